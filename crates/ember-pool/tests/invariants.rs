//! The pool's invariants, each shown on a model without Burn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ember_pool::step::{
    BatchSource, FailureKind, IterSource, Progress, SourceError, Step, StepError, StepModel,
    StepOutputs,
};
use ember_pool::{DevicePool, PoolOptions};

/// What a test asks one device to do with one batch.
#[derive(Debug, Clone)]
enum Action {
    Answer,
    Sleep(Duration),
    Panic(&'static str),
    /// Panics with a payload that panics again when dropped, which kills the worker thread.
    KillWorker,
}

#[derive(Debug, Clone)]
struct Batch {
    step: usize,
    value: f64,
    action: Action,
}

fn batch(step: usize, value: f64) -> Batch {
    Batch {
        step,
        value,
        action: Action::Answer,
    }
}

/// Returns the batch's step tag and value times the model's weight, after doing the action.
#[derive(Debug, Clone)]
struct Probe {
    weight: f64,
}

struct DropBomb;

impl Drop for DropBomb {
    fn drop(&mut self) {
        panic!("payload exploded while being dropped");
    }
}

impl StepModel for Probe {
    type Device = usize;
    type Input = Batch;
    type Output = (usize, f64);

    fn fork(self, _device: &usize) -> Self {
        self
    }

    fn step(&self, batch: Batch) -> (usize, f64) {
        match batch.action {
            Action::Answer => {}
            Action::Sleep(duration) => std::thread::sleep(duration),
            Action::Panic(message) => panic!("{message}"),
            Action::KillWorker => std::panic::panic_any(DropBomb),
        }
        (batch.step, batch.value * self.weight)
    }
}

type Source = IterSource<std::vec::IntoIter<Result<Batch, SourceError>>>;

fn source(batches: Vec<Result<Batch, SourceError>>) -> Source {
    IterSource::new(batches.into_iter())
}

/// `devices` sources of `steps` plain batches each, batch `s` of device `d` worth `10 d + s`.
fn sources(devices: usize, steps: usize) -> Vec<Source> {
    (0..devices)
        .map(|d| {
            source(
                (0..steps)
                    .map(|s| Ok(batch(s, (10 * d + s) as f64)))
                    .collect(),
            )
        })
        .collect()
}

fn pool(devices: usize) -> DevicePool<Probe> {
    DevicePool::new((0..devices).collect(), PoolOptions::default()).unwrap()
}

fn ran(step: Result<Step<(usize, f64)>, StepError>) -> StepOutputs<(usize, f64)> {
    match step {
        Ok(Step::Ran(outputs)) => outputs,
        other => panic!("expected a step that ran, got {other:?}"),
    }
}

fn devices_and_steps(outputs: &StepOutputs<(usize, f64)>) -> Vec<(usize, usize)> {
    outputs
        .outputs
        .iter()
        .map(|o| (o.device, o.output.0))
        .collect()
}

fn failed_devices(error: &StepError) -> Vec<usize> {
    error.failures().iter().map(|f| f.device).collect()
}

const MODEL: Probe = Probe { weight: 1.0 };

// Invariant 1: every answer of a step is consumed by that step, whatever fails.

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
    let next = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&next), [(0, 1), (1, 1)]);
}

// Invariant 2: every failing device is reported, and the pool stays usable.

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

// Invariant 3: a hung worker times out with its device index; its late answer is never used.

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

// Invariant 4: exhausted sources stop contributing, still count, and end the epoch.

#[test]
fn exhausted_sources_still_count_until_the_epoch_is_over() {
    let mut pool = pool(2);
    let mut sources = vec![
        source((0..3).map(|s| Ok(batch(s, s as f64))).collect()),
        source(vec![Ok(batch(0, 10.0))]),
    ];
    let first = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&first), [(0, 0), (1, 0)]);
    assert_eq!(first.progress.progress, Progress::new(2, Some(4)));

    let second = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&second), [(0, 1)]);
    assert_eq!(second.progress.progress, Progress::new(3, Some(4)));
    assert_eq!((second.progress.sources, second.progress.exhausted), (2, 1));

    ran(pool.step(&mut sources, &MODEL));
    match pool.step(&mut sources, &MODEL).unwrap() {
        Step::EpochOver(progress) => {
            assert_eq!(progress.progress, Progress::new(4, Some(4)));
            assert!(progress.all_exhausted());
        }
        other => panic!("expected the end of the epoch, got {other:?}"),
    }
}

// Invariant 5: outputs come back in device order, so a reduction is bit-for-bit repeatable.

#[test]
fn outputs_are_in_device_order_whatever_order_workers_finish_in() {
    let devices = 4;
    let mut pool = pool(devices);
    // Values whose float sum depends on the order of addition.
    let values = [1e16, 1.0, -1e16, 1.0];
    let mut reductions = Vec::new();
    for round in 0..6 {
        let mut sources: Vec<Source> = (0..devices)
            .map(|d| {
                // Slower devices first, and a different order each round.
                let delay = ((devices - d + round) % devices) as u64 * 5;
                source(vec![Ok(Batch {
                    action: Action::Sleep(Duration::from_millis(delay)),
                    ..batch(round, values[d])
                })])
            })
            .collect();
        let outputs = ran(pool.step(&mut sources, &MODEL));
        let order: Vec<usize> = outputs.outputs.iter().map(|o| o.device).collect();
        assert_eq!(order, [0, 1, 2, 3]);
        reductions.push(
            outputs
                .outputs
                .iter()
                .fold(0.0f64, |sum, o| sum + o.output.1)
                .to_bits(),
        );
    }
    assert!(reductions.windows(2).all(|pair| pair[0] == pair[1]));
    assert_eq!(f64::from_bits(reductions[0]), ((1e16 + 1.0) - 1e16) + 1.0);
}

#[test]
fn each_output_carries_its_step_time() {
    let mut pool = pool(2);
    let mut sources = vec![
        source(vec![Ok(Batch {
            action: Action::Sleep(Duration::from_millis(30)),
            ..batch(0, 0.0)
        })]),
        source(vec![Ok(batch(0, 1.0))]),
    ];
    let outputs = ran(pool.step(&mut sources, &MODEL));
    assert!(outputs.outputs[0].elapsed >= Duration::from_millis(30));
}

// Invariant 6: dropping the pool stops and joins its workers.

/// A device that counts how many of its copies have been dropped.
#[derive(Debug)]
struct CountedDevice(Arc<AtomicUsize>);

impl Clone for CountedDevice {
    fn clone(&self) -> Self {
        CountedDevice(self.0.clone())
    }
}

impl Drop for CountedDevice {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct Echo;

impl StepModel for Echo {
    type Device = CountedDevice;
    type Input = u32;
    type Output = u32;
    fn fork(self, _device: &CountedDevice) -> Self {
        self
    }
    fn step(&self, input: u32) -> u32 {
        input
    }
}

#[test]
fn dropping_the_pool_joins_every_worker() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let devices: Vec<CountedDevice> = (0..3).map(|_| CountedDevice(dropped.clone())).collect();
    // The pool keeps its own list; each worker thread holds one more copy until it ends.
    let pool = DevicePool::<Echo>::new(devices, PoolOptions::default()).unwrap();
    let mut sources: Vec<IterSource<_>> = (0..3)
        .map(|_| IterSource::new(vec![Ok::<u32, SourceError>(7)].into_iter()))
        .collect();
    let mut pool = pool;
    assert!(matches!(pool.step(&mut sources, &Echo), Ok(Step::Ran(_))));
    let before = dropped.load(Ordering::SeqCst);
    drop(pool);
    // Three copies in the pool's list and three held by the worker threads: all gone on return.
    assert_eq!(dropped.load(Ordering::SeqCst) - before, 6);
}

#[test]
fn sources_can_be_boxed_trait_objects() {
    let mut pool = pool(2);
    let mut sources: Vec<Box<dyn BatchSource<Batch>>> = sources(2, 1)
        .into_iter()
        .map(|s| Box::new(s) as Box<dyn BatchSource<Batch>>)
        .collect();
    let outputs = ran(pool.step(&mut sources, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0)]);
}
