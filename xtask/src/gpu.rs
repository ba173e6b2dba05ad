//! `cargo xtask gpu [--epochs E]`: ember on this machine's CUDA devices, for a machine that has
//! some (CI has none; `cargo clippy --features cuda` is what CI checks of this path).
//!
//! 1. Counts the GPUs with `nvidia-smi -L`; with none, it says so and fails.
//! 2. With two or more, runs the distinct-device suite (`tests/tests/distinct_devices.rs`) on
//!    `cuda:0,cuda:1` in a release build: two devices train like one on the concatenated batch
//!    (parameters within the suite's tolerance), and every failure path of the pool.
//! 3. Trains `ember train --features cuda` (release) on 1, 2, … N GPUs, the same epochs each,
//!    and prints, per device count: examples per second, seconds per step, test accuracy and
//!    each device's memory at the end (its pools' reserved bytes, their high-water mark).
//!    The table goes to `target/bench/gpu.md`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::compat::{cargo, target_dir};
use crate::process::{build, expect_success, run_limited};

const TASK: &str = "gpu";

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let epochs: usize = match args.iter().position(|a| a == "--epochs") {
        Some(at) => args
            .get(at + 1)
            .context("--epochs needs a number")?
            .parse()
            .context("--epochs needs a number")?,
        None => 10,
    };
    let gpus = count_gpus();
    if gpus == 0 {
        bail!("{TASK}: no CUDA device at hand (`nvidia-smi -L` lists none); nothing to measure");
    }
    eprintln!("{TASK}: {gpus} CUDA device(s)");
    let target = target_dir(root);
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;

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
                "distinct_devices",
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
    let mut md = format!(
        "| GPUs | examples/s | s per step | test accuracy | memory per device at the end (reserved) |\n\
         |---:|---:|---:|---:|---|\n<!-- {epochs} epochs of `ember train`, {} -->\n",
        gpu_names().join(", ")
    );
    for n in 1..=gpus {
        let list: Vec<String> = (0..n).map(|i| format!("cuda:{i}")).collect();
        let mut command = Command::new(&ember);
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
    std::fs::write(out.join("gpu.md"), &md)?;
    print!("{md}");
    eprintln!("{TASK}: wrote {}", out.join("gpu.md").display());
    Ok(())
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
    use super::Figures;

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
