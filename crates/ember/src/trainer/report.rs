//! What a run reports: each step's figures to the step hook ([`StepReport`]), each epoch's
//! ([`EpochReport`]), and the whole run's ([`TrainReport`]).

use std::path::PathBuf;

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
    /// among them: the record keeps those ([`SummaryRecord::take_errors`](crate::SummaryRecord::take_errors)).
    pub summary_errors: u64,
    /// The checkpoint the run resumed from, when it did.
    pub resumed_from: Option<PathBuf>,
    /// Newer checkpoint files passed over on resuming (torn or damaged), and why.
    pub checkpoints_skipped: Vec<(PathBuf, String)>,
    /// Checkpoints this run wrote.
    pub checkpoints_written: usize,
    /// Checkpoints a full disk (or a quota) had no room for; the run went on without them,
    /// and the first was logged as an error. A resume goes on from the last one written.
    pub checkpoints_failed: usize,
    /// Steps the run's log lacks for good: records lost while training went on (a full disk, a
    /// failed writer) before a checkpoint that a resume then went on from, which cannot write
    /// them again. Each was logged as a warning at the resume and is noted in the log itself
    /// ([`LOG_GAP_TAG`]).
    pub log_gaps: Vec<LogGap>,
    /// For a resumed run, how long each part of going on took, up to its first optimizer step.
    pub recovery: Option<Recovery>,
    /// How long this process's checkpoints held the training thread up while it trained:
    /// taking each (a local log flushed and its position taken, or a bucket log's cut asked
    /// of its writer pool; the state's snapshot) and waiting for older ones while two were
    /// still being written. Writing the file, and in a bucket shipping the log up to it, are
    /// the checkpoint threads'.
    pub checkpoint_stall: std::time::Duration,
    /// Of [`checkpoint_stall`](Self::checkpoint_stall), how long the training thread waited
    /// for older checkpoints to be written (a store slower than the checkpoints come): the
    /// rest is what taking them cost it.
    pub checkpoint_queue_wait: std::time::Duration,
    /// How long the run's end waited for the checkpoints still being written (the last one
    /// is whole before [`Trainer::fit`](super::Trainer::fit) returns).
    pub checkpoint_end_wait: std::time::Duration,
}

/// How long a resumed run took to train again, part by part (see [`TrainReport::recovery`]):
/// from the Trainer's start to the end of its first optimizer step. What comes before the
/// Trainer (the process starting, the command's admission, the summary record opening) is the
/// caller's to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Choosing the newest whole checkpoint and reading it (and its ranks' parts).
    pub read: std::time::Duration,
    /// Its state into the model, the optimizer and the scheduler.
    pub restore: std::time::Duration,
    /// The log rolled back to the checkpoint.
    pub rollback: std::time::Duration,
    /// From there to the first step: the loaders' earlier epochs begun, the run's first records,
    /// the batches the killed run had trained on drawn and dropped.
    pub data_position: std::time::Duration,
    /// The first step, to the end of its optimizer step.
    pub first_step: std::time::Duration,
}

impl Recovery {
    /// Every part together.
    pub fn total(&self) -> std::time::Duration {
        self.read + self.restore + self.rollback + self.data_position + self.first_step
    }
}

/// Steps `from..=to` whose records a run's log lacks for good (see [`TrainReport::log_gaps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogGap {
    /// The first step a record was lost at.
    pub from: i64,
    /// The step of the checkpoint the run went on from: nothing after it is missing.
    pub to: i64,
}

/// The text tag a resumed run notes each of its log's gaps under, at the gap's first step
/// (`ember inspect` lists them; TensorBoard shows them in its text dashboard).
pub const LOG_GAP_TAG: &str = "ember/log_gap";

impl TrainReport {
    /// The last epoch's figures.
    pub fn last(&self) -> Option<&EpochReport> {
        self.epochs.last()
    }
}
