//! Cuts: the log's position at a checkpoint, taken without waiting for the store.
//!
//! A checkpoint of a run in a bucket must name the objects that hold its log up to that
//! moment, and a resume removes every later one. Waiting at the checkpoint for the mirror to
//! ship the log's tail, then listing the bucket, puts the store's round trips on the training
//! thread. A cut instead records, on the caller's thread and from the local staging directory
//! alone, how long each event file is (the pool has just flushed, so each ends on a whole
//! record) and which other files there are. From then on the mirror never lets a segment cross
//! a cut's length, so the objects up to the cut are exactly the segments before it; the
//! checkpoint thread asks for the cut to be shipped ([`LogCut::shipped`](super::LogCut::shipped)) and gets those
//! objects' names from the mirror's own account of what it uploaded, without a listing. A
//! checkpoint written after that is written after its log is in the store: one that exists is
//! whole.
//!
//! The cut's length and the mirror's bound on a segment are taken under one lock, and a file
//! only grows: a segment the mirror reads after a cut stops at it, and one it read before lies
//! wholly before it (the file was no longer when the segment was read).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::staged::{PROJECTOR_CONFIG, staged_files};

/// The cuts not yet shipped, shared by the mirror's handle and its thread.
#[derive(Debug, Default)]
pub(super) struct Cuts {
    next: u64,
    open: BTreeMap<u64, Cut>,
}

/// The staging directory at one moment: every event file's length and every other file's
/// name, relative to it.
#[derive(Debug, Default)]
pub(super) struct Cut {
    pub(super) events: BTreeMap<String, u64>,
    pub(super) whole: BTreeMap<String, u64>,
    pub(super) projector_config: Option<Vec<u8>>,
}

impl Cuts {
    /// The shared book, locked (a panic elsewhere leaves nothing half-done in it).
    pub(super) fn lock(book: &Mutex<Self>) -> MutexGuard<'_, Self> {
        book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The length the segment of `file` that starts at `from` may not go past: the nearest
    /// open cut of that file beyond `from`, if any.
    pub(super) fn bound(&self, file: &str, from: u64) -> Option<u64> {
        self.open
            .values()
            .filter_map(|cut| cut.events.get(file).copied())
            .filter(|&len| len > from)
            .min()
    }

    /// Records the staging directory as it is now; its number.
    pub(super) fn take(&mut self, staging: &Path) -> Result<u64, String> {
        let mut cut = Cut::default();
        for file in staged_files(staging)? {
            let len = fs::metadata(&file.path)
                .map_err(|e| format!("reading {}: {e}", file.path.display()))?
                .len();
            if file.event_file {
                cut.events.insert(file.relative, len);
                continue;
            }
            if file.relative == PROJECTOR_CONFIG {
                cut.projector_config = Some(
                    fs::read(&file.path)
                        .map_err(|e| format!("reading {}: {e}", file.path.display()))?,
                );
            }
            cut.whole.insert(file.relative, len);
        }
        let id = self.next;
        self.next += 1;
        self.open.insert(id, cut);
        Ok(id)
    }

    /// The cut `id`, no longer open.
    pub(super) fn close(&mut self, id: u64) -> Option<Cut> {
        self.open.remove(&id)
    }
}

/// What the store holds of the log up to a cut, as the mirror uploaded it: each object's
/// name (relative to the log directory's URL) and size, and the projector config's text then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShippedCut {
    pub(crate) objects: BTreeMap<String, u64>,
    pub(crate) projector_config: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests;
