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
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::process::{build, on_path, positive_arg, run_limited, target_dir};

const TASK: &str = "scaling";

/// One process to run each round.
#[derive(Debug, Clone)]
struct Config {
    model: &'static str,
    side: &'static str,
    workers: u16,
    /// One core per worker (pinned, ember with a one-thread compute pool per worker) or not.
    pinned: bool,
    summaries: bool,
    /// On `wgpu:0` (and `wgpu:1`) instead of the flex CPU backend.
    wgpu: bool,
}

impl Config {
    fn key(&self) -> String {
        format!(
            "{} {} x{} {}{}{}",
            self.model,
            self.side,
            self.workers,
            if self.pinned { "pinned" } else { "free" },
            if self.summaries { " summaries" } else { "" },
            if self.wgpu { " wgpu" } else { "" }
        )
    }
}

/// The sizes one model trains at.
#[derive(Debug, Clone, Copy)]
struct ModelSizes {
    width: u32,
    epochs: u16,
    /// Examples per batch on each worker (`ember bench scaling`'s default, 128, when `None`).
    batch: Option<u16>,
    /// Only the first N digits (all of them when `None`).
    subset: Option<u32>,
}

/// The sizes a run trains each model at.
struct Sizes {
    digits: ModelSizes,
    deep: ModelSizes,
    conv: ModelSizes,
}

impl Sizes {
    fn of(&self, model: &str) -> ModelSizes {
        match model {
            "digits" => self.digits,
            "deep" => self.deep,
            _ => self.conv,
        }
    }

    /// Smaller models for lavapipe, which computes a CPU's work through a Vulkan driver: at
    /// the CPU rows' sizes one digits run took 67 s (86 examples/s). These keep a run near
    /// 10 s, so the wgpu rows compare the sides, not the models' scale.
    fn on_lavapipe() -> Self {
        let model = |width, epochs, batch, subset| ModelSizes {
            width,
            epochs,
            batch,
            subset,
        };
        Sizes {
            digits: model(2048, 3, None, None),
            deep: model(512, 2, None, None),
            conv: model(64, 1, Some(32), Some(400)),
        }
    }
}

/// The models, in the report's order.
const MODELS: [&str; 3] = ["digits", "deep", "conv"];

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let with_mpi = args.iter().any(|a| a == "--mpi");
    let wgpu_only = args.iter().any(|a| a == "--wgpu-only");
    let with_wgpu = wgpu_only || args.iter().any(|a| a == "--wgpu");
    if with_mpi {
        crate::mpi::ensure_mpi().map_err(|why| anyhow::anyhow!("{TASK} --mpi: {why}"))?;
    }
    let rounds = positive_arg(args, "--rounds", if quick { 1 } else { 5 })?;
    let sizes = if quick {
        let small = |width| ModelSizes {
            width,
            epochs: 1,
            batch: None,
            subset: Some(300),
        };
        Sizes {
            digits: small(256),
            deep: small(128),
            conv: ModelSizes {
                batch: Some(16),
                ..small(16)
            },
        }
    } else {
        let all = |width, epochs| ModelSizes {
            width,
            epochs,
            batch: None,
            subset: None,
        };
        Sizes {
            digits: all(16384, 4),
            deep: all(2048, 2),
            // 58 examples/s on one core: 640 training digits in batches of 64 a worker keep a
            // run near 10 s, with 10 steps on 1 worker and 5 on 2.
            conv: ModelSizes {
                width: 512,
                epochs: 1,
                batch: Some(64),
                subset: Some(800),
            },
        }
    };
    let pin = on_path("taskset");
    if !pin {
        eprintln!("{TASK}: no taskset: workers are not pinned to cores (the pinned rows are not)");
    }
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
    let target = target_dir(root);
    let ember = target.join("release/ember");
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

    // Every side must still run and report; DDP's refusal on the CPU is its answer.
    for (key, lines) in &runs {
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

fn configs(with_cpu: bool, with_mpi: bool, with_wgpu: bool) -> Vec<Config> {
    let mut configs = Vec::new();
    for model in MODELS {
        let config = |side, workers, pinned, summaries| Config {
            model,
            side,
            workers,
            pinned,
            summaries,
            wgpu: false,
        };
        if with_cpu {
            for workers in [1, 2] {
                configs.push(config("ember", workers, true, false));
                configs.push(config("burn-multi", workers, true, false));
                configs.push(config("burn-sharded", workers, true, false));
            }
            configs.push(config("burn-single", 1, true, false));
            configs.push(config("burn-ddp", 2, true, false));
            configs.push(config("ember", 1, false, false));
            configs.push(config("ember", 1, true, true));
            configs.push(config("ember", 2, true, true));
            configs.push(config("burn-multi", 2, true, true));
        }
        if with_mpi {
            configs.push(config("ember-mpi", 1, true, false));
            configs.push(config("ember-mpi", 2, true, false));
        }
        if with_wgpu {
            // lavapipe computes on llvmpipe's own threads: nothing to pin.
            let on_wgpu = |side, workers| Config {
                wgpu: true,
                ..config(side, workers, false, false)
            };
            for workers in [1, 2] {
                for side in ["ember", "burn-multi", "burn-sharded"] {
                    configs.push(on_wgpu(side, workers));
                }
            }
            configs.push(on_wgpu("burn-single", 1));
            configs.push(on_wgpu("burn-ddp", 2));
        }
    }
    configs
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
    let mut command = if config.side == "ember-mpi" {
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
    };
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

fn brief(line: &Value) -> String {
    match (line.get("examples_per_second"), line.get("error")) {
        (_, Some(error)) => format!("error: {}", error.as_str().unwrap_or("?")),
        (Some(eps), _) => format!("{:.0} examples/s", eps.as_f64().unwrap_or(0.0)),
        _ => "no figure".into(),
    }
}

/// Median, minimum and maximum of `values` (not empty).
fn spread(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Some((median, values[0], values[n - 1]))
}

fn figure(lines: &[Value], field: &str) -> Option<(f64, f64, f64)> {
    spread(
        lines
            .iter()
            .filter_map(|line| line.get(field).and_then(Value::as_f64))
            .collect(),
    )
}

fn report(
    configs: &[Config],
    runs: &BTreeMap<String, Vec<Value>>,
    rounds: usize,
    pin: bool,
) -> String {
    let mut md = format!(
        "# Data-parallel scaling: ember against burn-train 0.23\n\n`cargo xtask scaling --rounds {rounds}`; \
         examples/s are the median of {rounds} round(s) (slowest–fastest). Pinned: one core per worker \
         (`taskset`{}), ember's workers with one compute thread each. Efficiency: examples/s at 2 ÷ (2 × at 1) \
         of the same side. Outside: share of ember's step outside the mean device's forward/backward.\n",
        if pin {
            ""
        } else {
            ": not available, so not pinned"
        }
    );
    for model in MODELS {
        // The CPU rows' sizes head the model's table; wgpu rows name their own.
        let of_model = |(key, _): &(&String, &Vec<Value>)| key.starts_with(&format!("{model} "));
        let lines = runs
            .iter()
            .filter(of_model)
            .min_by_key(|(key, _)| key.ends_with(" wgpu"))
            .and_then(|(_, lines)| lines.first());
        let parameters = lines
            .and_then(|l| l.get("parameters"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let width = lines
            .and_then(|l| l.get("width"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let batch = lines
            .and_then(|l| l.get("batch_size"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        md.push_str(&format!(
            "\n## {model}: width {width}, {parameters} parameters, batches of {batch} a worker\n\n| side | workers (ranks for ember-mpi) | cores | summaries | examples/s | efficiency | outside | optimizer | reduce |\n|---|---:|---|---|---:|---:|---:|---:|---:|\n"
        ));
        for config in configs.iter().filter(|c| c.model == model) {
            let Some(lines) = runs.get(&config.key()) else {
                continue;
            };
            let cores = if config.wgpu {
                let width = lines
                    .first()
                    .and_then(|l| l.get("width"))
                    .and_then(Value::as_u64);
                format!("wgpu (lavapipe), width {}", width.unwrap_or(0))
            } else if config.pinned {
                format!("{} pinned", config.workers)
            } else {
                "all, free".into()
            };
            let summaries = if config.summaries { "on" } else { "off" };
            if let Some(error) = lines
                .iter()
                .find_map(|l| l.get("error").and_then(Value::as_str))
            {
                md.push_str(&format!(
                    "| {} | {} | {cores} | {summaries} | error: {error} | | | | |\n",
                    config.side, config.workers
                ));
                continue;
            }
            let eps = figure(lines, "examples_per_second");
            let cell = |f: Option<(f64, f64, f64)>, scale: f64, digits: usize| match f {
                Some((m, lo, hi)) => format!(
                    "{:.*} ({:.*}–{:.*})",
                    digits,
                    m * scale,
                    digits,
                    lo * scale,
                    digits,
                    hi * scale
                ),
                None => "–".into(),
            };
            let efficiency = if config.workers == 2 {
                let one = Config {
                    workers: 1,
                    side: if config.side == "burn-ddp" {
                        "burn-multi"
                    } else {
                        config.side
                    },
                    ..config.clone()
                };
                match (
                    eps,
                    runs.get(&one.key())
                        .and_then(|l| figure(l, "examples_per_second")),
                ) {
                    (Some((two, ..)), Some((one, ..))) if one > 0.0 => {
                        format!("{:.0}%", 100.0 * two / (2.0 * one))
                    }
                    _ => "–".into(),
                }
            } else {
                "–".into()
            };
            let share = |field| match figure(lines, field) {
                Some((m, ..)) => format!("{:.0}%", m * 100.0),
                None => "–".into(),
            };
            md.push_str(&format!(
                "| {} | {} | {cores} | {summaries} | {} | {efficiency} | {} | {} | {} |\n",
                config.side,
                config.workers,
                cell(eps, 1.0, 0),
                share("outside_share"),
                share("optimizer_share"),
                share("reduce_share"),
            ));
        }
        md.push_str(&ratios(model, runs));
    }
    md
}

/// ember's examples/s over the fastest burn-train strategy's, at each worker count, summaries
/// off and pinned; and ember's 2 pinned workers over its 1 free worker.
fn ratios(model: &'static str, runs: &BTreeMap<String, Vec<Value>>) -> String {
    let on = |side: &'static str, workers: u16, pinned: bool, wgpu: bool| {
        let key = Config {
            model,
            side,
            workers,
            pinned,
            summaries: false,
            wgpu,
        }
        .key();
        runs.get(&key)
            .and_then(|lines| figure(lines, "examples_per_second"))
            .map(|(median, ..)| median)
    };
    let eps = |side, workers, pinned| on(side, workers, pinned, false);
    let mut text = String::from("\n");
    if let (Some(one), Some(two)) = (eps("ember-mpi", 1, true), eps("ember-mpi", 2, true)) {
        text.push_str(&format!(
            "- ember under mpirun, 2 ranks over 1: {:.2}× ({:.0}% efficiency)\n",
            two / one,
            50.0 * two / one
        ));
    }
    if let (Some(one), Some(two)) = (eps("ember", 1, true), eps("ember", 2, true)) {
        text.push_str(&format!(
            "- ember, 2 workers over 1, one core each: {:.2}× ({:.0}% efficiency)\n",
            two / one,
            50.0 * two / one
        ));
    }
    for workers in [1u16, 2] {
        let ember = eps("ember", workers, true);
        let fastest = ["burn-single", "burn-multi", "burn-sharded", "burn-ddp"]
            .into_iter()
            .filter_map(|side| eps(side, workers, true).map(|e| (side, e)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(ember), Some((side, burn))) = (ember, fastest) {
            text.push_str(&format!(
                "- {workers} worker(s): ember {:.2}× burn-train's fastest ({side})\n",
                ember / burn
            ));
        }
    }
    for workers in [1u16, 2] {
        let ember = on("ember", workers, false, true);
        let fastest = ["burn-single", "burn-multi", "burn-sharded", "burn-ddp"]
            .into_iter()
            .filter_map(|side| on(side, workers, false, true).map(|e| (side, e)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(ember), Some((side, burn))) = (ember, fastest) {
            text.push_str(&format!(
                "- wgpu, {workers} device(s): ember {:.2}× burn-train's fastest ({side})\n",
                ember / burn
            ));
        }
    }
    if let (Some(two), Some(free)) = (eps("ember", 2, true), eps("ember", 1, false)) {
        text.push_str(&format!(
            "- ember, 2 pinned workers against 1 worker free on every core: {:.2}×\n",
            two / free
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(vec![3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(vec![4.0, 1.0, 2.0, 3.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(Vec::new()), None);
    }

    #[test]
    fn wgpu_only_runs_every_model_on_wgpu_and_nothing_else() {
        let configs = configs(false, false, true);
        assert!(configs.iter().all(|c| c.wgpu));
        for model in MODELS {
            let sides: Vec<_> = configs.iter().filter(|c| c.model == model).collect();
            // ember, multi and sharded at 1 and 2 devices, single, ddp.
            assert_eq!(sides.len(), 8, "{model}: {sides:?}");
        }
    }

    #[test]
    fn the_report_has_efficiency_and_ratios_from_the_runs() {
        let line = |side: &str, workers: u16, eps: f64| {
            json!({"side": side, "workers": workers, "parameters": 10, "width": 4,
                   "examples_per_second": eps, "outside_share": 0.25})
        };
        let mut runs = BTreeMap::new();
        let configs: Vec<Config> = configs(true, false, false)
            .into_iter()
            .filter(|c| c.model == "digits")
            .collect();
        for config in &configs {
            let eps = match (config.side, config.workers, config.pinned) {
                ("ember", 1, true) => 100.0,
                ("ember", 2, true) => 190.0,
                ("ember", 1, false) => 120.0,
                ("burn-multi", 1, _) => 90.0,
                ("burn-multi", 2, _) => 150.0,
                _ => 50.0,
            };
            let value = if config.side == "burn-ddp" {
                json!({"error": "burn-ddp panicked: no collectives"})
            } else {
                line(config.side, config.workers, eps)
            };
            runs.insert(config.key(), vec![value]);
        }
        let md = report(&configs, &runs, 1, true);
        assert!(
            md.contains("| ember | 2 | 2 pinned | off | 190 (190–190) | 95% | 25% |"),
            "{md}"
        );
        assert!(
            md.contains("error: burn-ddp panicked: no collectives"),
            "{md}"
        );
        assert!(
            md.contains("ember, 2 workers over 1, one core each: 1.90× (95% efficiency)"),
            "{md}"
        );
        assert!(
            md.contains("1 worker(s): ember 1.11× burn-train's fastest (burn-multi)"),
            "{md}"
        );
        assert!(
            md.contains("2 worker(s): ember 1.27× burn-train's fastest (burn-multi)"),
            "{md}"
        );
        assert!(md.contains("1 worker free on every core: 1.58×"), "{md}");
    }
}
