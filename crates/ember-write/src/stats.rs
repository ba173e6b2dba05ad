//! The statistics view of a pool.

use std::path::PathBuf;

use ember_pack::FileKind;

/// Counters of one file writer.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterStats {
    /// The writer's file kind.
    pub kind: FileKind,
    /// Records written (for export, tensors written).
    pub records_written: u64,
    /// Records dropped: size cap reached, record too large for any file,
    /// export refused, or the writer had failed.
    pub records_dropped: u64,
    /// Bytes written, framing and file headers included.
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
            bytes_written: 0,
            files_created: 0,
            failed: false,
            path: None,
        }
    }
}

/// A snapshot of a pool's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolStats {
    /// Records accepted by `write`.
    pub records_submitted: u64,
    /// Records dropped by `write` because the queue was full.
    pub records_dropped_queue_full: u64,
    /// Records waiting in the queue now.
    pub queue_depth: usize,
    /// Values the packer rejected.
    pub values_rejected: u64,
    /// Errors of every kind so far (rejected values and refused exports included).
    pub errors: u64,
    /// Per-writer counters, as of the last batch the pool thread finished.
    pub writers: Vec<WriterStats>,
}

impl PoolStats {
    /// The counters of the `kind` writer.
    pub fn writer(&self, kind: FileKind) -> Option<&WriterStats> {
        self.writers.iter().find(|w| w.kind == kind)
    }
}
