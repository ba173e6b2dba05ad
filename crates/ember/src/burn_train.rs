//! burn-train integration: a metric logger writing through [`SummaryRecord`], and a training
//! strategy running `SupervisedTraining` on ember's device pool.
//!
//! - [`SummaryLogger`] is a burn-train `MetricLogger`: register it with
//!   `SupervisedTraining::with_metric_logger` and every numeric metric lands in TensorBoard (or
//!   MindInsight) files, under `<split>/<metric name>` per batch and `<split>/<metric name>/epoch`
//!   per epoch.
//! - [`PoolStrategy`] is a burn-train `SupervisedLearningStrategy`: pass it as
//!   `TrainingStrategy::Custom(Arc::new(PoolStrategy::new(devices, Reduction::Mean)))` and the
//!   training steps run on an [`ember_pool::DevicePool`], with device-ordered gradient reduction
//!   (mean or sum) and failures that name every failed device.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use burn::optim::SgdConfig;
//! use burn::tensor::Device;
//! use burn::train::logger::FileMetricLogger;
//! use burn::train::metric::LossMetric;
//! use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
//! use ember::SummaryRecord;
//! use ember::burn_train::{PoolStrategy, SummaryLogger};
//! use ember::step::burn::Reduction;
//! # use ember_tests::{Mlp, regression_loader};
//!
//! let device = Device::flex().autodiff();
//! let strategy = Arc::new(PoolStrategy::new(vec![device.clone(); 2], Reduction::Mean));
//! let result = SupervisedTraining::new(
//!     "runs/demo",
//!     regression_loader(1, 64, 8, &device),
//!     regression_loader(2, 16, 8, &device),
//! )
//! .num_epochs(2)
//! .metrics((LossMetric::new(),))
//! .with_metric_logger(FileMetricLogger::new("runs/demo"))
//! .with_metric_logger(SummaryLogger::new(SummaryRecord::new("runs/demo/tensorboard")?))
//! .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
//! .launch(Learner::new(Mlp::new(8, &device), SgdConfig::new().init(), 0.05));
//! if let Some(error) = result.error {
//!     eprintln!("training failed: {error}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use burn::data::dataloader::split::split_dataloader;
use burn::data::dataloader::{DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::optim::GradientsParams;
use burn::tensor::Device;
use burn::train::logger::MetricLogger;
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{MetricDefinition, MetricId, NumericEntry};
use burn::train::train::WorkerFailure;
use burn::train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent, LearnerModel,
    SupervisedLearningStrategy, SupervisedTrainingEventProcessor, TrainLoader, TrainOutput,
    TrainStep, TrainingComponents, TrainingError, TrainingItem, ValidLoader,
};
use ember_pool::step::burn::{BurnStep, Reduction, reduce_gradients};
use ember_pool::step::{Step, StepError};
use ember_pool::{DevicePool, PoolOptions, SpawnError};

use crate::faults::SummaryFaults;
use crate::{SummaryError, SummaryRecord};

// ---------------------------------------------------------------------------------------------
// SummaryLogger
// ---------------------------------------------------------------------------------------------

/// A burn-train `MetricLogger` that writes every numeric metric through a [`SummaryRecord`].
///
/// **Tags and steps.** burn passes a logger no step, only the epoch and the split, so the logger
/// counts: each batch update of metric `Name` in split `train` is written as `train/Name` at
/// step 1, 2, 3, … (counted per split and metric, continuing across epochs), and the value burn
/// computes at the end of the split (the epoch's final, authoritative value) is written as
/// `train/Name/epoch` at the epoch number. Names are the metrics' own ("Loss", "Accuracy",
/// "Learning Rate", …, learned from `log_metric_definition`); splits are `train`, `valid` and
/// `test` (`test/<tag>` for a tagged test split). Non-numeric metrics are not written.
///
/// burn sends the end-of-split values as one more update followed by an epoch summary; the
/// logger therefore holds each split's latest update until the next update (then it was a
/// batch) or the summary (then it was the final values). What is still held when the logger is
/// dropped is written as batch values.
///
/// **Owned or shared record.** [`SummaryLogger::new`] takes the record: burn drops its loggers
/// when training ends, and the logger then closes the record, so the files are complete when
/// `launch` returns. [`SummaryLogger::shared`] writes through an `Arc<Mutex<SummaryRecord>>`
/// that the caller keeps to record more (hyper-parameters, histograms) and closes itself; the
/// logger only flushes it at each epoch end and when dropped.
///
/// **Registering.** Registering any logger with `SupervisedTraining::with_metric_logger`
/// replaces burn's default `FileMetricLogger`, and this logger is write-only:
/// [`read_numeric`](MetricLogger::read_numeric) returns `Err`. burn's checkpointing strategy,
/// early stopping and `summary()` read metrics back through the first logger that can, and
/// burn panics when none can. **Register `FileMetricLogger::new(dir)` first** whenever
/// checkpoints, early stopping or the learner summary are used.
///
/// **Execution strategies.** The logger sits behind burn's event store, so it works the same
/// with every execution strategy: `ExecutionStrategy::single`, `ExecutionStrategy::multi`
/// (either `MultiDeviceOptim`), custom strategies such as [`PoolStrategy`], and
/// `ExecutionStrategy::ddp`, whose workers' events are merged by one event processor into the
/// same stream (start of split, one update per batch, end of split, epoch summary) before they
/// reach loggers. The single, multi and pool strategies are covered by ember's tests; DDP is
/// not: it needs a CubeCL or remote device, and on Flex (`Device::flex()`) burn panics with
/// "Distributed operations are not supported for device Flex(Cpu)". Its support rests on
/// burn 0.23's DDP event processor (`strategies/ddp/processor.rs`), read, not run.
///
/// **Errors.** The logger never panics and never ends training by itself: every failure (a
/// closed record, a rejected value, a full writer queue, a poisoned lock) is counted and kept
/// in [`errors`](SummaryLogger::errors), a handle that outlives the logger. What a failure of
/// the record does to training follows the record's
/// [`error_policy`](SummaryRecord::error_policy), read when the logger is made:
///
/// - under [`ErrorPolicy::Log`] (the default), the first failure of each kind is logged with
///   `log::error!` and training goes on;
/// - under [`ErrorPolicy::Raise`], every failure is logged, and, when the logger was given
///   burn's interrupter with [`with_interrupter`](SummaryLogger::with_interrupter), the first
///   one fails it, so training stops after the current step and `LearningResult::error` holds
///   it. burn gives a `MetricLogger` no other way to stop training (its methods return
///   nothing), and its `TrainingError` has no variant for a logger, so the error comes as
///   `TrainingError::Dataset` carrying the logger's message. Without the interrupter, a
///   `Raise` record's failures are logged and training goes on.
///
/// Write failures that happen on the record's writer threads reach the logger only under
/// `Raise` (from a later call); under `Log` the record keeps them
/// ([`SummaryRecord::take_errors`]).
///
/// [`ErrorPolicy::Log`]: crate::ErrorPolicy::Log
/// [`ErrorPolicy::Raise`]: crate::ErrorPolicy::Raise
pub struct SummaryLogger {
    record: Arc<Mutex<SummaryRecord>>,
    owned: bool,
    names: HashMap<MetricId, String>,
    steps: HashMap<(String, String), i64>,
    /// The latest update of each split, not yet known to be a batch's or the split's final one.
    held: HashMap<Split, MetricsUpdate>,
    errors: LoggerErrors,
    faults: SummaryFaults,
    interrupter: Option<Interrupter>,
}

impl std::fmt::Debug for SummaryLogger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryLogger")
            .field("owned", &self.owned)
            .field("metrics", &self.names.len())
            .field("errors", &self.errors.count())
            .finish()
    }
}

/// A clonable view of a [`SummaryLogger`]'s errors, readable after burn has taken the logger.
#[derive(Debug, Clone, Default)]
pub struct LoggerErrors {
    inner: Arc<ErrorsInner>,
}

#[derive(Debug, Default)]
struct ErrorsInner {
    count: AtomicU64,
    last: Mutex<Option<String>>,
}

impl LoggerErrors {
    /// How many failures the logger has met so far.
    pub fn count(&self) -> u64 {
        self.inner.count.load(Ordering::Relaxed)
    }

    /// The latest failure's message, if any.
    pub fn last(&self) -> Option<String> {
        match self.inner.last.lock() {
            Ok(last) => last.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Logs, counts and keeps a failure.
    fn push(&self, message: String) {
        log::error!("summary logger: {message}");
        self.keep(message);
    }

    /// Counts and keeps a failure, for one whose logging is decided elsewhere.
    fn keep(&self, message: String) {
        self.inner.count.fetch_add(1, Ordering::Relaxed);
        match self.inner.last.lock() {
            Ok(mut last) => *last = Some(message),
            Err(poisoned) => *poisoned.into_inner() = Some(message),
        }
    }
}

impl SummaryLogger {
    /// A logger that owns `record` and closes it when burn drops the logger at the end of
    /// training.
    pub fn new(record: SummaryRecord) -> Self {
        Self::with_record(Arc::new(Mutex::new(record)), true)
    }

    /// A logger writing through a record the caller shares and closes; the logger flushes it at
    /// each epoch end and when dropped.
    pub fn shared(record: Arc<Mutex<SummaryRecord>>) -> Self {
        Self::with_record(record, false)
    }

    fn with_record(record: Arc<Mutex<SummaryRecord>>, owned: bool) -> Self {
        let policy = match record.lock() {
            Ok(record) => record.error_policy(),
            Err(poisoned) => poisoned.into_inner().error_policy(),
        };
        Self {
            record,
            owned,
            names: HashMap::new(),
            steps: HashMap::new(),
            held: HashMap::new(),
            errors: LoggerErrors::default(),
            faults: SummaryFaults::new(policy),
            interrupter: None,
        }
    }

    /// Lets the logger stop training when its record's policy is
    /// [`ErrorPolicy::Raise`](crate::ErrorPolicy::Raise): the first failure of the record fails
    /// `interrupter` (pass `SupervisedTraining::interrupter()`). See the type's documentation,
    /// **Errors**.
    pub fn with_interrupter(mut self, interrupter: Interrupter) -> Self {
        self.interrupter = Some(interrupter);
        self
    }

    /// A handle on the logger's failures that stays readable after the logger is registered.
    pub fn errors(&self) -> LoggerErrors {
        self.errors.clone()
    }

    /// How many failures the logger has met so far.
    pub fn error_count(&self) -> u64 {
        self.errors.count()
    }

    fn lock(&self) -> Option<MutexGuard<'_, SummaryRecord>> {
        match self.record.lock() {
            Ok(record) => Some(record),
            Err(_) => {
                self.errors
                    .push("the summary record's lock is poisoned; values dropped".into());
                None
            }
        }
    }

    /// Writes one update's numeric values: per batch (counted steps) or as the split's final
    /// values (at the epoch).
    fn write(&mut self, update: &MetricsUpdate, split: &Split, final_epoch: Option<usize>) {
        let prefix = split_prefix(split);
        let mut values = Vec::with_capacity(update.entries_numeric.len());
        for numeric in &update.entries_numeric {
            let Some(name) = self.names.get(&numeric.entry.metric_id) else {
                self.errors.push(format!(
                    "a {prefix} value of metric {:?} came before its definition; dropped",
                    numeric.entry.metric_id
                ));
                continue;
            };
            let (tag, step) = match final_epoch {
                Some(epoch) => (format!("{prefix}/{name}/epoch"), epoch as i64),
                None => {
                    let step = self
                        .steps
                        .entry((prefix.clone(), name.clone()))
                        .or_insert(0);
                    *step += 1;
                    (format!("{prefix}/{name}"), *step)
                }
            };
            if let Some(entry) = &numeric.numeric_entry {
                values.push((tag, step, entry.current()));
            }
        }
        if values.is_empty() {
            return;
        }
        let Some(mut record) = self.lock() else {
            return;
        };
        let mut failures = Vec::new();
        for (tag, step, value) in values {
            if let Err(error) = record.add_scalar(&tag, value, step) {
                failures.push((format!("writing {tag} at step {step}"), error));
            }
        }
        drop(record);
        for (context, error) in failures {
            self.fault(context, error);
        }
    }

    fn flush_record(&mut self) {
        let result = match self.lock() {
            Some(mut record) => record.flush(),
            None => return,
        };
        if let Err(error) = result {
            self.fault("flushing".into(), error);
        }
    }

    /// Keeps a failure of the record, and applies the record's policy to it.
    fn fault(&mut self, context: String, error: SummaryError) {
        let message = format!("{context}: {error}");
        self.errors.keep(message.clone());
        if self.faults.ends_training(&error) {
            log::error!("summary logger: {message}");
            if let Some(interrupter) = &self.interrupter {
                let failure = EmberFailure(format!("summary logger: {message}"));
                interrupter.fail(TrainingError::Dataset(DatasetError::new(failure)));
            }
        }
    }
}

/// `train`, `valid`, `test` or `test/<tag>`.
fn split_prefix(split: &Split) -> String {
    match split {
        Split::Test(Some(tag)) => format!("test/{tag}"),
        other => other.to_string(),
    }
}

impl MetricLogger for SummaryLogger {
    fn log(&mut self, update: MetricsUpdate, _epoch: usize, split: &Split) {
        // The previous update of this split was not followed by an epoch summary: a batch's.
        if let Some(previous) = self.held.insert(split.clone(), update) {
            self.write(&previous, split, None);
        }
    }

    fn read_numeric(
        &mut self,
        name: &str,
        epoch: usize,
        split: &Split,
    ) -> Result<Vec<NumericEntry>, String> {
        Err(format!(
            "the summary logger is write-only and cannot read back {split}/{name} of epoch \
             {epoch}; register a FileMetricLogger first"
        ))
    }

    fn log_metric_definition(&mut self, definition: MetricDefinition) {
        self.names
            .insert(definition.metric_id, definition.name.to_string());
    }

    fn log_epoch_summary(&mut self, summary: EpochSummary) {
        // The update held for this split is the one burn computed at the end of the split.
        if let Some(last) = self.held.remove(&summary.split) {
            self.write(&last, &summary.split, Some(summary.epoch_number));
        }
        self.flush_record();
    }
}

impl Drop for SummaryLogger {
    fn drop(&mut self) {
        let held: Vec<(Split, MetricsUpdate)> = self.held.drain().collect();
        for (split, update) in held {
            self.write(&update, &split, None);
        }
        if self.owned {
            let result = match self.lock() {
                Some(mut record) => record.close(),
                None => return,
            };
            match result {
                Ok(()) | Err(SummaryError::Closed) => {}
                Err(error) => self.errors.push(format!("closing: {error}")),
            }
        } else {
            self.flush_record();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// PoolStrategy
// ---------------------------------------------------------------------------------------------

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
}

/// The message of an ember error that burn's `TrainingError` has no variant for.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct EmberFailure(String);

/// A burn-train `SupervisedLearningStrategy` that runs training on ember's
/// [`DevicePool`].
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

/// What one training epoch on the pool needs.
struct TrainEpoch<'a, M: LearnerModel> {
    strategy: &'a PoolStrategy,
    pool: &'a mut DevicePool<BurnStep<M>>,
    loaders: &'a [TrainLoader<M>],
    main: &'a Device,
    accumulation: usize,
    interrupter: &'a Interrupter,
}

impl<M> TrainEpoch<'_, M>
where
    M: LearnerModel,
    TrainOutput<<M as TrainStep>::Output>: Send,
{
    fn run(
        &mut self,
        learner: &mut Learner<M>,
        epoch: usize,
        events: &mut SupervisedTrainingEventProcessor<M>,
    ) {
        let interrupter = self.interrupter;
        log::info!(
            "executing training epoch {epoch} on {} pool devices",
            self.loaders.len()
        );
        let mut iterators: Vec<Box<dyn DataLoaderIterator<<M as TrainStep>::Input> + '_>> =
            self.loaders.iter().map(|loader| loader.iter()).collect();
        interrupter.fail_on_error(events.process_train(LearnerEvent::StartSplit {
            epoch_number: epoch,
            progress: Progress::aggregate(iterators.iter().map(|it| it.progress())),
        }));

        let mut iteration = 0usize;
        let mut window: Vec<GradientsParams> = Vec::new();
        let mut window_steps = 0usize;
        let mut step = 0usize;
        while !interrupter.should_stop() {
            step += 1;
            let outputs = match self
                .pool
                .step(iterators.as_mut_slice(), &BurnStep(learner.model()))
            {
                Ok(Step::Ran(outputs)) => outputs,
                Ok(Step::EpochOver(_)) => break,
                Err(source) => {
                    self.strategy.fail(
                        interrupter,
                        PoolStrategyError::Step {
                            epoch,
                            step,
                            source,
                        },
                    );
                    break;
                }
            };
            let progress = Progress::aggregate(iterators.iter().map(|it| it.progress()));
            let mut items = Vec::with_capacity(outputs.outputs.len());
            for output in outputs.outputs {
                window.push(output.output.grads);
                items.push(output.output.item);
            }
            window_steps += 1;
            if window_steps >= self.accumulation {
                self.optimize(learner, &mut window);
                window_steps = 0;
            }
            for item in items {
                iteration += 1;
                let item = TrainingItem::new(
                    item,
                    progress.clone(),
                    Some(iteration),
                    Some(learner.lr_current()),
                );
                interrupter.fail_on_error(events.process_train(LearnerEvent::ProcessedItem(item)));
            }
        }
        interrupter.fail_on_error(events.flush());
        // A partial accumulation window still updates the model, as burn-train does.
        if window_steps > 0 && !interrupter.should_stop() {
            self.optimize(learner, &mut window);
        }

        let mut progress = Progress::aggregate(iterators.iter().map(|it| it.progress()));
        if !interrupter.should_stop() {
            progress.resolve_total();
        }
        interrupter.fail_on_error(events.process_train(LearnerEvent::EndSplit { epoch, progress }));
        interrupter.fail_on_error(events.flush());
    }

    /// Reduces the window's gradients in order on the main device and steps the optimizer.
    fn optimize(&self, learner: &mut Learner<M>, window: &mut Vec<GradientsParams>) {
        let model = learner.model();
        let grads = reduce_gradients(window.drain(..), self.main, &model, self.strategy.reduction);
        learner.lr_step();
        learner.optimizer_step(grads);
    }
}

/// One validation pass on the main device, as burn's single-device validation epoch does.
fn valid_epoch<M: LearnerModel>(
    learner: &Learner<M>,
    loader: &ValidLoader<M>,
    epoch: usize,
    events: &mut SupervisedTrainingEventProcessor<M>,
    interrupter: &Interrupter,
) {
    log::info!("executing validation epoch {epoch}");
    let model = learner.model().valid();
    let mut iterator = loader.iter();
    interrupter.fail_on_error(events.process_valid(LearnerEvent::StartSplit {
        epoch_number: epoch,
        progress: iterator.progress(),
    }));
    let mut iteration = 0usize;
    while !interrupter.should_stop() {
        let batch = match iterator.next() {
            Some(Ok(batch)) => batch,
            Some(Err(error)) => {
                interrupter.fail(error);
                break;
            }
            None => break,
        };
        let progress = iterator.progress();
        iteration += 1;
        let item = InferenceStep::step(&model, batch);
        let item = TrainingItem::new(item, progress, Some(iteration), None);
        interrupter.fail_on_error(events.process_valid(LearnerEvent::ProcessedItem(item)));
    }
    interrupter.fail_on_error(events.flush());
    let mut progress = iterator.progress();
    if !interrupter.should_stop() {
        progress.resolve_total();
    }
    interrupter.fail_on_error(events.process_valid(LearnerEvent::EndSplit { epoch, progress }));
    interrupter.fail_on_error(events.flush());
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
        let Some(main) = self.devices.first().cloned() else {
            self.fail(&interrupter, PoolStrategyError::NoDevices);
            return (learner.model(), events);
        };
        let options = match self.step_timeout {
            Some(timeout) => PoolOptions::default().step_timeout(timeout),
            None => PoolOptions::default(),
        };
        let mut pool = match DevicePool::<BurnStep<M>>::new(self.devices.clone(), options) {
            Ok(pool) => pool,
            Err(error) => {
                self.fail(&interrupter, error.into());
                return (learner.model(), events);
            }
        };

        let loaders = split_dataloader(train, &self.devices);
        let valid = valid.to_device(&main.clone().inner());
        learner.fork(&main);
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;
        let mut epoch_train = TrainEpoch {
            strategy: self,
            pool: &mut pool,
            loaders: &loaders,
            main: &main,
            accumulation: components.grad_accumulation.unwrap_or(1).max(1),
            interrupter: &interrupter,
        };

        for epoch in starting_epoch..=components.num_epochs {
            epoch_train.run(&mut learner, epoch, &mut events);
            if interrupter.should_stop() {
                if let Some(interruption) = interrupter.interruption() {
                    let reason = interruption.reason.as_deref().unwrap_or("reason unknown");
                    log::info!("training interrupted: {reason}");
                }
                break;
            }

            valid_epoch(&learner, &valid, epoch, &mut events, &interrupter);
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
