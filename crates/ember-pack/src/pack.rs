//! The packer: records in, serialized events out.

use std::borrow::Cow;
use std::collections::HashSet;

use rayon::prelude::*;

use crate::error::{PackError, PackErrorKind};
use crate::record::{Record, finite_wall_time};
use crate::tag::Tag;
use crate::value::Value;
use crate::{ms, tb, wire};

/// The event format to pack for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// TensorBoard's `tensorboard.Event` (`brain.Event:2`).
    #[default]
    TensorBoard,
    /// MindSpore's `mindspore.irpb.Event` (`MindSpore.Event:1`), as MindInsight reads it.
    MindInsight,
}

/// Which file a packed item belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// The summary (event) file: scalars, tensors, histograms, images, text, hparams, graphs.
    Summary,
    /// MindSpore's `_lineage` file of `LineageEvent`s.
    Lineage,
    /// MindSpore's `_explain` file.
    Explain,
    /// One `.npy` file per exported tensor.
    Export,
    /// TensorBoard's projector: one directory of files per embedding, listed in the run's
    /// `projector_config.pbtxt`.
    Projector,
}

/// How TensorBoard histograms are bucketed. MindInsight always uses MindSpore's own rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistogramRule {
    /// This many equal-width buckets over the finite values' range, as TensorBoard's own
    /// summary ops do (30 by default). At most [`HistogramRule::MAX_EQUAL_WIDTH`]; with more,
    /// raw histograms are rejected with [`PackErrorKind::SizeOverflow`].
    EqualWidth(u32),
    /// TensorFlow's exponential buckets (`1e-12·1.1^i` both signs), empty runs collapsed.
    Exponential,
}

impl HistogramRule {
    /// The largest equal-width bucket count: every histogram allocates and writes that many
    /// buckets, whatever its values.
    pub const MAX_EQUAL_WIDTH: u32 = 1 << 16;
}

impl Default for HistogramRule {
    fn default() -> HistogramRule {
        HistogramRule::EqualWidth(30)
    }
}

/// What to pack for and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackOptions {
    /// The event format.
    pub format: Format,
    /// TensorBoard's histogram bucketing.
    pub histogram: HistogramRule,
    /// `source_metadata.writer` of TensorBoard's first event.
    pub writer_name: String,
}

impl Default for PackOptions {
    fn default() -> PackOptions {
        PackOptions {
            format: Format::default(),
            histogram: HistogramRule::default(),
            writer_name: "ember".to_string(),
        }
    }
}

impl PackOptions {
    /// Default options for `format`.
    pub fn new(format: Format) -> PackOptions {
        PackOptions {
            format,
            ..PackOptions::default()
        }
    }
}

/// Which tags get their plugin metadata in this pack call.
///
/// TensorBoard readers keep the metadata of the first value of each tag, so a writer sends it
/// only on the first value of each tag in each file. MindInsight has no metadata; it ignores this.
#[derive(Clone, Copy, Debug)]
pub enum MetadataFor<'a> {
    /// Every tag.
    All,
    /// Only these tags; the others get no plugin metadata.
    Only(&'a HashSet<Tag>),
}

impl MetadataFor<'_> {
    /// Whether `tag` gets metadata.
    pub fn includes(&self, tag: &Tag) -> bool {
        match self {
            MetadataFor::All => true,
            MetadataFor::Only(set) => set.contains(tag.as_str()),
        }
    }
}

/// Which tensor a `.npy` item holds: MindSpore names the file `<quoted tag>_<step>.npy`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExportKey {
    /// The tag.
    pub tag: Tag,
    /// The step.
    pub step: i64,
}

/// One serialized item of a record.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedItem {
    /// The file it goes to.
    pub kind: FileKind,
    /// One serialized event (unframed), or the whole `.npy` file for [`FileKind::Export`].
    pub bytes: Vec<u8>,
    /// For [`FileKind::Export`], the tag and step that name the file.
    pub export: Option<ExportKey>,
    /// For [`FileKind::Projector`], the embedding's files (`bytes` is then empty).
    pub projector: Option<Box<crate::ProjectorFiles>>,
}

/// What packing a record produced.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PackedRecord {
    /// In MindSpore's order: graph, lineage and explain items as their values come, then the
    /// record's one summary event (absent when it has no summary value), then exports.
    pub items: Vec<PackedItem>,
    /// Values that could not be packed, with the reason.
    pub rejected: Vec<PackError>,
}

/// A `Summary.Value` on its way into the summary event.
pub(crate) enum Part<'a> {
    /// A complete encoded `Summary.Value`.
    Encoded(Vec<u8>),
    /// `tag`, a `float` in `field`, and optional `SummaryMetadata` bytes (field 9).
    Scalar {
        tag: &'a str,
        field: u32,
        value: f32,
        metadata: Option<&'a [u8]>,
    },
    /// `tag`, a tensor (field 8) made of `header` then `data` as field `data_field`, and optional
    /// metadata.
    Tensor {
        tag: &'a str,
        header: Vec<u8>,
        data_field: u32,
        data: Cow<'a, [u8]>,
        metadata: Option<&'a [u8]>,
    },
}

impl Part<'_> {
    fn tensor_body_len(header: &[u8], data_field: u32, data: &[u8]) -> usize {
        header.len()
            + if data.is_empty() {
                0
            } else {
                wire::len_field_len(data_field, data.len())
            }
    }

    fn len(&self) -> usize {
        let meta = |m: &Option<&[u8]>| m.map_or(0, |m| wire::len_field_len(9, m.len()));
        match self {
            Part::Encoded(bytes) => bytes.len(),
            Part::Scalar {
                tag,
                field,
                metadata,
                ..
            } => wire::len_field_len(1, tag.len()) + wire::key_len(*field) + 4 + meta(metadata),
            Part::Tensor {
                tag,
                header,
                data_field,
                data,
                metadata,
            } => {
                wire::len_field_len(1, tag.len())
                    + wire::len_field_len(8, Self::tensor_body_len(header, *data_field, data))
                    + meta(metadata)
            }
        }
    }

    fn write(&self, buf: &mut Vec<u8>) {
        match self {
            Part::Encoded(bytes) => buf.extend_from_slice(bytes),
            Part::Scalar {
                tag,
                field,
                value,
                metadata,
            } => {
                wire::put_bytes(buf, 1, tag.as_bytes());
                wire::put_f32_field(buf, *field, *value);
                if let Some(m) = metadata {
                    wire::put_bytes(buf, 9, m);
                }
            }
            Part::Tensor {
                tag,
                header,
                data_field,
                data,
                metadata,
            } => {
                wire::put_bytes(buf, 1, tag.as_bytes());
                wire::put_len_prefix(buf, 8, Self::tensor_body_len(header, *data_field, data));
                buf.extend_from_slice(header);
                if !data.is_empty() {
                    wire::put_bytes(buf, *data_field, data);
                }
                if let Some(m) = metadata {
                    wire::put_bytes(buf, 9, m);
                }
            }
        }
    }
}

/// The `Event{wall_time, step, summary}` holding `parts`, as prost would encode it: TensorBoard
/// (proto3) leaves out a zero wall time and step, MindSpore (proto2) always writes both.
/// Encoded into `buf` (cleared) when it is large enough.
pub(crate) fn summary_event(
    format: Format,
    wall_time: f64,
    step: i64,
    parts: &[Part<'_>],
    mut buf: Vec<u8>,
) -> Vec<u8> {
    let proto3 = format == Format::TensorBoard;
    let write_time = !proto3 || wall_time != 0.0;
    let write_step = !proto3 || step != 0;
    let summary_len: usize = parts.iter().map(|p| wire::len_field_len(1, p.len())).sum();
    let len = if write_time { 9 } else { 0 }
        + if write_step {
            wire::varint_field_len(2, step as u64)
        } else {
            0
        }
        + wire::len_field_len(5, summary_len);
    buf.clear();
    if buf.capacity() < len {
        // A fresh allocation: growing would copy the old contents for nothing.
        buf = Vec::with_capacity(len);
    }
    if write_time {
        wire::put_f64_field(&mut buf, 1, wall_time);
    }
    if write_step {
        wire::put_varint_field(&mut buf, 2, step as u64);
    }
    wire::put_len_prefix(&mut buf, 5, summary_len);
    for part in parts {
        wire::put_len_prefix(&mut buf, 1, part.len());
        part.write(&mut buf);
    }
    debug_assert_eq!(buf.len(), len);
    buf
}

/// Where a value's output goes while a record is packed.
pub(crate) struct Sink<'a> {
    /// Values for the record's summary event.
    pub(crate) parts: Vec<Part<'a>>,
    /// Graph, lineage and explain items, in value order.
    pub(crate) items: Vec<PackedItem>,
    /// `.npy` items, in value order; they follow the summary event.
    exports: Vec<PackedItem>,
    /// The record's step, which names exports.
    step: i64,
}

impl Sink<'_> {
    /// Adds a separate event for `kind` (graph, lineage, explain).
    pub(crate) fn item(&mut self, kind: FileKind, bytes: Vec<u8>) {
        self.items.push(PackedItem {
            kind,
            bytes,
            export: None,
            projector: None,
        });
    }

    /// Adds an embedding's files; like exports, they follow the summary event.
    pub(crate) fn projector(&mut self, files: crate::ProjectorFiles) {
        self.exports.push(PackedItem {
            kind: FileKind::Projector,
            bytes: Vec::new(),
            export: None,
            projector: Some(Box::new(files)),
        });
    }

    /// The record's step.
    pub(crate) fn step(&self) -> i64 {
        self.step
    }

    /// Adds the `.npy` file of the value under `tag`.
    pub(crate) fn export(&mut self, tag: &Tag, bytes: Vec<u8>) {
        self.exports.push(PackedItem {
            kind: FileKind::Export,
            bytes,
            export: Some(ExportKey {
                tag: tag.clone(),
                step: self.step,
            }),
            projector: None,
        });
    }
}

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
