//! What the pool thread receives and how it weighs it: the messages callers send, each record's
//! weight in the byte budget, the values heavy enough to pack on a thread of their own, and a
//! packed record with the CRCs of its large events.

use crossbeam_channel::Sender;
use ember_pack::{FileKind, Histogram, PackedItem, PackedRecord, Record, Value};

use crate::event_file;
use crate::framing::masked_crc32c;

/// A value at least this large is worth a packing task of its own.
pub(crate) const HEAVY_VALUE_BYTES: usize = 4096;

/// Batches with fewer heavy values than this are packed on the pool thread.
///
/// Light records (scalars) are packed serially: the caller's thread keeps
/// the other cores busy producing them, and on a small machine packing
/// threads would only compete with it (measured: 1.4M vs 0.9M scalar
/// records/s on 2 cores). Heavy records leave the caller waiting on a full
/// queue, so their packing gets the cores.
pub(crate) const PARALLEL_MIN_HEAVY: usize = 2;

/// What callers send to the pool thread.
pub(crate) enum Msg {
    /// A record and its weight in the byte budget.
    Record(Record, usize),
    /// Answer once every earlier record reached the operating system.
    Flush(Sender<()>),
    /// Run this, on the pool thread, once every earlier record reached the operating system;
    /// it is given the first step a record of the pool was lost at, if any.
    After(AfterWritten),
}

/// What [`Msg::After`] runs.
pub(crate) type AfterWritten = Box<dyn FnOnce(Option<i64>) + Send>;

/// What the pool thread does once the records before a message are written: answer a flush, or
/// run what the caller left there.
pub(crate) enum Then {
    Ack(Sender<()>),
    Run(AfterWritten),
}

impl Then {
    pub(crate) fn of(msg: Msg) -> Option<Self> {
        match msg {
            Msg::Flush(ack) => Some(Self::Ack(ack)),
            Msg::After(run) => Some(Self::Run(run)),
            Msg::Record(..) => None,
        }
    }
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Record(r, _) => write!(f, "Record(step {})", r.step()),
            Msg::Flush(_) => f.write_str("Flush"),
            Msg::After(_) => f.write_str("After"),
        }
    }
}

/// The payload bytes `record` holds, for the queue's byte budget.
pub(crate) fn record_weight(record: &Record) -> usize {
    record
        .values()
        .iter()
        .map(|(tag, value)| {
            let payload = match value {
                Value::Tensor(t) | Value::Export(t) => t.bytes().len(),
                Value::Histogram(Histogram::Raw(t) | Histogram::RawWith(t, _)) => t.bytes().len(),
                Value::Image(image) => image.data.bytes().len(),
                Value::Text(text) => text.len(),
                Value::Embedding(e) => embedding_bytes(e),
                _ => 256,
            };
            tag.as_str().len() + payload + 64
        })
        .sum::<usize>()
        + 64
}

/// Whether packing `value` takes long enough to be worth a task of its own.
pub(crate) fn is_heavy(value: &Value) -> bool {
    let bytes = match value {
        Value::Tensor(t) | Value::Export(t) => t.bytes().len(),
        Value::Histogram(Histogram::Raw(t) | Histogram::RawWith(t, _)) => t.bytes().len(),
        Value::Image(image) => image.data.bytes().len(),
        Value::Embedding(e) => embedding_bytes(e),
        _ => 0,
    };
    bytes >= HEAVY_VALUE_BYTES
}

/// The bytes an embedding holds: its matrix, labels and thumbnails.
pub(crate) fn embedding_bytes(e: &ember_pack::Embedding) -> usize {
    e.matrix.bytes().len()
        + e.labels
            .iter()
            .flatten()
            .map(|l| l.len() + 1)
            .sum::<usize>()
        + e.thumbnails
            .iter()
            .flatten()
            .map(|i| i.data.bytes().len())
            .sum::<usize>()
}

/// Raw histograms with at least this many bytes of values are split across the pack threads
/// by ember-pack (it splits inputs of 32,768 elements and more when it runs on a rayon pool),
/// so a batch holding one is packed on the pack pool even when it is alone.
pub(crate) const SPLIT_HISTOGRAM_BYTES: usize = 32 * 1024 * 4;

/// Whether packing `value` splits across the pack pool's threads.
pub(crate) fn splits(value: &Value) -> bool {
    matches!(value, Value::Histogram(Histogram::Raw(t)) if t.bytes().len() >= SPLIT_HISTOGRAM_BYTES)
}

/// A packed record with the CRC of each large event, computed on the pack
/// thread that made it (in `items` order; `None` for the others, and empty,
/// without an allocation, when no event is large: scalars come by millions).
pub(crate) struct Packed {
    pub(crate) record: PackedRecord,
    pub(crate) crcs: Vec<Option<u32>>,
}

impl Packed {
    pub(crate) fn new(record: PackedRecord) -> Self {
        let crcs = if record.items.iter().any(held) {
            record.items.iter().map(crc_if_held).collect()
        } else {
            Vec::new()
        };
        Self { record, crcs }
    }
}

/// The masked CRC of a summary event that the writer will hold.
pub(crate) fn crc_if_held(item: &PackedItem) -> Option<u32> {
    held(item).then(|| masked_crc32c(&item.bytes))
}

/// Whether the writer will hold `item` as it is (see `event_file::HOLD_MIN`).
pub(crate) fn held(item: &PackedItem) -> bool {
    item.kind == FileKind::Summary && item.bytes.len() >= event_file::HOLD_MIN
}
