//! MindInsight's encoding of each value kind, as mindspore 2.10's `_summary_adapter.py` and
//! `_lineage_adapter.py` pack them.
//! One function per value kind, each beside the MindSpore source it follows.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use half::f16;
use prost::Message;

use crate::dtype::DType;
use crate::error::PackErrorKind::{self, InvalidGraph};
use crate::format::{FileKind, Format};
use crate::histogram;
use crate::image::{self, Image};
use crate::npy;
use crate::packed::{Part, Sink};
use crate::proto::mindspore as msp;
use crate::tag::Tag;
use crate::tensor::{TensorValue, buffer_len};
use crate::value::{
    AttrValue, Graph, HParamValue, HParams, Histogram, HistogramBuckets, Lineage, SessionPart,
    SessionStatus, Value,
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
    /// A graph and what each node becomes in MindSpore's layout.
    Graph(&'a Graph, Vec<GraphRole>),
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
        Value::Graph(g) => Plan::Graph(g, check_graph(g)?),
        Value::Lineage(l) => Plan::Lineage(l),
        Value::HParams(h) => {
            check_hparams(h)?;
            Plan::HParams(h)
        }
        Value::Explain(e) => {
            check_explain(e)?;
            Plan::Explain(e)
        }
        Value::Export(t) => Plan::Export(t, npy::check(t)?),
        // MindInsight has no text, pr curve, audio, custom scalars or projector dashboard, and MindSpore's
        // `SummaryRecord` no such plugin: a tensor or scalar stand-in would show numbers
        // without their meaning, so these are refused, naming the format.
        Value::Text(_)
        | Value::PrCurve(_)
        | Value::Audio(_)
        | Value::CustomScalars(_)
        | Value::Embedding(_)
        | Value::SessionStart => {
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
        Plan::Graph(g, roles) => {
            let event = msp::Event {
                wall_time,
                step: None,
                what: Some(msp::event::What::GraphDef(graph_proto(g, &roles))),
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

/// The custom lineage key the session status goes under: MindSpore's lineage has no status
/// field, so it is one more custom column, named so as not to meet a usual hyper-parameter.
pub(crate) const SESSION_STATUS_KEY: &str = "session_status";

/// MindInsight reads every `user_info` entry of a custom lineage record, and fails on a record
/// without any (its lineage page then lists no job at all), so a record must hold one.
fn check_hparams(h: &HParams) -> Result<(), PackErrorKind> {
    h.check()?;
    let has_entries = match h.part {
        SessionPart::Whole => !h.hparams.is_empty() || h.status.is_some(),
        SessionPart::Start => !h.hparams.is_empty(),
        SessionPart::End => true,
    };
    if has_entries {
        Ok(())
    } else {
        Err(PackErrorKind::InvalidHParams(
            "MindInsight needs at least one hyper-parameter or a status",
        ))
    }
}

/// Hyper-parameters as MindInsight's custom lineage columns, in the layout of MindSpore's
/// `SummaryCollector._package_custom_lineage_data`: one `user_info` entry per key, each holding
/// one map with that one key. Integers go in `map_int32` (beyond `i32`, in `map_double`, where
/// MindSpore would fail), numbers in `map_double`, strings in `map_str`; booleans, which
/// MindSpore refuses, as the strings `"true"`/`"false"`. The status, when the part writes it,
/// comes last as `session_status` (`"success"`, `"failure"`, `"running"`).
fn user_defined_info(h: &HParams) -> msp::UserDefinedInfo {
    fn entry(name: &str, v: &HParamValue) -> msp::UserDefinedInfo {
        let mut info = msp::UserDefinedInfo::default();
        let name = name.to_string();
        match v {
            HParamValue::Int(i) => match i32::try_from(*i) {
                Ok(small) => {
                    info.map_int32.insert(name, small);
                }
                Err(_) => {
                    info.map_double.insert(name, *i as f64);
                }
            },
            HParamValue::Number(n) => {
                info.map_double.insert(name, *n);
            }
            HParamValue::Str(s) => {
                info.map_str.insert(name, s.clone());
            }
            HParamValue::Bool(b) => {
                info.map_str.insert(name, b.to_string());
            }
        }
        info
    }
    let mut user_info = Vec::new();
    if h.part != SessionPart::End {
        user_info.extend(h.hparams.iter().map(|(name, v)| entry(name, v)));
    }
    if let Some(status) = h.status.filter(|_| h.part != SessionPart::Start) {
        let status = match status {
            SessionStatus::Success => "success",
            SessionStatus::Failure => "failure",
            SessionStatus::Running => "running",
        };
        user_info.push(entry(SESSION_STATUS_KEY, &HParamValue::Str(status.into())));
    }
    msp::UserDefinedInfo {
        user_info,
        ..Default::default()
    }
}

/// What a graph node becomes in MindSpore's layout.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum GraphRole {
    /// An operator node: `name` is its numeric id, its inputs refer to ids.
    Op(u64),
    /// A parameter (a `Parameter` node without inputs): a `GraphProto.parameters` entry with
    /// this name, which its consumers' inputs refer to.
    Parameter(String),
}

/// The op type MindInsight treats as a parameter, and ember's module graphs use.
const PARAMETER_OP: &str = "Parameter";

/// The last segment of a node's `full_name`: MindSpore's `Op-opN`, with `/` in the op (which
/// would add a scope) replaced by `_`.
fn op_segment(op: &str, id: u64) -> String {
    format!("{}-op{id}", op.replace('/', "_"))
}

/// A graph node's `full_name`: the node's own name as its scope, then `Op-opN`, so a node that
/// is also the scope of others never collides with that scope.
fn full_name(name: &str, op: &str, id: u64) -> String {
    format!("{name}/{}", op_segment(op, id))
}

/// Checks a graph for MindInsight and gives each node its role. MindInsight's graph builder
/// resolves inputs by id and names nodes by `full_name`; it refuses `<`, `>` and `"` in names,
/// makes scopes of every `/` segment, and treats `Parameter` op nodes as parameters. So node
/// names must be unique, non-empty, without empty segments or those characters; ops non-empty;
/// inputs must name nodes; a `Parameter` takes no input; parameter names (the node name with
/// `/` as `.`, MindSpore's `conv1.weight` style) must be unique; and no generated `full_name`
/// may be another node's scope.
pub(crate) fn check_graph(g: &Graph) -> Result<Vec<GraphRole>, PackErrorKind> {
    let index = check_node_names(g)?;
    let roles = node_roles(g, &index)?;
    // Every scope MindInsight will make, from operator full names and from the scopes it puts
    // parameters in (their consumers' scopes, which are node names).
    let mut scopes = HashSet::new();
    for (n, role) in g.nodes.iter().zip(&roles) {
        if let GraphRole::Op(id) = role {
            let full = full_name(&n.name, &n.op, *id);
            let mut at = 0;
            while let Some(slash) = full[at..].find('/') {
                scopes.insert(full[..at + slash].to_string());
                at += slash + 1;
            }
        }
    }
    for (n, role) in g.nodes.iter().zip(&roles) {
        if let GraphRole::Op(id) = role {
            let full = full_name(&n.name, &n.op, *id);
            if scopes.contains(&full) {
                return Err(InvalidGraph(format!(
                    "node {:?}: its MindInsight name {full:?} is also a scope",
                    n.name
                )));
            }
        }
    }
    Ok(roles)
}

/// Each node's index by name, once every name and op is checked.
fn check_node_names(g: &Graph) -> Result<HashMap<&str, usize>, PackErrorKind> {
    let mut index = HashMap::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        if n.name.is_empty() || n.name.split('/').any(str::is_empty) {
            return Err(InvalidGraph(format!(
                "node name {:?} is empty or has an empty scope segment",
                n.name
            )));
        }
        for text in [&n.name, &n.op] {
            if text.contains(['<', '>', '"']) {
                return Err(InvalidGraph(format!(
                    "node {:?}: MindInsight refuses '<', '>' and '\"' in {text:?}",
                    n.name
                )));
            }
        }
        if n.op.is_empty() {
            return Err(InvalidGraph(format!("node {:?} has no op", n.name)));
        }
        if index.insert(n.name.as_str(), i).is_some() {
            return Err(InvalidGraph(format!(
                "node name {:?} is used twice",
                n.name
            )));
        }
    }
    Ok(index)
}

/// Each node's role, once its inputs name nodes and parameters are checked.
fn node_roles(g: &Graph, index: &HashMap<&str, usize>) -> Result<Vec<GraphRole>, PackErrorKind> {
    let mut roles = Vec::with_capacity(g.nodes.len());
    let mut parameter_names = HashSet::new();
    let mut next_id = 0u64;
    for n in &g.nodes {
        if let Some(missing) = n.inputs.iter().find(|i| !index.contains_key(i.as_str())) {
            return Err(InvalidGraph(format!(
                "node {:?} has input {missing:?}, which is not a node",
                n.name
            )));
        }
        if n.op == PARAMETER_OP {
            if !n.inputs.is_empty() {
                return Err(InvalidGraph(format!(
                    "node {:?}: a MindSpore parameter takes no input",
                    n.name
                )));
            }
            let name = n.name.replace('/', ".");
            if !parameter_names.insert(name.clone()) {
                return Err(InvalidGraph(format!(
                    "node {:?}: parameter name {name:?} is used twice",
                    n.name
                )));
            }
            roles.push(GraphRole::Parameter(name));
        } else {
            next_id += 1;
            roles.push(GraphRole::Op(next_id));
        }
    }
    Ok(roles)
}

/// MindSpore's `GraphProto` of a checked graph, as MindSpore's own graphs are laid out:
/// operator nodes named by numeric id (from 1, in node order), `full_name` `<name>/<Op>-op<id>`,
/// `scope` the node's name; parameters in `parameters`, with their `shape` attribute as the
/// tensor shape; inputs by id or parameter name.
pub(crate) fn graph_proto(g: &Graph, roles: &[GraphRole]) -> msp::GraphProto {
    use msp::DataType as T;
    let by_name: std::collections::HashMap<&str, &GraphRole> = g
        .nodes
        .iter()
        .zip(roles)
        .map(|(n, r)| (n.name.as_str(), r))
        .collect();
    let reference = |input: &str| match by_name.get(input) {
        Some(GraphRole::Op(id)) => id.to_string(),
        Some(GraphRole::Parameter(name)) => name.clone(),
        // Checked: every input names a node.
        None => input.to_string(),
    };
    let mut node = Vec::new();
    let mut parameters = Vec::new();
    for (n, role) in g.nodes.iter().zip(roles) {
        match role {
            GraphRole::Parameter(name) => {
                let shape = n.attrs.iter().find_map(|(k, v)| match v {
                    AttrValue::Ints(dims) if k == "shape" => Some(dims),
                    _ => None,
                });
                parameters.push(msp::ParameterProto {
                    name: Some(name.clone()),
                    r#type: shape.map(|dims| msp::TypeProto {
                        data_type: Some(T::DtTensor as i32),
                        value: Some(msp::type_proto::Value::TensorType(
                            msp::type_proto::Tensor {
                                elem_type: None,
                                shape: Some(msp::TensorShapeProto {
                                    dim: dims
                                        .iter()
                                        .map(|&d| msp::tensor_shape_proto::Dimension {
                                            size: Some(d),
                                            name: None,
                                        })
                                        .collect(),
                                }),
                            },
                        )),
                    }),
                    default_val: None,
                });
            }
            GraphRole::Op(id) => node.push(msp::NodeProto {
                input: n
                    .inputs
                    .iter()
                    .map(|i| msp::InputProto {
                        name: Some(reference(i)),
                        r#type: Some(msp::input_proto::EdgeType::DataEdge as i32),
                    })
                    .collect(),
                name: Some(id.to_string()),
                op_type: Some(n.op.clone()),
                scope: Some(n.name.clone()),
                attribute: n.attrs.iter().map(|(k, v)| attribute(k, v)).collect(),
                full_name: Some(full_name(&n.name, &n.op, *id)),
                ..Default::default()
            }),
        }
    }
    msp::GraphProto {
        node,
        name: Some(g.name.clone()),
        parameters,
        ..Default::default()
    }
}

fn attribute(name: &str, v: &AttrValue) -> msp::AttributeProto {
    use msp::DataType as T;
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
        name: Some(name.to_string()),
        value: Some(value),
    }
}
