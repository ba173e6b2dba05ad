//! The TensorBoard messages of the value kinds that need more than a tensor: shapes, tensor
//! headers, histograms, WAV audio, custom-scalar layouts and graphs.

use crate::error::PackErrorKind;
use crate::format::HistogramRule;
use crate::histogram;
use crate::plugins::{Audio, ChartContent, CustomScalarLayout, pcm16_sample};
use crate::proto::tensorboard as tbp;
use crate::tensor::TensorValue;
use crate::value::{AttrValue, Graph, Histogram};
use crate::wire;

use super::metadata::data_type;

/// A `TensorShapeProto` of `dims`.
pub(super) fn shape(dims: &[i64]) -> tbp::TensorShapeProto {
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
pub(super) fn tensor_header(t: &TensorValue) -> Vec<u8> {
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
pub(super) fn buckets_proto(b: &crate::value::HistogramBuckets) -> tbp::HistogramProto {
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
