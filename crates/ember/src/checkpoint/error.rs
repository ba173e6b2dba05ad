//! What can go wrong writing or reading checkpoints, or resuming from one: [`CheckpointError`],
//! naming the file or directory and why.

use std::io;
use std::path::{Path, PathBuf};

/// What can go wrong writing or reading checkpoints, or resuming from one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file system operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A checkpoint file is torn or damaged.
    #[error("checkpoint {} is not whole: {reason}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A section is missing or cannot be read.
    #[error("checkpoint {} has no readable `{section}` section: {reason}", path.display())]
    Section {
        /// The file.
        path: PathBuf,
        /// The section's name.
        section: String,
        /// Why.
        reason: String,
    },
    /// Burn could not turn a model, optimizer or scheduler into bytes, or back.
    #[error("cannot {what}: {reason}")]
    Record {
        /// What was being done.
        what: &'static str,
        /// Burn's error.
        reason: String,
    },
    /// The checkpoint was taken by a run that cannot be continued by this one.
    #[error("cannot resume from {}: {reason}", path.display())]
    Mismatch {
        /// The checkpoint.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// A resume found nothing to go on from: the directory is missing or holds no whole
    /// checkpoint of this job. Nothing was changed; starting the run over is a choice of its
    /// own ([`Trainer::restart`](crate::Trainer::restart)).
    #[error("no checkpoint to resume from in {}: {why}", dir.display())]
    NothingToResume {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why: the directory is missing, empty, or each checkpoint in it was passed over (and
        /// why).
        why: String,
        /// Every checkpoint file found, and why it was passed over; empty when there was none.
        passed_over: Vec<(PathBuf, String)>,
    },
    /// A fresh run found what another run left in its directory (`found`: a checkpoint, an
    /// event file); nothing was changed.
    #[error(
        "{} holds the checkpoints of another run or its log ({}): resume that run, restart \
         it from its first step, or choose another directory; nothing was changed",
        dir.display(),
        found.display()
    )]
    AnotherRun {
        /// The directory.
        dir: PathBuf,
        /// The other run's file found there.
        found: PathBuf,
    },
    /// A resume found the run finished: its newest whole checkpoint is at the end of its last
    /// epoch. Nothing was changed.
    #[error(
        "the run in {} has finished: its newest checkpoint {} is at the end of its last epoch \
         ({epochs}); nothing to resume (a restart trains it again from its first step)",
        dir.display(),
        checkpoint.display()
    )]
    Finished {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The epochs the run trains.
        epochs: usize,
        /// Its newest whole checkpoint.
        checkpoint: PathBuf,
    },
    /// The checkpoint was taken with other settings than the run resuming from it has (a
    /// learning rate, a seed, a model or data size, a batch, the log's format, …). Nothing was
    /// changed.
    #[error(
        "cannot resume from {}: it was taken with other settings ({}); resume with the settings \
         the run was started with; nothing was changed",
        checkpoint.display(),
        differences.join(", ")
    )]
    SettingsDiffer {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// Each setting that differs, as `name: value there, value here`.
        differences: Vec<String>,
    },
    /// The checkpoint was taken by another run than the one in its directory (a copy of another
    /// run's checkpoint). Nothing was changed.
    #[error(
        "cannot resume from {}: it was taken by run {taken_by}, and this directory's run is \
         {this_run}; nothing was changed (move it out, or resume run {taken_by} where it lives)",
        checkpoint.display()
    )]
    OtherRun {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The id of the run that took it.
        taken_by: String,
        /// The id of the run of its directory.
        this_run: String,
    },
    /// A fresh run found a name it would write taken by a file that is not its own (another
    /// program's model, another run's record). Nothing was changed.
    #[error(
        "{} is not this run's, and the run would replace it; nothing was changed: move it, or \
         choose another directory",
        found.display()
    )]
    Occupied {
        /// The file.
        found: PathBuf,
    },
    /// The checkpoint directory's files would have paths the system cannot open. Nothing was
    /// changed.
    #[error("cannot write checkpoints in {}: {why}; choose a shorter path", path.display())]
    PathTooLong {
        /// The checkpoint directory.
        path: PathBuf,
        /// What is too long.
        why: String,
    },
    /// The checkpoint holds no position of the log (it was taken with no summary record), yet
    /// the log holds files this run wrote: rolling back could not tell which of their records
    /// came after the checkpoint. Nothing was changed.
    #[error(
        "cannot resume into {}: the checkpoint holds no position of the log (taken with no \
         summary record), and the log holds {files} file(s) this run wrote; nothing was changed \
         (resume without a summary record, or start the run over)",
        dir.display()
    )]
    LogNotRecorded {
        /// The log directory.
        dir: PathBuf,
        /// How many files of the run's it holds.
        files: usize,
    },
    /// Another run holds the checkpoint directory.
    #[error(transparent)]
    Locked(#[from] ember_write::LockError),
    /// Another process holds the bucket run's lease, or the lease could not be read.
    #[error(transparent)]
    Leased(#[from] crate::bucket::RemoteError),
    /// The log directory could not be rolled back to the checkpoint.
    #[error("cannot roll the log directory back to the checkpoint: {0}")]
    Rollback(#[from] ember_write::RollbackError),
    /// The thread writing checkpoints stopped.
    #[error("the checkpoint writer thread panicked")]
    WriterPanicked,
}

impl CheckpointError {
    /// Whether the run lost its place to another writer: its directory or lock file taken
    /// away, or its lease in a bucket taken over. Nothing more is written under the run then.
    pub fn claim_lost(&self) -> bool {
        match self {
            Self::Locked(ember_write::LockError::Lost { .. }) => true,
            Self::Leased(error) => crate::bucket::lease_lost(error),
            _ => false,
        }
    }
}

pub(super) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
