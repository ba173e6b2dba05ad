//! The hparams plugin's three values: the experiment, the session start and the session end.

use std::collections::HashMap;

use prost::Message;

use crate::packed::Part;
use crate::proto::google::protobuf as pb;
use crate::proto::tensorboard::{self as tbp, hparams as hp};
use crate::value::{HParamValue, HParams, SessionPart, SessionStatus};

use super::metadata::{encoded_value, metadata};

/// Tags of the hparams plugin's three values.
pub(crate) const HPARAMS_EXPERIMENT_TAG: &str = "_hparams_/experiment";
/// See [`HPARAMS_EXPERIMENT_TAG`].
pub(crate) const HPARAMS_SESSION_START_TAG: &str = "_hparams_/session_start_info";
/// See [`HPARAMS_EXPERIMENT_TAG`].
pub(crate) const HPARAMS_SESSION_END_TAG: &str = "_hparams_/session_end_info";

/// The hparams plugin's values that `h.part` selects: experiment and session start info, and
/// session end info when there is a status.
pub(super) fn hparams(h: &HParams, wall_time: f64) -> Vec<Part<'static>> {
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
pub(super) fn session_start(
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
