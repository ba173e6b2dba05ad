//! The figures of one run: a workload's JSON line parsed, a side run once, the median of its
//! rounds, and criterion's means read back from `target/criterion`.

use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use anyhow::{Context, bail, ensure};
use serde_json::Value;

/// One measurement, as the JSON line of `ember bench write` or `tbx_write.py`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Figure {
    pub(super) seconds: f64,
    pub(super) bytes: u64,
}

/// Reads the last line of `stdout` as a figure, checking it is for `peer`, `workload` and `n`.
pub(super) fn parse_figure(
    stdout: &str,
    peer: &str,
    workload: &str,
    n: u64,
) -> anyhow::Result<Figure> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .context("no output")?;
    let v: Value = serde_json::from_str(line).with_context(|| format!("not JSON: {line}"))?;
    ensure!(
        v["peer"] == peer && v["workload"] == workload && v["n"] == n,
        "expected peer {peer}, workload {workload}, n {n}; got {line}"
    );
    let seconds = v["seconds"].as_f64().context("no seconds")?;
    let bytes = v["bytes"].as_u64().context("no bytes")?;
    ensure!(seconds > 0.0 && bytes > 0, "implausible figure: {line}");
    Ok(Figure { seconds, bytes })
}

pub(super) fn run_figure(
    mut command: Command,
    peer: &str,
    workload: &str,
    n: u64,
) -> anyhow::Result<Figure> {
    let output = command
        .output()
        .with_context(|| format!("starting the {peer} {workload} run"))?;
    if !output.status.success() {
        bail!(
            "the {peer} {workload} run failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    parse_figure(&String::from_utf8_lossy(&output.stdout), peer, workload, n)
}

pub(super) fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// Criterion's mean estimate of every benchmark written at or after `since`, in nanoseconds.
pub(super) fn criterion_means(criterion_dir: &Path, since: SystemTime) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    let mut stack = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "new") {
                    if let Some(figure) = criterion_mean(&path, since) {
                        found.push(figure);
                    }
                } else {
                    stack.push(path);
                }
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

pub(super) fn criterion_mean(new_dir: &Path, since: SystemTime) -> Option<(String, f64)> {
    let estimates = new_dir.join("estimates.json");
    let fresh = std::fs::metadata(&estimates)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since);
    if !fresh {
        return None;
    }
    let read = |name: &str| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(new_dir.join(name)).ok()?).ok()
    };
    let id = read("benchmark.json")?["full_id"].as_str()?.to_string();
    let mean = read("estimates.json")?["mean"]["point_estimate"].as_f64()?;
    Some((id, mean))
}
