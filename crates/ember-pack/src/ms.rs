//! MindInsight's encoding of each value kind, as mindspore 2.10's `_summary_adapter.py` and
//! `_lineage_adapter.py` pack them.

use std::borrow::Cow;

use half::f16;
use prost::Message;

use crate::error::PackErrorKind;
use crate::histogram;
use crate::image;
use crate::npy;
use crate::pack::{FileKind, Format, Part, Sink};
use crate::proto::mindspore as msp;
use crate::tag::Tag;
use crate::tensor::{DType, TensorValue, buffer_len};
use crate::value::{
    AttrValue, Graph, HParamValue, HParams, Histogram, HistogramBuckets, Image, Lineage, Value,
};
use crate::wire;

/// `version` of MindSpore's first summary event.
pub(crate) const VERSION: &str = "MindSpore.Event:1";

/// The first event of a MindSpore summary file.
pub(crate) fn file_header(wall_time: f64) -> Vec<u8> {
    msp::Event {
        wall_time,
        step: None,
        what: Some(msp::event::What::Version(VERSION.to_string())),
    }
    .encode_to_vec()
}

/// MindSpore's `DataType` of a dtype; bf16 has none (numpy cannot hold it).
pub(crate) fn data_type(dtype: DType) -> Option<msp::DataType> {
    use msp::DataType as T;
    Some(match dtype {
        DType::Bool => T::DtBool,
        DType::I8 => T::DtInt8,
        DType::I16 => T::DtInt16,
        DType::I32 => T::DtInt32,
        DType::I64 => T::DtInt64,
        DType::U8 => T::DtUint8,
        DType::U16 => T::DtUint16,
        DType::U32 => T::DtUint32,
        DType::U64 => T::DtUint64,
        DType::F16 => T::DtFloat16,
        DType::F32 => T::DtFloat32,
        DType::F64 => T::DtFloat64,
        DType::BF16 => return None,
    })
}

fn encoded_value(tag: &str, v: msp::summary::value::Value) -> Part<'static> {
    Part::Encoded(
        msp::summary::Value {
            tag: tag.to_string(),
            value: Some(v),
        }
        .encode_to_vec(),
    )
}

/// A value MindInsight can hold, checked, with what the check computed for encoding it.
pub(crate) enum Plan<'a> {
    Scalar(f64),
    Tensor(&'a TensorValue, msp::DataType),
    RawHistogram(&'a TensorValue),
    /// Precomputed buckets and their total `count`.
    Buckets(&'a HistogramBuckets, i64),
    Image(&'a Image, image::Geometry),
    Graph(&'a Graph),
    Lineage(&'a Lineage),
    HParams(&'a HParams),
    Explain(&'a msp::Explain),
    Export(&'a TensorValue, npy::Layout),
}

/// Checks one value for MindInsight: every test packing makes before it encodes, in O(rank)
/// or O(buckets).
pub(crate) fn check(value: &Value) -> Result<Plan<'_>, PackErrorKind> {
    Ok(match value {
        Value::Scalar(v) => Plan::Scalar(*v),
        Value::Tensor(t) => Plan::Tensor(t, check_tensor(t)?),
        Value::Histogram(h) => {
            histogram::check(h)?;
            match h {
                Histogram::Raw(t) | Histogram::RawWith(t, _) => Plan::RawHistogram(t),
                Histogram::Buckets(b) => Plan::Buckets(b, bucket_total(b)?),
            }
        }
        Value::Image(img) => Plan::Image(img, image::check(Format::MindInsight, img)?),
        Value::Graph(g) => Plan::Graph(g),
        Value::Lineage(l) => Plan::Lineage(l),
        Value::HParams(h) => Plan::HParams(h),
        Value::Explain(e) => {
            check_explain(e)?;
            Plan::Explain(e)
        }
        Value::Export(t) => Plan::Export(t, npy::check(t)?),
        Value::Text(_) => {
            return Err(PackErrorKind::Unsupported {
                format: Format::MindInsight,
                kind: value.kind_name(),
            });
        }
    })
}

/// Packs one checked value for MindInsight; only PNG encoding can still fail.
pub(crate) fn pack<'a>(
    tag: &'a Tag,
    plan: Plan<'a>,
    wall_time: f64,
    sink: &mut Sink<'a>,
) -> Result<(), PackErrorKind> {
    let tag_str = tag.as_str();
    match plan {
        Plan::Scalar(v) => sink.parts.push(Part::Scalar {
            tag: tag_str,
            field: 3,
            value: v as f32,
            metadata: None,
        }),
        Plan::Tensor(t, dt) => sink.parts.push(tensor(tag_str, t, dt)),
        Plan::RawHistogram(t) => sink.parts.push(encoded_value(
            tag_str,
            msp::summary::value::Value::Histogram(raw_histogram(t)),
        )),
        Plan::Buckets(b, count) => sink.parts.push(encoded_value(
            tag_str,
            msp::summary::value::Value::Histogram(bucket_histogram(b, count)),
        )),
        Plan::Image(img, geometry) => {
            let encoded = image::mindinsight(img, &geometry)?;
            let image = msp::summary::Image {
                height: encoded.height as i32,
                width: encoded.width as i32,
                colorspace: encoded.colorspace,
                encoded_image: encoded.png,
            };
            sink.parts.push(encoded_value(
                tag_str,
                msp::summary::value::Value::Image(image),
            ));
        }
        Plan::Graph(g) => {
            let event = msp::Event {
                wall_time,
                step: None,
                what: Some(msp::event::What::GraphDef(graph_proto(g))),
            };
            sink.item(FileKind::Summary, event.encode_to_vec());
        }
        Plan::Lineage(l) => {
            use msp::lineage_event::What;
            let what = match l {
                Lineage::Train(t) => What::TrainLineage((**t).clone()),
                Lineage::Eval(e) => What::EvaluationLineage((**e).clone()),
                Lineage::DatasetGraph(d) => What::DatasetGraph((**d).clone()),
                Lineage::UserDefined(u) => What::UserDefinedInfo((**u).clone()),
            };
            sink.item(FileKind::Lineage, lineage_event(wall_time, what));
        }
        Plan::HParams(h) => {
            let what = msp::lineage_event::What::UserDefinedInfo(user_defined_info(h));
            sink.item(FileKind::Lineage, lineage_event(wall_time, what));
        }
        Plan::Explain(e) => {
            let event = msp::Event {
                wall_time,
                step: None,
                what: Some(msp::event::What::Explain(e.clone())),
            };
            sink.item(FileKind::Explain, event.encode_to_vec());
        }
        Plan::Export(t, layout) => sink.export(tag, npy::encode(t, layout)),
    }
    Ok(())
}

fn lineage_event(wall_time: f64, what: msp::lineage_event::What) -> Vec<u8> {
    msp::LineageEvent {
        wall_time,
        step: None,
        what: Some(what),
    }
    .encode_to_vec()
}

/// Checks a tensor for MindInsight: bytes matching the shape, `int64` dims, a dtype MindSpore
/// has, and room for every element as `f32`.
fn check_tensor(t: &TensorValue) -> Result<msp::DataType, PackErrorKind> {
    t.check()?;
    t.check_dims_i64()?;
    let dt = data_type(t.dtype()).ok_or(PackErrorKind::DType {
        format: Format::MindInsight,
        kind: "tensor",
        dtype: t.dtype(),
    })?;
    buffer_len(t.element_count(), 4).ok_or(PackErrorKind::SizeOverflow(
        "the tensor as f32 exceeds isize::MAX bytes",
    ))?;
    Ok(dt)
}

/// A tensor value: `dims` (unpacked, proto2), `data_type`, and every element as `f32` in packed
/// `float_data`, as MindSpore writes it whatever the dtype.
fn tensor<'a>(tag: &'a str, t: &'a TensorValue, dt: msp::DataType) -> Part<'a> {
    let mut header = Vec::with_capacity(t.shape().len() * 4 + 2);
    for &d in t.shape() {
        wire::put_varint_field(&mut header, 1, d as u64);
    }
    wire::put_varint_field(&mut header, 2, dt as u64);
    let data = match t.dtype() {
        DType::F32 => Cow::Borrowed(t.bytes()),
        _ => Cow::Owned(to_f32_bytes(t)),
    };
    Part::Tensor {
        tag,
        header,
        data_field: 3,
        data,
        metadata: None,
    }
}

/// The elements of `t` narrowed to `f32`, little-endian.
fn to_f32_bytes(t: &TensorValue) -> Vec<u8> {
    let size = t.dtype().size();
    let mut out = Vec::with_capacity(t.bytes().len() / size * 4);
    match t.dtype() {
        DType::F16 => {
            for c in t.bytes().chunks_exact(2) {
                out.extend_from_slice(&f16::from_le_bytes([c[0], c[1]]).to_f32().to_le_bytes());
            }
        }
        dtype => {
            for c in t.bytes().chunks_exact(size) {
                out.extend_from_slice(&(crate::tensor::element_f64(dtype, c) as f32).to_le_bytes());
            }
        }
    }
    out
}

/// Counts from `2^63` on saturate when converted to `i64`.
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

/// MindSpore's total `count` of precomputed buckets: `num` plus the NaN and ±Inf counts, once
/// it and every bucket's count are known to fit the `int64` fields that hold them.
fn bucket_total(b: &HistogramBuckets) -> Result<i64, PackErrorKind> {
    let overflow = PackErrorKind::SizeOverflow("histogram counts exceed i64::MAX");
    // `num` was checked finite and not negative; below 2^63 its conversion is exact or truncates.
    if b.num >= I64_LIMIT || b.buckets.iter().any(|x| x.count >= I64_LIMIT) {
        return Err(overflow);
    }
    [b.nan_count, b.pos_inf_count, b.neg_inf_count]
        .into_iter()
        .try_fold(b.num as u64, u64::checked_add)
        .and_then(|total| i64::try_from(total).ok())
        .ok_or(overflow)
}

/// MindSpore's `Summary.Histogram` of raw values, checked by [`histogram::check`].
fn raw_histogram(t: &TensorValue) -> msp::summary::Histogram {
    let s = histogram::stats(t);
    let buckets = histogram::mindspore(t, &s)
        .into_iter()
        .map(|(left, width, count)| msp::summary::histogram::Bucket {
            left,
            width,
            count: count as i64,
        })
        .collect();
    let valid = s.finite > 0;
    msp::summary::Histogram {
        buckets,
        nan_count: Some(s.nan as i64),
        pos_inf_count: Some(s.pos_inf as i64),
        neg_inf_count: Some(s.neg_inf as i64),
        max: valid.then_some(s.max),
        min: valid.then_some(s.min),
        sum: valid.then_some(s.sum),
        count: Some(s.total as i64),
    }
}

/// MindSpore's `Summary.Histogram` of precomputed buckets whose total is `count` (see
/// [`bucket_total`], which bounds every count cast here).
fn bucket_histogram(b: &HistogramBuckets, count: i64) -> msp::summary::Histogram {
    msp::summary::Histogram {
        buckets: b
            .buckets
            .iter()
            .map(|x| msp::summary::histogram::Bucket {
                left: x.left,
                width: x.right - x.left,
                count: x.count as i64,
            })
            .collect(),
        nan_count: Some(b.nan_count as i64),
        pos_inf_count: Some(b.pos_inf_count as i64),
        neg_inf_count: Some(b.neg_inf_count as i64),
        max: Some(b.max),
        min: Some(b.min),
        sum: Some(b.sum),
        count: Some(count),
    }
}

/// MindSpore's `check_explain_proto`: one of these must be set.
fn check_explain(e: &msp::Explain) -> Result<(), PackErrorKind> {
    let has_labels = e.metadata.as_ref().is_some_and(|m| !m.label.is_empty());
    if e.image_path.is_some() || e.inference.is_some() || has_labels || !e.benchmark.is_empty() {
        Ok(())
    } else {
        Err(PackErrorKind::EmptyExplain)
    }
}

/// Hyper-parameters as MindInsight's custom lineage columns: numbers in `map_double`, strings
/// and booleans (`"true"`/`"false"`) in `map_str`.
fn user_defined_info(h: &HParams) -> msp::UserDefinedInfo {
    let mut info = msp::UserDefinedInfo::default();
    for (name, v) in &h.hparams {
        match v {
            HParamValue::Number(n) => {
                info.map_double.insert(name.clone(), *n);
            }
            HParamValue::Str(s) => {
                info.map_str.insert(name.clone(), s.clone());
            }
            HParamValue::Bool(b) => {
                info.map_str.insert(name.clone(), b.to_string());
            }
        }
    }
    info
}

/// MindSpore's `GraphProto` of a graph: each node's `scope` is its name up to the last `/`.
pub(crate) fn graph_proto(g: &Graph) -> msp::GraphProto {
    use msp::DataType as T;
    let node = g
        .nodes
        .iter()
        .map(|n| msp::NodeProto {
            input: n
                .inputs
                .iter()
                .map(|i| msp::InputProto {
                    name: Some(i.clone()),
                    r#type: Some(msp::input_proto::EdgeType::DataEdge as i32),
                })
                .collect(),
            name: Some(n.name.clone()),
            op_type: Some(n.op.clone()),
            scope: Some(
                n.name
                    .rsplit_once('/')
                    .map_or("", |(scope, _)| scope)
                    .to_string(),
            ),
            attribute: n
                .attrs
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        AttrValue::Bool(b) => msp::ValueProto {
                            dtype: Some(T::DtBool as i32),
                            bool_val: Some(*b),
                            ..Default::default()
                        },
                        AttrValue::Int(i) => msp::ValueProto {
                            dtype: Some(T::DtInt64 as i32),
                            int_val: Some(*i),
                            ..Default::default()
                        },
                        AttrValue::Float(f) => msp::ValueProto {
                            dtype: Some(T::DtFloat64 as i32),
                            double_val: Some(*f),
                            ..Default::default()
                        },
                        AttrValue::Str(s) => msp::ValueProto {
                            dtype: Some(T::DtString as i32),
                            str_val: Some(s.clone()),
                            ..Default::default()
                        },
                        AttrValue::Ints(v) => msp::ValueProto {
                            dtype: Some(T::DtInts64 as i32),
                            int_vals: v.clone(),
                            ..Default::default()
                        },
                    };
                    msp::AttributeProto {
                        name: Some(k.clone()),
                        value: Some(value),
                    }
                })
                .collect(),
            full_name: Some(n.name.clone()),
            ..Default::default()
        })
        .collect();
    msp::GraphProto {
        node,
        name: Some(g.name.clone()),
        ..Default::default()
    }
}
