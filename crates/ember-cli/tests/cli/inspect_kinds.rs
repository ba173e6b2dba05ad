//! `ember inspect` on the kinds with details: the demo job's PR curves, embedding and custom
//! scalars layout, a log with audio, and plugin values or projector files that are broken.
//! Expectations come from what was written (the layout `ember train` writes, the audio samples
//! quantized here by hand) and from invariants of the curves, not from inspect's own code.

use std::path::Path;

use ember::SummaryRecord;
use ember::pack::proto::tensorboard as tbp;
use ember::read::framing;
use prost::Message;
use serde_json::Value as Json;

use super::{ember, path_str};

/// `ember inspect --json [--values] <path>`, its exit code and document.
fn inspect_json(path: &Path, values: bool) -> (Option<i32>, Json) {
    let mut args = vec!["inspect", "--json", path_str(path)];
    if values {
        args.push("--values");
    }
    let output = ember(&args);
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&output.stderr));
    });
    (output.status.code(), report)
}

/// The tag entries of the first run of kind `kind`.
fn tags<'a>(report: &'a Json, kind: &str) -> Vec<&'a Json> {
    report["runs"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == kind)
        .collect()
}

fn numbers(value: &Json) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one demo log, then each kind inspect lists checked in turn"
)]
fn inspect_lists_the_demo_jobs_pr_curves_embedding_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("run");
    let train = ember(&[
        "train",
        "--subset",
        "300",
        "--epochs",
        "1",
        "--logdir",
        path_str(&logdir),
    ]);
    assert!(train.status.success(), "{train:?}");

    let (code, report) = inspect_json(&logdir, true);
    assert_eq!((code, &report["ok"]), (Some(0), &Json::Bool(true)));

    // One curve per digit class, at the epoch's last step (4), over the 60 held-out digits.
    let curves = tags(&report, "pr curve");
    let names: Vec<&str> = curves.iter().map(|t| t["tag"].as_str().unwrap()).collect();
    let want: Vec<String> = (0..10).map(|class| format!("pr/digit_{class}")).collect();
    assert_eq!(names, want);
    let mut positives = 0.0;
    for curve in &curves {
        assert_eq!(
            (&curve["count"], &curve["step_max"]),
            (&Json::from(1), &Json::from(4))
        );
        let summary = &curve["pr_curve"];
        assert_eq!(summary["num_thresholds"], 51);
        let examples =
            summary["positives"].as_f64().unwrap() + summary["negatives"].as_f64().unwrap();
        assert_eq!(examples, 60.0, "{}", curve["tag"]);
        positives += summary["positives"].as_f64().unwrap();
        let [step, _, value] = curve["values"][0].as_array().unwrap().as_slice() else {
            panic!("{}", curve["values"]);
        };
        assert_eq!(step, 4);
        let row = |name: &str| numbers(&value[name]);
        let (tp, fp, tn, fn_) = (
            row("true_positives"),
            row("false_positives"),
            row("true_negatives"),
            row("false_negatives"),
        );
        let thresholds = row("thresholds");
        assert_eq!(
            (thresholds.len(), thresholds[0], thresholds[50]),
            (51, 0.0, 1.0)
        );
        for i in 0..51 {
            // Every example is counted once at every threshold, and precision is tp / (tp + fp)
            // as an f32, 0 where nothing is predicted positive.
            assert_eq!(
                tp[i] + fp[i] + tn[i] + fn_[i],
                60.0,
                "{} at {i}",
                curve["tag"]
            );
            let precision = if tp[i] + fp[i] > 0.0 {
                f64::from((tp[i] / (tp[i] + fp[i])) as f32)
            } else {
                0.0
            };
            assert!(
                (row("precision")[i] - precision).abs() < 1e-6,
                "{}",
                curve["tag"]
            );
            assert!(
                i == 0 || tp[i] <= tp[i - 1],
                "positives only fall as the threshold rises"
            );
        }
    }
    // Each held-out digit is of exactly one class.
    assert_eq!(positives, 60.0);

    // The layout `ember train` writes: one category, a chart per metric with both splits.
    let layout = tags(&report, "custom scalars layout");
    assert_eq!(layout.len(), 1);
    assert_eq!(layout[0]["tag"], ember::pack::CUSTOM_SCALARS_TAG);
    let category = &layout[0]["layout"]["categories"][0];
    assert_eq!(category["title"], "train vs valid");
    assert_eq!(category["charts"][0]["title"], "loss");
    assert_eq!(
        category["charts"][0]["multiline"],
        serde_json::json!(["train/loss", "valid/loss"])
    );
    assert_eq!(
        category["charts"][1]["multiline"],
        serde_json::json!(["train/accuracy", "valid/accuracy"])
    );

    // The hidden layer's 64 activations of the 60 held-out digits, labelled, with 8x8 thumbnails.
    let embeddings = tags(&report, "embedding");
    assert_eq!(embeddings.len(), 1);
    assert_eq!(embeddings[0]["tag"], "embedding/hidden:00004");
    let embedding = &embeddings[0]["embedding"];
    assert_eq!(embedding["tensor_shape"], serde_json::json!([60, 64]));
    assert_eq!(
        embedding["sprite"]["single_image_dim"],
        serde_json::json!([8, 8])
    );
    assert_eq!(embedding["problems"], serde_json::json!([]));
    let labels = logdir.join(embedding["metadata_path"].as_str().unwrap());
    let labels = std::fs::read_to_string(labels).unwrap();
    assert_eq!(labels.lines().count(), 60);
    let projector = &report["runs"][0]["projector"];
    assert_eq!(
        (&projector["embeddings"], &projector["problems"]),
        (&Json::from(1), &serde_json::json!([]))
    );

    // The text output names them too.
    let text = ember(&["inspect", path_str(&logdir)]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("pr curve: 10 tag(s), 10 value(s)"), "{text}");
    assert!(text.contains("51 thresholds"), "{text}");
    assert!(text.contains("embedding: 1 tag(s)"), "{text}");
    assert!(
        text.contains("[60, 64], labels, sprite of 8x8 thumbnails"),
        "{text}"
    );
    assert!(text.contains("1 category, 2 chart(s)"), "{text}");
    assert!(
        text.contains("projector config projector_config.pbtxt: 1 embedding(s), ok"),
        "{text}"
    );

    // A label file gone is an error of the projector config, and the exit code says so.
    let metadata = logdir.join(embedding["metadata_path"].as_str().unwrap());
    std::fs::remove_file(&metadata).unwrap();
    let (code, report) = inspect_json(&logdir, false);
    assert_eq!(code, Some(1));
    let problems = report["runs"][0]["projector"]["problems"]
        .as_array()
        .unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0]["kind"], "missing_file");
    let message = problems[0]["message"].as_str().unwrap();
    assert!(
        message.contains("metadata file") && message.contains("is missing"),
        "{message}"
    );
    assert_eq!(report["errors"], 1);
}

/// TensorFlow's `encode_wav` by hand: `round(x · 32768)` half away from zero, clamped to 16
/// bits; read back as the sample over 32768.
fn quantized(x: f32) -> f64 {
    f64::from((x * 32768.0).round().clamp(-32768.0, 32767.0) / 32768.0)
}

#[test]
fn inspect_lists_audio_with_its_rate_and_samples() {
    let dir = tempfile::tempdir().unwrap();
    let rate = 8000;
    let samples: Vec<f32> = (0..400).map(|i| (i as f32 * 0.05).sin() * 1.2).collect();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    summary.add_audio("audio/tone", &samples, rate, 2).unwrap();
    summary
        .add_audio("audio/tone", &samples[..80], rate, 9)
        .unwrap();
    summary.close().unwrap();

    let (code, report) = inspect_json(dir.path(), true);
    assert_eq!(code, Some(0));
    let audio = tags(&report, "audio");
    assert_eq!(audio.len(), 1);
    let tone = audio[0];
    assert_eq!(
        (&tone["tag"], &tone["count"]),
        (&Json::from("audio/tone"), &Json::from(2))
    );
    assert_eq!(
        (&tone["step_min"], &tone["step_max"]),
        (&Json::from(2), &Json::from(9))
    );
    // The summary is of the latest clip.
    assert_eq!(
        tone["audio"],
        serde_json::json!({ "sample_rate": 8000, "channels": 1, "frames": 80, "seconds": 0.01 })
    );
    let values = tone["values"].as_array().unwrap();
    assert_eq!(values.len(), 2);
    for (value, (step, written)) in values.iter().zip([(2, &samples[..]), (9, &samples[..80])]) {
        assert_eq!(value[0], step);
        let want: Vec<f64> = written.iter().map(|&x| quantized(x)).collect();
        assert_eq!(numbers(&value[2]["samples"]), want);
        assert_eq!(value[2]["sample_rate"], 8000);
    }
    let text = ember(&["inspect", path_str(dir.path())]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("audio: 1 tag(s), 2 value(s)"), "{text}");
    assert!(text.contains("8000 Hz, 1 channel(s), 0.01 s"), "{text}");
}

#[test]
fn a_pr_curve_that_is_not_six_rows_is_an_error_at_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let value = tbp::summary::Value {
        tag: "pr/bad".into(),
        metadata: Some(tbp::SummaryMetadata {
            plugin_data: Some(tbp::summary_metadata::PluginData {
                plugin_name: "pr_curves".into(),
                content: Vec::new(),
            }),
            ..Default::default()
        }),
        value: Some(tbp::summary::value::Value::Tensor(tbp::TensorProto {
            dtype: tbp::DataType::DtFloat as i32,
            tensor_shape: Some(tbp::TensorShapeProto {
                dim: [4, 2]
                    .map(|size| tbp::tensor_shape_proto::Dim {
                        size,
                        ..Default::default()
                    })
                    .into(),
                ..Default::default()
            }),
            float_val: vec![0.0; 8],
            ..Default::default()
        })),
        ..Default::default()
    };
    let event = tbp::Event {
        step: 3,
        what: Some(tbp::event::What::Summary(tbp::Summary {
            value: vec![value],
        })),
        ..Default::default()
    };
    let file = dir.path().join("events.out.tfevents.1.host");
    std::fs::write(&file, framing::frame(&event.encode_to_vec())).unwrap();

    let (code, report) = inspect_json(dir.path(), false);
    assert_eq!(code, Some(1));
    let problems = report["runs"][0]["files"][0]["problems"]
        .as_array()
        .unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(
        (&problems[0]["kind"], &problems[0]["offset"]),
        (&Json::from("undecodable_value"), &Json::from(0))
    );
    let message = problems[0]["message"].as_str().unwrap();
    assert!(
        message.contains("\"pr/bad\"") && message.contains("shape [4, 2]"),
        "{message}"
    );
    // The value is still counted under its kind, without figures.
    let curve = tags(&report, "pr curve");
    assert_eq!((curve.len(), &curve[0]["count"]), (1, &Json::from(1)));
    assert!(curve[0].get("pr_curve").is_none());
}
