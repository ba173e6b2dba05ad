//! ember-write: event-file writers and the asynchronous writer pool.
//!
//! **Layer L1.** This crate turns [`ember_pack::Record`]s into files on disk.
//! Its only ember dependency is `ember-pack` (layer L0), which packs records
//! into serialized events; it knows nothing of burn, training loops or
//! devices.
//!
//! # Pieces
//!
//! - [`framing`]: TFRecord framing (length, masked CRC-32C, data, masked
//!   CRC-32C), shared by TensorBoard and MindInsight files.
//! - [`reader`]: a checking reader that iterates the records of a file or byte
//!   slice, telling a truncated tail (normal while a file is written) from
//!   corruption, with byte offsets; `ember inspect` builds on it.
//! - [`naming`]: the file names of both formats, and export paths no tag can
//!   escape.
//! - [`WriterPool`]: the pool. One writer per file kind (summary, lineage,
//!   explain, export), each creating its files on their first record
//!   (create-new, mode 0600), with a size cap (stop or rotate) and a
//!   free-disk guard.
//! - [`workload`]: the benchmark workloads, reused by `ember bench write`.
//!
//! # How the pool keeps order without busy polling
//!
//! `write` only sends the record over a bounded crossbeam channel, so the
//! caller's cost is one channel send. The pool thread blocks on the channel
//! (`recv_timeout`, the timeout being the next timed flush; there is no
//! polling loop, unlike MindSpore's writer process). When a record arrives it
//! drains what else is queued, up to `max_batch` records, and:
//!
//! 1. decides serially, in submission order, which tags are new to the
//!    summary file (TensorBoard wants plugin metadata only on the first value
//!    of each tag in a file);
//! 2. packs the batch on rayon; `par_iter().map().collect()` keeps the order;
//! 3. writes the packed items serially, in submission order. If the summary
//!    file rotated, or an earlier record was dropped, a record whose metadata
//!    plan no longer matches the file is packed again before it is written.
//!
//! A flush is a message in the same channel, so it is handled after every
//! record sent before it and answered only once they reached the operating
//! system (and, with [`Durability::Sync`], the disk).
//!
//! # Errors
//!
//! A writer that fails (I/O error, disk guard) is closed and removed, and its
//! error kept; the others go on. With [`ErrorPolicy::Raise`] the caller's
//! next `write` or `flush` returns it; with [`ErrorPolicy::Log`] it is logged
//! and counted. `close` returns every error not yet returned. Rejected values
//! (see [`ember_pack::PackError`]) are errors too. Nothing here panics on
//! input or I/O failure, and nothing blocks forever: if the pool thread dies,
//! its channels disconnect and callers get [`WriteError::Closed`] or
//! [`WriteError::ThreadPanicked`].
#![deny(missing_docs)]

mod error;
mod export;
mod files;
pub mod framing;
mod free_space;
mod guard;
mod ledger;
pub mod naming;
mod options;
mod pool;
pub mod reader;
mod stats;
mod summary_file;
mod worker;
pub mod workload;

/// The data model and packing this crate writes, re-exported so that layers above reach it here.
pub use ember_pack as pack;

pub use error::{FileError, MAX_KEPT_ERRORS, WriteError, WriteErrors};
pub use free_space::{FreeSpace, FreeSpaceSource, SystemFreeSpace};
pub use options::{
    DEFAULT_MAX_QUEUED_BYTES, Durability, ErrorPolicy, FullQueuePolicy, SizePolicy, WriterOptions,
    WriterPoolBuilder,
};
pub use pool::WriterPool;
pub use reader::{RawRecord, ReadProblem, RecordReader, Scan};
pub use stats::{PoolStats, WriterStats};

use ember_pack::FileKind;

/// A lowercase name of a file kind, for messages.
pub fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Summary => "summary",
        FileKind::Lineage => "lineage",
        FileKind::Explain => "explain",
        FileKind::Export => "export",
    }
}
