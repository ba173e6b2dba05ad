//! Invariant 5: a worker whose step panicked is replaced by a fresh one.

use super::*;

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
