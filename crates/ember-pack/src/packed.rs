//! What packing takes and gives: [`PackOptions`], packed items and records, and the [`Sink`]
//! the formats' encoders write a record's parts into.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::error::PackError;
use crate::format::{FileKind, Format, HistogramRule};
use crate::tag::Tag;
use crate::wire;

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
    pub(crate) exports: Vec<PackedItem>,
    /// The record's step, which names exports.
    pub(crate) step: i64,
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
