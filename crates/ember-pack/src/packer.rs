//! The [`Packer`]: checks each value of a record for its format and hands it to that format's
//! encoder (`tb.rs`, `ms.rs`), which writes into a `Sink`.

use rayon::prelude::*;

use crate::error::{PackError, PackErrorKind};
use crate::format::{FileKind, Format};
use crate::packed::{MetadataFor, PackOptions, PackedItem, PackedRecord, Sink, summary_event};
use crate::record::{Record, finite_wall_time};
use crate::tag::Tag;
use crate::value::Value;
use crate::{ms, tb};

/// A value checked for the packer's format: what encoding it needs.
enum Plan<'a> {
    TensorBoard(tb::Plan<'a>),
    MindInsight(ms::Plan<'a>),
}

/// Packs records into serialized events for one [`Format`]. Cheap to share across threads.
#[derive(Debug)]
pub struct Packer {
    options: PackOptions,
    tb_meta: tb::Metadata,
}

impl Packer {
    /// A packer for these options.
    pub fn new(options: PackOptions) -> Packer {
        Packer {
            options,
            tb_meta: tb::Metadata::new(),
        }
    }

    /// The options.
    pub fn options(&self) -> &PackOptions {
        &self.options
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.options.format
    }

    /// Checks `value` as [`Packer::pack`] would, without encoding it: `Ok` exactly when packing
    /// it cannot fail, else the same error packing would give. (Only a PNG encoder failure,
    /// which valid pixels do not cause, is left to packing.)
    ///
    /// Costs O(rank) for tensors and images and O(buckets) for precomputed histograms, never
    /// O(elements), so a writer can call it before queueing a value and report a bad one to
    /// the caller that made it.
    pub fn check(&self, tag: &Tag, value: &Value) -> Result<(), PackError> {
        self.plan(value).map(drop).map_err(|kind| PackError {
            tag: tag.clone(),
            kind,
        })
    }

    /// The checks of [`Packer::check`], keeping what they computed for encoding.
    fn plan<'a>(&self, value: &'a Value) -> Result<Plan<'a>, PackErrorKind> {
        match self.options.format {
            Format::TensorBoard => tb::check(&self.options, value).map(Plan::TensorBoard),
            Format::MindInsight => ms::check(value).map(Plan::MindInsight),
        }
    }

    /// Packs one record. `metadata_for` says which tags get their plugin metadata (TensorBoard
    /// writes it only on the first value of each tag in a file; the writer tracks which tags a
    /// file has seen). Rejected values are listed in [`PackedRecord::rejected`], with the error
    /// [`Packer::check`] gives for them; the others pack.
    pub fn pack(&self, record: &Record, metadata_for: MetadataFor<'_>) -> PackedRecord {
        self.pack_into(record, metadata_for, Vec::new())
    }

    /// [`Packer::pack`], encoding the record's summary event into `buffer` (its contents are
    /// discarded, its capacity used when it is enough). A writer that hands back the buffers of
    /// events it has written spares a large allocation per record, and the page faults of
    /// memory the allocator gave back to the system in between.
    pub fn pack_into(
        &self,
        record: &Record,
        metadata_for: MetadataFor<'_>,
        buffer: Vec<u8>,
    ) -> PackedRecord {
        let mut sink = Sink {
            parts: Vec::with_capacity(record.len()),
            items: Vec::new(),
            exports: Vec::new(),
            step: record.step(),
        };
        let mut rejected = Vec::new();
        let wall_time = record.wall_time();
        for (tag, value) in record.values() {
            let result = self.plan(value).and_then(|plan| match plan {
                Plan::TensorBoard(plan) => tb::pack(
                    &self.tb_meta,
                    &self.options,
                    tag,
                    plan,
                    metadata_for.includes(tag),
                    wall_time,
                    &mut sink,
                ),
                Plan::MindInsight(plan) => ms::pack(tag, plan, wall_time, &mut sink),
            });
            if let Err(kind) = result {
                rejected.push(PackError {
                    tag: tag.clone(),
                    kind,
                });
            }
        }
        let mut items = sink.items;
        if !sink.parts.is_empty() {
            let bytes = summary_event(
                self.options.format,
                wall_time,
                record.step(),
                &sink.parts,
                buffer,
            );
            items.push(PackedItem {
                kind: FileKind::Summary,
                bytes,
                export: None,
                projector: None,
            });
        }
        items.extend(sink.exports);
        PackedRecord { items, rejected }
    }

    /// Packs records in parallel on rayon's pool, every tag with metadata
    /// ([`MetadataFor::All`]); results come in input order.
    pub fn pack_many(&self, records: &[Record]) -> Vec<PackedRecord> {
        records
            .par_iter()
            .map(|r| self.pack(r, MetadataFor::All))
            .collect()
    }

    /// The serialized first event of a file of `kind`; empty when such files have none.
    ///
    /// TensorBoard: `Event{wall_time, file_version: "brain.Event:2", source_metadata.writer}` for
    /// [`FileKind::Summary`]. MindInsight: `Event{wall_time, version: "MindSpore.Event:1"}` for
    /// summary and explain files; lineage files and exports have no first event. A non-finite
    /// `wall_time` becomes `0.0`.
    pub fn file_header(&self, kind: FileKind, wall_time: f64) -> Vec<u8> {
        let wall_time = finite_wall_time(wall_time);
        match (self.options.format, kind) {
            (Format::TensorBoard, FileKind::Summary) => {
                tb::file_header(wall_time, &self.options.writer_name)
            }
            (Format::MindInsight, FileKind::Summary | FileKind::Explain) => {
                ms::file_header(wall_time)
            }
            _ => Vec::new(),
        }
    }
}

impl Default for Packer {
    fn default() -> Packer {
        Packer::new(PackOptions::default())
    }
}
