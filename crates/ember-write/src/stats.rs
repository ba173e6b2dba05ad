//! The statistics view of a pool.
//!
//! Records are counted once each, by their fate, so that
//! `records_submitted == records_written + records_dropped_queue_full +
//! records_dropped + records_rejected + records_failed + records_pending()`
//! holds at every snapshot, and `records_pending()` is 0 once `flush` or
//! `close` returned.

use std::path::PathBuf;

use ember_pack::FileKind;

/// Counters of one file writer. Its unit is the framed event (an exported
/// tensor for the export writer): one record may give a writer several.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterStats {
    /// The writer's file kind.
    pub kind: FileKind,
    /// Events that reached the file (`write(2)` returned), file headers not
    /// counted; for export, tensors written.
    pub records_written: u64,
    /// Events dropped: size cap reached, event too large for any file, or
    /// export refused.
    pub records_dropped: u64,
    /// Events lost because the writer failed (the one that met the failure
    /// included) or had failed before.
    pub records_failed: u64,
    /// Bytes that reached the file, framing and file headers included.
    pub bytes_written: u64,
    /// Files created (event files, or exported tensors).
    pub files_created: u64,
    /// Whether the writer failed and was removed.
    pub failed: bool,
    /// The current (or last) file; for export, the export directory.
    pub path: Option<PathBuf>,
}

impl WriterStats {
    pub(crate) fn new(kind: FileKind) -> Self {
        Self {
            kind,
            records_written: 0,
            records_dropped: 0,
            records_failed: 0,
            bytes_written: 0,
            files_created: 0,
            failed: false,
            path: None,
        }
    }
}

/// A snapshot of a pool's counters; see the module docs for how they add up.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterPoolStats {
    /// Records handed to `write` (those refused for a full queue included).
    pub records_submitted: u64,
    /// Records every event of which reached its file.
    pub records_written: u64,
    /// Records not queued because the queue was full (dropped, or refused
    /// with [`WriteError::QueueFull`](crate::WriteError::QueueFull)).
    pub records_dropped_queue_full: u64,
    /// Records (some of) whose events a writer dropped: size cap, too large
    /// for any file, export refused. Their other events may have been written.
    pub records_dropped: u64,
    /// Records none of whose values could be packed (every value rejected,
    /// or packing panicked).
    pub records_rejected: u64,
    /// Records (some of) whose events were lost to a failed writer.
    pub records_failed: u64,
    /// Values the packer rejected (their records' other values go on).
    pub values_rejected: u64,
    /// Records waiting in the queue now.
    pub queue_depth: usize,
    /// Payload bytes of the queued and in-flight records now.
    pub queued_bytes: usize,
    /// Errors of every kind so far (rejected values and refused exports included).
    pub errors: u64,
    /// fsync calls on event files and directories.
    pub fsyncs: u64,
    /// Batches packed on the pool's packing threads rather than its own thread.
    pub parallel_batches: u64,
    /// Per-writer counters, as of the last batch the pool thread finished.
    pub writers: Vec<WriterStats>,
}

impl WriterPoolStats {
    /// The counters of the `kind` writer.
    pub fn writer(&self, kind: FileKind) -> Option<&WriterStats> {
        self.writers.iter().find(|w| w.kind == kind)
    }

    /// Records submitted whose fate is not decided yet: queued, or in the
    /// batch the pool thread is writing.
    pub fn records_pending(&self) -> u64 {
        self.records_submitted.saturating_sub(
            self.records_written
                + self.records_dropped_queue_full
                + self.records_dropped
                + self.records_rejected
                + self.records_failed,
        )
    }
}
