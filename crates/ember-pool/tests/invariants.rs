//! The pool's invariants (numbered as in `docs/architecture.md`), each shown on a model without
//! Burn; invariant 8, the one-job inbox, is tested in `src/worker.rs`.
//!
//! Past 600 lines on purpose: one test file for the pool's numbered invariants, each test
//! standing alone with its own test double.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ember_pool::step::{
    BatchSource, FailureKind, IterSource, Progress, SourceError, Step, StepError, StepModel,
    StepOutputs,
};
use ember_pool::{DEFAULT_MAX_ABANDONED_WORKERS, DevicePool, PoolOptions};

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
    assert_eq!(pool.stats().replaced_gone, 1);
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

// Invariant 4: abandoned workers are counted exactly, and past the limit the pool gives up.

/// A device that counts its copies: the pool makes one for each worker it starts.
#[derive(Debug)]
struct Spawns(Arc<AtomicUsize>);

impl Clone for Spawns {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::SeqCst);
        Spawns(self.0.clone())
    }
}

/// Blocks every step until the test drops the sending end of its channel: a worker that hangs
/// for as long as the test wants, with no clock involved.
#[derive(Clone)]
struct Hang(crossbeam_channel::Receiver<()>);

impl StepModel for Hang {
    type Device = Spawns;
    type Input = ();
    type Output = ();
    fn fork(self, _device: &Spawns) -> Self {
        self
    }
    fn step(&self, _input: ()) {
        let _ = self.0.recv();
    }
}

#[test]
fn repeated_hangs_are_counted_exactly_and_the_limit_stops_the_pool() {
    let (release, hold) = crossbeam_channel::bounded::<()>(0);
    let model = Hang(hold);
    let spawns = Arc::new(AtomicUsize::new(0));
    let devices = vec![Spawns(spawns.clone()), Spawns(spawns.clone())];
    let options = PoolOptions::default().step_timeout(Duration::from_millis(100));
    let mut pool = DevicePool::<Hang>::new(devices, options)
        .unwrap()
        .with_max_abandoned_workers(Some(3));
    assert_eq!(pool.max_abandoned_workers(), Some(3));
    assert_eq!(spawns.load(Ordering::SeqCst), 2);
    let mut sources: Vec<IterSource<_>> = (0..2)
        .map(|_| IterSource::new((0..3).map(|_| Ok::<(), SourceError>(()))))
        .collect();

    // Both workers hang: both are abandoned, counted and replaced.
    let error = pool.step(&mut sources, &model).unwrap_err();
    assert_eq!(failed_devices(&error), [0, 1]);
    assert!(
        error
            .failures()
            .iter()
            .all(|f| matches!(f.kind, FailureKind::TimedOut(_)))
    );
    assert_eq!(pool.stats().abandoned_workers, 2);
    assert_eq!(spawns.load(Ordering::SeqCst), 4);

    // Device 0's worker is the third abandoned and replaced; device 1's, the fourth, is over the
    // limit: it gets no replacement and the pool gives up.
    let error = pool.step(&mut sources, &model).unwrap_err();
    assert!(matches!(
        error,
        StepError::TooManyAbandonedWorkers {
            abandoned: 4,
            limit: 3
        }
    ));
    assert_eq!(
        error.to_string(),
        "device pool gave up: 4 hung workers abandoned, more than its limit of 3"
    );
    assert_eq!(pool.stats().abandoned_workers, 4);
    assert_eq!(spawns.load(Ordering::SeqCst), 5);

    // Later steps fail at once: no batch is pulled and no thread started.
    let error = pool.step(&mut sources, &model).unwrap_err();
    assert!(matches!(error, StepError::TooManyAbandonedWorkers { .. }));
    assert_eq!(spawns.load(Ordering::SeqCst), 5);
    assert!(sources.iter().all(|s| s.progress().items_processed == 2));
    assert_eq!(pool.stats().abandoned_workers, 4);
    drop(release);
}

#[test]
fn the_abandoned_worker_limit_defaults_to_a_bound_and_can_be_lifted() {
    let pool = pool(1);
    assert_eq!(
        pool.max_abandoned_workers(),
        Some(DEFAULT_MAX_ABANDONED_WORKERS)
    );
    assert_eq!(
        pool.with_max_abandoned_workers(None)
            .max_abandoned_workers(),
        None
    );
}

// Invariant 5: a worker whose step panicked is replaced by a fresh one.

thread_local! {
    /// Forks run on the current thread: a fresh worker thread starts at zero.
    static FORKS_ON_THIS_THREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Answers how many forks its worker thread has run, this step's included; panics on demand.
#[derive(Debug, Clone)]
struct ForkCounter;

impl StepModel for ForkCounter {
    type Device = usize;
    type Input = bool;
    type Output = usize;

    fn fork(self, _device: &usize) -> Self {
        FORKS_ON_THIS_THREAD.with(|forks| forks.set(forks.get() + 1));
        self
    }

    fn step(&self, panic: bool) -> usize {
        assert!(!panic, "step failed on purpose");
        FORKS_ON_THIS_THREAD.with(|forks| forks.get())
    }
}

#[test]
fn a_panicked_worker_is_replaced_by_a_fresh_fork() {
    let mut pool = DevicePool::<ForkCounter>::new(vec![0, 1, 2], PoolOptions::default()).unwrap();
    let mut sources: Vec<IterSource<_>> = (0..3)
        .map(|d| {
            let batches = [false, d == 1, false, false].map(Ok::<bool, SourceError>);
            IterSource::new(batches.into_iter())
        })
        .collect();
    let forks = |step: Result<Step<usize>, StepError>| -> Vec<usize> {
        match step {
            Ok(Step::Ran(outputs)) => outputs.outputs.iter().map(|o| o.output).collect(),
            other => panic!("expected a step that ran, got {other:?}"),
        }
    };
    assert_eq!(forks(pool.step(&mut sources, &ForkCounter)), [1, 1, 1]);
    let error = pool.step(&mut sources, &ForkCounter).unwrap_err();
    assert_eq!(failed_devices(&error), [1]);
    assert_eq!(pool.stats().replaced_after_panic, 1);
    // Device 1 runs on a new worker thread, forked afresh; the others keep theirs.
    assert_eq!(forks(pool.step(&mut sources, &ForkCounter)), [3, 1, 3]);
    assert_eq!(forks(pool.step(&mut sources, &ForkCounter)), [4, 2, 4]);
}

// Invariant 6: exhausted sources stop contributing, are not polled again, and end the epoch.

/// A source that is not fused: after its `None` it has batches again, and it counts its polls.
struct Unfused {
    items: std::collections::VecDeque<Option<Batch>>,
    polls: Arc<AtomicUsize>,
}

impl Iterator for Unfused {
    type Item = Result<Batch, SourceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.items.pop_front().flatten().map(Ok)
    }
}

impl BatchSource<Batch> for Unfused {
    fn progress(&self) -> Progress {
        Progress::new(0, None)
    }
}

fn unfused(items: Vec<Option<Batch>>) -> (Unfused, Arc<AtomicUsize>) {
    let polls = Arc::new(AtomicUsize::new(0));
    let source = Unfused {
        items: items.into(),
        polls: polls.clone(),
    };
    (source, polls)
}

#[test]
fn an_exhausted_source_is_not_polled_again_in_the_epoch() {
    let mut pool = pool(2);
    // Device 0 ends after one batch; were it asked again it would hand out a batch of step 9.
    let (short, short_polls) = unfused(vec![Some(batch(0, 0.0)), None, Some(batch(9, 9.0))]);
    let (long, _) = unfused((0..3).map(|s| Some(batch(s, 10.0 + s as f64))).collect());
    let mut sources = vec![short, long];
    assert_eq!(
        devices_and_steps(&ran(pool.step(&mut sources, &MODEL))),
        [(0, 0), (1, 0)]
    );
    for step in 1..3 {
        let outputs = ran(pool.step(&mut sources, &MODEL));
        assert_eq!(devices_and_steps(&outputs), [(1, step)]);
        assert_eq!(
            (outputs.progress.sources, outputs.progress.exhausted),
            (2, 1)
        );
    }
    assert!(matches!(
        pool.step(&mut sources, &MODEL),
        Ok(Step::EpochOver(_))
    ));
    // One batch and one `None`: never polled after it said it was done.
    assert_eq!(short_polls.load(Ordering::SeqCst), 2);
}

#[test]
fn the_next_epochs_sources_are_polled_after_the_epoch_is_over() {
    let mut pool = pool(2);
    let mut first = vec![
        source(vec![Ok(batch(0, 0.0))]),
        source(vec![Ok(batch(0, 10.0)), Ok(batch(1, 11.0))]),
    ];
    while let Step::Ran(_) = pool.step(&mut first, &MODEL).unwrap() {}
    let mut second = sources(2, 1);
    let outputs = ran(pool.step(&mut second, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0)]);
}

#[test]
fn new_epoch_lets_a_caller_leave_an_epoch_early() {
    let mut pool = pool(2);
    let mut first = vec![
        source(vec![Ok(batch(0, 0.0))]),
        source((0..3).map(|s| Ok(batch(s, 10.0 + s as f64))).collect()),
    ];
    ran(pool.step(&mut first, &MODEL));
    // Device 0's source runs out here, with device 1's batches left over.
    assert_eq!(
        devices_and_steps(&ran(pool.step(&mut first, &MODEL))),
        [(1, 1)]
    );
    pool.new_epoch();
    let mut second = sources(2, 1);
    let outputs = ran(pool.step(&mut second, &MODEL));
    assert_eq!(devices_and_steps(&outputs), [(0, 0), (1, 0)]);
}

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

// Invariant 7: outputs come back in device order, so a reduction is bit-for-bit repeatable.

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

// Invariant 9: dropping the pool stops and joins its workers.

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
