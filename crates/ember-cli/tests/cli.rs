//! The `ember` binary end to end: train writes logs both formats' readers decode, inspect finds
//! truncated tails and corruption at their byte offsets with the documented exit codes, bench
//! write prints one valid JSON line per workload, failures are one line without a panic, and
//! Ctrl-C stops train with whole logs and exit code 130.
//!
//! Past 600 lines on purpose: one file for the binary's surface; each test spawns the binary on
//! its own fixture and stands alone.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ember::SummaryRecord;
use ember::pack::proto::tensorboard::hparams;
use ember::pack::proto::{mindspore, tensorboard};
use ember::pack::{Format, hparams_tags};
use ember::read::Scan;
use prost::Message;

fn ember(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(args)
        .output()
        .expect("the ember binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Files of `dir` whose name contains `pattern`, sorted.
fn files(dir: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.to_string_lossy().contains(pattern))
        .collect();
    files.sort();
    files
}

/// Asserts a failure is one `error:` line on stderr, with no panic or backtrace.
fn assert_one_error_line(output: &Output) {
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
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

/// A TensorBoard file of `loss` at steps 0..20 (values 20, 19, ..., 1), and its record offsets.
fn scalar_log(dir: &Path, format: Format) -> (PathBuf, Vec<u64>) {
    let logdir = dir.join("good");
    let mut summary = SummaryRecord::builder(&logdir)
        .format(format)
        .build()
        .unwrap();
    for step in 0..20 {
        summary
            .add_scalar("loss", 20.0 - step as f64, step)
            .unwrap();
    }
    summary.close().unwrap();
    let pattern = match format {
        Format::MindInsight => "_MS",
        _ => "tfevents",
    };
    let file = files(&logdir, pattern).remove(0);
    let offsets = Scan::file(&file)
        .unwrap()
        .records
        .iter()
        .map(|r| r.offset)
        .collect();
    (file, offsets)
}

/// A writable copy of `file` in `dir/<name>/`, changed by `change`.
fn damaged_copy(file: &Path, dir: &Path, name: &str, change: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = std::fs::read(file).unwrap();
    change(&mut bytes);
    let run = dir.join(name);
    std::fs::create_dir_all(&run).unwrap();
    let copy = run.join(file.file_name().unwrap());
    std::fs::write(&copy, bytes).unwrap();
    copy
}

#[test]
fn inspect_lists_a_good_file_with_its_scalar_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (file, offsets) = scalar_log(dir.path(), Format::TensorBoard);
    // The file version, then 20 scalars.
    assert_eq!(offsets.len(), 21);
    let output = ember(&["inspect", path_str(&file)]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("21 records, ok"), "{stdout}");
    assert!(stdout.contains("scalar: 1 tag(s), 20 value(s)"), "{stdout}");
    let loss = stdout.lines().find(|l| l.contains("loss")).unwrap();
    assert!(
        loss.contains("20 x  steps 0..19  first 20 last 1 min 1 max 20"),
        "{loss}"
    );
}

#[test]
fn inspect_warns_of_a_truncated_tail_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (file, offsets) = scalar_log(dir.path(), Format::TensorBoard);
    let last = *offsets.last().unwrap();
    // Cut the last record in the middle of its data.
    let cut = damaged_copy(&file, dir.path(), "cut", |b| b.truncate(last as usize + 14));
    let output = ember(&["inspect", path_str(&cut)]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("warning: truncated record at byte {last}")),
        "{stdout}"
    );
    assert!(stdout.contains("20 records, truncated tail"), "{stdout}");
    assert!(stdout.contains("0 error(s), 1 warning(s)"), "{stdout}");
    assert!(text(&output.stderr).starts_with("warning: 1 truncated tail"));

    let output = ember(&["inspect", path_str(&cut), "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let problem = &report["runs"][0]["files"][0]["problems"][0];
    assert_eq!(problem["kind"], "truncated_tail");
    assert_eq!(problem["severity"], "warning");
    assert_eq!(problem["offset"], last);
    assert_eq!(report["ok"], true);
}

#[test]
fn inspect_reports_corruption_at_its_offset_keeps_going_and_exits_one() {
    let dir = tempfile::tempdir().unwrap();
    let (file, offsets) = scalar_log(dir.path(), Format::TensorBoard);
    // Flip a data byte of record 5 and a length byte of record 12.
    let (data_hit, header_hit) = (offsets[5], offsets[12]);
    let corrupt = damaged_copy(&file, dir.path(), "corrupt", |b| {
        b[data_hit as usize + 14] ^= 0x40;
        b[header_hit as usize] ^= 0x01;
    });
    let output = ember(&["inspect", path_str(corrupt.parent().unwrap())]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("error: corrupt record data at byte {data_hit}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "error: corrupt record header at byte {header_hit}"
        )),
        "{stdout}"
    );
    // The scan went on past both: 21 records less the two damaged ones.
    assert!(stdout.contains("19 records, DAMAGED"), "{stdout}");
    assert!(stdout.contains("2 error(s)"), "{stdout}");
    assert!(text(&output.stderr).starts_with("error: 2 damaged"));

    let output = ember(&["inspect", path_str(&corrupt), "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ok"], false);
    let problems = report["runs"][0]["files"][0]["problems"]
        .as_array()
        .unwrap();
    let found: Vec<(String, u64)> = problems
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["offset"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("bad_data_crc".to_string(), data_hit),
            ("bad_length_crc".to_string(), header_hit)
        ]
    );
}

#[test]
fn inspect_checks_mindinsight_files_too() {
    let dir = tempfile::tempdir().unwrap();
    let (file, offsets) = scalar_log(dir.path(), Format::MindInsight);
    let hit = offsets[3];
    let corrupt = damaged_copy(&file, dir.path(), "corrupt", |b| {
        b[hit as usize + 13] ^= 0xff
    });
    let output = ember(&["inspect", path_str(&corrupt)]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("[mindinsight summary]"), "{stdout}");
    assert!(
        stdout.contains(&format!("corrupt record data at byte {hit}")),
        "{stdout}"
    );
    assert!(stdout.contains("scalar: 1 tag(s), 19 value(s)"), "{stdout}");
}

#[test]
fn inspect_failures_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let output = ember(&["inspect", path_str(&missing)]);
    assert_one_error_line(&output);
    assert!(text(&output.stderr).contains("cannot read"));

    let output = ember(&["inspect", path_str(dir.path())]);
    assert_one_error_line(&output);
    assert!(text(&output.stderr).contains("no event files"));

    let stray = dir.path().join("notes.txt");
    std::fs::write(&stray, "hello").unwrap();
    let output = ember(&["inspect", path_str(&stray)]);
    assert_one_error_line(&output);
}

#[test]
fn bench_write_prints_one_json_line_for_every_workload() {
    let dir = tempfile::tempdir().unwrap();
    // Events per step: one per add_* call, one per record.
    for (workload, format, per_step) in [
        ("scalars", "tensorboard", 1),
        ("scalars10", "mindinsight", 10),
        ("scalars10-record", "tensorboard", 1),
        ("hist", "tensorboard", 1),
        ("image", "mindinsight", 1),
        ("tensor", "tensorboard", 1),
    ] {
        let out = dir.path().join(workload);
        let output = ember(&[
            "bench",
            "write",
            "--workload",
            workload,
            "--n",
            "5",
            "--out",
            path_str(&out),
            "--format",
            format,
        ]);
        let stdout = text(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        let line: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(line["peer"], "ember");
        assert_eq!(line["workload"], workload);
        assert_eq!(line["n"], 5);
        let seconds = line["seconds"].as_f64().unwrap();
        let per_second = line["per_second"].as_f64().unwrap();
        assert!(seconds > 0.0);
        assert!((per_second * seconds - 5.0).abs() < 1e-6);
        let on_disk: u64 = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(line["bytes"].as_u64().unwrap(), on_disk);
        assert!(on_disk > 0);
        // Every step's record is in the file, whole.
        let events = files(&out, "events").remove(0);
        let scan = Scan::file(&events).unwrap();
        assert!(scan.problems.is_empty());
        assert_eq!(
            scan.records.len(),
            1 + 5 * per_step,
            "{workload}: the version record and 5 steps"
        );
    }
}

#[test]
fn bench_write_refuses_a_non_empty_out_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old"), "x").unwrap();
    let output = ember(&[
        "bench",
        "write",
        "--workload",
        "scalars",
        "--n",
        "1",
        "--out",
        path_str(dir.path()),
    ]);
    assert_one_error_line(&output);
    assert!(text(&output.stderr).contains("not empty"));
}

#[test]
fn bench_memory_prints_one_json_line() {
    let output = ember(&["bench", "memory", "--n", "3"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let line: serde_json::Value = serde_json::from_str(text(&output.stdout).trim()).unwrap();
    assert_eq!(line["peer"], "memory");
    assert_eq!(line["n"], 3);
    assert_eq!(line["bytes"], 400_000);
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
    assert!(text(&output.stderr).contains("cannot create log dir"));
}

/// A spawned `ember` that is killed if the test ends before it does, so a failing test never
/// leaves a long training behind.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for the process to exit; a hang past `limit` fails the test instead of hanging it.
fn exit_within(child: &mut Spawned, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "ember still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ember train` for 1000 epochs, sent SIGINT once it has finished its first epoch. Returns
/// the log dir, the exit status and stdout.
fn interrupted_train(dir: &Path, format: &str) -> (PathBuf, ExitStatus, String) {
    let logdir = dir.join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args([
            "train",
            "--subset",
            "300",
            "--epochs",
            "1000",
            "--format",
            format,
            "--logdir",
            path_str(&logdir),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ember binary runs");
    let mut child = Spawned(child);
    // Without a terminal the progress bar is hidden and each epoch is one stderr line.
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let (lines, training) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.starts_with("epoch ") && lines.send(()).is_err() {
                break;
            }
        }
    });
    training
        .recv_timeout(Duration::from_secs(120))
        .expect("ember train finishes an epoch");
    let pid = child.0.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let status = exit_within(&mut child, Duration::from_secs(60));
    let mut stdout = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    (logdir, status, stdout)
}

/// Every record of `file`, asserting the file is whole: no truncated tail, no damage.
fn whole_records(file: &Path) -> Vec<Vec<u8>> {
    let scan = Scan::file(file).unwrap();
    assert!(scan.problems.is_empty(), "{file:?}: {:?}", scan.problems);
    scan.records.into_iter().map(|r| r.data).collect()
}

#[test]
fn ctrl_c_stops_train_with_whole_tensorboard_logs_and_a_failure_status() {
    let dir = tempfile::tempdir().unwrap();
    let (logdir, status, stdout) = interrupted_train(dir.path(), "tensorboard");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        stdout.contains(&format!("logs: {}", logdir.display())),
        "{stdout}"
    );

    let event_files = files(&logdir, "tfevents");
    assert_eq!(event_files.len(), 1);
    let mut statuses = Vec::new();
    let mut interrupted = false;
    for data in whole_records(&event_files[0]) {
        let event = tensorboard::Event::decode(data.as_slice()).unwrap();
        let Some(tensorboard::event::What::Summary(summary)) = event.what else {
            continue;
        };
        for value in summary.value {
            interrupted |= value.tag == "run/interrupted";
            if value.tag != hparams_tags::SESSION_END_INFO {
                continue;
            }
            let plugin = value.metadata.unwrap().plugin_data.unwrap();
            let data = hparams::HParamsPluginData::decode(plugin.content.as_slice()).unwrap();
            if let Some(hparams::h_params_plugin_data::Data::SessionEndInfo(end)) = data.data {
                statuses.push(end.status());
            }
        }
    }
    assert_eq!(statuses, [hparams::Status::Failure]);
    assert!(interrupted, "no run/interrupted scalar");
}

#[test]
fn ctrl_c_stops_train_with_whole_mindinsight_logs_and_a_written_lineage_file() {
    let dir = tempfile::tempdir().unwrap();
    let (logdir, status, stdout) = interrupted_train(dir.path(), "mindinsight");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        stdout.contains(&format!("logs: {}", logdir.display())),
        "{stdout}"
    );

    let event_files = files(&logdir, ".out.events.summary.");
    assert!(!event_files.is_empty());
    let mut lineage_files = 0;
    let mut user_defined = 0;
    let mut interrupted = false;
    for file in &event_files {
        let records = whole_records(file);
        if file.to_string_lossy().ends_with("_lineage") {
            lineage_files += 1;
            assert!(!records.is_empty(), "{file:?} is empty");
            for data in records {
                let event = mindspore::LineageEvent::decode(data.as_slice()).unwrap();
                if let Some(mindspore::lineage_event::What::UserDefinedInfo(_)) = event.what {
                    user_defined += 1;
                }
            }
        } else {
            for data in records {
                let event = mindspore::Event::decode(data.as_slice()).unwrap();
                if let Some(mindspore::event::What::Summary(summary)) = event.what {
                    interrupted |= summary.value.iter().any(|v| v.tag == "run/interrupted");
                }
            }
        }
    }
    assert_eq!(lineage_files, 1);
    // The hyper-parameters at the start, and again with the run's end.
    assert_eq!(user_defined, 2);
    assert!(interrupted, "no run/interrupted scalar");
}

#[test]
fn inspect_skips_a_fifo_and_a_device_named_like_event_files() {
    let dir = tempfile::tempdir().unwrap();
    let (good, _) = scalar_log(dir.path(), Format::TensorBoard);
    let run = good.parent().unwrap();
    let fifo = run.join("events.out.tfevents.123.host.1.0");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let zero = run.join("events.out.tfevents.124.host.1.0");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();

    for json in [false, true] {
        let mut args = vec!["inspect", path_str(run)];
        if json {
            args.push("--json");
        }
        let child = Command::new(env!("CARGO_BIN_EXE_ember"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = Spawned(child);
        // Reading either would block or never end: a hang fails here.
        let status = exit_within(&mut child, Duration::from_secs(60));
        let (mut stdout, mut stderr) = (String::new(), String::new());
        child
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(status.success(), "{stdout}{stderr}");

        let warnings: Vec<&str> = stderr.lines().collect();
        assert_eq!(warnings.len(), 2, "{stderr}");
        assert!(warnings[0].starts_with("warning: skipped "), "{stderr}");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(path_str(&fifo)) && w.contains("FIFO")),
            "{stderr}"
        );
        assert!(
            warnings.iter().any(|w| w.contains(path_str(&zero))
                && w.contains("symbolic link to a character device")),
            "{stderr}"
        );

        if json {
            let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(report["ok"], true);
            let files = report["runs"][0]["files"].as_array().unwrap();
            assert_eq!(files.len(), 1);
            assert_eq!(files[0]["path"], path_str(&good));
            assert_eq!(files[0]["records"], 21);
            let mut skipped: Vec<&str> = report["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["path"].as_str().unwrap())
                .collect();
            skipped.sort();
            assert_eq!(skipped, [path_str(&fifo), path_str(&zero)]);
        } else {
            assert!(stdout.contains("1 file(s), 21 valid record(s)"), "{stdout}");
        }
    }
}

#[test]
fn inspect_json_values_prints_every_scalar_as_step_wall_time_value() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = scalar_log(dir.path(), Format::TensorBoard);
    let output = ember(&["inspect", path_str(&file), "--json", "--values"]);
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let loss = report["runs"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tag"] == "loss")
        .unwrap();
    let values = loss["values"].as_array().unwrap();
    assert_eq!(values.len(), 20);
    for (step, point) in values.iter().enumerate() {
        assert_eq!(point[0], step as i64);
        assert!(point[1].as_f64().unwrap() > 1.6e9, "a wall time: {point}");
        assert_eq!(point[2], 20.0 - step as f64);
    }
    // Without --values the series is left out; --values without --json is refused by clap.
    let plain = ember(&["inspect", path_str(&file), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(report["runs"][0]["tags"][0].get("values").is_none());
    assert_eq!(
        ember(&["inspect", path_str(&file), "--values"])
            .status
            .code(),
        Some(2)
    );
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
