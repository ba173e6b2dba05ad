//! The MindInsight base directory: the job `ember-kinds` with every kind MindInsight holds,
//! and the job `mindspore-job`, laid out as MindSpore's `SummaryCollector` writes one.

use std::path::Path;

use ember::pack::proto::mindspore as msp;
use ember::pack::{Format, HParams, ImageLayout, Lineage, SessionStatus, TensorValue};
use ember::{Plugin, SummaryError, SummaryRecord};

use super::*;

/// Writes the MindInsight base directory `base`: the job `ember-kinds` (every kind MindInsight
/// holds, and text refused with a typed error) and the job `mindspore-job`, and the manifest of
/// `ember-kinds`'s raw inputs in `base/manifest.json`.
#[expect(
    clippy::too_many_lines,
    reason = "one job of every kind MindInsight holds, written in the order a reader checks them"
)]
pub(super) fn write_mindinsight(base: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let job = base.join("ember-kinds");
    std::fs::create_dir_all(&job)?;
    let mut summary = SummaryRecord::builder(&job)
        .format(Format::MindInsight)
        .export_tensors(true)
        .build()?;
    let mut manifest = Manifest::default();

    let mut scalar_json = Vec::new();
    let points: Vec<(i64, f64)> = (0..12)
        .map(|s| (s, 0.1 * (s as f64) - 0.4))
        .chain([(12, f64::NAN), (13, f64::INFINITY), (14, 1e-40)])
        .collect();
    for &(step, value) in &points {
        summary.add_scalar("scalars/loss", value, step)?;
    }
    scalar_json.push(format!(
        "{{\"tag\":\"scalars/loss\",\"steps\":[{}],\"values\":{}}}",
        points
            .iter()
            .map(|p| p.0.to_string())
            .collect::<Vec<_>>()
            .join(","),
        json_nums(points.iter().map(|p| p.1))
    ));
    manifest.add("scalars", json_list(scalar_json));

    let mut hist_json = Vec::new();
    for (tag, step, values) in histogram_inputs() {
        hist_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"values\":{}}}",
            json_str(tag),
            step,
            json_nums(values.iter().map(|&v| v as f64))
        ));
        summary.add_histogram(tag, values, step)?;
    }
    manifest.add("histograms", json_list(hist_json));

    // Images in MindSpore's NCHW layout (MindInsight reads every image so): values in [0, 1],
    // then values beyond it, which MindSpore rescales by the canvas's range.
    let mut image_json = Vec::new();
    let images: [(&str, i64, Vec<usize>, usize, bool); 3] = [
        ("image/rgb", 2, vec![1, 3, 6, 9], 1, false),
        ("image/gray", 4, vec![1, 1, 5, 4], 2, false),
        ("image/batch", 6, vec![10, 3, 4, 5], 3, true),
    ];
    for (tag, step, shape, salt, out_of_range) in images {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = image_values(n, salt)
            .into_iter()
            .map(|v| if out_of_range { v } else { v.clamp(0.0, 1.0) })
            .collect();
        summary.add_images(
            tag,
            TensorValue::from_slice(&values, shape.clone()),
            ImageLayout::Nchw,
            step,
        )?;
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        image_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"shape\":[{}],\"values\":{}}}",
            json_str(tag),
            step,
            dims.join(","),
            json_nums(values.iter().map(|&v| v as f64))
        ));
    }
    manifest.add("images", json_list(image_json));

    // Tensors, also exported as .npy (export is on).
    let weights: Vec<f32> = (0..24).map(|i| (i as f32 - 11.5) / 8.0).collect();
    summary.add_tensor(
        "tensor/weights",
        TensorValue::from_slice(&weights, vec![2, 3, 4]),
        1,
    )?;
    let counts: Vec<i32> = vec![-3, 0, 7, 1 << 20];
    summary.add_tensor(
        "tensor/counts",
        TensorValue::from_slice(&counts, vec![4]),
        8,
    )?;
    manifest.add(
        "tensors",
        json_list(vec![
            format!(
                "{{\"tag\":\"tensor/weights\",\"step\":1,\"dtype\":\"float32\",\"shape\":[2,3,4],\"values\":{}}}",
                json_nums(weights.iter().map(|&v| v as f64))
            ),
            format!(
                "{{\"tag\":\"tensor/counts\",\"step\":8,\"dtype\":\"int32\",\"shape\":[4],\"values\":{}}}",
                json_nums(counts.iter().map(|&v| v as f64))
            ),
        ]),
    );

    // Text: MindInsight has no text dashboard, so ember refuses it with a typed error.
    let refused = match summary.add_text("notes", "**ember**", 0) {
        Err(SummaryError::Rejected(e)) => e.to_string(),
        other => {
            return Err(
                format!("text for MindInsight: expected a pack error, got {other:?}").into(),
            );
        }
    };
    manifest.add("text_refused", json_str(&refused));

    // Hyper-parameters (custom lineage) with a status, then train and evaluation lineage and a
    // dataset graph, as MindSpore's SummaryCollector fills them.
    let mut hparams = HParams::new()
        .with("lr", 0.125)
        .with("optimizer", "adam")
        .with("batch_size", 32i64)
        .with("use_bn", true);
    hparams.status = Some(SessionStatus::Success);
    summary.add_value(Plugin::HParams, "hparams", hparams)?;
    let train = msp::TrainLineage {
        hyper_parameters: Some(msp::train_lineage::HyperParameters {
            optimizer: Some("Adam".into()),
            learning_rate: Some(0.125),
            loss_function: Some("CrossEntropyLoss".into()),
            epoch: Some(3),
            parallel_mode: Some("stand_alone".into()),
            device_num: Some(1),
            batch_size: Some(32),
        }),
        train_dataset: Some(msp::train_lineage::TrainDataset {
            train_dataset_path: Some("/data/digits/train".into()),
            train_dataset_size: Some(1437),
        }),
        algorithm: Some(msp::train_lineage::Algorithm {
            network: Some("Mlp".into()),
            loss: Some(0.25),
        }),
        model: Some(msp::train_lineage::Model {
            path: Some(r#"{"ckpt": null}"#.into()),
            size: Some(0),
        }),
    };
    summary.add_value(Plugin::TrainLineage, "train_lineage", Lineage::from(train))?;
    let eval = msp::EvaluationLineage {
        metric: Some(r#"{"accuracy": 0.875, "loss": 0.5}"#.into()),
        valid_dataset: Some(msp::evaluation_lineage::ValidDataset {
            valid_dataset_path: Some("/data/digits/test".into()),
            valid_dataset_size: Some(360),
        }),
    };
    summary.add_value(Plugin::EvalLineage, "eval_lineage", Lineage::from(eval))?;
    let mut parameter = msp::OperationParameter::default();
    parameter
        .map_str
        .insert("op_type".into(), "BatchDataset".into());
    parameter.map_int.insert("batch_size".into(), 32);
    let dataset = msp::DatasetGraph {
        parameter: Some(parameter),
        ..Default::default()
    };
    summary.add_value(
        Plugin::DatasetGraph,
        "train_dataset",
        Lineage::from(dataset),
    )?;
    summary.record(11)?;
    manifest.add(
        "lineage",
        "{\"job\":\"./ember-kinds\",\"user_defined\":{\"lr\":0.125,\"optimizer\":\"adam\",\"batch_size\":32,\"use_bn\":\"true\",\"session_status\":\"success\"},\"metric\":{\"accuracy\":0.875,\"loss\":0.5},\"model\":{\"network\":\"Mlp\",\"optimizer\":\"Adam\",\"learning_rate\":0.125,\"loss_function\":\"CrossEntropyLoss\",\"epoch\":3,\"batch_size\":32,\"device_num\":1,\"loss\":0.25,\"model_size\":0,\"train_dataset_count\":1437,\"test_dataset_count\":360},\"dataset_op\":\"BatchDataset\"}".into(),
    );

    let graph = nested_graph();
    manifest.add("graph", graph_json(&graph));
    summary.add_graph(graph, 0)?;
    summary.close()?;
    std::fs::write(base.join("manifest.json"), manifest.render())?;

    write_mindspore_job(&base.join("mindspore-job"))
}

/// A job laid out as MindSpore 2.10's `SummaryCollector` writes one: a `loss/auto` scalar each
/// step, custom lineage data at the first step (`_package_custom_lineage_data`: one `user_info`
/// entry per key, ints in `map_int32`), train lineage at the end (`_package_train_lineage_message`)
/// and evaluation lineage after `model.eval` (`_package_eval_lineage_message`).
pub(super) fn write_mindspore_job(job: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(job)?;
    let mut summary = SummaryRecord::builder(job)
        .format(Format::MindInsight)
        .build()?;
    let mut custom = msp::UserDefinedInfo::default();
    let mut version = msp::UserDefinedInfo::default();
    version.map_str.insert("version".into(), "v1".into());
    custom.user_info.push(version);
    let mut epochs = msp::UserDefinedInfo::default();
    epochs.map_int32.insert("epochs".into(), 10);
    custom.user_info.push(epochs);
    let mut dropout = msp::UserDefinedInfo::default();
    dropout.map_double.insert("dropout".into(), 0.5);
    custom.user_info.push(dropout);
    for step in 1..=3i64 {
        summary.add_scalar("loss/auto", 2.0 / step as f64, step)?;
        if step == 1 {
            summary.add_value(
                Plugin::CustomLineage,
                "custom_lineage_data",
                Lineage::from(custom.clone()),
            )?;
            summary.record(step)?;
        }
    }
    let train = msp::TrainLineage {
        hyper_parameters: Some(msp::train_lineage::HyperParameters {
            optimizer: Some("Momentum".into()),
            learning_rate: Some(0.01),
            loss_function: Some("SoftmaxCrossEntropyWithLogits".into()),
            epoch: Some(10),
            parallel_mode: Some("stand_alone".into()),
            device_num: Some(1),
            batch_size: Some(32),
        }),
        train_dataset: Some(msp::train_lineage::TrainDataset {
            train_dataset_path: Some("/data/mnist/train".into()),
            train_dataset_size: Some(60000),
        }),
        algorithm: Some(msp::train_lineage::Algorithm {
            network: Some("LeNet5".into()),
            loss: Some(0.0625),
        }),
        model: Some(msp::train_lineage::Model {
            path: Some(r#"{"ckpt": "/ckpt/lenet-10_1875.ckpt"}"#.into()),
            size: Some(494_192),
        }),
    };
    summary.add_value(Plugin::TrainLineage, "train_lineage", Lineage::from(train))?;
    summary.record(0)?;
    let eval = msp::EvaluationLineage {
        metric: Some(r#"{"Accuracy": 0.9875}"#.into()),
        valid_dataset: Some(msp::evaluation_lineage::ValidDataset {
            valid_dataset_path: Some("/data/mnist/test".into()),
            valid_dataset_size: Some(10000),
        }),
    };
    summary.add_value(Plugin::EvalLineage, "eval_lineage", Lineage::from(eval))?;
    summary.record(0)?;
    summary.close()?;
    Ok(())
}
