//! `cargo xtask scaling [--rounds R] [--quick]`: how much faster two workers train than one,
//! ember against burn-train 0.23's own strategies, side by side in one run.
//!
//! Every run is one process of `ember bench scaling` (release build): the same digits, model,
//! batches per worker and epochs for every side. Three models: the digits perceptron of
//! `ember train --hidden 16384` (1.2 M parameters, most of them in one matrix); a deeper one of
//! three 2048-wide hidden layers (8.5 M parameters in square matrices, whose step at 128
//! examples a batch is a third Adam: memory traffic); and the compute-bound one, a
//! convolutional net of 6.1 M parameters whose weights each serve 16 or 64 positions of the
//! digit (about 100 FLOP per parameter and example, against the perceptrons' 6), trained on
//! 640 digits in batches of 64 a worker to keep a run near 10 s.
//!
//! "One core per worker" pins 1 worker to core 0 and 2 workers to cores 0 and 1 (`taskset`),
//! ember's workers each with a compute pool of one thread; burn-train's strategies have no
//! such setting and share the process's pool over the same cores. "Free" is 1 ember worker
//! unpinned, its products on every core. Summaries on are rows of their own: ember's Trainer
//! recording its usual series, burn-train with ember's `SummaryLogger`.
//!
//! Each round runs every configuration once, in reverse order every other round; a cell is
//! the median examples per second over the rounds, with the slowest and fastest. Scaling
//! efficiency is examples/s at 2 workers ÷ (2 × examples/s at 1). The share outside
//! forward/backward is ember's own account of its steps (1 − the mean device's step ÷ the
//! whole step: placing the model, waiting for the slowest device, reducing, the optimizer).
//! The report goes to `target/bench/scaling.md` and `scaling.json`.
//!
//! `--mpi` builds `ember-cli` with its `mpi` feature (Open MPI from Debian, installed as for
//! `cargo xtask mpi`) and adds ember's Trainer as 1 and 2 ranks under `mpirun` of one worker
//! each (`ember-mpi`), pinned by `--bind-to core`, the job's examples per second reported by
//! rank 0; burn-train has no multi-process strategy to set beside it.
//!
//! `--wgpu` builds it with its `wgpu` feature and adds every side on `wgpu:0` and on
//! `wgpu:0,wgpu:1` (two logical devices; Mesa's lavapipe where there is no GPU), DDP included,
//! which wgpu's collectives may allow. `--wgpu-only` runs those rows alone.
//!
//! `--quick` (CI) runs one round of small models on a subset: it checks that every side still
//! runs and reports, not how fast.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::process::{build, on_path, run_limited, target_dir};

mod config;
mod report;

use config::{Config, ModelSizes, Sizes, configs};
use report::report;

const TASK: &str = "scaling";

/// `cargo xtask scaling`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// One small round, as CI runs it.
    #[arg(long)]
    quick: bool,
    /// ember as mpirun ranks too.
    #[arg(long)]
    mpi: bool,
    /// On two wgpu devices too.
    #[arg(long)]
    wgpu: bool,
    /// On two wgpu devices alone.
    #[arg(long)]
    wgpu_only: bool,
    /// Rounds (5, or 1 with --quick).
    #[arg(long)]
    rounds: Option<std::num::NonZeroUsize>,
}

pub(crate) fn run(root: &Path, options: &Options) -> anyhow::Result<()> {
    let quick = options.quick;
    let with_mpi = options.mpi;
    let wgpu_only = options.wgpu_only;
    let with_wgpu = wgpu_only || options.wgpu;
    if with_mpi {
        crate::mpirun::ensure_mpi().map_err(|why| anyhow::anyhow!("{TASK} --mpi: {why}"))?;
    }
    let rounds = options
        .rounds
        .map_or(if quick { 1 } else { 5 }, std::num::NonZeroUsize::get);
    let sizes = Sizes::for_run(quick);
    let pin = on_path("taskset");
    if !pin {
        eprintln!("{TASK}: no taskset: workers are not pinned to cores (the pinned rows are not)");
    }
    let ember = build_ember(root, with_mpi, with_wgpu)?;
    let target = target_dir(root);
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;
    // Summary directories and each run's output, under the target directory.
    let scratch = out.join("scaling-runs");
    std::fs::create_dir_all(&scratch)?;

    let configs = configs(!wgpu_only, with_mpi, with_wgpu);
    let mut runs: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for round in 0..rounds {
        let mut order: Vec<&Config> = configs.iter().collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for config in order {
            // DDP refuses the CPU backend at once: once is enough to say so.
            if config.side == "burn-ddp" && round > 0 {
                continue;
            }
            let line = run_one(&ember, config, &sizes, quick, pin, &scratch)?;
            eprintln!(
                "{TASK}: round {}: {}: {}",
                round + 1,
                config.key(),
                brief(&line)
            );
            runs.entry(config.key()).or_default().push(line);
        }
    }

    let report = report(&configs, &runs, rounds, pin);
    std::fs::write(out.join("scaling.md"), &report)?;
    std::fs::write(
        out.join("scaling.json"),
        serde_json::to_string_pretty(&json!({ "rounds": rounds, "runs": runs }))?,
    )?;
    println!("{report}");
    eprintln!("{TASK}: report in {}", out.join("scaling.md").display());

    every_side_ran(&runs)
}

/// Builds `ember-cli` in release with the features the run needs; the path of its binary.
fn build_ember(root: &Path, with_mpi: bool, with_wgpu: bool) -> anyhow::Result<PathBuf> {
    let features: Vec<&str> = [(with_mpi, "mpi"), (with_wgpu, "wgpu")]
        .into_iter()
        .filter_map(|(on, feature)| on.then_some(feature))
        .collect();
    let features = features.join(",");
    let mut cargo_args = vec!["build", "--release", "-p", "ember-cli"];
    if !features.is_empty() {
        cargo_args.extend(["--features", &features]);
    }
    build(root, &cargo_args)?;
    Ok(target_dir(root).join("release/ember"))
}

/// Every side must still run and report; DDP's refusal on the CPU is its answer.
fn every_side_ran(runs: &BTreeMap<String, Vec<Value>>) -> anyhow::Result<()> {
    for (key, lines) in runs {
        for line in lines {
            let failed = line.get("error").and_then(Value::as_str);
            if let Some(error) = failed
                && !key.contains("burn-ddp")
            {
                bail!("{TASK}: {key} failed: {error}");
            }
        }
    }
    Ok(())
}

fn run_one(
    ember: &Path,
    config: &Config,
    sizes: &Sizes,
    quick: bool,
    pin: bool,
    scratch: &Path,
) -> anyhow::Result<Value> {
    let sizes = if config.wgpu && !quick {
        Sizes::on_lavapipe().of(config.model)
    } else {
        sizes.of(config.model)
    };
    let mut command = launcher(ember, config, pin);
    add_run_args(&mut command, config, &sizes);
    let logdir = scratch.join(config.key().replace(' ', "_"));
    if config.summaries {
        let _ = std::fs::remove_dir_all(&logdir);
        command.arg("--summaries").arg(&logdir);
    }
    let log = scratch.join("run.log");
    let ran = run_limited(
        command,
        &format!("ember bench scaling ({})", config.key()),
        &log,
    )?;
    ensure!(
        ran.success,
        "ember bench scaling ({}) failed ({}):\n{}",
        config.key(),
        ran.status,
        ran.output
    );
    let line = ran
        .output
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .with_context(|| format!("no JSON line from {}:\n{}", config.key(), ran.output))?;
    let _ = std::fs::remove_dir_all(&logdir);
    serde_json::from_str(line).with_context(|| format!("{} printed {line}", config.key()))
}

/// The command that starts `ember`: under mpirun for ember-mpi, under taskset when pinned.
fn launcher(ember: &Path, config: &Config, pin: bool) -> Command {
    if config.side == "ember-mpi" {
        let mut command = Command::new("mpirun");
        command.args(["-n", &config.workers.to_string()]);
        command.args(["--bind-to", if config.pinned { "core" } else { "none" }]);
        if crate::process::is_root() {
            command.arg("--allow-run-as-root");
        }
        command.arg(ember);
        command
    } else if config.pinned && pin {
        let cores = if config.workers == 1 { "0" } else { "0,1" };
        let mut command = Command::new("taskset");
        command.args(["-c", cores]).arg(ember);
        command
    } else {
        Command::new(ember)
    }
}

/// `ember bench scaling`'s arguments for `config` at `sizes`, summaries aside.
fn add_run_args(command: &mut Command, config: &Config, sizes: &ModelSizes) {
    let (side, workers) = match config.side {
        // Each rank one worker; the job's workers are its ranks.
        "ember-mpi" => ("ember", 1),
        side => (side, config.workers),
    };
    command.args(["bench", "scaling", "--side", side]).args([
        "--workers".to_string(),
        workers.to_string(),
        "--model".into(),
        config.model.into(),
        "--width".into(),
        sizes.width.to_string(),
        "--epochs".into(),
        sizes.epochs.to_string(),
    ]);
    if let Some(subset) = sizes.subset {
        command.args(["--subset".to_string(), subset.to_string()]);
    }
    if let Some(batch) = sizes.batch {
        command.args(["--batch-size".to_string(), batch.to_string()]);
    }
    if config.wgpu {
        let devices = if config.workers == 1 {
            "wgpu:0"
        } else {
            "wgpu:0,wgpu:1"
        };
        // Mesa's device-select layer prints about a missing Wayland session otherwise.
        command
            .args(["--device", devices])
            .env("NODEVICE_SELECT", "1");
    }
    if config.pinned && side == "ember" {
        command.args(["--worker-threads", "1"]);
    }
}

fn brief(line: &Value) -> String {
    match (line.get("examples_per_second"), line.get("error")) {
        (_, Some(error)) => format!("error: {}", error.as_str().unwrap_or("?")),
        (Some(eps), _) => format!("{:.0} examples/s", eps.as_f64().unwrap_or(0.0)),
        _ => "no figure".into(),
    }
}
