//! TensorBoard's encoding of each value kind: the check and the packing of each, over the
//! plugin metadata (`metadata.rs`), the messages (`messages.rs`) and the hparams plugin
//! (`hparams.rs`).

use std::borrow::Cow;

use prost::Message;

use crate::error::PackErrorKind;
use crate::format::{FileKind, Format, HistogramRule};
use crate::histogram;
use crate::image::{self, Image};
use crate::npy;
use crate::packed::{PackOptions, Part, Sink};
use crate::plugins::{Audio, CustomScalarLayout, PrCurve};
use crate::proto::tensorboard::{self as tbp};
use crate::tag::Tag;
use crate::tensor::TensorValue;
use crate::value::{Graph, HParams, Histogram, Value};

mod hparams;
mod messages;
mod metadata;

use hparams::hparams;
pub(crate) use hparams::{
    HPARAMS_EXPERIMENT_TAG, HPARAMS_SESSION_END_TAG, HPARAMS_SESSION_START_TAG,
};
use messages::{graph_def, histogram_proto, layout_proto, shape, tensor_header, wav};
pub(crate) use metadata::Metadata;
use metadata::{decoded_metadata, encoded_value, metadata};

/// `file_version` of TensorBoard's first event.
pub(crate) const FILE_VERSION: &str = "brain.Event:2";

/// The tag the custom scalars plugin reads its layout from (`custom_scalar/metadata.py`,
/// `CONFIG_SUMMARY_TAG`).
pub(crate) const CUSTOM_SCALARS_TAG: &str = "custom_scalars__config__";

/// The first event of a TensorBoard file.
pub(crate) fn file_header(wall_time: f64, writer: &str) -> Vec<u8> {
    tbp::Event {
        wall_time,
        step: 0,
        what: Some(tbp::event::What::FileVersion(FILE_VERSION.to_string())),
        source_metadata: Some(tbp::SourceMetadata {
            writer: writer.to_string(),
        }),
    }
    .encode_to_vec()
}

/// A value TensorBoard can hold, checked, with what the check computed for encoding it.
pub(crate) enum Plan<'a> {
    Scalar(f64),
    Tensor(&'a TensorValue),
    Histogram(&'a Histogram),
    Image(&'a Image, image::Geometry),
    Text(&'a str),
    HParams(&'a HParams),
    Graph(&'a Graph),
    Export(&'a TensorValue, npy::Layout),
    PrCurve(&'a PrCurve, u32),
    Audio(&'a Audio),
    CustomScalars(&'a CustomScalarLayout),
    Embedding(&'a crate::Embedding, crate::projector::Shape),
    SessionStart,
}

/// Checks one value for TensorBoard: every test packing makes before it encodes, in O(rank)
/// or O(buckets).
pub(crate) fn check<'a>(
    options: &PackOptions,
    value: &'a Value,
) -> Result<Plan<'a>, PackErrorKind> {
    Ok(match value {
        Value::Scalar(v) => Plan::Scalar(*v),
        Value::Tensor(t) => {
            t.check()?;
            t.check_dims_i64()?;
            Plan::Tensor(t)
        }
        Value::Histogram(h) => {
            histogram::check(h)?;
            let rule = match h {
                Histogram::RawWith(_, rule) => Some(*rule),
                Histogram::Raw(_) => Some(options.histogram),
                Histogram::Buckets(_) => None,
            };
            if let Some(HistogramRule::EqualWidth(k)) = rule
                && k > HistogramRule::MAX_EQUAL_WIDTH
            {
                return Err(PackErrorKind::SizeOverflow(
                    "the equal-width bucket count exceeds HistogramRule::MAX_EQUAL_WIDTH",
                ));
            }
            Plan::Histogram(h)
        }
        Value::Image(img) => Plan::Image(img, image::check(Format::TensorBoard, img)?),
        Value::Text(text) => Plan::Text(text),
        Value::HParams(h) => {
            h.check()?;
            Plan::HParams(h)
        }
        Value::Graph(g) => Plan::Graph(g),
        Value::Export(t) => Plan::Export(t, npy::check(t)?),
        Value::PrCurve(curve) => Plan::PrCurve(curve, curve.check()?),
        Value::Audio(audio) => {
            audio.check()?;
            Plan::Audio(audio)
        }
        Value::CustomScalars(layout) => Plan::CustomScalars(layout),
        Value::Embedding(e) => Plan::Embedding(e, e.check()?),
        Value::SessionStart => Plan::SessionStart,
        Value::Lineage(_) | Value::Explain(_) => {
            return Err(PackErrorKind::Unsupported {
                format: Format::TensorBoard,
                kind: value.kind_name(),
            });
        }
    })
}

/// Packs one checked value for TensorBoard; only PNG encoding can still fail.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack<'a>(
    meta: &'a Metadata,
    options: &PackOptions,
    tag: &'a Tag,
    plan: Plan<'a>,
    include_metadata: bool,
    wall_time: f64,
    sink: &mut Sink<'a>,
) -> Result<(), PackErrorKind> {
    use tbp::summary::value::Value as V;
    let tag_str = tag.as_str();
    match plan {
        Plan::Scalar(v) => sink.parts.push(Part::Scalar {
            tag: tag_str,
            field: 2,
            value: v as f32,
            metadata: include_metadata.then_some(meta.scalars.as_slice()),
        }),
        Plan::Tensor(t) => sink
            .parts
            .push(tensor_part(meta, tag_str, t, include_metadata)),
        Plan::Histogram(h) => {
            let histo = histogram_proto(h, options.histogram);
            let metadata = decoded_metadata(&meta.histograms, include_metadata);
            sink.parts
                .push(encoded_value(tag_str, metadata, V::Histo(histo)));
        }
        Plan::Image(img, geometry) => {
            let image = image_proto(img, &geometry)?;
            let metadata = decoded_metadata(&meta.images, include_metadata);
            sink.parts
                .push(encoded_value(tag_str, metadata, V::Image(image)));
        }
        Plan::Text(text) => {
            let text = vec![text.as_bytes().to_vec()];
            let tensor = string_tensor(tbp::TensorShapeProto::default(), text);
            let metadata = decoded_metadata(&meta.text, include_metadata);
            sink.parts
                .push(encoded_value(tag_str, metadata, V::Tensor(tensor)));
        }
        Plan::HParams(h) => sink.parts.extend(hparams(h, wall_time)),
        Plan::Graph(g) => sink.item(FileKind::Summary, graph_event(g, wall_time)),
        Plan::SessionStart => sink.item(FileKind::Summary, session_event(sink.step(), wall_time)),
        Plan::Export(t, layout) => sink.export(tag, npy::encode(t, layout)),
        Plan::Embedding(e, shape) => {
            let files = crate::projector::encode(tag, sink.step(), e, shape)?;
            sink.projector(files);
        }
        Plan::PrCurve(curve, num_thresholds) => {
            let (tensor, content) = pr_curve_proto(curve, num_thresholds);
            let metadata =
                include_metadata.then(|| metadata("pr_curves", content, tbp::DataClass::Tensor));
            sink.parts
                .push(encoded_value(tag_str, metadata, V::Tensor(tensor)));
        }
        Plan::Audio(audio) => {
            // `audio/summary_v2.py`: a [k, 2] string tensor of (encoded clip, label) rows.
            let tensor = string_tensor(shape(&[1, 2]), vec![wav(audio)?, Vec::new()]);
            let metadata = decoded_metadata(&meta.audio, include_metadata);
            sink.parts
                .push(encoded_value(tag_str, metadata, V::Tensor(tensor)));
        }
        Plan::CustomScalars(layout) => {
            // `custom_scalar/summary.py` (`pb`): the serialized layout in a rank-0 string
            // tensor under the plugin's fixed tag. The plugin reads the first layout of each
            // run, so the metadata goes on every value, as for hparams.
            let layout = layout_proto(layout).encode_to_vec();
            let tensor = string_tensor(tbp::TensorShapeProto::default(), vec![layout]);
            let metadata = decoded_metadata(&meta.custom_scalars, true);
            sink.parts.push(encoded_value(
                CUSTOM_SCALARS_TAG,
                metadata,
                V::Tensor(tensor),
            ));
        }
    }
    Ok(())
}

/// A tensor's value: its header, then its bytes as they are.
fn tensor_part<'a>(
    meta: &'a Metadata,
    tag: &'a str,
    t: &'a TensorValue,
    include_metadata: bool,
) -> Part<'a> {
    Part::Tensor {
        tag,
        header: tensor_header(t),
        data_field: 4,
        data: Cow::Borrowed(t.bytes()),
        metadata: include_metadata.then_some(meta.tensor.as_slice()),
    }
}

/// The event of a graph: its `GraphDef`, at step 0.
fn graph_event(g: &Graph, wall_time: f64) -> Vec<u8> {
    tbp::Event {
        wall_time,
        step: 0,
        what: Some(tbp::event::What::GraphDef(graph_def(g).encode_to_vec())),
        source_metadata: None,
    }
    .encode_to_vec()
}

/// The event of a session (re)start at `step`: what TensorBoard's loaders purge by.
fn session_event(step: i64, wall_time: f64) -> Vec<u8> {
    tbp::Event {
        wall_time,
        step,
        what: Some(tbp::event::What::SessionLog(tbp::SessionLog {
            status: tbp::session_log::SessionStatus::Start as i32,
            ..Default::default()
        })),
        source_metadata: None,
    }
    .encode_to_vec()
}

/// TensorBoard's image of a checked image, PNG-encoded.
fn image_proto(
    img: &Image,
    geometry: &image::Geometry,
) -> Result<tbp::summary::Image, PackErrorKind> {
    let encoded = image::tensorboard(img, geometry)?;
    Ok(tbp::summary::Image {
        height: encoded.height as i32,
        width: encoded.width as i32,
        colorspace: encoded.colorspace,
        encoded_image_string: encoded.png,
    })
}

/// A DT_STRING tensor of `shape` holding `strings`.
fn string_tensor(shape: tbp::TensorShapeProto, strings: Vec<Vec<u8>>) -> tbp::TensorProto {
    tbp::TensorProto {
        dtype: tbp::DataType::DtString as i32,
        tensor_shape: Some(shape),
        string_val: strings,
        ..Default::default()
    }
}

/// `pr_curve/summary.py` (`raw_data_pb`): a [6, n] DT_FLOAT tensor, and the threshold count for
/// the metadata, which every value carries in TensorBoard's own summaries; here the first of a
/// file's tag, as for every plugin.
fn pr_curve_proto(curve: &PrCurve, num_thresholds: u32) -> (tbp::TensorProto, Vec<u8>) {
    let tensor_content = curve
        .rows()
        .iter()
        .flat_map(|row| row.iter().flat_map(|&v| (v as f32).to_le_bytes()))
        .collect();
    let tensor = tbp::TensorProto {
        dtype: tbp::DataType::DtFloat as i32,
        tensor_shape: Some(shape(&[6, i64::from(num_thresholds)])),
        tensor_content,
        ..Default::default()
    };
    let content = tbp::PrCurvePluginData {
        version: 0,
        num_thresholds,
    }
    .encode_to_vec();
    (tensor, content)
}
