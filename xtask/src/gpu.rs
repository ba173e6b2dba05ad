//! `cargo xtask gpu [--epochs E]`: ember on this machine's CUDA devices, for a machine that has
//! some (CI has none; `cargo clippy --features cuda` is what CI checks of this path).
//!
//! 1. Counts the GPUs with `nvidia-smi -L`; with none, it says so and fails.
//! 2. With two or more, runs the distinct-device suite
//!    (`tests/tests/integration/distinct_devices.rs`) on `cuda:0,cuda:1` in a release build: two devices train like one on the concatenated batch
//!    (parameters within the suite's tolerance), and every failure path of the pool.
//! 3. Trains `ember train --features cuda` (release) on 1, 2, … N GPUs, the same epochs each,
//!    and prints, per device count: examples per second, seconds per step, test accuracy and
//!    each device's memory at the end (its pools' reserved bytes, their high-water mark).
//!    The table goes to `target/bench/gpu.md`.
//! 4. The scaling table of `cargo xtask scaling` on the GPUs: `ember bench scaling` (the deep
//!    model, 8.5 M parameters) on 1..N of them by ember's Trainer and by burn-train's `multi`
//!    (main device, sharded) and `ddp` strategies (CUDA has the collectives DDP needs; a side
//!    that fails is a row with its error), `--rounds R` rounds (default 1), examples/s with
//!    the scaling efficiency against the same side on one GPU, appended to `gpu.md`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::process::{build, cargo, expect_success, run_limited, target_dir};

const TASK: &str = "gpu";

pub(crate) fn run(root: &Path, rounds: usize, epochs: usize) -> anyhow::Result<()> {
    let gpus = count_gpus();
    if gpus == 0 {
        bail!("{TASK}: no CUDA device at hand (`nvidia-smi -L` lists none); nothing to measure");
    }
    eprintln!("{TASK}: {gpus} CUDA device(s)");
    let target = target_dir(root);
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;

    distinct_device_suite(root, gpus)?;
    build(
        root,
        &[
            "build",
            "--release",
            "-p",
            "ember-cli",
            "--features",
            "cuda",
        ],
    )?;
    let ember = target.join("release/ember");
    let mut md = train_table(&ember, &out, gpus, epochs)?;
    let runs = scaling_runs(&ember, &out, gpus, rounds)?;
    md.push_str(&scaling_table(&runs));
    std::fs::write(out.join("gpu.md"), &md)?;
    print!("{md}");
    eprintln!("{TASK}: wrote {}", out.join("gpu.md").display());
    Ok(())
}

/// With two GPUs or more, the distinct-device suite on `cuda:0,cuda:1` in a release build.
fn distinct_device_suite(root: &Path, gpus: usize) -> anyhow::Result<()> {
    if gpus >= 2 {
        let status = cargo()
            .args([
                "test",
                "--release",
                "-p",
                "ember-tests",
                "--features",
                "cuda",
                "--test",
                "integration",
                "distinct_devices::",
                "--",
                "--test-threads=1",
                "--nocapture",
            ])
            .env("EMBER_TEST_DEVICES", "cuda:0,cuda:1")
            .current_dir(root)
            .status()
            .context("starting cargo test")?;
        ensure!(
            status.success(),
            "the distinct-device suite on cuda:0,cuda:1 failed"
        );
    } else {
        eprintln!("{TASK}: one GPU: the two-device suite needs two, skipped");
    }
    Ok(())
}

/// `ember train` on 1..=`gpus` GPUs, `epochs` each: the markdown table of its figures.
fn train_table(ember: &Path, out: &Path, gpus: usize, epochs: usize) -> anyhow::Result<String> {
    let mut md = format!(
        "| GPUs | examples/s | s per step | test accuracy | memory per device at the end (reserved) |\n\
         |---:|---:|---:|---:|---|\n<!-- {epochs} epochs of `ember train`, {} -->\n",
        gpu_names().join(", ")
    );
    for n in 1..=gpus {
        let list: Vec<String> = (0..n).map(|i| format!("cuda:{i}")).collect();
        let mut command = Command::new(ember);
        command
            .args(["train", "--epochs", &epochs.to_string(), "--device"])
            .arg(list.join(","))
            .arg("--logdir")
            .arg(out.join(format!("gpu-run-{n}")));
        let what = format!("ember train on {n} GPU(s)");
        let ran = run_limited(command, &what, &out.join(format!("gpu-{n}.log")))?;
        expect_success(&ran, &what)?;
        let figures = Figures::parse(&ran.output, epochs)
            .with_context(|| format!("{what}: unexpected output:\n{}", ran.output))?;
        let line = format!(
            "| {n} | {:.0} | {:.4} | {:.2}% | {} |\n",
            figures.examples_per_second,
            figures.seconds_per_step,
            figures.accuracy,
            figures.memory.join("; ")
        );
        eprint!("{line}");
        md.push_str(&line);
    }
    Ok(md)
}

/// `ember bench scaling` of every side on 1..=`gpus` GPUs, `rounds` times: each run's JSON line.
fn scaling_runs(
    ember: &Path,
    out: &Path,
    gpus: usize,
    rounds: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        for n in 1..=gpus {
            let list: Vec<String> = (0..n).map(|i| format!("cuda:{i}")).collect();
            let mut sides = vec!["ember", "burn-multi", "burn-sharded", "burn-ddp"];
            if round % 2 == 1 {
                sides.reverse();
            }
            for side in sides {
                let mut command = Command::new(ember);
                command
                    .args(["bench", "scaling", "--side", side, "--model", "deep"])
                    .args(["--workers", &n.to_string(), "--device"])
                    .arg(list.join(","));
                let what = format!("ember bench scaling --side {side} on {n} GPU(s)");
                let ran = run_limited(command, &what, &out.join(format!("gpu-scaling-{n}.log")))?;
                expect_success(&ran, &what)?;
                let line = ran
                    .output
                    .lines()
                    .rev()
                    .find(|l| l.starts_with('{'))
                    .with_context(|| format!("{what}: no JSON line:\n{}", ran.output))?;
                runs.push(serde_json::from_str(line).with_context(|| format!("{what}: {line}"))?);
            }
        }
    }
    Ok(runs)
}

/// The scaling runs as a table: per GPU count and side, the median examples/s of its rounds,
/// the scaling efficiency against the same side on one GPU, and ember's share of a step outside
/// forward/backward; a side that failed shows its error.
fn scaling_table(runs: &[serde_json::Value]) -> String {
    use std::collections::BTreeMap;
    let mut cells: BTreeMap<(u64, String), Vec<&serde_json::Value>> = BTreeMap::new();
    for run in runs {
        let gpus = run["workers"].as_u64().unwrap_or(0);
        let side = run["side"].as_str().unwrap_or("?").to_string();
        cells.entry((gpus, side)).or_default().push(run);
    }
    let median =
        |values: &mut Vec<f64>| crate::stats::Spread::of(values.iter().copied()).map(|s| s.median);
    let mut eps: BTreeMap<(u64, String), f64> = BTreeMap::new();
    for (key, lines) in &cells {
        let mut values: Vec<f64> = lines
            .iter()
            .filter_map(|l| l["examples_per_second"].as_f64())
            .collect();
        if let Some(m) = median(&mut values) {
            eps.insert(key.clone(), m);
        }
    }
    let mut md = String::from(
        "\n| GPUs | side | examples/s | efficiency | outside forward/backward |\n|---:|---|---:|---:|---:|\n",
    );
    for ((gpus, side), lines) in &cells {
        let key = (*gpus, side.clone());
        let row = match (
            eps.get(&key),
            lines.iter().find_map(|l| l["error"].as_str()),
        ) {
            (Some(value), _) => {
                let efficiency = eps
                    .get(&(1, side.clone()))
                    .filter(|one| **one > 0.0)
                    .map(|one| format!("{:.0}%", 100.0 * value / (*gpus as f64 * one)))
                    .unwrap_or_else(|| "–".into());
                let mut outside: Vec<f64> = lines
                    .iter()
                    .filter_map(|l| l["outside_share"].as_f64())
                    .collect();
                let outside = median(&mut outside)
                    .map(|share| format!("{:.0}%", share * 100.0))
                    .unwrap_or_else(|| "–".into());
                format!("| {gpus} | {side} | {value:.0} | {efficiency} | {outside} |\n")
            }
            (None, Some(error)) => format!("| {gpus} | {side} | error: {error} | | |\n"),
            (None, None) => format!("| {gpus} | {side} | – | | |\n"),
        };
        md.push_str(&row);
    }
    md
}

fn count_gpus() -> usize {
    gpu_names().len()
}

/// `nvidia-smi -L`'s lines (`GPU 0: NVIDIA H200 (UUID: ...)`), empty without a driver.
fn gpu_names() -> Vec<String> {
    Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with("GPU "))
                .map(|l| l.split(" (UUID").next().unwrap_or(l).to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// What one `ember train` run printed, as figures.
struct Figures {
    examples_per_second: f64,
    seconds_per_step: f64,
    accuracy: f64,
    memory: Vec<String>,
}

impl Figures {
    /// From `training a ... MLP on 1438 digits ...`, `device memory: cuda:0: ...` and
    /// `test accuracy: 97.21% (...) after E epoch(s), S steps, T s`.
    fn parse(output: &str, epochs: usize) -> Option<Self> {
        let examples: f64 = output
            .lines()
            .find_map(|l| l.split(" MLP on ").nth(1))?
            .split(' ')
            .next()?
            .parse()
            .ok()?;
        let last = output
            .lines()
            .find_map(|l| l.strip_prefix("test accuracy: "))?;
        let accuracy: f64 = last.split('%').next()?.parse().ok()?;
        let tail = last.split(" epoch(s), ").nth(1)?;
        let steps: f64 = tail.split(' ').next()?.parse().ok()?;
        let seconds: f64 = tail
            .split(", ")
            .nth(1)?
            .trim_end_matches(" s")
            .parse()
            .ok()?;
        let memory = output
            .lines()
            .filter_map(|l| l.strip_prefix("device memory: "))
            .map(str::to_string)
            .collect();
        Some(Self {
            examples_per_second: examples * epochs as f64 / seconds,
            seconds_per_step: seconds / steps,
            accuracy,
            memory,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Figures, scaling_table};

    #[test]
    fn the_scaling_table_has_medians_efficiency_and_errors() {
        let run = |side: &str, workers: u64, eps: f64| {
            serde_json::json!({"side": side, "workers": workers, "examples_per_second": eps,
                               "outside_share": 0.125})
        };
        let runs = [
            run("ember", 1, 1000.0),
            run("ember", 1, 1200.0),
            run("ember", 1, 1100.0),
            run("ember", 2, 2000.0),
            run("burn-multi", 1, 900.0),
            run("burn-multi", 2, 1350.0),
            serde_json::json!({"side": "burn-ddp", "workers": 2, "error": "no NCCL"}),
        ];
        let md = scaling_table(&runs);
        assert!(md.contains("| 1 | ember | 1100 | 100% | 12% |"), "{md}");
        assert!(md.contains("| 2 | ember | 2000 | 91% | 12% |"), "{md}");
        assert!(md.contains("| 2 | burn-multi | 1350 | 75% | 12% |"), "{md}");
        assert!(md.contains("| 2 | burn-ddp | error: no NCCL | | |"), "{md}");
    }

    #[test]
    fn figures_come_from_ember_trains_own_lines() {
        let output = "training a 64-64-10 MLP on 1438 digits (359 held out for testing), 2 \
                      worker(s), 2 epoch(s)\n  worker 0: cuda:0 (CUDA device 0)\n\
                      device memory: cuda:0: 12.0 MiB reserved, 1.5 MiB in use\n\
                      test accuracy: 91.36% (359 held-out digits) after 2 epoch(s), 46 steps, 9.2 s\n";
        let figures = Figures::parse(output, 2).unwrap();
        assert!((figures.examples_per_second - 1438.0 * 2.0 / 9.2).abs() < 1e-9);
        assert!((figures.seconds_per_step - 9.2 / 46.0).abs() < 1e-12);
        assert_eq!(figures.accuracy, 91.36);
        assert_eq!(
            figures.memory,
            ["cuda:0: 12.0 MiB reserved, 1.5 MiB in use"]
        );
    }
}
