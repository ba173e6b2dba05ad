//! What the writers share while the pool thread writes one batch: the disk
//! guard, the fate of each record of the batch, the fsync count, and the
//! buffers of large events written, for the next batch's packing.

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
pub(crate) struct RecordFates {
    fates: Vec<Fate>,
}

impl RecordFates {
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
pub(crate) struct BatchContext {
    pub(crate) guard: DiskGuard,
    pub(crate) record_fates: RecordFates,
    /// fsync calls so far, for the pool's statistics.
    pub(crate) fsyncs: u64,
    /// Buffers of large events already written, to pack the next ones into.
    pub(crate) spare: Spare,
}

/// Buffers of large written events, kept from one batch's writing to the
/// next one's packing: a fresh buffer for each large event costs more than
/// filling it (the allocator gives freed memory back to the system, and
/// every page of the next buffer faults in again, zeroed by the kernel).
///
/// They hold no more than the events of the batch just written held, up to
/// `max_bytes`, and only until the next batch is packed into them (or none
/// waits): the pool's memory stays what it was with fresh buffers.
#[derive(Debug)]
pub(crate) struct Spare {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
    max_bytes: usize,
}

impl Spare {
    /// Spare buffers of at most `max_bytes` in all.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            buffers: Vec::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Keeps `buffer` for a later event, if there is room.
    pub(crate) fn keep(&mut self, buffer: Vec<u8>) {
        let bytes = self.bytes.saturating_add(buffer.capacity());
        if bytes <= self.max_bytes {
            self.bytes = bytes;
            self.buffers.push(buffer);
        }
    }

    /// A kept buffer, or an empty one.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        let buffer = self.buffers.pop().unwrap_or_default();
        self.bytes -= buffer.capacity();
        buffer
    }

    /// Whether no buffer is kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Frees every kept buffer.
    pub(crate) fn clear(&mut self) {
        self.buffers.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_buffers_stay_within_their_bytes() {
        let mut spare = Spare::new(300);
        spare.keep(Vec::with_capacity(200));
        spare.keep(Vec::with_capacity(200));
        assert_eq!(spare.buffers.len(), 1, "the second would pass 300 bytes");
        spare.keep(Vec::with_capacity(100));
        assert_eq!(spare.bytes, 300);
        assert!(spare.take().capacity() >= 100);
        assert!(spare.take().capacity() >= 200);
        assert_eq!((spare.take().capacity(), spare.bytes), (0, 0));
        spare.keep(Vec::with_capacity(50));
        spare.clear();
        assert_eq!((spare.buffers.len(), spare.bytes), (0, 0));
    }
}
