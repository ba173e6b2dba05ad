//! What the Trainer takes and gives: the output items it reads, its configuration, its reports
//! and its errors.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use burn::tensor::Tensor;
use burn::train::{ClassificationOutput, RegressionOutput};
use ember_pool::SpawnError;
use ember_pool::step::StepError;
use ember_pool::step::burn::Reduction;

use crate::checkpoint::CheckpointError;
use crate::collective::CollectiveError;
use crate::driver::ValidationError;
use crate::{SummaryError, SummaryRecord};

/// A step output that carries a loss, and possibly what accuracy needs.
pub trait TrainingItem {
    /// The batch's loss, shape `[1]`.
    fn loss(&self) -> &Tensor<1>;
    /// `(correct, total)` predictions, for classifiers.
    fn correct(&self) -> Option<(usize, usize)> {
        None
    }
    /// Examples in the batch.
    fn examples(&self) -> usize;
    /// Whether [`correct`](Self::correct) gives `Some`: the trainer then declares the accuracy
    /// metrics in the hyper-parameter session it starts, before any value exists.
    const CLASSIFIES: bool = false;
}

impl TrainingItem for RegressionOutput {
    fn loss(&self) -> &Tensor<1> {
        &self.loss
    }
    fn examples(&self) -> usize {
        self.output.dims()[0]
    }
}

impl TrainingItem for ClassificationOutput {
    const CLASSIFIES: bool = true;
    fn loss(&self) -> &Tensor<1> {
        &self.loss
    }
    fn correct(&self) -> Option<(usize, usize)> {
        let predicted = self.output.clone().argmax(1).flatten::<1>(0, 1);
        let hits = predicted.equal(self.targets.clone()).int().sum();
        let correct = hits.into_data().iter::<i64>().next().unwrap_or(0);
        Some((correct.max(0) as usize, self.targets.dims()[0]))
    }
    fn examples(&self) -> usize {
        self.targets.dims()[0]
    }
}

/// How a [`Trainer`](super::Trainer) trains.
#[derive(Debug, Clone)]
pub struct TrainerConfig {
    /// Epochs to run.
    pub epochs: usize,
    /// How device gradients combine (mean by default).
    pub reduction: Reduction,
    /// Steps whose gradients are combined into one optimizer step (1: every step).
    pub grad_accumulation: usize,
    /// Record weight and gradient histograms every this many optimizer steps (`None`: never).
    pub histogram_every: Option<usize>,
    /// Give up on a device step after this long (counted from when its batch was sent): the
    /// worker is reported as timed out, abandoned and replaced. Off by default.
    pub step_timeout: Option<Duration>,
    /// Threads of each device worker's own compute pool (see
    /// [`PoolOptions::worker_threads`](crate::PoolOptions::worker_threads)); `None` (the
    /// default) lets every worker use the process's global pool.
    pub worker_threads: Option<NonZeroUsize>,
    /// Sample the process's CPU use and resident memory and each device's memory in use this
    /// often, on a thread of its own, and record them with the next step as `system/…`
    /// scalars (the run's lead only, and only with a summary record). `None` (the default):
    /// not sampled.
    pub system_every: Option<Duration>,
    /// How many hung workers may be abandoned before training fails
    /// (`StepError::TooManyAbandonedWorkers`); each still holds a model copy and device memory
    /// until its step returns. `None` for no limit.
    pub max_abandoned_workers: Option<usize>,
    /// Write checkpoints, from which [`Trainer::resume_from`](super::Trainer::resume_from)
    /// goes on after a crash. Off by default.
    pub checkpoints: Option<CheckpointConfig>,
}

/// Where and how often a [`Trainer`](super::Trainer) writes checkpoints.
///
/// A checkpoint is written every [`every`](Self::every) optimizer steps, at the end of every
/// epoch, and when a run is stopped (by [`stop_when`](super::Trainer::stop_when)'s flag)
/// between two accumulation windows; across ranks, at the end of every epoch only (rank 0
/// writes it, after every other rank has written its own log's position beside it). Each holds the model, the optimizer's and the
/// scheduler's state (through Burn's records), the run's position (epoch, step, optimizer
/// steps, how far the data loaders have gone, the epoch's running totals) and the length of
/// every file of the summary log at that moment, to which a resumed run rolls the log back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The directory of checkpoint files (created when needed). It may lie inside the log
    /// directory; readers of the log ignore it.
    pub dir: PathBuf,
    /// Optimizer steps between two checkpoints (`None`: only at epoch ends and stops).
    pub every: Option<usize>,
    /// How many checkpoints to keep, newest first (at least 1).
    pub keep: usize,
}

impl CheckpointConfig {
    /// Checkpoints in `dir` every `every` optimizer steps, keeping the newest 3.
    pub fn new(dir: impl Into<PathBuf>, every: usize) -> Self {
        Self {
            dir: dir.into(),
            every: Some(every),
            keep: 3,
        }
    }
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            epochs: 1,
            reduction: Reduction::Mean,
            grad_accumulation: 1,
            histogram_every: Some(50),
            step_timeout: None,
            worker_threads: None,
            system_every: None,
            max_abandoned_workers: Some(ember_pool::DEFAULT_MAX_ABANDONED_WORKERS),
            checkpoints: None,
        }
    }
}

/// One epoch's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochReport {
    /// The epoch, from 1.
    pub epoch: usize,
    /// Mean train loss over the epoch's device batches.
    pub train_loss: f64,
    /// Train accuracy, for classifiers.
    pub train_accuracy: Option<f64>,
    /// Mean validation loss, if there is a validation set.
    pub valid_loss: Option<f64>,
    /// Validation accuracy, for classifiers with a validation set.
    pub valid_accuracy: Option<f64>,
    /// Training examples per second over the epoch.
    pub examples_per_second: f64,
}

/// One pool step's figures, given to a [`Trainer::on_step`](super::Trainer::on_step) hook (for progress displays).
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// The epoch, from 1.
    pub epoch: usize,
    /// The pool step within the epoch, from 1.
    pub step_in_epoch: usize,
    /// The pool step over the whole run, from 1: the step the summaries are recorded at.
    pub step: i64,
    /// Mean loss over the step's device batches.
    pub loss: f64,
    /// Training examples so far in this epoch.
    pub examples: usize,
    /// Training examples per second so far in this epoch.
    pub examples_per_second: f64,
    /// The devices' part of the step on the training thread: pulling the batches, sending
    /// them and waiting for the last device's answer.
    pub devices_seconds: f64,
    /// Each device's own step (placing the model on the device, forward and backward), in
    /// device order; `devices_seconds` less a device's own is how long it waited for the
    /// slowest.
    pub device_seconds: Vec<f64>,
    /// Moving the devices' gradients to the main device and adding them up.
    pub reduce_seconds: f64,
    /// The round across ranks and the optimizer step (0 when the step closed no window).
    pub optimizer_seconds: f64,
}

/// The hook run after every optimizer step.
pub(super) type UpdateHook<M> = Box<dyn FnMut(&M, usize) + Send>;

/// A hook run after every pool step.
pub(super) type StepHook = Box<dyn FnMut(&StepReport) + Send>;

/// A hook run after every epoch with the model, the epoch's figures, the run's step and the
/// summary record.
pub(super) type EpochHook<M> = Box<
    dyn FnMut(&M, &EpochReport, i64, Option<&mut SummaryRecord>) -> Result<(), SummaryError> + Send,
>;

/// What a training run did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrainReport {
    /// Each finished epoch's figures (an epoch cut short by a stop has none).
    pub epochs: Vec<EpochReport>,
    /// Optimizer steps taken.
    pub optimizer_steps: usize,
    /// Pool steps taken (each runs one batch per device).
    pub steps: usize,
    /// Whether the run was stopped early by [`Trainer::stop_when`](super::Trainer::stop_when)'s flag.
    pub interrupted: bool,
    /// Summary errors that training went past (under any [`ErrorPolicy`](crate::ErrorPolicy) but `Raise`); the
    /// first of each kind was logged. Write failures that happen on the writer threads are not
    /// among them: the record keeps those ([`SummaryRecord::take_errors`]).
    pub summary_errors: u64,
    /// The checkpoint the run resumed from, when it did.
    pub resumed_from: Option<PathBuf>,
    /// Newer checkpoint files passed over on resuming (torn or damaged), and why.
    pub checkpoints_skipped: Vec<(PathBuf, String)>,
    /// Checkpoints this run wrote.
    pub checkpoints_written: usize,
}

impl TrainReport {
    /// The last epoch's figures.
    pub fn last(&self) -> Option<&EpochReport> {
        self.epochs.last()
    }
}

/// Why training stopped early.
///
/// Whatever the error, a run given a summary record has recorded its hyper-parameters with
/// status [`SessionStatus::Failure`](crate::pack::SessionStatus::Failure) and the final metrics
/// known so far, and flushed the record (best effort: the error returned is the training one);
/// closing the record is left to the caller. A run refused at its start (a resume with nothing
/// to go on from, a directory another run holds, a configuration that cannot work) records
/// nothing: the log is left as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A step failed on one or more devices.
    #[error("training step {step} of epoch {epoch} failed: {source}")]
    Step {
        /// The epoch, from 1.
        epoch: usize,
        /// The pool step within the epoch, from 1.
        step: usize,
        /// Every failed device.
        source: StepError,
    },
    /// The worker pool could not start.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// Recording summaries failed, and the record's policy is [`ErrorPolicy::Raise`](crate::ErrorPolicy::Raise).
    #[error(transparent)]
    Summary(#[from] SummaryError),
    /// Validation could not run through: a batch could not be loaded, or the step panicked.
    #[error("validation of epoch {epoch} failed: {source}")]
    Validation {
        /// The epoch, from 1.
        epoch: usize,
        /// Which device and batch, and what happened.
        source: ValidationError,
    },
    /// A checkpoint could not be written, or the run could not resume from one.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The configuration cannot work.
    #[error("invalid trainer configuration: {0}")]
    Config(String),
    /// The job's ranks could not go on together: another rank failed (the source names it;
    /// its own error says why), left, or did not join a round in time, or the ranks' models
    /// differ. Step 0 of epoch 0 is the start, when parameters are broadcast from rank 0.
    #[error("training step {step} of epoch {epoch} across ranks: {source}")]
    Ranks {
        /// The epoch, from 1 (0: the start).
        epoch: usize,
        /// The pool step within the epoch, from 1 (0: the start).
        step: usize,
        /// What happened.
        source: CollectiveError,
    },
}

impl TrainError {
    /// Whether this rank ended because another rank of the job failed (which reports its own
    /// error): under `mpirun`, a process that exits with an error ends the whole job, so such a
    /// rank may want to give the failed one a moment to be heard first.
    pub fn peers_failed(&self) -> bool {
        matches!(
            self,
            TrainError::Ranks {
                source: CollectiveError::PeersFailed { .. },
                ..
            }
        )
    }
}
