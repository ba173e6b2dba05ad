//! The facade's errors.

use std::path::PathBuf;

use ember_write::pack::{PackError, TagError};
use ember_write::{WriteError, WriteErrors};

use crate::Plugin;

/// What can go wrong recording summaries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryError {
    /// The record was closed.
    #[error("the summary record is closed")]
    Closed,
    /// A tag is empty, too long, or holds a NUL.
    #[error(transparent)]
    Tag(#[from] TagError),
    /// A value cannot be packed in the record's format (wrong shape, dtype, channel count,
    /// a kind the format cannot hold, ...); it was refused where it was added, alone.
    #[error(transparent)]
    Rejected(#[from] PackError),
    /// A name given to `add_scalars` cannot name its run's directory.
    #[error(
        "`{0}` cannot name a sub-run directory (empty, `.`, `..`, or holding `/`, `\\` or NUL)"
    )]
    SubRunName(String),
    /// Another writer (a live run, another record) holds the log directory.
    #[error(transparent)]
    Locked(#[from] ember_write::LockError),
    /// The MLflow tracking server or the sink's spool.
    #[error(transparent)]
    Tracker(#[from] ember_track::TrackError),
    /// A tracking server beside a log directory in an object store (the spool is local).
    #[error("sending to MLflow needs a local log directory; this one is in an object store")]
    TrackerInBucket,
    /// The log directory path is empty.
    #[error("the log directory path is empty")]
    EmptyLogDir,
    /// `add_value` got a value of another kind than its plugin.
    #[error("plugin {plugin:?} expects its own kind of value, got a {value}")]
    PluginMismatch {
        /// The plugin asked for.
        plugin: Plugin,
        /// The kind of value given.
        value: &'static str,
    },
    /// A value given as a scalar holds other than one element.
    #[error("a scalar must be one element, got a tensor of shape {shape:?}")]
    NotAScalar {
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// A tensor's dtype that ember cannot record (quantized tensors).
    #[error("cannot record a tensor of dtype {0}")]
    UnsupportedDType(String),
    /// The rank or world size is invalid.
    #[error("invalid rank: {0}")]
    Rank(String),
    /// The log directory path exists and is not a directory.
    #[error("log directory {} exists and is not a directory", .0.display())]
    LogDirNotADirectory(PathBuf),
    /// Writing failed, or a value was rejected; from the writer pool.
    #[error(transparent)]
    Write(WriteError),
    /// Closing found these errors.
    #[error(transparent)]
    Close(WriteErrors),
    /// The log directory is an object-store URL, and this ember was built without the
    /// `object-store` feature.
    #[error("{0} is an object-store URL: build ember with the `object-store` feature to log there")]
    RemoteUnsupported(String),
    /// The object store of the log directory could not be used at the start.
    #[error(transparent)]
    Remote(#[from] crate::bucket::RemoteError),
    /// Records written could not be shipped to the object store (they are tried again, and
    /// stay in the staging directory until they are).
    #[error("shipping to {url}: {message}")]
    RemoteShip {
        /// The log directory's URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// The local staging directory of an object-store log directory could not be made.
    #[error("cannot create the staging directory {}: {source}", path.display())]
    Staging {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl From<WriteError> for SummaryError {
    fn from(error: WriteError) -> Self {
        SummaryError::Write(error)
    }
}
