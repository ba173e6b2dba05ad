//! How a [`Trainer`](super::Trainer) trains ([`TrainerConfig`]), where and how often it writes
//! checkpoints ([`CheckpointConfig`]), and the hooks it runs.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use ember_pool::step::burn::Reduction;

use super::report::{EpochReport, StepReport};
use crate::{SummaryError, SummaryRecord};

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
/// between two accumulation windows. Across ranks, the same, every rank at the same optimizer
/// step (a flag raised on one rank stops every rank after its next round): rank 0 writes the
/// checkpoint, after every other rank has written its part beside it (its log's position, its
/// place in the epoch, its optimizer shard). Each holds the model, the optimizer's and the
/// scheduler's state (through Burn's records), the run's position (epoch, step, optimizer
/// steps, how far the data loaders have gone, the epoch's running totals) and the length of
/// every file of the summary log at that moment, to which a resumed run rolls the log back.
///
/// A local directory is locked for as long as the run trains ([`DirLock`](crate::DirLock):
/// a second run, resume or restart there is refused naming this one), and the lock is checked
/// before every checkpoint: a directory deleted and made again, or moved, stops the run with
/// [`CheckpointError::Locked`](crate::checkpoint::CheckpointError::Locked) before it writes
/// into what may be another run's. [`fit_holding_run`](super::Trainer::fit_holding_run) hands
/// the run, still claimed, to the caller, to save the model through.
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

/// The hook run after every optimizer step.
pub(super) type UpdateHook<M> = Box<dyn FnMut(&M, usize) + Send>;

/// A hook run after every pool step.
pub(super) type StepHook = Box<dyn FnMut(&StepReport) + Send>;

/// A hook run after every epoch with the model, the epoch's figures, the run's step and the
/// summary record.
pub(super) type EpochHook<M> = Box<
    dyn FnMut(&M, &EpochReport, i64, Option<&mut SummaryRecord>) -> Result<(), SummaryError> + Send,
>;
