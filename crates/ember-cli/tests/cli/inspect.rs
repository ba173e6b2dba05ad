//! `ember inspect`: good files, truncated tails, corruption at its offset, both formats,
//! one-line failures, files that are no files, and `--json`.

use super::*;

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
