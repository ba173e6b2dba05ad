//! [`PoolStrategy`]: burn-train's supervised training on ember's device pool.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use burn::data::dataset::DatasetError;
use burn::optim::GradientsParams;
use burn::tensor::Device;
use burn::train::train::WorkerFailure;
use burn::train::{
    EventProcessorTraining, Interrupter, Learner, LearnerEvent, LearnerModel,
    SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainOutput,
    TrainStep, TrainingComponents, TrainingError, TrainingItem, ValidLoader,
};
use ember_pool::step::StepError;
use ember_pool::step::burn::Reduction;
use ember_pool::{PoolOptions, SpawnError};

use super::failure::EmberFailure;
use crate::collective::{CollectiveError, Ranks};
use crate::driver::{self, Driver, Optimize, StepFailure, StepFailureSource, ValidationError};

/// Why a [`PoolStrategy`] stopped training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolStrategyError {
    /// The strategy was given no devices.
    #[error("the pool strategy has no devices")]
    NoDevices,
    /// A worker thread could not start.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A training step failed; the source names every failed device.
    #[error("training step {step} of epoch {epoch} failed: {source}")]
    Step {
        /// The epoch, from burn's numbering (from 1).
        epoch: usize,
        /// The pool step within the epoch, from 1.
        step: usize,
        /// Every failed device.
        source: StepError,
    },
    /// Validation could not run through: a batch could not be loaded, or the step panicked.
    #[error("validation of epoch {epoch} failed: {source}")]
    Validation {
        /// The epoch, from burn's numbering (from 1).
        epoch: usize,
        /// Which device and batch, and what happened.
        source: ValidationError,
    },
}

/// A burn-train `SupervisedLearningStrategy` that runs training on ember's
/// [`DevicePool`](crate::DevicePool).
///
/// ```text
/// SupervisedTraining::new(dir, train, valid)
///     .with_training_strategy(TrainingStrategy::Custom(Arc::new(
///         PoolStrategy::new(devices, Reduction::Mean),
///     )))
/// ```
///
/// Like burn's `ExecutionStrategy::multi` with `MultiDeviceOptim::OptimMainDevice`, each epoch
/// splits the training loader into one contiguous slice per device, and each step runs one
/// batch per device; the gradients are brought to the main device (the first) and the optimizer
/// steps there. Validation runs on the main device. Unlike it:
///
/// - the workers are ember's (one long-lived thread per device for the whole run) and gradients
///   are reduced **in device order** by [`Reduction::Mean`] or [`Reduction::Sum`] (burn sums,
///   in arrival order), so runs reduce to the same bits;
/// - with gradient accumulation (`SupervisedTraining::grads_accumulation(n)`), the gradients of
///   every device of the `n` steps are reduced together, so `Mean` averages over all of them;
/// - a failure (a panicking step, a failing batch source, with [`with_step_timeout`] a hung
///   worker, a dead worker thread) ends training through burn's own mechanism: the interrupter
///   fails and `LearningResult::error` holds `TrainingError::Workers` with one entry per failed
///   device, each carrying ember's message; [`take_error`](PoolStrategy::take_error) gives the
///   typed [`PoolStrategyError`]. Errors without a device (no devices, a worker that could not
///   start) come as `TrainingError::Dataset` carrying ember's message.
///
/// burn's event processor gets one `ProcessedItem` per device output with the aggregated
/// progress, the iteration (device batches so far in the epoch) and the current learning rate;
/// `StartSplit`/`EndSplit`/`EndEpoch` as burn's strategies send them. The interrupter is checked
/// before every step. Checkpointing (`with_default_checkpointers`, resuming with `checkpoint(n)`),
/// and early stopping work as in burn's strategies, after validation of each epoch. Devices that
/// are not autodiff devices are made so, as burn does for its own strategies; burn's gradient
/// checkpointing flag does not reach custom strategies, so pass
/// `device.autodiff().gradient_checkpointing()` to use it.
///
/// Not supported: burn's sharded optimizer (`MultiDeviceOptim::OptimSharded`): the optimizer
/// always steps on the main device; and burn's `Interrupter` cannot cancel a step already
/// running on the workers: it is checked between steps (a hung step needs the step timeout).
///
/// [`with_step_timeout`]: PoolStrategy::with_step_timeout
#[derive(Debug)]
pub struct PoolStrategy {
    devices: Vec<Device>,
    reduction: Reduction,
    step_timeout: Option<Duration>,
    error: Mutex<Option<PoolStrategyError>>,
}

impl PoolStrategy {
    /// A strategy on `devices` (the first is the main device) reducing gradients by `reduction`.
    pub fn new(devices: Vec<Device>, reduction: Reduction) -> Self {
        let devices = devices
            .into_iter()
            .map(|device| {
                if device.is_autodiff() {
                    device
                } else {
                    device.autodiff()
                }
            })
            .collect();
        Self {
            devices,
            reduction,
            step_timeout: None,
            error: Mutex::new(None),
        }
    }

    /// Gives up on a device step after `timeout`: the device is reported as timed out and
    /// training ends with an error. No timeout by default.
    pub fn with_step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = Some(timeout);
        self
    }

    /// The devices, main device first.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// How device gradients are reduced.
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// The step timeout, if any.
    pub fn step_timeout(&self) -> Option<Duration> {
        self.step_timeout
    }

    /// Takes the error that ended the latest training run, typed, if one did.
    pub fn take_error(&self) -> Option<PoolStrategyError> {
        match self.error.lock() {
            Ok(mut slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }

    /// The pool's options: the step timeout, if one is set.
    fn pool_options(&self) -> PoolOptions {
        match self.step_timeout {
            Some(timeout) => PoolOptions::default().step_timeout(timeout),
            None => PoolOptions::default(),
        }
    }

    /// Fails burn's interrupter with `error` (as `TrainingError::Workers` when it names
    /// devices) and keeps the typed error for [`take_error`](Self::take_error).
    fn fail(&self, interrupter: &Interrupter, error: PoolStrategyError) {
        let training_error = match &error {
            PoolStrategyError::Step {
                epoch,
                step,
                source: source @ StepError::Devices(_),
            } => TrainingError::Workers(
                source
                    .failures()
                    .iter()
                    .map(|failure| {
                        let text = failure.to_string();
                        let prefix = format!("device {}: ", failure.device);
                        let message = text.strip_prefix(&prefix).unwrap_or(&text);
                        WorkerFailure {
                            device_id: failure.device,
                            message: format!("{message} (epoch {epoch}, step {step})"),
                        }
                    })
                    .collect(),
            ),
            other => TrainingError::Dataset(DatasetError::new(EmberFailure(other.to_string()))),
        };
        interrupter.fail(training_error);
        match self.error.lock() {
            Ok(mut slot) => *slot = Some(error),
            Err(poisoned) => *poisoned.into_inner() = Some(error),
        }
    }
}

/// burn-train's `Learner` as the driver's optimizer step: the learning-rate schedule steps, then
/// the optimizer, as burn's own strategies do.
struct LearnerStep<'a, M: LearnerModel>(&'a mut Learner<M>);

impl<M: LearnerModel> Optimize<M> for LearnerStep<'_, M> {
    fn model(&self) -> M {
        self.0.model()
    }

    fn step(&mut self, grads: GradientsParams) -> f64 {
        self.0.lr_step();
        let lr = self.0.lr_current().base();
        self.0.optimizer_step(grads);
        lr
    }

    fn wants_every_gradient(&self) -> bool {
        true
    }

    /// burn's `Learner` takes no model back, so across ranks it would step every parameter
    /// (the bits each owner gets) and join the exchange only for the other ranks' sake. The
    /// strategy gives the driver no ranks, so this is not reached today.
    fn step_shared(
        &mut self,
        grads: GradientsParams,
        ranks: &mut Ranks,
    ) -> Result<f64, CollectiveError> {
        let lr = self.step(grads);
        ranks.gather_parameters(self.0.model())?;
        Ok(lr)
    }
}

/// One training epoch on the pool, through the driver, sending burn's events.
fn train_epoch<M>(
    strategy: &PoolStrategy,
    driver: &mut Driver<M>,
    learner: &mut Learner<M>,
    epoch: usize,
    events: &mut SupervisedTrainingEventProcessor<M>,
    interrupter: &Interrupter,
) where
    M: LearnerModel,
    TrainOutput<<M as TrainStep>::Output>: Send,
{
    log::info!("executing training epoch {epoch} on the pool");
    let mut run = driver.epoch(None, HashMap::new());
    interrupter.fail_on_error(events.process_train(LearnerEvent::StartSplit {
        epoch_number: epoch,
        progress: run.progress(),
    }));
    let mut iteration = 0usize;
    while !interrupter.should_stop() {
        let done = match run.step(&mut LearnerStep(learner)) {
            Ok(Some(done)) => done,
            Ok(None) => break,
            Err(StepFailure {
                step,
                source: StepFailureSource::Devices(source),
            }) => {
                strategy.fail(
                    interrupter,
                    PoolStrategyError::Step {
                        epoch,
                        step,
                        source,
                    },
                );
                break;
            }
            Err(StepFailure {
                source: StepFailureSource::Ranks(source),
                ..
            }) => {
                // The strategy gives the driver no ranks, so no round can fail; were one to,
                // training stops with its reason rather than going on.
                log::error!("training step across ranks failed: {source}");
                interrupter.stop(Some(&source.to_string()));
                break;
            }
        };
        let progress = run.progress();
        for output in done.items {
            iteration += 1;
            let item = TrainingItem::new(
                output.item,
                progress.clone(),
                Some(iteration),
                Some(learner.lr_current()),
            );
            interrupter.fail_on_error(events.process_train(LearnerEvent::ProcessedItem(item)));
        }
    }
    interrupter.fail_on_error(events.flush());
    let mut progress = run.progress();
    // A partial accumulation window still updates the model, as burn-train does.
    if !interrupter.should_stop() {
        // Without ranks, finishing cannot fail.
        let _ = run.finish(&mut LearnerStep(learner));
        progress.resolve_total();
    }
    interrupter.fail_on_error(events.process_train(LearnerEvent::EndSplit { epoch, progress }));
    interrupter.fail_on_error(events.flush());
}

/// One validation pass on the main device through the driver, as burn's single-device
/// validation epoch does; a batch that cannot be loaded, or a panicking step, fails training
/// with a [`ValidationError`] naming the device and batch.
fn valid_epoch<M: LearnerModel>(
    strategy: &PoolStrategy,
    learner: &Learner<M>,
    loader: &ValidLoader<M>,
    epoch: usize,
    events: &mut SupervisedTrainingEventProcessor<M>,
    interrupter: &Interrupter,
) {
    log::info!("executing validation epoch {epoch}");
    let model = learner.model();
    interrupter.fail_on_error(events.process_valid(LearnerEvent::StartSplit {
        epoch_number: epoch,
        progress: loader.iter().progress(),
    }));
    let mut last = None;
    let result = driver::validate(&model, loader.as_ref(), |batch, item, progress| {
        if interrupter.should_stop() {
            return Ok(());
        }
        last = Some(progress.clone());
        let item = TrainingItem::new(item, progress, Some(batch), None);
        interrupter.fail_on_error(events.process_valid(LearnerEvent::ProcessedItem(item)));
        Ok::<(), ValidationError>(())
    });
    if let Err(source) = result {
        strategy.fail(interrupter, PoolStrategyError::Validation { epoch, source });
        return;
    }
    interrupter.fail_on_error(events.flush());
    let mut progress = last.unwrap_or_else(|| loader.iter().progress());
    if !interrupter.should_stop() {
        progress.resolve_total();
    }
    interrupter.fail_on_error(events.process_valid(LearnerEvent::EndSplit { epoch, progress }));
    interrupter.fail_on_error(events.flush());
}

/// Says why training stopped, where burn's interrupter was given a reason.
fn log_interruption(interrupter: &Interrupter) {
    if let Some(interruption) = interrupter.interruption() {
        let reason = interruption.reason.as_deref().unwrap_or("reason unknown");
        log::info!("training interrupted: {reason}");
    }
}

impl<M> SupervisedLearningStrategy<M> for PoolStrategy
where
    M: LearnerModel,
    TrainOutput<<M as TrainStep>::Output>: Send,
{
    fn fit(
        &self,
        components: TrainingComponents<M>,
        mut learner: Learner<M>,
        train: TrainLoader<M>,
        valid: ValidLoader<M>,
        starting_epoch: usize,
    ) -> (M, SupervisedTrainingEventProcessor<M>) {
        let mut events = components.event_processor;
        let interrupter = components.interrupter.clone();
        if let Ok(mut slot) = self.error.lock() {
            *slot = None;
        }
        let options = self.pool_options();
        let accumulation = components.grad_accumulation.unwrap_or(1);
        let mut driver = match Driver::new(
            &self.devices,
            train,
            None,
            options,
            Some(ember_pool::DEFAULT_MAX_ABANDONED_WORKERS),
            self.reduction,
            accumulation,
        ) {
            Ok(Some(driver)) => driver,
            Ok(None) => {
                self.fail(&interrupter, PoolStrategyError::NoDevices);
                return (learner.model(), events);
            }
            Err(error) => {
                self.fail(&interrupter, error.into());
                return (learner.model(), events);
            }
        };
        let main = driver.main().clone();
        let valid = valid.to_device(&main.clone().inner());
        learner.fork(&main);
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;

        for epoch in starting_epoch..=components.num_epochs {
            train_epoch(
                self,
                &mut driver,
                &mut learner,
                epoch,
                &mut events,
                &interrupter,
            );
            if interrupter.should_stop() {
                log_interruption(&interrupter);
                break;
            }

            valid_epoch(self, &learner, &valid, epoch, &mut events, &interrupter);
            if interrupter.should_stop() {
                break;
            }
            interrupter.fail_on_error(events.process_train(LearnerEvent::EndEpoch(epoch)));
            if checkpointer.is_some() || early_stopping.is_some() {
                interrupter.fail_on_error(events.flush());
            }
            if interrupter.should_stop() {
                break;
            }
            if let Some(checkpointer) = &mut checkpointer {
                checkpointer.checkpoint(&learner, epoch, &components.event_store);
            }
            if let Some(early_stopping) = &mut early_stopping
                && early_stopping.should_stop(epoch, &components.event_store)
            {
                break;
            }
        }
        (learner.model(), events)
    }
}
