//! What a run knows so far, kept apart from the loop so that a failed run can still record it,
//! and the MindSpore lineage made from it.

use ember_write::pack::proto::mindspore as msp;
use ember_write::pack::{HParamValue, HParams, Lineage};

use super::TrainReport;

/// What a run knows so far; kept outside [`Trainer::run`] so that a failed run can still
/// record it.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    pub(crate) report: TrainReport,
    /// Mean train loss of the latest epoch that ran a step, finished or not.
    pub(crate) latest_train_loss: Option<f64>,
    /// The learning rate of the latest optimizer step.
    pub(crate) learning_rate: Option<f64>,
    /// Examples in the first device batch.
    pub(crate) batch_size: Option<usize>,
    /// Training examples of the latest finished epoch.
    pub(crate) train_examples: Option<usize>,
    /// Validation examples of the latest validation.
    pub(crate) valid_examples: Option<usize>,
    /// Whether the run got past its start (resume included) and may have written to the log:
    /// a run refused before it has nothing to record the end of.
    pub(crate) began: bool,
}

impl RunState {
    /// The tags of the metrics a run records: those [`final_metrics`](Self::final_metrics)
    /// can give, and the per-step loss and per-epoch validation loss.
    pub(crate) fn metric_tags(validates: bool, classifies: bool) -> Vec<&'static str> {
        let mut tags = vec!["train/loss", "final/train_loss"];
        if validates {
            tags.extend(["valid/loss", "final/valid_loss"]);
            if classifies {
                tags.push("final/valid_accuracy");
            }
        }
        tags
    }

    /// The final metrics known so far: the latest train loss, and the latest validation.
    pub(super) fn final_metrics(&self) -> Vec<(&'static str, f64)> {
        let mut metrics = Vec::new();
        if let Some(loss) = self.latest_train_loss {
            metrics.push(("final/train_loss", loss));
        }
        if let Some(last) = self.report.last() {
            if let Some(loss) = last.valid_loss {
                metrics.push(("final/valid_loss", loss));
            }
            if let Some(accuracy) = last.valid_accuracy {
                metrics.push(("final/valid_accuracy", accuracy));
            }
        }
        metrics
    }
}

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
