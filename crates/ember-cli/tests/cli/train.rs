//! `ember train`: logs in both formats that their readers decode, its flags and log directories.

use super::*;

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one run of the binary, then each log it wrote read back in turn"
)]
fn train_on_a_subset_writes_tensorboard_logs_that_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("run");
    let output = ember(&[
        "train",
        "--subset",
        "300",
        "--epochs",
        "1",
        "--logdir",
        path_str(&logdir),
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(stdout.contains("test accuracy: "), "{stdout}");
    assert!(stdout.contains("(60 held-out digits)"), "{stdout}");
    assert!(
        stdout.contains(&format!("tensorboard --logdir {}", logdir.display())),
        "{stdout}"
    );

    let event_files = files(&logdir, "tfevents");
    assert_eq!(event_files.len(), 1);
    let scan = Scan::file(&event_files[0]).unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    let mut steps: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut texts = Vec::new();
    let mut image_size = None;
    let mut graph = false;
    for record in &scan.records {
        let event = tensorboard::Event::decode(record.data.as_slice()).unwrap();
        match event.what {
            Some(tensorboard::event::What::GraphDef(_)) => graph = true,
            Some(tensorboard::event::What::Summary(summary)) => {
                for value in summary.value {
                    steps.entry(value.tag.clone()).or_default().push(event.step);
                    use tensorboard::summary::value::Value as V;
                    match value.value {
                        Some(V::Image(image)) if value.tag == "samples/digits" => {
                            image_size = Some((image.height, image.width, image.colorspace));
                        }
                        Some(V::Tensor(t)) if value.tag == "samples/predictions" => {
                            texts.push(text(&t.string_val[0]));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    // 240 training digits on 2 workers of 120, batches of 32: 4 steps.
    assert_eq!(steps["train/loss"], [1, 2, 3, 4]);
    assert_eq!(steps["valid/accuracy"], [4]);
    assert_eq!(steps["samples/digits"], [4]);
    assert_eq!(steps["samples/predictions"], [4]);
    assert!(steps.contains_key("train/accuracy"));
    assert!(steps.contains_key("train/learning_rate"));
    assert!(steps.contains_key("_hparams_/experiment"));
    // Per-class PR curves on the held-out digits each epoch, and the custom scalars layout.
    for class in 0..10 {
        assert_eq!(steps[&format!("pr/digit_{class}")], [4], "class {class}");
    }
    assert!(steps.contains_key(ember::pack::CUSTOM_SCALARS_TAG));
    assert!(graph, "no graph event");
    // 16 grayscale 8x8 digits tiled into one image, larger than a single digit.
    let (height, width, colorspace) = image_size.expect("a sample grid image");
    assert_eq!(colorspace, 1);
    assert!(height >= 16 && width >= 16, "{height}x{width}");
    // The table lists the 16 samples with their labels and predictions.
    assert_eq!(texts.len(), 1);
    let table = &texts[0];
    assert!(
        table.starts_with("| sample | label | predicted |"),
        "{table}"
    );
    assert_eq!(table.matches('✓').count() + table.matches('✗').count(), 16);
    assert!(table.contains("of 16 right."), "{table}");

    // The held-out digits' hidden activations (64 units) as a projector embedding at the
    // last step, one label and one 8x8 thumbnail per digit.
    let embedding = logdir.join("embeddings").join("embedding%2Fhidden_4");
    let rows: Vec<usize> = std::fs::read_to_string(embedding.join("tensors.tsv"))
        .unwrap()
        .lines()
        .map(|l| l.split('\t').count())
        .collect();
    assert_eq!(rows, vec![64; 60]);
    let labels = std::fs::read_to_string(embedding.join("metadata.tsv")).unwrap();
    assert_eq!(labels.lines().count(), 60);
    assert!(
        labels
            .lines()
            .all(|l| l.parse::<u8>().is_ok_and(|d| d < 10))
    );
    let config = std::fs::read_to_string(logdir.join("projector_config.pbtxt")).unwrap();
    assert!(config.contains("tensor_shape: [60, 64]"), "{config}");
    assert!(config.contains("single_image_dim: [8, 8]"), "{config}");

    // inspect reads the same logs cleanly.
    let output = ember(&["inspect", path_str(&logdir)]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("samples/predictions"), "{stdout}");
    assert!(
        stdout.contains("projector config projector_config.pbtxt: 1 embedding(s)"),
        "{stdout}"
    );
    assert!(stdout.contains("0 error(s), 0 warning(s)"), "{stdout}");
}

#[test]
fn train_writes_mindinsight_logs_that_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("ms");
    let output = ember(&[
        "train",
        "--subset",
        "300",
        "--epochs",
        "1",
        "--devices",
        "1",
        "--format",
        "mindinsight",
        "--logdir",
        path_str(&logdir),
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(
        stdout.contains(&format!(
            "mindinsight start --summary-base-dir {}",
            dir.path().display()
        )),
        "{stdout}"
    );
    let summary_files = files(&logdir, ".out.events.summary.");
    let summary_file = summary_files
        .iter()
        .find(|p| p.to_string_lossy().ends_with("_MS"))
        .expect("a MindInsight summary file");
    let scan = Scan::file(summary_file).unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    let mut version = None;
    let mut steps: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut predictions = None;
    for record in &scan.records {
        let event = mindspore::Event::decode(record.data.as_slice()).unwrap();
        match event.what {
            Some(mindspore::event::What::Version(v)) => version = Some(v),
            Some(mindspore::event::What::Summary(summary)) => {
                for value in summary.value {
                    steps
                        .entry(value.tag.clone())
                        .or_default()
                        .push(event.step.unwrap_or(-1));
                    if let Some(mindspore::summary::value::Value::Tensor(t)) = value.value
                        && value.tag == "samples/predictions"
                    {
                        predictions = Some(t.dims);
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(version.as_deref(), Some("MindSpore.Event:1"));
    // 240 training digits on 1 worker, batches of 32: 8 steps.
    assert_eq!(steps["train/loss"], (1..=8).collect::<Vec<i64>>());
    assert_eq!(steps["samples/digits"], [8]);
    assert_eq!(steps["samples/labels"], [8]);
    assert_eq!(predictions, Some(vec![16]));

    let output = ember(&["inspect", path_str(&logdir), "--json"]);
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ok"], true);
    let formats: Vec<&str> = report["runs"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["format"].as_str().unwrap())
        .collect();
    assert!(formats.iter().all(|f| *f == "mindinsight"), "{formats:?}");
}

#[test]
fn bad_flags_and_uncreatable_log_dirs_fail_cleanly() {
    let output = ember(&["train", "--devices", "zero"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(!text(&output.stderr).contains("panicked"));

    // An unknown device is clap's error (exit 2), naming what is expected.
    let output = ember(&["train", "--device", "tpu:0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr)
            .contains("unknown device `tpu:0`: expected `cpu`, `wgpu:N` or `cuda:N`"),
        "{}",
        text(&output.stderr)
    );
    // A device whose backend this build lacks, and more workers than devices: one line each.
    #[cfg(not(feature = "wgpu"))]
    {
        let output = ember(&["train", "--subset", "100", "--device", "wgpu:0,wgpu:1"]);
        assert_one_error_line(&output);
        assert!(
            text(&output.stderr).contains("wgpu:0 needs ember built with the `wgpu` feature"),
            "{}",
            text(&output.stderr)
        );
    }
    let output = ember(&[
        "train",
        "--subset",
        "100",
        "--device",
        "cuda:0",
        "--devices",
        "3",
    ]);
    assert_one_error_line(&output);
    assert!(
        text(&output.stderr).contains("3 workers but 1 device(s) listed (cuda:0)"),
        "{}",
        text(&output.stderr)
    );

    let output = ember(&[
        "bench",
        "write",
        "--workload",
        "audio",
        "--n",
        "1",
        "--out",
        "x",
    ]);
    assert_eq!(output.status.code(), Some(2));

    // A log dir under a regular file cannot be created.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let logdir = file.join("run");
    let output = ember(&["train", "--subset", "100", "--logdir", path_str(&logdir)]);
    assert_one_error_line(&output);
    let printed = text(&output.stderr);
    assert!(
        printed.contains("cannot create") && printed.contains(path_str(&logdir)),
        "{printed}"
    );

    // Event files for MLflow without an MLflow server: refused before the run is made.
    let logdir = dir.path().join("events-to-nowhere");
    let output = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--subset", "100", "--mlflow-event-files"])
        .args(["--logdir", path_str(&logdir)])
        .env_remove("MLFLOW_TRACKING_URI")
        .output()
        .unwrap();
    assert_one_error_line(&output);
    assert!(
        text(&output.stderr).contains("give --mlflow URI or set MLFLOW_TRACKING_URI"),
        "{}",
        text(&output.stderr)
    );
    assert!(!logdir.exists(), "nothing is made before the refusal");
}

#[test]
fn train_takes_a_step_timeout_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("run");
    let ok = ember(&[
        "train",
        "--epochs",
        "1",
        "--subset",
        "64",
        "--step-timeout",
        "60",
        "--logdir",
        path_str(&logdir),
    ]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    for bad in ["0", "-1", "soon", "NaN"] {
        let refused = ember(&["train", "--step-timeout", bad]);
        assert_eq!(refused.status.code(), Some(2), "--step-timeout {bad}");
    }
}
