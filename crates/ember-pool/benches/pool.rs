//! Pool benchmarks: the per-step overhead with a trivial step on 1, 2 and 4 devices, and
//! burn-train's `MultiDevicesTrainStep` against `DevicePool` on the same Burn model, batches and
//! devices (2 flex workers), side by side in one run, each a whole train step (gradients
//! summed on the main device, then an SGD step).

use std::time::{Duration, Instant};

use burn::data::dataloader::DataLoaderIterator;
use burn::data::dataloader::Progress;
use burn::data::dataset::DatasetError;
use burn::optim::{GradientsAccumulator, SgdConfig};
use burn::tensor::Device;
use burn::train::train::MultiDevicesTrainStep;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ember_pool::step::burn::{BurnStep, Reduction, reduce_gradients};
use ember_pool::step::{IterSource, SourceError, Step, StepModel};
use ember_pool::{DevicePool, PoolOptions};
use ember_tests::{Mlp, XyBatch};

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
const LEARNING_RATE: f64 = 0.01;

/// Hands out `remaining` fresh synthetic batches, made on demand (the same cost on both sides).
/// Fresh batches and an updated model per step are what a real loop sees: replaying one batch
/// through a never-updated model, or holding thousands of prepared batches, made Burn slow down
/// over the process's life and skewed whichever side ran later.
struct Fresh {
    device: Device,
    next_seed: u64,
    remaining: u64,
    processed: usize,
}

impl Iterator for Fresh {
    type Item = Result<XyBatch, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.next_seed += DEVICES as u64;
        self.processed += ROWS;
        Some(Ok(XyBatch::synthetic(self.next_seed, ROWS, &self.device)))
    }
}

impl DataLoaderIterator<XyBatch> for Fresh {
    fn progress(&self) -> Progress {
        Progress::new(self.processed, None, None)
    }
}

fn loaders(device: &Device, steps: u64) -> Vec<Box<dyn DataLoaderIterator<XyBatch>>> {
    (0..DEVICES as u64)
        .map(|d| {
            Box::new(Fresh {
                device: device.clone(),
                next_seed: d,
                remaining: steps,
                processed: 0,
            }) as Box<dyn DataLoaderIterator<XyBatch>>
        })
        .collect()
}

/// The two sides of the comparison: one whole data-parallel train step each (the step on
/// every worker, gradients summed on the main device, as burn-train's `OptimMainDevice` does
/// and `Reduction::Sum` matches, then an SGD step).
struct Sides {
    device: Device,
    burn_train: MultiDevicesTrainStep<Mlp>,
    pool: DevicePool<BurnStep<Mlp>>,
    initial: Mlp,
}

impl Sides {
    fn new() -> Self {
        let device = Device::flex().autodiff();
        let devices = vec![device.clone(); DEVICES];
        Self {
            burn_train: MultiDevicesTrainStep::<Mlp>::new(&devices),
            pool: DevicePool::new(devices, PoolOptions::default()).expect("workers start"),
            initial: Mlp::new(HIDDEN, &device),
            device,
        }
    }

    fn burn_train(&self, steps: u64) -> Duration {
        let mut loaders = loaders(&self.device, steps);
        let mut model = self.initial.clone();
        let mut optim = SgdConfig::new().init();
        let started = Instant::now();
        for _ in 0..steps {
            let (outputs, _) = self
                .burn_train
                .step(&mut loaders, &model)
                .expect("step runs");
            let mut sum = GradientsAccumulator::<Mlp>::new();
            for output in outputs {
                sum.accumulate(&model, output.output.grads.to_device(&self.device, &model));
            }
            model = optim.step(LEARNING_RATE, model, sum.grads());
        }
        started.elapsed()
    }

    fn ember(&mut self, steps: u64) -> Duration {
        let mut sources = loaders(&self.device, steps);
        let mut model = self.initial.clone();
        let mut optim = SgdConfig::new().init();
        let started = Instant::now();
        for _ in 0..steps {
            let step_model = BurnStep(model);
            let outputs = match self.pool.step(&mut sources, &step_model) {
                Ok(Step::Ran(outputs)) => outputs.outputs,
                _ => unreachable!("every step has a batch per device"),
            };
            model = step_model.0;
            let grads = reduce_gradients(
                outputs.into_iter().map(|o| o.output.grads),
                &self.device,
                &model,
                Reduction::Sum,
            );
            model = optim.step(LEARNING_RATE, model, grads);
        }
        started.elapsed()
    }
}

/// burn-train's `MultiDevicesTrainStep` against `DevicePool`.
///
/// Burn slows down over a long-running process (about 2x after tens of thousands of steps here,
/// whichever side ran them), so the side measured second in one process loses. Measure each side
/// in a fresh process, alternating, and compare:
/// `cargo bench -p ember-pool --bench pool -- burn_train_` and `... -- ember_DevicePool`.
fn burn_train_against_ember(c: &mut Criterion) {
    let mut sides = Sides::new();
    let mut group = c.benchmark_group("train_step_2_flex_workers");
    group.bench_function("burn_train_MultiDevicesTrainStep", |b| {
        b.iter_custom(|steps| sides.burn_train(steps))
    });
    group.bench_function("ember_DevicePool", |b| {
        b.iter_custom(|steps| sides.ember(steps))
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
