//! `ember bench`: one JSON line per write workload, and the memory pass.

use super::*;

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
            .map(|e| e.unwrap().metadata().unwrap())
            .filter(|meta| meta.is_file())
            .map(|meta| meta.len())
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
