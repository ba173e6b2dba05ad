//! `DevicePool` training a Burn MLP on several workers of the flex device, checked against
//! single-device training and against burn-train's own multi-device step.

use burn::data::dataloader::DataLoaderIterator;
use burn::optim::{GradientsAccumulator, GradientsParams, SgdConfig};
use burn::tensor::Device;
use burn::train::train::MultiDevicesTrainStep;
use ember_pool::step::burn::{BurnStep, Reduction, reduce_gradients};
use ember_pool::step::{Step, StepError};
use ember_pool::{DevicePool, PoolOptions};
use ember_tests::{BatchList, Mlp, XyBatch, max_difference, parameters};

const STEPS: usize = 5;
const ROWS_PER_DEVICE: usize = 4;
const LEARNING_RATE: f64 = 0.05;
/// f32 round-off of a few summations in a different order over 5 SGD steps.
const TOLERANCE: f32 = 1e-5;

fn device() -> Device {
    Device::flex().autodiff()
}

/// `batches[d][s]`: device `d`'s batch for step `s`.
fn batches(devices: usize, dev: &Device) -> Vec<Vec<XyBatch>> {
    (0..devices)
        .map(|d| {
            (0..STEPS)
                .map(|s| XyBatch::synthetic((s * 100 + d) as u64, ROWS_PER_DEVICE, dev))
                .collect()
        })
        .collect()
}

fn loaders(batches: Vec<Vec<XyBatch>>) -> Vec<Box<dyn DataLoaderIterator<XyBatch>>> {
    batches
        .into_iter()
        .map(|b| Box::new(BatchList::new(b)) as Box<dyn DataLoaderIterator<XyBatch>>)
        .collect()
}

/// Trains with ember's pool on `devices` workers and returns the final parameters.
fn train_with_pool(initial: &Mlp, devices: usize, reduction: Reduction) -> Vec<f32> {
    let dev = device();
    let mut pool =
        DevicePool::<BurnStep<Mlp>>::new(vec![dev.clone(); devices], PoolOptions::default())
            .unwrap();
    let mut sources = loaders(batches(devices, &dev));
    let mut optim = SgdConfig::new().init();
    let mut model = initial.clone();
    let mut steps = 0;
    while let Ok(Step::Ran(outputs)) = pool.step(&mut sources, &BurnStep(model.clone())) {
        assert_eq!(outputs.outputs.len(), devices);
        let grads = reduce_gradients(
            outputs.outputs.into_iter().map(|o| o.output.grads),
            &dev,
            &model,
            reduction,
        );
        model = optim.step(LEARNING_RATE, model, grads);
        steps += 1;
    }
    assert_eq!(steps, STEPS);
    parameters(&model)
}

/// Trains on one device, each step on every device's batch concatenated.
fn train_on_concatenated_batches(initial: &Mlp, devices: usize) -> Vec<f32> {
    let dev = device();
    let batches = batches(devices, &dev);
    let mut optim = SgdConfig::new().init();
    let mut model = initial.clone();
    for s in 0..STEPS {
        let step_batches: Vec<XyBatch> = batches.iter().map(|b| b[s].clone()).collect();
        let output = burn::train::TrainStep::step(&model, XyBatch::concat(&step_batches));
        model = optim.step(LEARNING_RATE, model, output.grads);
    }
    parameters(&model)
}

/// Trains with burn-train's `MultiDevicesTrainStep`, summing gradients on the main device as
/// its `MultiDeviceOptim::OptimMainDevice` does.
fn train_with_burn_train(initial: &Mlp, devices: usize) -> Vec<f32> {
    let dev = device();
    let step = MultiDevicesTrainStep::<Mlp>::new(&vec![dev.clone(); devices]);
    let mut loaders = loaders(batches(devices, &dev));
    let mut optim = SgdConfig::new().init();
    let mut model = initial.clone();
    loop {
        let (outputs, _progress) = step.step(&mut loaders, &model).unwrap();
        if outputs.is_empty() {
            break;
        }
        let mut accumulator = GradientsAccumulator::<Mlp>::new();
        for output in outputs {
            accumulator.accumulate(&model, output.output.grads.to_device(&dev, &model));
        }
        let grads: GradientsParams = accumulator.grads();
        model = optim.step(LEARNING_RATE, model, grads);
    }
    parameters(&model)
}

#[test]
fn mean_reduction_on_2_and_4_workers_equals_one_device_on_the_concatenated_batch() {
    for devices in [2, 4] {
        let initial = Mlp::new(8, &device());
        let reference = train_on_concatenated_batches(&initial, devices);
        let pooled = train_with_pool(&initial, devices, Reduction::Mean);
        let difference = max_difference(&pooled, &reference);
        assert!(
            difference <= TOLERANCE,
            "{devices} workers: parameters differ by {difference}"
        );
        // Training moved the parameters, so the comparison is not vacuous.
        assert!(max_difference(&pooled, &ember_tests::parameters(&initial)) > 1e-3);
    }
}

#[test]
fn sum_reduction_matches_burn_train_multi_device_training() {
    let devices = 2;
    let initial = Mlp::new(8, &device());
    let burn_train = train_with_burn_train(&initial, devices);
    let pooled = train_with_pool(&initial, devices, Reduction::Sum);
    let difference = max_difference(&pooled, &burn_train);
    assert!(difference <= TOLERANCE, "parameters differ by {difference}");
    // Sum and mean really differ with two devices.
    let mean = train_with_pool(&initial, devices, Reduction::Mean);
    assert!(max_difference(&pooled, &mean) > 1e-3);
}

#[test]
fn mean_reduction_is_bit_for_bit_repeatable() {
    let initial = Mlp::new(8, &device());
    let first = train_with_pool(&initial, 4, Reduction::Mean);
    let second = train_with_pool(&initial, 4, Reduction::Mean);
    let bits = |p: &[f32]| p.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&first), bits(&second));
}

#[test]
fn a_panic_in_one_devices_step_names_it_and_the_next_step_works() {
    let dev = device();
    let mut batches = batches(2, &dev);
    batches[1][0].poison = Some("loss became nan");
    let mut sources = loaders(batches);
    let mut pool =
        DevicePool::<BurnStep<Mlp>>::new(vec![dev.clone(); 2], PoolOptions::default()).unwrap();
    let model = BurnStep(Mlp::new(8, &dev));

    let Err(error) = pool.step(&mut sources, &model) else {
        panic!("a poisoned batch must fail the step");
    };
    assert!(matches!(error, StepError::Devices(_)));
    assert_eq!(
        error.to_string(),
        "device 1: step panicked: loss became nan"
    );

    let Ok(Step::Ran(outputs)) = pool.step(&mut sources, &model) else {
        panic!("the step after a panic must run");
    };
    let devices: Vec<usize> = outputs.outputs.iter().map(|o| o.device).collect();
    assert_eq!(devices, [0, 1]);
    assert_eq!(
        outputs.progress.progress.items_processed,
        4 * ROWS_PER_DEVICE
    );
}
