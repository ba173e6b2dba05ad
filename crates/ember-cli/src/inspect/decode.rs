//! One record of either format into a run's tags: each value counted under its kind, scalars
//! with their number, PR curves, audio and layouts with their decoded value.

use ember::pack::proto::{mindspore, tensorboard};
use ember::read::{ValueProblem, decode_audio, decode_custom_scalars, decode_pr_curve, decode_wav};
use prost::Message;

use super::detail::Detail;
use super::report::{FileKind, RunReport};

pub(super) fn decode(
    kind: FileKind,
    data: &[u8],
    run: &mut RunReport,
) -> Result<(), prost::DecodeError> {
    match kind {
        FileKind::TensorBoard => decode_tensorboard(tensorboard::Event::decode(data)?, run),
        FileKind::MindInsightSummary | FileKind::MindInsightExplain => {
            decode_mindspore(mindspore::Event::decode(data)?, run)
        }
        FileKind::MindInsightLineage => {
            use mindspore::lineage_event::What;
            let event = mindspore::LineageEvent::decode(data)?;
            let tag = match &event.what {
                Some(What::Version(_)) | None => return Ok(()),
                Some(What::TrainLineage(_)) => "train_lineage",
                Some(What::EvaluationLineage(_)) => "evaluation_lineage",
                Some(What::DatasetGraph(_)) => "dataset_graph",
                Some(What::UserDefinedInfo(_)) => "user_defined_info",
            };
            run.add("lineage", tag, event.step, None);
        }
    }
    Ok(())
}

fn decode_tensorboard(event: tensorboard::Event, run: &mut RunReport) {
    use tensorboard::event::What;
    use tensorboard::summary::value::Value as V;
    let step = Some(event.step);
    run.wall_time = event.wall_time;
    match event.what {
        None | Some(What::FileVersion(_)) => {}
        Some(What::GraphDef(_)) => run.add("graph", "graph", step, None),
        Some(What::MetaGraphDef(_)) => run.add("graph", "meta_graph", step, None),
        Some(What::SessionLog(_)) => run.add("session_log", "session_log", step, None),
        Some(What::TaggedRunMetadata(m)) => run.add("run_metadata", &m.tag, step, None),
        Some(What::Summary(summary)) => {
            for value in summary.value {
                if let Some(plugin) = value
                    .metadata
                    .as_ref()
                    .and_then(|m| m.plugin_data.as_ref())
                    .filter(|p| !p.plugin_name.is_empty())
                {
                    run.plugins
                        .insert(value.tag.clone(), plugin.plugin_name.clone());
                }
                let plugin = run.plugins.get(&value.tag).cloned().unwrap_or_default();
                let (kind, scalar) = match &value.value {
                    Some(V::SimpleValue(v)) => ("scalar", Some(f64::from(*v))),
                    Some(V::Histo(_)) | Some(V::ObsoleteOldStyleHistogram(_)) => {
                        ("histogram", None)
                    }
                    Some(V::Image(_)) => ("image", None),
                    Some(V::Audio(_)) => ("audio", None),
                    Some(V::Tensor(t)) => match plugin.as_str() {
                        "text" => ("text", None),
                        "hparams" => ("hparams", None),
                        "pr_curves" => ("pr curve", None),
                        "audio" => ("audio", None),
                        "custom_scalars" => ("custom scalars layout", None),
                        "scalars" => ("scalar", tensor_scalar(t)),
                        _ => ("tensor", None),
                    },
                    None => ("empty", None),
                };
                run.add(kind, &value.tag, step, scalar);
                if kind == "text"
                    && value.tag == ember::LOG_GAP_TAG
                    && let Some(V::Tensor(t)) = &value.value
                    && let Some(note) = t.string_val.first()
                {
                    let note = String::from_utf8_lossy(note).into_owned();
                    run.log_gaps.push((event.step, note));
                }
                match details(&plugin, value.value) {
                    Some(Ok(details)) => {
                        for detail in details {
                            run.add_detail(kind, &value.tag, step, detail);
                        }
                    }
                    Some(Err(problem)) => run.value_problems.push((value.tag, problem)),
                    None => {}
                }
            }
        }
    }
}

/// The decoded values of a PR curve, audio or custom scalars value (several clips for audio);
/// `None` for other kinds.
fn details(
    plugin: &str,
    value: Option<tensorboard::summary::value::Value>,
) -> Option<Result<Vec<Detail>, ValueProblem>> {
    use tensorboard::summary::value::Value as V;
    Some(match (plugin, value?) {
        // TensorFlow 1's audio summaries: one clip in the value itself.
        (_, V::Audio(audio)) => decode_wav(audio.encoded_audio_string, String::new())
            .map(|clip| vec![Detail::Audio(clip)]),
        ("pr_curves", V::Tensor(t)) => decode_pr_curve(&t).map(|c| vec![Detail::PrCurve(c)]),
        ("audio", V::Tensor(t)) => {
            decode_audio(&t).map(|clips| clips.into_iter().map(Detail::Audio).collect())
        }
        ("custom_scalars", V::Tensor(t)) => {
            decode_custom_scalars(&t).map(|layout| vec![Detail::Layout(layout)])
        }
        _ => return None,
    })
}

/// The single number of a scalar tensor (TensorBoard's newer scalar form).
fn tensor_scalar(t: &tensorboard::TensorProto) -> Option<f64> {
    if let Some(v) = t.float_val.first() {
        return Some(f64::from(*v));
    }
    if let Some(v) = t.double_val.first() {
        return Some(*v);
    }
    let content = &t.tensor_content;
    if t.dtype == tensorboard::DataType::DtDouble as i32 && content.len() >= 8 {
        let bytes: [u8; 8] = content[..8].try_into().ok()?;
        return Some(f64::from_le_bytes(bytes));
    }
    if t.dtype == tensorboard::DataType::DtFloat as i32 && content.len() >= 4 {
        let bytes: [u8; 4] = content[..4].try_into().ok()?;
        return Some(f64::from(f32::from_le_bytes(bytes)));
    }
    None
}

fn decode_mindspore(event: mindspore::Event, run: &mut RunReport) {
    use mindspore::event::What;
    use mindspore::summary::value::Value as V;
    let step = event.step;
    run.wall_time = event.wall_time;
    match event.what {
        None | Some(What::Version(_)) => {}
        Some(What::GraphDef(graph)) => {
            let name = graph.name.filter(|n| !n.is_empty());
            run.add("graph", name.as_deref().unwrap_or("graph"), step, None);
        }
        Some(What::Explain(_)) => run.add("explain", "explain", step, None),
        Some(What::Summary(summary)) => {
            for value in summary.value {
                let (kind, scalar) = match &value.value {
                    Some(V::ScalarValue(v)) => ("scalar", Some(f64::from(*v))),
                    Some(V::Image(_)) => ("image", None),
                    Some(V::Tensor(_)) => ("tensor", None),
                    Some(V::Histogram(_)) => ("histogram", None),
                    Some(V::LossLandscape(_)) => ("loss_landscape", None),
                    None => ("empty", None),
                };
                run.add(kind, &value.tag, step, scalar);
            }
        }
    }
}
