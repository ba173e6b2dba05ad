//! [`SummaryLogger`]: burn-train metrics written through a [`SummaryRecord`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use burn::data::dataset::DatasetError;
use burn::train::logger::MetricLogger;
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{MetricAttributes, MetricDefinition, MetricId, NumericEntry};
use burn::train::{Interrupter, TrainingError};

use super::failure::EmberFailure;
use crate::faults::SummaryFaults;
use crate::{SummaryError, SummaryRecord};

/// A burn-train `MetricLogger` that writes every numeric metric through a [`SummaryRecord`].
///
/// **Tags.** The [`Trainer`](crate::Trainer)'s vocabulary: `<split>/<metric>` with the metric's
/// name in snake case ("Loss" → `loss`, "Learning Rate" → `learning_rate`, learned from
/// `log_metric_definition`), and metrics burn reports in percent (unit `%`: accuracy, …)
/// written as fractions, as the Trainer writes accuracy. Splits are `train`, `valid` and `test`
/// (`test/<tag>` for a tagged test split). Non-numeric metrics are not written.
///
/// **Steps.** burn passes a logger no step, only the epoch and the split, so the logger counts,
/// as [`XAxis`] says. By default ([`XAxis::Iteration`]) the x-axis is burn's global training
/// iteration, the Trainer's step: each training batch is one iteration, written as
/// `train/<metric>` at 1, 2, 3, … across epochs, and each split's end-of-epoch value (burn's
/// final, authoritative one) at the iteration training had reached: `valid/<metric>` and
/// `test/<metric>`, and `train/<metric>/epoch`. So `valid/loss` at step 40 is the validation
/// after 40 training steps, comparable with `train/loss` at 40, which is why it is the default.
/// [`XAxis::SplitBatches`] counts each split's batches instead.
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
/// (either `MultiDeviceOptim`), custom strategies such as [`PoolStrategy`](super::PoolStrategy), and
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
    /// Each metric's tag name and the factor that brings it to ember's unit.
    names: HashMap<MetricId, (String, f64)>,
    x_axis: XAxis,
    /// Training batches so far, across epochs: the global iteration.
    pub(crate) iteration: i64,
    /// Batches so far per split and metric, for [`XAxis::SplitBatches`].
    pub(crate) steps: HashMap<(String, String), i64>,
    /// The latest update of each split, not yet known to be a batch's or the split's final one.
    held: HashMap<Split, MetricsUpdate>,
    pub(crate) errors: LoggerErrors,
    faults: SummaryFaults,
    interrupter: Option<Interrupter>,
    /// Where the log snapshots for resuming go, when kept.
    pub(crate) checkpoints: Option<std::path::PathBuf>,
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
    pub(crate) fn keep(&self, message: String) {
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
            x_axis: XAxis::default(),
            iteration: 0,
            steps: HashMap::new(),
            held: HashMap::new(),
            errors: LoggerErrors::default(),
            faults: SummaryFaults::new(policy),
            interrupter: None,
            checkpoints: None,
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

    /// Where values go on the x-axis ([`XAxis::Iteration`] by default).
    pub fn x_axis(mut self, x_axis: XAxis) -> Self {
        self.x_axis = x_axis;
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

    pub(crate) fn lock(&self) -> Option<MutexGuard<'_, SummaryRecord>> {
        match self.record.lock() {
            Ok(record) => Some(record),
            Err(_) => {
                self.errors
                    .push("the summary record's lock is poisoned; values dropped".into());
                None
            }
        }
    }

    /// Writes one update's numeric values: a batch's, or with `final_epoch` the split's final
    /// values at the end of that epoch; where they go on the x-axis, [`XAxis`] says.
    fn write(&mut self, update: &MetricsUpdate, split: &Split, final_epoch: Option<usize>) {
        let prefix = split_prefix(split);
        let train = matches!(split, Split::Train);
        if self.x_axis == XAxis::Iteration && final_epoch.is_none() {
            if !train {
                // Every validation batch would fall on the same iteration.
                return;
            }
            self.iteration += 1;
        }
        let mut values = Vec::with_capacity(update.entries_numeric.len());
        for numeric in &update.entries_numeric {
            let Some((name, scale)) = self.names.get(&numeric.entry.metric_id).cloned() else {
                self.errors.push(format!(
                    "a {prefix} value of metric {:?} came before its definition; dropped",
                    numeric.entry.metric_id
                ));
                continue;
            };
            let (tag, step) = match (self.x_axis, final_epoch) {
                (XAxis::Iteration, Some(_)) if train => {
                    (format!("{prefix}/{name}/epoch"), self.iteration)
                }
                (XAxis::Iteration, Some(_)) => (format!("{prefix}/{name}"), self.iteration),
                (XAxis::Iteration, None) => (format!("{prefix}/{name}"), self.iteration),
                (XAxis::SplitBatches, Some(epoch)) => {
                    (format!("{prefix}/{name}/epoch"), epoch as i64)
                }
                (XAxis::SplitBatches, None) => {
                    let step = self
                        .steps
                        .entry((prefix.clone(), name.clone()))
                        .or_insert(0);
                    *step += 1;
                    (format!("{prefix}/{name}"), *step)
                }
            };
            if let Some(entry) = &numeric.numeric_entry {
                values.push((tag, step, entry.current() * scale));
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

/// A metric's name as a tag: lowercase, words joined by `_` ("Learning Rate" →
/// `learning_rate`).
fn snake_case(name: &str) -> String {
    name.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("_")
}

/// Where a [`SummaryLogger`] puts each value on the x-axis; see its **Steps**.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XAxis {
    /// burn's global training iteration (the default): training batches at their iteration,
    /// every split's end-of-epoch values at the iteration training had reached; validation
    /// batches are not written one by one.
    #[default]
    Iteration,
    /// Each split's own count: `<split>/<metric>` at the split's 1st, 2nd, … batch per metric
    /// (continuing across epochs), and the end-of-epoch values as `<split>/<metric>/epoch` at
    /// the epoch number.
    SplitBatches,
}

/// `train`, `valid`, `test` or `test/<tag>`.
pub(crate) fn split_prefix(split: &Split) -> String {
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
        let percent = matches!(
            &definition.attributes,
            MetricAttributes::Numeric(n) if n.unit.as_deref() == Some("%")
        );
        let scale = if percent { 0.01 } else { 1.0 };
        self.names
            .insert(definition.metric_id, (snake_case(&definition.name), scale));
    }

    fn log_epoch_summary(&mut self, summary: EpochSummary) {
        // The update held for this split is the one burn computed at the end of the split.
        if let Some(last) = self.held.remove(&summary.split) {
            self.write(&last, &summary.split, Some(summary.epoch_number));
        }
        self.flush_record();
        self.keep_snapshot(summary.epoch_number, &summary.split);
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
