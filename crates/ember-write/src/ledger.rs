//! What the writers share while the pool thread writes one batch: the disk
//! guard, the fate of each record of the batch, and the fsync count.

use crate::guard::DiskGuard;

/// What became of a record; a record with events for several writers takes
/// the worst fate of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fate {
    /// Every event reached its file.
    Written,
    /// A writer dropped an event (size cap, export refused).
    Dropped,
    /// An event was lost to a failed writer.
    Failed,
    /// Nothing could be packed.
    Rejected,
}

/// The fate of each record of the current batch, by index in the batch.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    fates: Vec<Fate>,
}

impl Ledger {
    /// Starts a batch of `records` records, each written until told otherwise.
    pub(crate) fn begin(&mut self, records: usize) {
        self.fates.clear();
        self.fates.resize(records, Fate::Written);
    }

    /// Records that part of record `idx` met `fate`; the worst fate stays.
    pub(crate) fn mark(&mut self, idx: usize, fate: Fate) {
        if let Some(slot) = self.fates.get_mut(idx) {
            *slot = (*slot).max(fate);
        }
    }

    /// The fates of the batch, in submission order.
    pub(crate) fn fates(&self) -> &[Fate] {
        &self.fates
    }
}

/// The state the pool thread lends to its writers.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) guard: DiskGuard,
    pub(crate) ledger: Ledger,
    /// fsync calls so far, for the pool's statistics.
    pub(crate) fsyncs: u64,
}
