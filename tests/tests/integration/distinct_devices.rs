//! Multi-device training on two *distinct* devices: logical wgpu devices `wgpu:0` and `wgpu:1`
//! (`ember::devices`), each with its own queue, memory and Burn client; on a machine without a
//! GPU they sit on Mesa's lavapipe. Every path that only matters when devices differ is driven
//! here: forking the model onto each device, gradients moved to the main device before the
//! reduction (or to the device that steps their parameter), validation on the main device,
//! and each failure of the pool.
//!
//! Run one test at a time (`--test-threads=1`, as the xtasks do): one measures device memory.
//!
//! Built only with this crate's `wgpu` or `cuda` feature; `cargo xtask devices` runs it on
//! lavapipe, and `cargo xtask gpu` on a machine's CUDA devices (`EMBER_TEST_DEVICES`, e.g.
//! `cuda:0,cuda:1`; default `wgpu:0,wgpu:1`).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::data::dataloader::DataLoaderIterator;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::SgdConfig;
use burn::optim::momentum::MomentumConfig;
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::logger::FileMetricLogger;
use burn::train::metric::LossMetric;
use burn::train::{
    InferenceStep, Learner, LearnerSummary, SupervisedTraining, TrainOutput, TrainStep,
    TrainingStrategy,
};
use ember::burn_train::{PoolStrategy, SummaryLogger};
use ember::devices::open_devices;
use ember::step::burn::{BurnStep, Reduction, reduce_gradients};
use ember::step::{FailureKind, Step, StepError};
use ember::{DevicePool, PoolOptions, SummaryRecord, TrainError, Trainer, TrainerConfig};
use ember_tests::{
    BatchList, Mlp, PoisonedLoader, XyBatch, max_difference, parameters, regression_loader,
    regression_rows, rows_loader,
};

mod reshard;

/// Two distinct devices, `EMBER_TEST_DEVICES` or `wgpu:0,wgpu:1`; the first is the main device.
fn two_devices() -> Vec<Device> {
    let list = std::env::var("EMBER_TEST_DEVICES").unwrap_or_else(|_| "wgpu:0,wgpu:1".into());
    let specs = ember::devices::parse_devices(&list).expect("EMBER_TEST_DEVICES");
    assert_eq!(specs.len(), 2, "the suite runs on two devices, not {list}");
    let opened = open_devices(&specs)
        .expect("two distinct devices (install mesa-vulkan-drivers where there is no GPU)");
    for device in &opened {
        eprintln!("{}: {}", device.spec, device.description);
    }
    opened.into_iter().map(|o| o.device).collect()
}

/// The devices every float parameter of `module` is on.
fn parameter_devices<M: Module>(module: &M) -> Vec<Device> {
    struct Collect(Vec<Device>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.val().device());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

fn assert_all_on<M: Module>(module: &M, device: &Device, what: &str) {
    let devices = parameter_devices(module);
    assert!(!devices.is_empty());
    for (i, on) in devices.iter().enumerate() {
        assert_eq!(
            on, device,
            "{what}: parameter {i} is on {on:?}, not {device:?}"
        );
    }
}

/// GPU float arithmetic sums in workgroup order, not in the CPU's sequential order, and the two
/// sides below sum a batch's gradient over 8 rows twice (then average) against 16 rows once:
/// each step's gradient differs by a few ulps of its size (~1e-6 relative), and a few dozen SGD
/// steps at this learning rate do not amplify that past 1e-4 on parameters of size ~1. A bug in
/// the reduction (a sum for a mean, a device's gradient dropped or counted twice) moves them by
/// 1e-2 or more.
const GPU_TOLERANCE: f32 = 1e-4;

#[test]
fn two_logical_devices_are_distinct_and_mixing_them_needs_a_transfer() {
    let devices = two_devices();
    let (a, b) = (&devices[0], &devices[1]);
    assert_ne!(a, b, "wgpu:0 and wgpu:1 are one device");
    assert_eq!(
        two_devices(),
        devices,
        "opening the devices again gives others"
    );

    let x = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0], [3]), a);
    let y = Tensor::<1>::from_data(TensorData::new(vec![10.0f32, 20.0, 30.0], [3]), b);
    assert_eq!(x.device(), *a);
    assert_eq!(y.device(), *b);

    // Each device has memory of its own: a large tensor on one grows that one's pool only.
    let usage = |device: &Device| {
        device
            .memory_pool_usage()
            .expect("a GPU-backend device reports its memory pools")
    };
    let (before_a, before_b) = (usage(a), usage(b));
    let big = Tensor::<1>::ones([1 << 20], a);
    a.sync().unwrap();
    let (after_a, after_b) = (usage(a), usage(b));
    eprintln!(
        "4 MiB on the first device: its bytes in use {} -> {}, the second's {} -> {}",
        before_a.bytes_in_use, after_a.bytes_in_use, before_b.bytes_in_use, after_b.bytes_in_use
    );
    // (Freed buffers of earlier tensors may leave the pool meanwhile: the bound is absolute.)
    assert!(after_a.bytes_in_use >= 4 << 20, "{after_a:?}");
    assert_eq!(
        before_b.bytes_in_use, after_b.bytes_in_use,
        "a tensor on the first device took memory on the second"
    );
    drop(big);

    // An operation on tensors of two devices without a transfer is refused.
    let mixed = catch_unwind(AssertUnwindSafe(|| {
        (x.clone() + y.clone())
            .into_data()
            .iter::<f32>()
            .collect::<Vec<_>>()
    }));
    let refusal = match mixed {
        Ok(values) => panic!("adding tensors of two distinct devices was accepted: {values:?}"),
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    };
    assert!(
        refusal.contains("not on the same device"),
        "refused for another reason: {refusal}"
    );

    // With the transfer it works, and the result is on the device moved to.
    let sum = x + y.to_device(a);
    assert_eq!(sum.device(), *a);
    assert_eq!(
        sum.into_data().iter::<f32>().collect::<Vec<_>>(),
        [11.0, 22.0, 33.0]
    );
}

#[test]
fn the_trainer_on_two_distinct_devices_trains_like_one_device_on_the_concatenated_batch() {
    let devices = two_devices();
    let main = devices[0].clone();
    const ROWS: usize = 128;
    const BATCH: usize = 8;
    const ACCUMULATION: usize = 2;
    const EPOCHS: usize = 3;
    let rows = regression_rows(5, ROWS);
    let model = Mlp::new(8, &main);
    let config = TrainerConfig {
        epochs: EPOCHS,
        histogram_every: None,
        grad_accumulation: ACCUMULATION,
        reduction: Reduction::Mean,
        ..TrainerConfig::default()
    };
    let started = Instant::now();
    let (parallel, report) = Trainer::new(
        devices.clone(),
        SgdConfig::new().init(),
        0.05,
        config.clone(),
    )
    .fit(
        model.clone(),
        rows_loader(rows.clone(), BATCH, &main),
        Some(regression_loader(9, 32, BATCH, &main)),
        None,
    )
    .unwrap();
    let parallel_time = started.elapsed();
    // 64 rows a device, 8 a batch: 8 pool steps an epoch, one optimizer step every 2.
    assert_eq!(report.optimizer_steps, EPOCHS * 8 / ACCUMULATION);
    assert!(report.last().unwrap().valid_loss.is_some());
    assert_all_on(&parallel, &main, "the trained model");

    let single = Trainer::new(vec![main.clone()], SgdConfig::new().init(), 0.05, config);
    let single = trained_on_concatenated_batches(single, &model, &rows, BATCH, &main);
    let difference = max_difference(&parameters(&parallel), &parameters(&single));
    let moved = max_difference(&parameters(&parallel), &parameters(&model));
    eprintln!(
        "trainer, 2 distinct devices vs 1 on the concatenated batch: max |Δparam| = {difference:e} \
         (training moved parameters by up to {moved:e}); 2-device fit {parallel_time:.2?}"
    );
    assert!(
        moved > 1e-2,
        "training did not move the parameters: {moved}"
    );
    assert!(
        difference < GPU_TOLERANCE,
        "2 distinct devices differ from one device by {difference}"
    );
}

/// `model` trained by `trainer` on one device, `main`, on what two devices trained on in
/// batches of `batch` each: device i trains on rows [i·R/2, (i+1)·R/2), step k on the k-th
/// batch of each, so one device's step k takes both batches concatenated.
fn trained_on_concatenated_batches(
    trainer: Trainer<Mlp>,
    model: &Mlp,
    rows: &[[f32; 3]],
    batch: usize,
    main: &Device,
) -> Mlp {
    let slice = rows.len() / 2;
    let mut concatenated = Vec::with_capacity(rows.len());
    for step in 0..slice / batch {
        for worker in 0..2 {
            let start = worker * slice + step * batch;
            concatenated.extend_from_slice(&rows[start..start + batch]);
        }
    }
    let (single, _) = trainer
        .fit(
            model.clone(),
            rows_loader(concatenated, 2 * batch, main),
            None,
            None,
        )
        .unwrap();
    single
}

/// Units of a model of more than 2^18 parameter elements (`Linear` weights of 2 × 65,536 and
/// 65,536 × 1, and the biases): the size from which the Trainer splits the optimizer step
/// between devices. Split by element count, the second device steps the first layer's bias
/// and the second layer's weight.
const WIDE: usize = 65_536;

#[test]
fn the_trainer_with_the_optimizer_split_between_devices_trains_like_one_device() {
    let devices = two_devices();
    let main = devices[0].clone();
    const ROWS: usize = 64;
    const BATCH: usize = 8;
    const EPOCHS: usize = 2;
    let rows = regression_rows(7, ROWS);
    let model = Mlp::new(WIDE, &main);
    // SGD with momentum keeps one tensor of state per parameter, on the device that steps it;
    // its updates are linear in the gradients, so the two runs below differ by rounding only.
    let optimizer = || {
        SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .init()
    };
    const LR: f64 = 1e-4;
    let config = TrainerConfig {
        epochs: EPOCHS,
        histogram_every: None,
        reduction: Reduction::Mean,
        ..TrainerConfig::default()
    };
    let hook_main = main.clone();
    let (parallel, report) = Trainer::new(devices.clone(), optimizer(), LR, config.clone())
        .on_update(move |model, _| {
            assert_all_on(model, &hook_main, "the model an update hook sees")
        })
        .fit(
            model.clone(),
            rows_loader(rows.clone(), BATCH, &main),
            Some(regression_loader(9, 16, BATCH, &main)),
            None,
        )
        .unwrap();
    assert_eq!(report.optimizer_steps, EPOCHS * ROWS / (2 * BATCH));
    assert_all_on(&parallel, &main, "the trained model");

    let single = Trainer::new(vec![main.clone()], optimizer(), LR, config);
    let single = trained_on_concatenated_batches(single, &model, &rows, BATCH, &main);
    let difference = max_difference(&parameters(&parallel), &parameters(&single));
    let moved = max_difference(&parameters(&parallel), &parameters(&model));
    eprintln!(
        "optimizer split by device vs one device on the concatenated batch: max |Δparam| = \
         {difference:e} (training moved parameters by up to {moved:e})"
    );
    assert!(
        moved > 1e-3,
        "training did not move the parameters: {moved}"
    );
    // Rounding moves them by ~1e-8; a gradient stepped on the wrong device's copy, dropped
    // or counted twice moves them by a sizeable share of `moved`.
    assert!(
        difference < moved * 1e-3,
        "the optimizer split by device differs from one device by {difference}"
    );
}

#[test]
fn burn_train_on_the_pool_strategy_with_two_distinct_devices_logs_what_burn_summarises() {
    let devices = two_devices();
    let main = devices[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let logger = SummaryLogger::new(SummaryRecord::new(dir.path().join("tb")).unwrap());
    let errors = logger.errors();
    let strategy = Arc::new(PoolStrategy::new(devices.clone(), Reduction::Mean));
    let result = SupervisedTraining::new(
        dir.path().join("burn"),
        regression_loader(1, 64, 8, &main),
        regression_loader(2, 16, 8, &main),
    )
    .num_epochs(2)
    .metrics((LossMetric::new(),))
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(dir.path().join("burn")))
    .with_metric_logger(logger)
    .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
    .launch(Learner::new(
        Mlp::new(8, &main),
        SgdConfig::new().init(),
        0.05,
    ));
    if let Some(error) = &result.error {
        panic!("training failed: {error}");
    }
    assert!(strategy.take_error().is_none());
    assert_eq!(errors.count(), 0, "{:?}", errors.last());
    assert_all_on(&result.model, &main, "the learner's model");

    let burns = LearnerSummary::new(dir.path().join("burn"), &["Loss"]).unwrap();
    let ours = ember::read::scalars(dir.path().join("tb")).unwrap();
    assert_eq!(burns.epochs, 2);
    for (split, summaries, tag) in [
        ("train", &burns.metrics.train, "train/loss/epoch"),
        ("valid", &burns.metrics.valid, "valid/loss"),
    ] {
        let loss = summaries
            .iter()
            .find(|m| m.name == "Loss")
            .unwrap_or_else(|| panic!("burn summarises no {split} loss"));
        let read: Vec<f64> = ours[tag].iter().map(|p| p.value).collect();
        let expected: Vec<f64> = loss.entries.iter().map(|e| e.value).collect();
        assert_eq!(
            read.len(),
            expected.len(),
            "{tag}: {read:?} vs {expected:?}"
        );
        for (r, e) in read.iter().zip(&expected) {
            // ember stores f32; burn's summary is the f64 mean of the same batch losses.
            assert!(
                (r - e).abs() <= 1e-6 * e.abs().max(1.0),
                "{tag}: ember read {read:?}, burn summarises {expected:?}"
            );
        }
    }
}

/// The MLP, hanging for a while on a batch poisoned with [`HANG`] instead of panicking on it.
#[derive(Module, Debug)]
struct Stalling {
    mlp: Mlp,
}

const HANG: &str = "hang";
/// The pool's step timeout: a warm step here takes well under 100 ms.
const STEP_TIMEOUT: Duration = Duration::from_secs(4);

impl TrainStep for Stalling {
    type Input = XyBatch;
    type Output = burn::train::RegressionOutput;

    fn step(&self, batch: XyBatch) -> TrainOutput<Self::Output> {
        if batch.poison == Some(HANG) {
            std::thread::sleep(STEP_TIMEOUT * 2);
        }
        let output = TrainStep::step(&self.mlp, batch);
        TrainOutput {
            grads: output.grads,
            item: output.item,
        }
    }
}

impl InferenceStep for Stalling {
    type Input = XyBatch;
    type Output = burn::train::RegressionOutput;

    fn step(&self, batch: XyBatch) -> Self::Output {
        InferenceStep::step(&self.mlp, batch)
    }
}

/// What step `s` of device `d` gets.
enum Batch {
    /// A batch on the device, as a split data loader gives it.
    Good,
    /// A batch on the device that panics the step with this message.
    Poisoned(&'static str),
    /// A batch left on the main device, as a source that forgot `to_device` gives it.
    OnMainDevice,
}

/// Each device's batches, step by step, as `plan(step, device)` says.
fn batches_for(
    steps: usize,
    devices: &[Device],
    plan: impl Fn(usize, usize) -> Batch,
) -> Vec<Box<dyn DataLoaderIterator<XyBatch>>> {
    (0..devices.len())
        .map(|d| {
            let batches = (0..steps)
                .map(|s| {
                    let seed = (s * 10 + d) as u64;
                    match plan(s, d) {
                        Batch::Good => XyBatch::synthetic(seed, 4, &devices[d]),
                        Batch::Poisoned(message) => XyBatch {
                            poison: Some(message),
                            ..XyBatch::synthetic(seed, 4, &devices[d])
                        },
                        Batch::OnMainDevice => XyBatch::synthetic(seed, 4, &devices[0]),
                    }
                })
                .collect();
            Box::new(BatchList::new(batches)) as Box<dyn DataLoaderIterator<XyBatch>>
        })
        .collect()
}

/// A step's result in words (train outputs have no `Debug`).
fn outcome<T>(result: &Result<Step<T>, StepError>) -> String {
    match result {
        Ok(Step::Ran(outputs)) => format!("{} outputs", outputs.outputs.len()),
        Ok(Step::EpochOver(_)) => "the end of the epoch".to_string(),
        Err(error) => error.to_string(),
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one table of pool failures, each driven and its device checked in turn"
)]
fn every_pool_failure_on_distinct_devices_is_named_and_leaves_nothing_on_a_wrong_device() {
    let devices = two_devices();
    let main = devices[0].clone();
    let model = Stalling {
        mlp: Mlp::new(8, &main),
    };
    // A first step on a GPU device compiles its kernels, which takes seconds in a debug build;
    // done here on each device, the timeout below measures steps, not compilers.
    for device in &devices {
        let warm = TrainStep::step(
            &model.clone().fork(device),
            XyBatch::synthetic(0, 4, device),
        );
        drop(warm);
        device.sync().unwrap();
    }
    let mut pool = DevicePool::<BurnStep<Stalling>>::new(
        devices.clone(),
        PoolOptions::default().step_timeout(STEP_TIMEOUT),
    )
    .unwrap();
    // Step 0: fine. Step 1: device 1 panics. Step 2: device 0 hangs past the timeout. Step 3:
    // fine again, on a replaced worker for each device.
    // Step 0: fine. Step 1: device 1 panics. Step 2: device 0 hangs past the timeout. Step 3:
    // device 1 is handed a batch still on device 0. Step 4: fine again, on replaced workers.
    let mut sources = batches_for(5, &devices, |step, device| match (step, device) {
        (1, 1) => Batch::Poisoned("poisoned on wgpu:1"),
        (2, 0) => Batch::Poisoned(HANG),
        (3, 1) => Batch::OnMainDevice,
        _ => Batch::Good,
    });
    let mut optimizer = SgdConfig::new().init();
    let mut model = model;
    let mut timings = BTreeMap::new();
    for step in 0..5 {
        let started = Instant::now();
        let result = pool.step(&mut sources, &BurnStep(model.clone()));
        timings.insert(step, started.elapsed());
        let only = |failures: &ember::DeviceFailures, device: usize| {
            let failures = failures.as_slice();
            assert_eq!(failures.len(), 1, "step {step}: {failures:?}");
            assert_eq!(failures[0].device, device, "step {step}: {failures:?}");
            format!("{:?}", failures[0].kind)
        };
        match (step, result) {
            (0 | 4, Ok(Step::Ran(outputs))) => {
                assert_eq!(outputs.outputs.len(), 2);
                let grads = reduce_gradients(
                    outputs.outputs.into_iter().map(|o| o.output.grads),
                    &main,
                    &model,
                    Reduction::Mean,
                );
                model = optimizer.step(0.05, model, grads);
                assert_all_on(&model, &main, "after a reduced step");
            }
            (1, Err(StepError::Devices(failures))) => {
                let kind = only(&failures, 1);
                assert!(
                    kind.contains("Panicked") && kind.contains("poisoned on wgpu:1"),
                    "{kind}"
                );
            }
            (2, Err(StepError::Devices(failures))) => {
                let kind = only(&failures, 0);
                assert!(kind.starts_with("TimedOut"), "{kind}");
            }
            (3, Err(StepError::Devices(failures))) => {
                // Burn refuses the layer on a batch of another device; the pool names the
                // device whose batch it was, and the run goes on.
                let kind = only(&failures, 1);
                assert!(
                    kind.contains("Panicked") && kind.contains("not on the same device"),
                    "{kind}"
                );
            }
            (step, other) => panic!("step {step}: unexpected {}", outcome(&other)),
        }
    }
    // The hung worker was abandoned and replaced; the two that panicked (the poisoned batch,
    // the batch on the wrong device) were replaced, and step 4 ran on the replacements.
    let stats = pool.stats();
    assert_eq!(stats.abandoned_workers, 1);
    assert_eq!(stats.replaced_after_panic, 2);
    assert!(matches!(
        pool.step(&mut sources, &BurnStep(model.clone())),
        Ok(Step::EpochOver(_))
    ));
    eprintln!(
        "pool steps on two devices (ok, panic, hang, batch on the wrong device, ok): {timings:?}"
    );

    // A source error on the second device is named, and no batch went to its worker.
    let device1 = devices[1].clone();
    let failing = PoisonedLoader::failing(regression_loader(3, 32, 8, &device1), 0, "disk gone");
    let mut sources: Vec<Box<dyn DataLoaderIterator<XyBatch>>> = vec![
        Box::new(BatchList::new(vec![XyBatch::synthetic(1, 8, &main)])),
        failing.iter(),
    ];
    match pool.step(&mut sources, &BurnStep(model.clone())) {
        Err(StepError::Devices(failures)) => {
            let failures = failures.as_slice();
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert_eq!(failures[0].device, 1);
            assert!(
                matches!(failures[0].kind, FailureKind::Source(_)),
                "{failures:?}"
            );
        }
        other => panic!(
            "expected device 1's source to fail, got {}",
            outcome(&other)
        ),
    }
    assert_all_on(&model, &main, "the model after every failure");
}

#[test]
fn a_panicking_device_ends_the_trainer_with_that_device_named() {
    let devices = two_devices();
    let main = devices[0].clone();
    // 64 rows over two devices in batches of 8: row 40 is in device 1's second batch.
    let train = PoisonedLoader::wrap(regression_loader(1, 64, 8, &main), 40, "bad rows");
    let error = Trainer::new(
        devices,
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs: 1,
            histogram_every: None,
            ..TrainerConfig::default()
        },
    )
    .fit(Mlp::new(8, &main), train, None, None)
    .map(|_| ())
    .unwrap_err();
    match &error {
        TrainError::Step {
            epoch: 1,
            step: 2,
            source,
        } => {
            let failed: Vec<usize> = source.failures().iter().map(|f| f.device).collect();
            assert_eq!(failed, [1], "{error}");
        }
        other => panic!("expected step 2 to fail on device 1, got {other}"),
    }
}
