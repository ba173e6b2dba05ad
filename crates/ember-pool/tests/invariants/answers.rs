//! Invariant 1: every answer of a step is consumed by that step, whatever fails.
//! Invariant 2: every failing device is reported, and the pool stays usable.

use super::*;

#[test]
fn a_panic_does_not_leave_a_slow_answer_for_the_next_step() {
    let mut pool = pool(2);
    let mut sources = vec![
        source(vec![
            Ok(Batch {
                action: Action::Sleep(Duration::from_millis(50)),
                ..batch(0, 0.0)
            }),
            Ok(batch(1, 1.0)),
        ]),
        source(vec![
            Ok(Batch {
                action: Action::Panic("boom"),
                ..batch(0, 10.0)
            }),
            Ok(batch(1, 11.0)),
        ]),
    ];
    let error = pool.step(&mut sources, &MODEL).unwrap_err();
    assert_eq!(failed_devices(&error), [1]);
    let next = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&next), [(0, 1), (1, 1)]);
}

#[test]
fn a_source_error_still_waits_for_the_workers_already_sent_a_batch() {
    let mut pool = pool(3);
    let mut sources = vec![
        source(vec![
            Ok(Batch {
                action: Action::Sleep(Duration::from_millis(50)),
                ..batch(0, 0.0)
            }),
            Ok(batch(1, 1.0)),
        ]),
        source(vec![Err("disk went away".into()), Ok(batch(1, 11.0))]),
        source(vec![Ok(batch(0, 20.0)), Ok(batch(1, 21.0))]),
    ];
    let error = pool.step(&mut sources, &MODEL).unwrap_err();
    assert_eq!(
        error.to_string(),
        "device 1: batch source failed: disk went away"
    );
    assert!(matches!(error.failures()[0].kind, FailureKind::Source(_)));

    // Device 2 was not pulled in the failed step, so its first batch is still there.
    let next = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&next), [(0, 1), (1, 1), (2, 0)]);
}

#[test]
fn a_dead_worker_is_reported_and_replaced() {
    let mut pool = pool(2);
    let mut sources = vec![
        source(vec![Ok(batch(0, 0.0)), Ok(batch(1, 1.0))]),
        source(vec![
            Ok(Batch {
                action: Action::KillWorker,
                ..batch(0, 10.0)
            }),
            Ok(batch(1, 11.0)),
        ]),
    ];
    let error = pool.step(&mut sources, &MODEL).unwrap_err();
    assert_eq!(error.to_string(), "device 1: worker thread is gone");
    assert_eq!(pool.stats().replaced_gone, 1);
    let next = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&next), [(0, 1), (1, 1)]);
}

#[test]
fn every_failing_device_is_reported_and_the_next_step_runs() {
    let mut pool = pool(4);
    let mut sources: Vec<Source> = (0..4)
        .map(|d| {
            let first = if d % 2 == 0 {
                Batch {
                    action: Action::Panic(if d == 0 {
                        "nan in layer 3"
                    } else {
                        "out of memory"
                    }),
                    ..batch(0, 0.0)
                }
            } else {
                batch(0, 0.0)
            };
            source(vec![Ok(first), Ok(batch(1, d as f64))])
        })
        .collect();
    let error = pool.step(&mut sources, &MODEL).unwrap_err();
    assert_eq!(failed_devices(&error), [0, 2]);
    assert_eq!(
        error.to_string(),
        "2 devices failed:\n  device 0: step panicked: nan in layer 3\n  device 2: step panicked: out of memory"
    );
    let next = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&next), [(0, 1), (1, 1), (2, 1), (3, 1)]);
}
