//! MindSpore's lineage of a run, made from what the run knows ([`RunState`]): the train lineage
//! and, when the run validated, the evaluation lineage, which MindInsight's lineage page needs
//! to list the run.

use ember_write::pack::proto::mindspore as msp;
use ember_write::pack::{HParamValue, HParams, Lineage};

use super::run_state::RunState;

/// MindSpore's `EvaluationLineage` of the latest validation, as
/// `SummaryCollector._collect_eval_lineage` fills it: the metrics as a JSON object (here
/// `valid_loss` and, for classifiers, `valid_accuracy`, written as Python's `json.dumps` writes
/// numbers) and the size of the validation set. `None` when the run never validated.
pub(super) fn eval_lineage(state: &RunState) -> Option<Lineage> {
    let last = state.report.last()?;
    let loss = last.valid_loss?;
    let mut metrics = vec![("valid_loss", loss)];
    if let Some(accuracy) = last.valid_accuracy {
        metrics.push(("valid_accuracy", accuracy));
    }
    let fields: Vec<String> = metrics
        .iter()
        .map(|(name, value)| format!("\"{name}\": {}", json_number(*value)))
        .collect();
    Some(
        msp::EvaluationLineage {
            metric: Some(format!("{{{}}}", fields.join(", "))),
            valid_dataset: state
                .valid_examples
                .map(|n| msp::evaluation_lineage::ValidDataset {
                    valid_dataset_path: None,
                    valid_dataset_size: Some(i32::try_from(n).unwrap_or(i32::MAX)),
                }),
        }
        .into(),
    )
}

/// A number as Python's `json.dumps` writes it (which MindInsight's `json.loads` reads):
/// `NaN`, `Infinity` and `-Infinity` for the values JSON lacks.
fn json_number(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:?}")
    }
}

/// MindSpore's `TrainLineage` of the run, filled as `SummaryCollector._collect_train_lineage`
/// fills it: the network's type and final loss, the optimizer (the `optimizer` string
/// hyper-parameter, when given: a Burn optimizer has no name), the learning rate last used,
/// the epochs asked for, the parallel mode and device count, the per-device batch size, the
/// examples per epoch, and the model as `{"ckpt": null}` of size 0 (ember saves no
/// checkpoint), which MindSpore writes when there is none.
pub(super) fn train_lineage<M>(
    hparams: &HParams,
    devices: usize,
    epochs: usize,
    state: &RunState,
) -> Lineage {
    let optimizer = hparams.hparams.iter().find_map(|(name, v)| match v {
        HParamValue::Str(s) if name == "optimizer" => Some(s.clone()),
        _ => None,
    });
    let parallel_mode = if devices > 1 {
        "data_parallel"
    } else {
        "stand_alone"
    };
    let to_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    msp::TrainLineage {
        hyper_parameters: Some(msp::train_lineage::HyperParameters {
            optimizer,
            learning_rate: state.learning_rate.map(|lr| lr as f32),
            loss_function: None,
            epoch: Some(to_i32(epochs)),
            parallel_mode: Some(parallel_mode.into()),
            device_num: Some(to_i32(devices)),
            batch_size: state.batch_size.map(to_i32),
        }),
        train_dataset: state
            .train_examples
            .map(|n| msp::train_lineage::TrainDataset {
                train_dataset_path: None,
                train_dataset_size: Some(to_i32(n)),
            }),
        algorithm: Some(msp::train_lineage::Algorithm {
            network: Some(
                std::any::type_name::<M>()
                    .split('<')
                    .next()
                    .and_then(|base| base.rsplit("::").next())
                    .unwrap_or_default()
                    .to_string(),
            ),
            loss: state.latest_train_loss.map(|loss| loss as f32),
        }),
        model: Some(msp::train_lineage::Model {
            path: Some(r#"{"ckpt": null}"#.into()),
            size: Some(0),
        }),
    }
    .into()
}
