//! Why a run stopped early: [`TrainError`], each failure named by where it happened (device,
//! rank, epoch, step).

use ember_pool::SpawnError;
use ember_pool::step::StepError;

use crate::SummaryError;
use crate::checkpoint::CheckpointError;
use crate::collective::CollectiveError;
use crate::driver::ValidationError;

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
    /// The job's ranks could not add up the epoch's validation, each rank having validated
    /// its share: another rank failed (the source names it) or did not come in time.
    #[error("validation of epoch {epoch} across ranks: {source}")]
    RanksValidating {
        /// The epoch, from 1.
        epoch: usize,
        /// What happened.
        source: CollectiveError,
    },
}

impl TrainError {
    /// Whether the error came from the job's ranks, not from this rank's own work.
    pub(crate) fn ranks_error(&self) -> Option<&CollectiveError> {
        match self {
            TrainError::Ranks { source, .. } | TrainError::RanksValidating { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

impl TrainError {
    /// Whether this rank ended because another rank of the job failed (which reports its own
    /// error): under `mpirun`, a process that exits with an error ends the whole job, so such a
    /// rank may want to give the failed one a moment to be heard first.
    pub fn peers_failed(&self) -> bool {
        matches!(
            self.ranks_error(),
            Some(CollectiveError::PeersFailed { .. })
        )
    }
}
