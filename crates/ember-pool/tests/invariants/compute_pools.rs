//! `PoolOptions::worker_threads`: each worker's step runs on a compute pool of its own, of the
//! size asked, and a step that panics there is reported and replaced as on the worker itself.

use super::*;

/// Answers the thread its step ran on and the size of the rayon pool it saw; panics on demand.
#[derive(Debug, Clone)]
struct WhereAmI;

impl StepModel for WhereAmI {
    type Device = usize;
    type Input = bool;
    type Output = (String, usize);

    fn fork(self, _device: &usize) -> Self {
        self
    }

    fn step(&self, panic: bool) -> (String, usize) {
        assert!(!panic, "step failed on purpose");
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        (thread, rayon::current_num_threads())
    }
}

fn outputs(step: Result<Step<(String, usize)>, StepError>) -> Vec<(String, usize)> {
    match step {
        Ok(Step::Ran(outputs)) => outputs.outputs.into_iter().map(|o| o.output).collect(),
        other => panic!("expected a step that ran, got {other:?}"),
    }
}

#[test]
fn each_worker_steps_on_a_compute_pool_of_its_own_size() {
    let threads = std::num::NonZeroUsize::new(3).unwrap();
    let options = PoolOptions::default().worker_threads(threads);
    let mut pool = DevicePool::<WhereAmI>::new(vec![0, 1], options).unwrap();
    let mut sources: Vec<IterSource<_>> = (0..2)
        .map(|d| {
            IterSource::new(
                [false, d == 1, false]
                    .map(Ok::<bool, SourceError>)
                    .into_iter(),
            )
        })
        .collect();
    let first = outputs(pool.step(&mut sources, &WhereAmI));
    for (device, (thread, size)) in first.iter().enumerate() {
        assert!(
            thread.starts_with(&format!("ember-device-{device}-compute-")),
            "{thread}"
        );
        assert_eq!(*size, 3);
    }
    // A panic inside the compute pool is the device's failure, and its worker is replaced.
    let error = pool.step(&mut sources, &WhereAmI).unwrap_err();
    assert_eq!(failed_devices(&error), [1]);
    assert_eq!(pool.stats().replaced_after_panic, 1);
    let last = outputs(pool.step(&mut sources, &WhereAmI));
    assert!(last[1].0.starts_with("ember-device-1-compute-"), "{last:?}");
    assert_eq!(last[1].1, 3);
}

#[test]
fn without_worker_threads_steps_run_on_the_worker_with_the_global_pool() {
    let mut pool = DevicePool::<WhereAmI>::new(vec![0], PoolOptions::default()).unwrap();
    let mut sources = vec![IterSource::new(
        [Ok::<bool, SourceError>(false)].into_iter(),
    )];
    let (thread, size) = outputs(pool.step(&mut sources, &WhereAmI)).remove(0);
    assert_eq!(thread, "ember-device-0");
    assert_eq!(size, rayon::current_num_threads());
}
