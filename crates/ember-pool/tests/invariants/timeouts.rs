//! Invariant 3: a hung worker times out with its device index; its late answer is never used.

use super::*;

/// A source that takes `delay` to produce each batch, as a slow data loader does.
struct SlowSource {
    inner: Source,
    delay: Duration,
}

impl Iterator for SlowSource {
    type Item = Result<Batch, SourceError>;

    fn next(&mut self) -> Option<Self::Item> {
        std::thread::sleep(self.delay);
        self.inner.next()
    }
}

impl BatchSource<Batch> for SlowSource {
    fn progress(&self) -> Progress {
        self.inner.progress()
    }
}

#[test]
fn a_slow_source_does_not_time_out_a_healthy_worker() {
    // Pulling the three batches takes longer than the timeout, but each 20 ms step is far inside
    // it, counted from when its own batch was sent.
    let timeout = Duration::from_millis(1000);
    let pull = Duration::from_millis(400);
    let options = PoolOptions::default().step_timeout(timeout);
    let mut pool = DevicePool::<Probe>::new(vec![0, 1, 2], options).unwrap();
    let mut sources: Vec<SlowSource> = (0..3)
        .map(|d| SlowSource {
            inner: source(vec![Ok(Batch {
                action: Action::Sleep(Duration::from_millis(20)),
                ..batch(0, d as f64)
            })]),
            delay: pull,
        })
        .collect();
    let outputs = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0), (2, 0)]);
}

#[test]
fn a_hung_worker_times_out_and_its_late_answer_is_discarded() {
    let options = PoolOptions::default().step_timeout(Duration::from_millis(200));
    let mut pool = DevicePool::<Probe>::new(vec![0, 1], options).unwrap();
    let hang = Duration::from_millis(600);
    let mut sources = vec![
        source((0..4).map(|s| Ok(batch(s, s as f64))).collect()),
        source(vec![
            Ok(Batch {
                action: Action::Sleep(hang),
                ..batch(0, 10.0)
            }),
            Ok(batch(1, 11.0)),
            Ok(batch(2, 12.0)),
            Ok(batch(3, 13.0)),
        ]),
    ];
    let started = Instant::now();
    let error = pool.step(&mut sources, &MODEL).unwrap_err();
    assert!(
        started.elapsed() < hang,
        "the step waited for the hung worker"
    );
    assert_eq!(failed_devices(&error), [1]);
    assert!(matches!(error.failures()[0].kind, FailureKind::TimedOut(_)));

    // The replacement worker runs the next steps; once the hung one wakes, its answer (step 0)
    // arrives and must not be taken for a later step's.
    let next = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&next), [(0, 1), (1, 1)]);
    std::thread::sleep(hang);
    for expected_step in 2..4 {
        let outputs = ran(pool.step(&mut sources, &MODEL));
        assert_eq!(
            devices_and_steps(&outputs),
            [(0, expected_step), (1, expected_step)]
        );
    }
}

#[test]
fn a_timeout_too_long_for_the_clock_is_no_timeout() {
    let options = PoolOptions::default().step_timeout(Duration::MAX);
    let mut pool = DevicePool::<Probe>::new(vec![0, 1], options).unwrap();
    let mut sources = sources(2, 1);
    let outputs = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0)]);
}

#[test]
fn a_shut_down_pool_says_so() {
    let mut pool = pool(2);
    pool.shutdown();
    let mut sources = sources(2, 1);
    assert!(matches!(
        pool.step(&mut sources, &MODEL),
        Err(StepError::ShutDown)
    ));
}

#[test]
fn one_source_per_device_is_required() {
    let mut pool = pool(3);
    let mut sources = sources(2, 1);
    let error = pool.step(&mut sources, &MODEL).unwrap_err();
    assert_eq!(
        error.to_string(),
        "expected 3 batch sources, one per device, got 2"
    );
}
