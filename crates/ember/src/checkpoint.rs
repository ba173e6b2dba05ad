//! Checkpoint mechanics, in one place: what lets a killed run start again where it was. It
//! knows no trainer: the [`Trainer`](crate::Trainer)'s policy (when to checkpoint, what its
//! position and identity are, reading one back into a run) is `trainer/checkpointing.rs`,
//! over these parts.
//!
//! - [`file`](Checkpoint): the file format, named byte sections under a checksum;
//! - [`directory`](Checkpoints): a directory of them, written durably, the newest whole one
//!   found and why any newer was passed over, a job's parts across ranks;
//! - `log_place`: where the run's summary log is, to snapshot at a checkpoint and roll back
//!   on resume (the snapshot itself is ember-write's `LogSnapshot`: the lengths of exactly the
//!   files the run's writers listed in their journal before making them, so that a rollback,
//!   a restart touches nothing else in the directory: another tool's event
//!   file, a copy, an empty directory stay byte for byte);
//! - `meta`: the `meta` section's fields, read in one place;
//!
//! A resume either finds a whole checkpoint of this very run (same accumulation, reduction
//! and model; as many devices and ranks, or fewer that divide the ones it began with) or
//! refuses before it changes anything
//! ([`CheckpointError::NothingToResume`], [`CheckpointError::Mismatch`]); so does a resume
//! with a summary record from a checkpoint with no `log` section
//! ([`CheckpointError::Section`]) or with an empty one (taken with no summary record) while
//! the log holds files the run wrote ([`CheckpointError::LogNotRecorded`]). Restarting a run
//! is its own, named call ([`Trainer::restart`](crate::Trainer::restart)).
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

mod directory;
mod error;
mod file;
pub(crate) mod log_place;
pub(crate) mod meta;

pub use directory::{Checkpoints, Loaded};
pub(crate) use directory::{JOB_STAMP, no_room, seq_of};
pub use error::CheckpointError;
pub use file::{Checkpoint, read, write_durably};
pub(crate) use log_place::LogPlace;
