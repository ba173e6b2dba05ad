//! What the loop does around one step: the Trainer's side of the driver's optimizer step
//! ([`Stepper`]), the step-time tags, errors named by device, and the validation pass.

use burn::data::dataloader::DataLoader;
use burn::module::Module;
use burn::optim::GradientsParams;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::tensor::Tensor;
use burn::train::{InferenceStep, TrainStep};

use super::config::UpdateHook;
use super::error::TrainError;
use super::item::TrainingItem;
use super::optimizer_shards::OptimizerShards;
use crate::driver::{self, Optimize, StepDone, StepFailure, StepFailureSource, ValidationError};
use crate::model_info::named_gradients;

/// The Trainer's side of the driver's optimizer step: Burn's optimizer and scheduler on the
/// model it owns, and, when asked, each parameter's reduced gradient for histograms.
pub(super) struct Stepper<'a, M> {
    pub(super) model: M,
    pub(super) optimizer: &'a mut OptimizerShards,
    pub(super) scheduler: &'a mut ModuleLrScheduler,
    /// Whether the next optimizer step keeps the gradients for histograms.
    pub(super) want_gradients: bool,
    pub(super) gradients: Option<Vec<(String, Vec<f32>)>>,
    /// Optimizer steps so far.
    pub(super) updates: usize,
    pub(super) on_update: Option<&'a mut UpdateHook<M>>,
}

/// The tag of a device's series `name` (its step time, its wait): per rank across ranks, so
/// that each rank's devices have series of their own in the run.
pub(super) fn device_tag(rank: Option<usize>, device: usize, name: &str) -> String {
    match rank {
        Some(rank) => format!("rank/{rank}/device/{device}/{name}"),
        None => format!("device/{device}/{name}"),
    }
}

/// Each device's scalars of a step: its own step (fork, forward and backward) and how long it
/// then waited for the slowest device.
pub(super) fn device_times(
    rank: Option<usize>,
    done: &StepDone<impl Sized>,
) -> impl Iterator<Item = (String, f64)> + '_ {
    done.items.iter().flat_map(move |output| {
        let wait = done.timing.devices.saturating_sub(output.elapsed);
        [
            (
                device_tag(rank, output.device, "step_seconds"),
                output.elapsed.as_secs_f64(),
            ),
            (
                device_tag(rank, output.device, "wait_seconds"),
                wait.as_secs_f64(),
            ),
        ]
    })
}

/// The step's own scalars: the devices' part of it, the gradients' reduction and the
/// optimizer step (with the round across ranks).
pub(super) fn step_times(done: &StepDone<impl Sized>) -> [(&'static str, f64); 3] {
    [
        ("step/devices_seconds", done.timing.devices.as_secs_f64()),
        ("step/reduce_seconds", done.timing.reduce.as_secs_f64()),
        ("step/optimizer_seconds", done.timing.optimize.as_secs_f64()),
    ]
}

pub(super) fn step_error(epoch: usize, failure: StepFailure) -> TrainError {
    match failure.source {
        StepFailureSource::Devices(source) => TrainError::Step {
            epoch,
            step: failure.step,
            source,
        },
        StepFailureSource::Ranks(source) => TrainError::Ranks {
            epoch,
            step: failure.step,
            source,
        },
    }
}

impl<M: Module + Clone> Optimize<M> for Stepper<'_, M> {
    fn model(&self) -> M {
        self.model.clone()
    }

    fn step(&mut self, grads: GradientsParams) -> f64 {
        if self.want_gradients {
            self.gradients = Some(named_gradients(&self.model, &grads));
        }
        let lr = self.scheduler.step();
        let base = lr.base();
        self.model = self.optimizer.step(lr, self.model.clone(), grads);
        self.updates += 1;
        if let Some(hook) = self.on_update.as_mut() {
            hook(&self.model, self.updates);
        }
        base
    }
}

/// What a validation pass adds up to.
pub(super) struct ValidTotals {
    pub(super) loss: f64,
    pub(super) accuracy: Option<f64>,
    pub(super) examples: usize,
}

/// Mean loss, accuracy and example count of the validation set, on the main device through the
/// driver: a batch that cannot be loaded, or a panicking step, is a [`ValidationError`].
pub(super) fn validate<M, V>(
    model: &M,
    valid: &dyn DataLoader<<M as TrainStep>::Input>,
) -> Result<ValidTotals, ValidationError>
where
    M: TrainStep + InferenceStep<Input = <M as TrainStep>::Input, Output = V> + Module,
    V: TrainingItem,
{
    let (mut loss, mut batches, mut correct, mut judged) = (0.0, 0usize, 0usize, 0usize);
    let mut examples = 0usize;
    driver::validate(model, valid, |_, output: V, _| {
        loss += scalar(output.loss());
        batches += 1;
        examples += output.examples();
        if let Some((hits, total)) = output.correct() {
            correct += hits;
            judged += total;
        }
        Ok::<(), ValidationError>(())
    })?;
    Ok(ValidTotals {
        loss: loss / batches.max(1) as f64,
        accuracy: (judged > 0).then(|| correct as f64 / judged as f64),
        examples,
    })
}

pub(super) fn scalar(tensor: &Tensor<1>) -> f64 {
    tensor.to_data().iter::<f64>().next().unwrap_or(f64::NAN)
}
