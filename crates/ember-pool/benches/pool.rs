//! Pool benchmarks: the per-step overhead with a trivial step on 1, 2 and 4 devices, and
//! burn-train's `MultiDevicesTrainStep` against `DevicePool` on the same Burn model, batches and
//! devices (2 flex workers), side by side in one run.

use std::time::{Duration, Instant};

use burn::data::dataloader::DataLoaderIterator;
use burn::tensor::Device;
use burn::train::train::MultiDevicesTrainStep;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ember_pool::step::burn::BurnStep;
use ember_pool::step::{IterSource, SourceError, Step, StepModel};
use ember_pool::{DevicePool, PoolOptions};
use ember_tests::{BatchList, Mlp, XyBatch};

/// A step that does nothing, so only the pool's own cost is measured.
#[derive(Clone)]
struct Trivial;

impl StepModel for Trivial {
    type Device = usize;
    type Input = u64;
    type Output = u64;
    fn fork(self, _device: &usize) -> Self {
        self
    }
    fn step(&self, input: u64) -> u64 {
        input
    }
}

fn per_step_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool_overhead_trivial_step");
    for devices in [1usize, 2, 4] {
        let mut pool = DevicePool::<Trivial>::new((0..devices).collect(), PoolOptions::default())
            .expect("workers start");
        let mut sources: Vec<_> = (0..devices)
            .map(|_| IterSource::new(std::iter::repeat_with(|| Ok::<u64, SourceError>(1))))
            .collect();
        group.bench_with_input(BenchmarkId::from_parameter(devices), &devices, |b, _| {
            b.iter(|| match pool.step(&mut sources, &Trivial) {
                Ok(Step::Ran(outputs)) => outputs.outputs.len(),
                _ => unreachable!("an endless source never ends the epoch"),
            })
        });
    }
    group.finish();
}

const DEVICES: usize = 2;
const ROWS: usize = 32;
const HIDDEN: usize = 64;

fn loaders(batch: &XyBatch, steps: u64) -> Vec<Box<dyn DataLoaderIterator<XyBatch>>> {
    (0..DEVICES)
        .map(|_| {
            let batches = (0..steps).map(|_| batch.clone()).collect();
            Box::new(BatchList::new(batches)) as Box<dyn DataLoaderIterator<XyBatch>>
        })
        .collect()
}

fn burn_train_against_ember(c: &mut Criterion) {
    let device = Device::flex().autodiff();
    let model = Mlp::new(HIDDEN, &device);
    let batch = XyBatch::synthetic(7, ROWS, &device);
    let devices = vec![device.clone(); DEVICES];

    let burn_train = MultiDevicesTrainStep::<Mlp>::new(&devices);
    let mut pool = DevicePool::<BurnStep<Mlp>>::new(devices.clone(), PoolOptions::default())
        .expect("workers start");

    let mut group = c.benchmark_group("train_step_2_flex_workers");
    group.bench_function("burn_train_MultiDevicesTrainStep", |b| {
        b.iter_custom(|steps| {
            let mut loaders = loaders(&batch, steps);
            let started = Instant::now();
            for _ in 0..steps {
                let (outputs, _) = burn_train.step(&mut loaders, &model).expect("step runs");
                assert_eq!(outputs.len(), DEVICES);
            }
            started.elapsed()
        })
    });
    group.bench_function("ember_DevicePool", |b| {
        b.iter_custom(|steps| {
            let mut sources = loaders(&batch, steps);
            let started = Instant::now();
            for _ in 0..steps {
                match pool.step(&mut sources, &BurnStep(model.clone())) {
                    Ok(Step::Ran(outputs)) => assert_eq!(outputs.outputs.len(), DEVICES),
                    _ => unreachable!("every step has a batch per device"),
                }
            }
            started.elapsed()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = per_step_overhead, burn_train_against_ember
}
criterion_main!(benches);
