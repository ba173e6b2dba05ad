//! Why a run directory could not be read: [`ReadError`], naming the file and, for a record,
//! its offset.

use std::path::PathBuf;

use ember_write::reader::ReadProblem;

use super::plugins::ValueProblem;

/// Why a run directory could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Listing the directory or opening a file failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A record is damaged (not a truncated tail).
    #[error("{}: {problem}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the reader found, with its offset.
        problem: ReadProblem,
    },
    /// A whole record is not an event of its format.
    #[error("{}: the record at byte {offset} is not an event: {source}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The record's offset.
        offset: u64,
        /// The decoder's error.
        source: prost::DecodeError,
    },
    /// A PR curve, audio clip or custom scalars layout does not hold its plugin's layout.
    #[error("{}: the value {tag:?} in the record at byte {offset}: {source}", path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// The record's offset.
        offset: u64,
        /// The value's tag.
        tag: String,
        /// What is wrong with it (boxed: a WAV error is large, and rare).
        source: Box<ValueProblem>,
    },
    /// The run's `projector_config.pbtxt` is not a protobuf text-format `ProjectorConfig`.
    #[error("{}, line {line}: {problem}", path.display())]
    ProjectorConfig {
        /// The config file.
        path: PathBuf,
        /// The line the problem is on, from 1.
        line: usize,
        /// What the parser expected.
        problem: &'static str,
    },
    /// An object-store log directory could not be read (or this build has no `object-store`
    /// feature).
    #[error("cannot read {url}: {message}")]
    Remote {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
}
