//! Invariant 7: outputs come back in device order, so a reduction is bit-for-bit repeatable.
//! Invariant 9: dropping the pool stops and joins its workers.

use super::*;

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
