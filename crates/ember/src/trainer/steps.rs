//! What the loop does around one step: the Trainer's side of the driver's optimizer step
//! ([`Stepper`]), the step-time tags, errors named by device, and the validation pass.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use burn::data::dataloader::DataLoader;
use burn::module::{Module, ParamId};
use burn::optim::GradientsParams;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::tensor::{Device, Tensor};
use burn::train::{InferenceStep, TrainStep};

use super::config::UpdateHook;
use super::error::TrainError;
use super::item::TrainingItem;
use super::optimizer_shards::OptimizerShards;
use crate::collective::{CollectiveError, Ranks};
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
/// then waited for the slowest device. A device that ran several slices of a step (a run
/// resumed on fewer devices or ranks) has one value of each: their times added up.
pub(super) fn device_times(
    rank: Option<usize>,
    done: &StepDone<impl Sized>,
) -> impl Iterator<Item = (String, f64)> + '_ {
    let mut busy: Vec<(usize, std::time::Duration)> = Vec::new();
    for output in &done.items {
        match busy.iter_mut().find(|(device, _)| *device == output.device) {
            Some((_, elapsed)) => *elapsed += output.elapsed,
            None => busy.push((output.device, output.elapsed)),
        }
    }
    busy.into_iter().flat_map(move |(device, elapsed)| {
        let wait = done.timing.devices.saturating_sub(elapsed);
        [
            (
                device_tag(rank, device, "step_seconds"),
                elapsed.as_secs_f64(),
            ),
            (device_tag(rank, device, "wait_seconds"), wait.as_secs_f64()),
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
        self.updated();
        base
    }

    fn wants_every_gradient(&self) -> bool {
        self.want_gradients
    }

    fn step_shared(
        &mut self,
        grads: GradientsParams,
        ranks: &mut Ranks,
    ) -> Result<f64, CollectiveError> {
        if self.want_gradients {
            self.gradients = Some(named_gradients(&self.model, &grads));
        }
        let grads = ranks.owned_gradients(&self.model, grads);
        let lr = self.scheduler.step();
        let base = lr.base();
        let model = self.model.clone();
        let optimizer = &mut *self.optimizer;
        // A panicking step is announced in the exchange the other ranks wait in, then goes on
        // panicking here, as one process's optimizer would.
        let stepped = match catch_unwind(AssertUnwindSafe(|| optimizer.step(lr, model, grads))) {
            Ok(stepped) => stepped,
            Err(payload) => {
                let _ = ranks.announce_step_failure();
                resume_unwind(payload);
            }
        };
        self.model = ranks.gather_parameters(stepped)?;
        self.updated();
        Ok(base)
    }
}

impl<M: Module + Clone> Stepper<'_, M> {
    /// The parameters the optimizer steps on a device other than the main one, and where.
    pub(super) fn gradient_homes(&mut self) -> HashMap<ParamId, Device> {
        self.optimizer.gradient_homes(&self.model).clone()
    }

    fn updated(&mut self) {
        self.updates += 1;
        if let Some(hook) = self.on_update.as_mut() {
            hook(&self.model, self.updates);
        }
    }
}

/// What a validation pass adds up to: sums, so that ranks that each validated a share can
/// add theirs up.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ValidTotals {
    loss_sum: f64,
    batches: usize,
    correct: usize,
    judged: usize,
    pub(super) examples: usize,
}

impl ValidTotals {
    /// The mean of the batches' losses.
    pub(super) fn loss(&self) -> f64 {
        self.loss_sum / self.batches.max(1) as f64
    }

    /// The share of judged examples classified right, for classifiers.
    pub(super) fn accuracy(&self) -> Option<f64> {
        (self.judged > 0).then(|| self.correct as f64 / self.judged as f64)
    }

    fn to_values(self) -> [f64; 5] {
        [
            self.loss_sum,
            self.batches as f64,
            self.correct as f64,
            self.judged as f64,
            self.examples as f64,
        ]
    }

    fn add_values(&mut self, values: &[f64]) {
        if let [loss_sum, batches, correct, judged, examples] = *values {
            self.loss_sum += loss_sum;
            self.batches += batches as usize;
            self.correct += correct as usize;
            self.judged += judged as usize;
            self.examples += examples as usize;
        }
    }
}

/// Why a validation pass did not finish.
pub(super) enum ValidFailure {
    /// This rank's own pass: a batch that could not be loaded, or a panicking step.
    Here(ValidationError),
    /// Another rank failed, or the ranks could not exchange their totals.
    Ranks(CollectiveError),
}

/// Validates `model` on the main device through the driver. Across ranks, each rank validates
/// its own contiguous share of the batches (as it trains on its share of the training set)
/// and the ranks' sums are added up in rank order, the same bits on every rank: each
/// validation batch is run once in the job instead of once per rank.
pub(super) fn validate<M, V>(
    model: &M,
    valid: &dyn DataLoader<<M as TrainStep>::Input>,
    ranks: Option<&mut Ranks>,
) -> Result<ValidTotals, ValidFailure>
where
    M: TrainStep + InferenceStep<Input = <M as TrainStep>::Input, Output = V> + Module,
    V: TrainingItem,
{
    let Some(ranks) = ranks.filter(|ranks| ranks.size() > 1) else {
        return validate_here(model, valid).map_err(ValidFailure::Here);
    };
    let share = ranks.shard(valid.num_items());
    let own = validate_here(model, valid.slice(share.start, share.end).as_ref())
        .map_err(ValidFailure::Here)?;
    let every_rank = ranks
        .gather_totals(&own.to_values())
        .map_err(ValidFailure::Ranks)?;
    let mut totals = ValidTotals::default();
    for values in &every_rank {
        totals.add_values(values);
    }
    Ok(totals)
}

/// Sums over every batch of `valid`, a batch that cannot be loaded, or a panicking step, being
/// a [`ValidationError`].
fn validate_here<M, V>(
    model: &M,
    valid: &dyn DataLoader<<M as TrainStep>::Input>,
) -> Result<ValidTotals, ValidationError>
where
    M: TrainStep + InferenceStep<Input = <M as TrainStep>::Input, Output = V> + Module,
    V: TrainingItem,
{
    let mut totals = ValidTotals::default();
    driver::validate(model, valid, |_, output: V, _| {
        totals.loss_sum += scalar(output.loss());
        totals.batches += 1;
        totals.examples += output.examples();
        if let Some((hits, total)) = output.correct() {
            totals.correct += hits;
            totals.judged += total;
        }
        Ok::<(), ValidationError>(())
    })?;
    Ok(totals)
}

pub(super) fn scalar(tensor: &Tensor<1>) -> f64 {
    tensor.to_data().iter::<f64>().next().unwrap_or(f64::NAN)
}
