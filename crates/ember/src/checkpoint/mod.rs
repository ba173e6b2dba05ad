//! Checkpoints and resuming, in one place: what lets a killed run start again where it was.
//!
//! - [`file`](Checkpoint): the file format, named byte sections under a checksum;
//! - [`directory`](Checkpoints): a directory of them, written durably, the newest whole one
//!   found and why any newer was passed over, a job's parts across ranks;
//! - `log_place`: where the run's summary log is, to snapshot at a checkpoint and roll back
//!   on resume (the snapshot itself, lengths of files, is ember-write's `LogSnapshot`);
//! - `trainer`: the [`Trainer`](crate::Trainer)'s checkpoints: what a run's position and
//!   identity are (`meta`), writing them off the training thread, and reading one back into a
//!   run, with what a resume restores;
//! - `burn_train`: the same for a burn-train run logged by
//!   [`SummaryLogger`](crate::burn_train::SummaryLogger).
//!
//! A resume either finds a whole checkpoint of this very run (same devices, ranks,
//! accumulation, reduction and model) or refuses before it changes anything
//! ([`CheckpointError::NothingToResume`], [`CheckpointError::Mismatch`]); starting a run over
//! is its own, named call ([`Trainer::start_over`](crate::Trainer::start_over)).
//!
//! A checkpoint is one file of named sections (the trainer's progress, the model, optimizer
//! and scheduler records, the log directory's snapshot) followed by the CRC-32C of every byte
//! before it, so that a torn or damaged file is told from a whole one by reading it alone:
//!
//! ```text
//! "EMBERCKP" | version u32 | sections u32 | { name_len u16 | name | len u64 | bytes }* | crc32c u32
//! ```
//!
//! (integers little-endian). [`Checkpoints::write`] makes one durable the way a file system
//! allows: written whole under a temporary name, fsynced, renamed to `ckpt-<seq>.ember`, and
//! the directory fsynced ([`ember_write::durable`]); only then are the oldest beyond the
//! number to keep removed (a removal that fails is logged: the new checkpoint stands), so the
//! directory never holds only torn checkpoints. [`Checkpoints::latest`] takes the newest whole
//! one and says why it passed over any newer.

use std::io;
use std::path::{Path, PathBuf};

pub(crate) mod burn_train;
mod directory;
mod file;
pub(crate) mod log_place;
pub(crate) mod trainer;

pub use directory::{Checkpoints, Loaded};
pub use file::{Checkpoint, read, write_durably};
pub(crate) use log_place::LogPlace;

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
    /// own ([`Trainer::start_over`](crate::Trainer::start_over)).
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
    /// Another run holds the checkpoint directory.
    #[error(transparent)]
    Locked(#[from] ember_write::LockError),
    /// The log directory could not be rolled back to the checkpoint.
    #[error("cannot roll the log directory back to the checkpoint: {0}")]
    Rollback(#[from] ember_write::RollbackError),
    /// The thread writing checkpoints stopped.
    #[error("the checkpoint writer thread panicked")]
    WriterPanicked,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
