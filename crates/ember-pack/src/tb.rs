//! TensorBoard's encoding of each value kind.

use std::borrow::Cow;
use std::collections::HashMap;

use prost::Message;

use crate::dtype::DType;
use crate::error::PackErrorKind;
use crate::histogram;
use crate::image::{self, Image};
use crate::kinds::{FileKind, Format, HistogramRule};
use crate::npy;
use crate::pack::{PackOptions, Part, Sink};
use crate::plugins::{Audio, ChartContent, CustomScalarLayout, PrCurve, pcm16_sample};
use crate::proto::google::protobuf as pb;
use crate::proto::tensorboard::{self as tbp, hparams as hp};
use crate::tag::Tag;
use crate::tensor::TensorValue;
use crate::value::{
    AttrValue, Graph, HParamValue, HParams, Histogram, SessionPart, SessionStatus, Value,
};
use crate::wire;

/// `file_version` of TensorBoard's first event.
pub(crate) const FILE_VERSION: &str = "brain.Event:2";

/// Tags of the hparams plugin's three values.
pub(crate) const HPARAMS_EXPERIMENT_TAG: &str = "_hparams_/experiment";
/// See [`HPARAMS_EXPERIMENT_TAG`].
pub(crate) const HPARAMS_SESSION_START_TAG: &str = "_hparams_/session_start_info";
/// See [`HPARAMS_EXPERIMENT_TAG`].
pub(crate) const HPARAMS_SESSION_END_TAG: &str = "_hparams_/session_end_info";

/// The tag the custom scalars plugin reads its layout from (`custom_scalar/metadata.py`,
/// `CONFIG_SUMMARY_TAG`).
pub(crate) const CUSTOM_SCALARS_TAG: &str = "custom_scalars__config__";

/// Serialized `SummaryMetadata` of each plugin, built once per packer.
#[derive(Debug)]
pub(crate) struct Metadata {
    scalars: Vec<u8>,
    histograms: Vec<u8>,
    images: Vec<u8>,
    text: Vec<u8>,
    tensor: Vec<u8>,
    audio: Vec<u8>,
    custom_scalars: Vec<u8>,
}

/// `SummaryMetadata` for `plugin` with serialized `content` and `data_class`.
pub(crate) fn metadata(
    plugin: &str,
    content: Vec<u8>,
    data_class: tbp::DataClass,
) -> tbp::SummaryMetadata {
    tbp::SummaryMetadata {
        plugin_data: Some(tbp::summary_metadata::PluginData {
            plugin_name: plugin.to_string(),
            content,
        }),
        data_class: data_class as i32,
        ..Default::default()
    }
}

impl Metadata {
    pub(crate) fn new() -> Metadata {
        use tbp::DataClass::{BlobSequence, Scalar, Tensor};
        Metadata {
            scalars: metadata(
                "scalars",
                tbp::ScalarPluginData::default().encode_to_vec(),
                Scalar,
            )
            .encode_to_vec(),
            histograms: metadata(
                "histograms",
                tbp::HistogramPluginData::default().encode_to_vec(),
                Tensor,
            )
            .encode_to_vec(),
            images: metadata(
                "images",
                tbp::ImagePluginData::default().encode_to_vec(),
                BlobSequence,
            )
            .encode_to_vec(),
            text: metadata(
                "text",
                tbp::TextPluginData::default().encode_to_vec(),
                Tensor,
            )
            .encode_to_vec(),
            // No TensorBoard plugin shows general tensors; the explicit data class makes
            // TensorBoard's data server keep them rather than drop an unknown plugin.
            tensor: metadata("tensor", Vec::new(), Tensor).encode_to_vec(),
            // `audio/metadata.py`: version 0, WAV, and no data class, as TensorBoard's own
            // audio summaries: its loaders then migrate the [k, 2] (clip, label) tensor to the
            // [k] blob sequence they serve. With the class set they skip that step and serve
            // each (clip, label) row as one blob, which is no WAV.
            audio: metadata(
                "audio",
                tbp::AudioPluginData {
                    version: 0,
                    encoding: tbp::audio_plugin_data::Encoding::Wav as i32,
                }
                .encode_to_vec(),
                tbp::DataClass::Unknown,
            )
            .encode_to_vec(),
            // `custom_scalar/summary.py` writes an empty content; the plugin reads the layout
            // through the data provider's tensors.
            custom_scalars: metadata("custom_scalars", Vec::new(), Tensor).encode_to_vec(),
        }
    }
}

/// TensorFlow's `DataType` of a dtype.
pub(crate) fn data_type(dtype: DType) -> tbp::DataType {
    use tbp::DataType as T;
    match dtype {
        DType::Bool => T::DtBool,
        DType::I8 => T::DtInt8,
        DType::I16 => T::DtInt16,
        DType::I32 => T::DtInt32,
        DType::I64 => T::DtInt64,
        DType::U8 => T::DtUint8,
        DType::U16 => T::DtUint16,
        DType::U32 => T::DtUint32,
        DType::U64 => T::DtUint64,
        DType::F16 => T::DtHalf,
        DType::BF16 => T::DtBfloat16,
        DType::F32 => T::DtFloat,
        DType::F64 => T::DtDouble,
    }
}

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

/// A `Summary.Value` with a prost-built payload.
fn encoded_value(
    tag: &str,
    metadata: Option<tbp::SummaryMetadata>,
    v: tbp::summary::value::Value,
) -> Part<'static> {
    Part::Encoded(
        tbp::summary::Value {
            tag: tag.to_string(),
            node_name: String::new(),
            metadata,
            value: Some(v),
        }
        .encode_to_vec(),
    )
}

fn decoded_metadata(bytes: &[u8], include: bool) -> Option<tbp::SummaryMetadata> {
    // Decoding our own bytes cannot fail; an empty default would only drop the metadata.
    include.then(|| tbp::SummaryMetadata::decode(bytes).unwrap_or_default())
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

/// A `TensorShapeProto` of `dims`.
fn shape(dims: &[i64]) -> tbp::TensorShapeProto {
    tbp::TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| tbp::tensor_shape_proto::Dim {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The clip as 16-bit PCM WAV, as TensorFlow's `encode_wav` writes it (the quantization of
/// [`pcm16_sample`]).
pub(crate) fn wav(audio: &Audio) -> Result<Vec<u8>, PackErrorKind> {
    let spec = hound::WavSpec {
        channels: audio.channels,
        sample_rate: audio.sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let encode = || -> Result<Vec<u8>, hound::Error> {
        let mut cursor = std::io::Cursor::new(Vec::with_capacity(44 + 2 * audio.samples.len()));
        let mut writer = hound::WavWriter::new(&mut cursor, spec)?;
        let mut samples = writer.get_i16_writer(audio.samples.len() as u32);
        for &x in &audio.samples {
            samples.write_sample(pcm16_sample(x));
        }
        samples.flush()?;
        writer.finalize()?;
        Ok(cursor.into_inner())
    };
    encode().map_err(|e| PackErrorKind::Wav(e.to_string()))
}

/// The `Layout` proto of the custom scalars plugin.
pub(crate) fn layout_proto(layout: &CustomScalarLayout) -> tbp::Layout {
    use tbp::chart::Content;
    tbp::Layout {
        version: 0,
        category: layout
            .categories
            .iter()
            .map(|c| tbp::Category {
                title: c.title.clone(),
                closed: c.closed,
                chart: c
                    .charts
                    .iter()
                    .map(|chart| tbp::Chart {
                        title: chart.title.clone(),
                        content: Some(match &chart.content {
                            ChartContent::Multiline(tags) => {
                                Content::Multiline(tbp::MultilineChartContent { tag: tags.clone() })
                            }
                            ChartContent::Margin(series) => {
                                Content::Margin(tbp::MarginChartContent {
                                    series: series
                                        .iter()
                                        .map(|s| tbp::margin_chart_content::Series {
                                            value: s.value.clone(),
                                            lower: s.lower.clone(),
                                            upper: s.upper.clone(),
                                        })
                                        .collect(),
                                })
                            }
                        }),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Fields 1 (dtype) and 2 (shape) of a `TensorProto`, as prost encodes them.
fn tensor_header(t: &TensorValue) -> Vec<u8> {
    let mut dims = Vec::new();
    for &d in t.shape() {
        // Dim{size = 1}; proto3 leaves out a zero size.
        let size_len = if d == 0 {
            0
        } else {
            wire::varint_field_len(1, d as u64)
        };
        wire::put_len_prefix(&mut dims, 2, size_len);
        if d != 0 {
            wire::put_varint_field(&mut dims, 1, d as u64);
        }
    }
    let mut header = Vec::with_capacity(dims.len() + 8);
    wire::put_varint_field(&mut header, 1, data_type(t.dtype()) as u64);
    wire::put_bytes(&mut header, 2, &dims);
    header
}

/// The `HistogramProto` of a histogram value checked by [`histogram::check`].
/// `rule` buckets raw values unless the value brings its own.
pub(crate) fn histogram_proto(h: &Histogram, rule: HistogramRule) -> tbp::HistogramProto {
    let (t, rule) = match h {
        Histogram::Raw(t) => (t, rule),
        Histogram::RawWith(t, own) => (t, *own),
        Histogram::Buckets(b) => return buckets_proto(b),
    };
    let s = histogram::stats(t);
    let (bucket_limit, bucket) = match rule {
        HistogramRule::EqualWidth(k) => histogram::equal_width(t, &s, k.max(1) as usize),
        HistogramRule::Exponential => histogram::exponential(t, &s),
    };
    let (min, max) = if s.finite == 0 {
        (0.0, 0.0)
    } else {
        (s.min, s.max)
    };
    tbp::HistogramProto {
        min,
        max,
        num: s.finite as f64,
        sum: s.sum,
        sum_squares: s.sum_squares,
        bucket_limit,
        bucket,
    }
}

/// The `HistogramProto` of precomputed buckets: right edges and counts, as they are.
fn buckets_proto(b: &crate::value::HistogramBuckets) -> tbp::HistogramProto {
    tbp::HistogramProto {
        min: b.min,
        max: b.max,
        num: b.num,
        sum: b.sum,
        sum_squares: b.sum_squares,
        bucket_limit: b.buckets.iter().map(|b| b.right).collect(),
        bucket: b.buckets.iter().map(|b| b.count).collect(),
    }
}

/// The hparams plugin's values that `h.part` selects: experiment and session start info, and
/// session end info when there is a status.
fn hparams(h: &HParams, wall_time: f64) -> Vec<Part<'static>> {
    use hp::h_params_plugin_data::Data;
    let part = |tag: &str, data: Data| {
        let content = hp::HParamsPluginData {
            version: 0,
            data: Some(data),
        }
        .encode_to_vec();
        let metadata = metadata("hparams", content, tbp::DataClass::Tensor);
        // TensorBoard's own hparams summaries carry a null scalar tensor beside the metadata.
        let null = tbp::TensorProto {
            dtype: tbp::DataType::DtFloat as i32,
            tensor_shape: Some(tbp::TensorShapeProto::default()),
            float_val: vec![0.0],
            ..Default::default()
        };
        encoded_value(
            tag,
            Some(metadata),
            tbp::summary::value::Value::Tensor(null),
        )
    };
    let mut parts = Vec::new();
    if h.part != SessionPart::End {
        parts.extend(session_start(h, wall_time).map(|(tag, data)| part(tag, data)));
    }
    if let Some(status) = h.status.filter(|_| h.part != SessionPart::Start) {
        let status = match status {
            SessionStatus::Success => hp::Status::Success,
            SessionStatus::Failure => hp::Status::Failure,
            SessionStatus::Running => hp::Status::Running,
        };
        let end = hp::SessionEndInfo {
            status: status as i32,
            end_time_secs: wall_time,
        };
        parts.push(part(HPARAMS_SESSION_END_TAG, Data::SessionEndInfo(end)));
    }
    parts
}

/// The experiment (every hyper-parameter and metric) and the session start info.
fn session_start(
    h: &HParams,
    wall_time: f64,
) -> [(&'static str, hp::h_params_plugin_data::Data); 2] {
    use hp::h_params_plugin_data::Data;
    let experiment = hp::Experiment {
        hparam_infos: h
            .hparams
            .iter()
            .map(|(name, v)| hp::HParamInfo {
                name: name.clone(),
                r#type: match v {
                    HParamValue::Bool(_) => hp::DataType::Bool,
                    HParamValue::Int(_) | HParamValue::Number(_) => hp::DataType::Float64,
                    HParamValue::Str(_) => hp::DataType::String,
                } as i32,
                ..Default::default()
            })
            .collect(),
        metric_infos: h
            .metrics
            .iter()
            .map(|tag| hp::MetricInfo {
                name: Some(hp::MetricName {
                    group: String::new(),
                    tag: tag.clone(),
                }),
                ..Default::default()
            })
            .collect(),
        time_created_secs: wall_time,
        ..Default::default()
    };
    let start = hp::SessionStartInfo {
        hparams: h
            .hparams
            .iter()
            .map(|(name, v)| {
                let kind = match v {
                    HParamValue::Bool(b) => pb::value::Kind::BoolValue(*b),
                    HParamValue::Int(i) => pb::value::Kind::NumberValue(*i as f64),
                    HParamValue::Number(n) => pb::value::Kind::NumberValue(*n),
                    HParamValue::Str(s) => pb::value::Kind::StringValue(s.clone()),
                };
                (name.clone(), pb::Value { kind: Some(kind) })
            })
            .collect::<HashMap<_, _>>(),
        start_time_secs: wall_time,
        ..Default::default()
    };
    [
        (HPARAMS_EXPERIMENT_TAG, Data::Experiment(experiment)),
        (HPARAMS_SESSION_START_TAG, Data::SessionStartInfo(start)),
    ]
}

/// TensorFlow's `GraphDef` of a graph: one `NodeDef` per node, the `/` scopes making the tree.
pub(crate) fn graph_def(g: &Graph) -> tbp::GraphDef {
    use tbp::attr_value::Value as A;
    let node = g
        .nodes
        .iter()
        .map(|n| tbp::NodeDef {
            name: n.name.clone(),
            op: n.op.clone(),
            input: n.inputs.clone(),
            device: String::new(),
            attr: n
                .attrs
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        AttrValue::Bool(b) => A::B(*b),
                        AttrValue::Int(i) => A::I(*i),
                        AttrValue::Float(f) => A::F(*f as f32),
                        AttrValue::Str(s) => A::S(s.as_bytes().to_vec()),
                        AttrValue::Ints(v) => A::List(tbp::attr_value::ListValue {
                            i: v.clone(),
                            ..Default::default()
                        }),
                    };
                    (k.clone(), tbp::AttrValue { value: Some(v) })
                })
                .collect(),
        })
        .collect();
    tbp::GraphDef {
        node,
        version: 0,
        versions: Some(tbp::VersionDef {
            producer: 22,
            ..Default::default()
        }),
    }
}
