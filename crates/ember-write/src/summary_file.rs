//! The summary file: an [`EventFileWriter`] plus TensorBoard's rule that the
//! first value of each tag in a file carries its plugin metadata, and only
//! that one.
//!
//! Records are packed in parallel, before they are written, so which tags are
//! new is decided beforehand: [`SummaryFile::plan`] walks the batch in
//! submission order. While the file's tag set stays what the plan assumed,
//! records are written as packed. A rotation (the new file has seen no tag),
//! a dropped record or a rejected value breaks the plan; from then on each
//! record's unseen tags are checked, and a record packed with the wrong
//! metadata is packed again before it is written. MindInsight has no
//! metadata, so for it none of this runs.

use std::collections::HashSet;

use ember_pack::{FileKind, MetadataFor, Packer, Record, Tag};

use crate::batch_context::BatchContext;
use crate::error::FileError;
use crate::event_file::{Event, EventFileWriter, Prepared};
use crate::framing;

/// How many times a record is packed again when rotations keep changing
/// which of its tags are new.
const REPACK_TRIES: usize = 3;

/// The tags of one record that need metadata; `None` for none.
pub(crate) type NewTags = Option<HashSet<Tag>>;

/// A record of the batch being written, as the summary file needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned<'a> {
    /// Its index in the batch.
    pub(crate) idx: usize,
    pub(crate) record: &'a Record,
    /// The tags it was packed with metadata for.
    pub(crate) assumed: &'a NewTags,
    /// Its tags whose values were not packed.
    pub(crate) rejected: &'a [Tag],
}

/// What can stop a record from reaching the summary file, besides the policy.
#[derive(Debug)]
pub(crate) enum SummaryFailure {
    /// The writer failed.
    File(FileError),
    /// Packing the record again panicked.
    Panicked(String),
}

/// The summary file writer; see the module docs.
#[derive(Debug)]
pub(crate) struct SummaryFile {
    pub(crate) writer: EventFileWriter,
    /// Whether the format has per-tag metadata (TensorBoard).
    metadata: bool,
    /// Tags whose metadata the current file holds.
    seen: HashSet<Tag>,
    /// The file's tag set is what the current plan assumed.
    plan_holds: bool,
    empty: HashSet<Tag>,
}

/// Packs `record` with metadata on `tags`, its summary event into `buffer`
/// (see [`Packer::pack_into`]), a panic turned into its message.
pub(crate) fn pack_caught(
    packer: &Packer,
    record: &Record,
    tags: &NewTags,
    empty: &HashSet<Tag>,
    buffer: Vec<u8>,
) -> Result<ember_pack::PackedRecord, String> {
    caught(|| {
        packer.pack_into(
            record,
            MetadataFor::Only(tags.as_ref().unwrap_or(empty)),
            buffer,
        )
    })
}

/// Runs `f`, turning a panic into its message: a bug in packing must cost one
/// record, never the pool thread and every record queued behind it.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned())
    })
}

impl SummaryFile {
    pub(crate) fn new(writer: EventFileWriter, metadata: bool) -> Self {
        Self {
            writer,
            metadata,
            seen: HashSet::new(),
            plan_holds: true,
            empty: HashSet::new(),
        }
    }

    /// For each record of `batch`, in order, the tags new to the file.
    pub(crate) fn plan(&mut self, batch: &[Record]) -> Vec<NewTags> {
        self.plan_holds = true;
        if !self.metadata {
            return vec![None; batch.len()];
        }
        let mut batch_new: HashSet<Tag> = HashSet::new();
        batch
            .iter()
            .map(|r| {
                let mut new: NewTags = None;
                for (tag, _) in r.values() {
                    if !self.seen.contains(tag) && batch_new.insert(tag.clone()) {
                        new.get_or_insert_with(HashSet::new).insert(tag.clone());
                    }
                }
                new
            })
            .collect()
    }

    /// A record planned in this batch did not become part of the file as
    /// planned (rejected values, no summary event): check from now on.
    pub(crate) fn break_plan(&mut self) {
        self.plan_holds = false;
    }

    /// The record's tags the file has not seen; `None` for none.
    fn unseen(&self, record: &Record) -> NewTags {
        let mut out: NewTags = None;
        for (tag, _) in record.values() {
            if !self.seen.contains(tag) {
                out.get_or_insert_with(HashSet::new).insert(tag.clone());
            }
        }
        out
    }

    /// Writes the summary events of a record.
    pub(crate) fn write(
        &mut self,
        planned: Planned<'_>,
        events: Vec<Event>,
        packer: &Packer,
        ctx: &mut BatchContext,
    ) -> Result<(), SummaryFailure> {
        let idx = planned.idx;
        if !self.metadata {
            return self
                .writer
                .write_events(idx, events, ctx)
                .map_err(SummaryFailure::File);
        }
        if self.plan_holds {
            let total = events
                .iter()
                .map(|e| framing::framed_len(e.data.len()))
                .sum();
            match self.writer.prepare(total, ctx) {
                Ok(Prepared::Ready { rotated: false }) => {
                    self.writer
                        .append_all(idx, events, ctx)
                        .map_err(SummaryFailure::File)?;
                    if let Some(new) = planned.assumed {
                        self.seen.extend(new.iter().cloned());
                    }
                    return Ok(());
                }
                Ok(Prepared::Ready { rotated: true }) => {
                    self.seen.clear();
                    self.plan_holds = false;
                }
                Ok(Prepared::Drop) => {
                    self.plan_holds = false;
                    self.writer.dropped(idx, events.len(), ctx);
                    return Ok(());
                }
                Err(e) => {
                    self.writer.lost(idx, events.len(), ctx);
                    return Err(SummaryFailure::File(e));
                }
            }
        }
        self.write_checked(planned, events, packer, ctx)
    }

    fn write_checked(
        &mut self,
        planned: Planned<'_>,
        mut events: Vec<Event>,
        packer: &Packer,
        ctx: &mut BatchContext,
    ) -> Result<(), SummaryFailure> {
        let Planned {
            idx,
            record,
            assumed,
            rejected,
        } = planned;
        let mut packed_for = assumed.clone();
        for _ in 0..REPACK_TRIES {
            let needed = self.unseen(record);
            if needed != packed_for {
                let repacked = pack_caught(packer, record, &needed, &self.empty, Vec::new())
                    .map_err(|m| {
                        self.writer.lost(idx, events.len(), ctx);
                        SummaryFailure::Panicked(m)
                    })?;
                events = repacked
                    .items
                    .into_iter()
                    .filter(|i| i.kind == FileKind::Summary)
                    .map(|i| Event::from(i.bytes))
                    .collect();
                packed_for = needed;
            }
            let total = events
                .iter()
                .map(|e| framing::framed_len(e.data.len()))
                .sum();
            match self.writer.prepare(total, ctx) {
                Err(e) => {
                    self.writer.lost(idx, events.len(), ctx);
                    return Err(SummaryFailure::File(e));
                }
                Ok(Prepared::Drop) => {
                    self.writer.dropped(idx, events.len(), ctx);
                    return Ok(());
                }
                Ok(Prepared::Ready { rotated: true }) => self.seen.clear(),
                Ok(Prepared::Ready { rotated: false }) => {
                    self.writer
                        .append_all(idx, events, ctx)
                        .map_err(SummaryFailure::File)?;
                    for (tag, _) in record.values() {
                        if !rejected.contains(tag) {
                            self.seen.insert(tag.clone());
                        }
                    }
                    return Ok(());
                }
            }
        }
        // Rotated on every try: each file was too small for this record.
        self.writer.dropped(idx, events.len(), ctx);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::caught;

    #[test]
    fn a_panic_becomes_its_message() {
        assert_eq!(caught(|| 7), Ok(7));
        assert_eq!(caught(|| -> () { panic!("boom") }), Err("boom".to_owned()));
        let n = 3;
        assert_eq!(
            caught(|| -> () { panic!("index {n} out of range") }),
            Err("index 3 out of range".to_owned())
        );
    }
}
