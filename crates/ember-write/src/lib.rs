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
//!
//! # Module order
//!
//! Imports point one way, so the crate reads from the bottom up (`cargo xtask layers` fails on a
//! circle):
//!
//! 1. `error`, `framing`, `free_space`, `naming`, `stats`: no imports from the crate;
//! 2. `guard` (the disk guard), `batch_context` (each record's fate, what the writers share while
//!    writing a batch), `options`;
//! 3. the file writers: `event_file`, then `summary_file`, `export` and `projector`;
//! 4. `pool_state` (what the handle and the pool thread share), `batch` (messages, record weights,
//!    packed records), `worker` (the pool thread), `pool`
//!    (the handle), and at the top `builder`, whose `build` starts a pool;
//! 5. beside them, on `framing`, `naming` and `options` alone: `reader`, `rollback` and
//!    `remote/` (inside it, `store` and `messages` below `download`, `shipper` and the mirror);
//!    over `remote`, `orphans` (what killed writers left in their staging directories).
//!
//! # How the pool batches without busy polling
//!
//! `write` reserves the record's payload bytes and sends it over a bounded
//! crossbeam channel, so the caller's cost is one channel send. The pool
//! thread blocks on the channel until a record arrives (or the next timed
//! fsync is due; there is no polling loop, unlike MindSpore's writer
//! process), then gathers more for at most `max_delay` (20 ms), parked rather
//! than woken for each record: a caller unparks it when a batch's worth is
//! queued, or to flush or close. Then it:
//!
//! 1. decides serially, in submission order, which tags are new to the
//!    summary file (TensorBoard wants plugin metadata only on the first value
//!    of each tag in a file; MindInsight has none);
//! 2. packs the batch, on the pool's own rayon threads when it holds large
//!    values (`collect` keeps the order), each record under `catch_unwind`;
//! 3. writes the packed events serially, in submission order, into each
//!    writer's buffer, and hands every buffer to the operating system before
//!    the next batch: a record reaches its file at most `max_delay` plus the
//!    batch's own time after `write`;
//! 4. settles each record's fate and releases its bytes.
//!
//! A flush is a message in the same channel, so it is handled after every
//! record sent before it.
//!
//! # Accounting
//!
//! Every record handed to `write` ends as exactly one of: written (every
//! event reached its file), dropped for a full queue, dropped by a writer
//! (size cap, export refused), rejected (nothing could be packed) or failed
//! (lost to a failed writer); see [`WriterPoolStats`]. When a `write(2)` fails part
//! way, the events that reached the file whole count as written, the file is
//! cut back to the last of them, and the rest count as failed, so the counts
//! equal what a reader finds.
//!
//! # Errors
//!
//! A writer that fails (I/O error, disk guard, a planted symlink) is closed
//! and removed, and its error kept; the others go on. With
//! [`ErrorPolicy::Log`] (the default) errors are counted, kept for
//! [`WriterPool::take_errors`], and the first of each kind is logged; with
//! [`ErrorPolicy::Raise`] the caller's next `write` or `flush` returns it.
//! `close` returns every error not yet returned. Rejected values (see
//! [`ember_pack::PackError`]) are errors too. Nothing here panics on input or
//! I/O failure (a panic while packing, a bug, rejects its record), and
//! nothing blocks forever: if the pool thread dies, its channels disconnect
//! and callers get [`WriteError::Closed`] or [`WriteError::ThreadPanicked`].
//!
//! # Memory
//!
//! The queue holds at most `queue_capacity` records (1024) and
//! `max_queued_bytes` payload bytes (32 MiB), the batch being written
//! included; a record larger than that passes alone. Each event file writer
//! buffers at most 256 KiB plus one event before handing its buffer over.
#![deny(missing_docs)]

mod batch;
mod batch_context;
mod builder;
mod dir;
pub mod durable;
mod error;
mod event_file;
mod export;
pub mod framing;
mod free_space;
mod guard;
pub mod journal;
pub mod lock;
pub mod naming;
mod options;
#[cfg(feature = "object-store")]
pub mod orphans;
mod pool;
mod pool_state;
mod projector;
pub mod reader;
#[cfg(feature = "object-store")]
pub mod remote;
pub mod rollback;
mod stats;
mod summary_file;
mod worker;

/// The data model and packing this crate writes, re-exported so that layers above reach it here.
pub use ember_pack as pack;

pub use builder::WriterPoolBuilder;
pub use error::{FileError, MAX_KEPT_ERRORS, WriteError, WriteErrors, kind_name};
pub use free_space::{FreeSpace, FreeSpaceSource, SystemFreeSpace};
pub use journal::{Journal, JournalError, Made};
pub use lock::{DirLock, LockError};
pub use options::{
    DEFAULT_MAX_QUEUED_BYTES, Durability, ErrorPolicy, FullQueuePolicy, SizePolicy, WriterOptions,
};
pub use pool::WriterPool;
pub use reader::{RawRecord, ReadProblem, RecordReader, Scan};
pub use rollback::{LogSnapshot, Ownership, Restored, RollbackError};
pub use stats::{WriterPoolStats, WriterStats};

/// Whether `log_dir` names an object store (`s3://`, `gs://`, `az://`, `file://`, …) rather
/// than a local directory: such a log directory needs the `object-store` feature.
pub fn is_remote(log_dir: &str) -> bool {
    [
        "s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://", "file://",
    ]
    .iter()
    .any(|scheme| log_dir.starts_with(scheme))
}
