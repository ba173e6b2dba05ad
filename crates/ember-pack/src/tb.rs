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
    let tag_str = tag.as_str();
    match plan {
        Plan::Scalar(v) => {
            let metadata = include_metadata.then_some(meta.scalars.as_slice());
            sink.parts.push(Part::Scalar {
                tag: tag_str,
                field: 2,
                value: v as f32,
                metadata,
            });
        }
        Plan::Tensor(t) => {
            let metadata = include_metadata.then_some(meta.tensor.as_slice());
            sink.parts.push(Part::Tensor {
                tag: tag_str,
                header: tensor_header(t),
                data_field: 4,
                data: Cow::Borrowed(t.bytes()),
                metadata,
            });
        }
        Plan::Histogram(h) => {
            let histo = histogram_proto(h, options.histogram);
            let metadata = decoded_metadata(&meta.histograms, include_metadata);
            sink.parts.push(encoded_value(
                tag_str,
                metadata,
                tbp::summary::value::Value::Histo(histo),
            ));
        }
        Plan::Image(img, geometry) => {
            let encoded = image::tensorboard(img, &geometry)?;
            let metadata = decoded_metadata(&meta.images, include_metadata);
            let image = tbp::summary::Image {
                height: encoded.height as i32,
                width: encoded.width as i32,
                colorspace: encoded.colorspace,
                encoded_image_string: encoded.png,
            };
            sink.parts.push(encoded_value(
                tag_str,
                metadata,
                tbp::summary::value::Value::Image(image),
            ));
        }
        Plan::Text(text) => {
            let tensor = tbp::TensorProto {
                dtype: tbp::DataType::DtString as i32,
                tensor_shape: Some(tbp::TensorShapeProto::default()),
                string_val: vec![text.as_bytes().to_vec()],
                ..Default::default()
            };
            let metadata = decoded_metadata(&meta.text, include_metadata);
            sink.parts.push(encoded_value(
                tag_str,
                metadata,
                tbp::summary::value::Value::Tensor(tensor),
            ));
        }
        Plan::HParams(h) => sink.parts.extend(hparams(h, wall_time)),
        Plan::Graph(g) => {
            let event = tbp::Event {
                wall_time,
                step: 0,
                what: Some(tbp::event::What::GraphDef(graph_def(g).encode_to_vec())),
                source_metadata: None,
            };
            sink.item(FileKind::Summary, event.encode_to_vec());
        }
        Plan::Export(t, layout) => sink.export(tag, npy::encode(t, layout)),
        Plan::Embedding(e, shape) => {
            let files = crate::projector::encode(tag, sink.step(), e, shape)?;
            sink.projector(files);
        }
        Plan::PrCurve(curve, num_thresholds) => {
            // `pr_curve/summary.py` (`raw_data_pb`): a [6, n] DT_FLOAT tensor, the threshold
            // count in the metadata, which every value carries in TensorBoard's own summaries;
            // here the first of a file's tag, as for every plugin.
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
            let metadata =
                include_metadata.then(|| metadata("pr_curves", content, tbp::DataClass::Tensor));
            sink.parts.push(encoded_value(
                tag_str,
                metadata,
                tbp::summary::value::Value::Tensor(tensor),
            ));
        }
        Plan::Audio(audio) => {
            // `audio/summary_v2.py`: a [k, 2] string tensor of (encoded clip, label) rows.
            let wav = wav(audio)?;
            let tensor = tbp::TensorProto {
                dtype: tbp::DataType::DtString as i32,
                tensor_shape: Some(shape(&[1, 2])),
                string_val: vec![wav, Vec::new()],
                ..Default::default()
            };
            let metadata = decoded_metadata(&meta.audio, include_metadata);
            sink.parts.push(encoded_value(
                tag_str,
                metadata,
                tbp::summary::value::Value::Tensor(tensor),
            ));
        }
        Plan::CustomScalars(layout) => {
            // `custom_scalar/summary.py` (`pb`): the serialized layout in a rank-0 string
            // tensor under the plugin's fixed tag. The plugin reads the first layout of each
            // run, so the metadata goes on every value, as for hparams.
            let tensor = tbp::TensorProto {
                dtype: tbp::DataType::DtString as i32,
                tensor_shape: Some(tbp::TensorShapeProto::default()),
                string_val: vec![layout_proto(layout).encode_to_vec()],
                ..Default::default()
            };
            let metadata = decoded_metadata(&meta.custom_scalars, true);
            sink.parts.push(encoded_value(
                CUSTOM_SCALARS_TAG,
                metadata,
                tbp::summary::value::Value::Tensor(tensor),
            ));
        }
    }
    Ok(())
}
