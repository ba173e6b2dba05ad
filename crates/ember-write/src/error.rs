//! Error types: [`FileError`] for one file writer, [`WriteError`] for the
//! pool's callers, and [`WriteErrors`], every error `close` collected.

use std::fmt;
use std::io;
use std::path::PathBuf;

use ember_pack::{FileKind, PackError};

/// A failure of one file writer. The pool closes and removes a writer that
/// meets one; writers of other kinds go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// A file system operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done: `create`, `write`, `flush`, `fsync`, ...
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The free-disk guard refused a record: less than `factor` times its
    /// size is free.
    #[error(
        "the disk may soon be exhausted by {}: {free} bytes free, a {record}-byte record needs {factor} times that",
        path.display()
    )]
    DiskSpace {
        /// The file the record was for.
        path: PathBuf,
        /// Free bytes reported.
        free: u64,
        /// The record's size in bytes, framing included.
        record: u64,
        /// The guard's factor.
        factor: u64,
    },
    /// A directory ember creates inside the log directory exists already as
    /// something else: a file, or a symbolic link, which is never followed, so
    /// that nothing is written outside the log directory.
    #[error("refusing to use {}: it exists and is not a directory (symbolic links are not followed)", path.display())]
    NotADirectory {
        /// The path found.
        path: PathBuf,
    },
    /// A record larger than framing allows (2 GiB).
    #[error("a record of {len} bytes is larger than the 2 GiB a framed record may hold")]
    RecordTooLarge {
        /// Its data length.
        len: u64,
    },
}

/// An error reported to a caller of [`crate::WriterPool`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A file writer failed; it was closed and removed, and records of its
    /// kind are dropped from then on.
    #[error("{} writer failed and was removed: {source}", kind_name(*kind))]
    WriterFailed {
        /// The writer's file kind.
        kind: FileKind,
        /// What went wrong.
        #[source]
        source: FileError,
    },
    /// A value could not be packed; the rest of its record was written.
    #[error("value rejected at step {step}: {source}")]
    Rejected {
        /// The record's step.
        step: i64,
        /// The packing error, which names the tag.
        #[source]
        source: PackError,
    },
    /// Packing a record panicked: a bug in ember, caught so that the writer
    /// and the other records go on. The record was rejected whole.
    #[error("packing the record of step {step} panicked: {message}")]
    PackPanicked {
        /// The record's step.
        step: i64,
        /// The panic's message.
        message: String,
    },
    /// One exported tensor was not written (its file exists, or its name is
    /// too long); the export writer goes on.
    #[error("exported tensor not written to {}: {source}", path.display())]
    ExportRefused {
        /// The file it would have gone to.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// One embedding was not written (its directory exists: the same tag and
    /// step twice; or its name is too long); the projector writer goes on.
    #[error("embedding not written to {}: {source}", path.display())]
    EmbeddingRefused {
        /// The directory it would have gone to.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The queue was full (in records, or in bytes) and the full-queue policy
    /// is `Error`; the record was not queued and is counted as dropped.
    #[error("the writer queue is full")]
    QueueFull,
    /// The pool's thread is gone (closed, or it panicked).
    #[error("the writer pool is closed")]
    Closed,
    /// The pool's thread panicked; records still queued were lost.
    #[error("the writer thread panicked")]
    ThreadPanicked,
    /// The pool options are invalid.
    #[error("invalid writer options: {0}")]
    InvalidOptions(String),
    /// The log directory could not be created.
    #[error("cannot create log directory {}: {source}", path.display())]
    LogDir {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The pool's thread could not be started.
    #[error("cannot start the writer thread: {0}")]
    Spawn(io::Error),
}

impl WriteError {
    /// True when this error means the record just handed to `write` was not
    /// queued ([`WriteError::QueueFull`], [`WriteError::Closed`]); any other
    /// error from `write` is an earlier failure, and the record was queued.
    pub fn refused_record(&self) -> bool {
        matches!(self, WriteError::QueueFull | WriteError::Closed)
    }

    /// A short name of the error's kind, for logging each kind once.
    pub(crate) fn kind_key(&self) -> (&'static str, Option<FileKind>) {
        match self {
            WriteError::WriterFailed { kind, .. } => ("writer failed", Some(*kind)),
            WriteError::Rejected { .. } => ("rejected", None),
            WriteError::PackPanicked { .. } => ("pack panicked", None),
            WriteError::ExportRefused { .. } => ("export refused", None),
            WriteError::EmbeddingRefused { .. } => ("embedding refused", None),
            WriteError::QueueFull => ("queue full", None),
            WriteError::Closed => ("closed", None),
            WriteError::ThreadPanicked => ("thread panicked", None),
            WriteError::InvalidOptions(_) => ("invalid options", None),
            WriteError::LogDir { .. } => ("log dir", None),
            WriteError::Spawn(_) => ("spawn", None),
        }
    }
}

/// The errors that `close` collected, in the order they happened.
///
/// A pool keeps at most [`MAX_KEPT_ERRORS`] errors waiting for the caller;
/// later ones are logged and counted in `not_kept`, so a value rejected at
/// every step cannot grow memory without bound.
#[derive(Debug)]
pub struct WriteErrors {
    /// The errors kept, oldest first.
    pub errors: Vec<WriteError>,
    /// Errors that happened while the pool already held the maximum.
    pub not_kept: u64,
}

/// The most errors a pool keeps waiting for its caller.
pub const MAX_KEPT_ERRORS: usize = 1024;

impl fmt::Display for WriteErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let more = (self.errors.len() as u64).saturating_sub(1) + self.not_kept;
        match self.errors.first() {
            None => write!(f, "{} errors not kept", self.not_kept),
            Some(first) if more == 0 => write!(f, "{first}"),
            Some(first) => write!(f, "{first} (and {more} more errors)"),
        }
    }
}

impl std::error::Error for WriteErrors {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.errors
            .first()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A lowercase name of a file kind, for messages.
pub fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Summary => "summary",
        FileKind::Lineage => "lineage",
        FileKind::Explain => "explain",
        FileKind::Export => "export",
        FileKind::Projector => "projector",
    }
}
