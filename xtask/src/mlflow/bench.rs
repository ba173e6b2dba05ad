//! `cargo xtask mlflow --bench`: metrics a second into one local tracking server, side by side
//! in one run, round after round: ember (`ember bench write --workload scalars10 --mlflow`, the
//! release build, timed until the server has taken every point), MLflow's Python client
//! synchronous (`log_batch` of 1,000) and asynchronous (`log_metrics` a step with
//! `enable_async_logging`), and the server's ceiling (four clients at once); and what the
//! sink costs the loop that records (`loop_seconds`, the same workload without it beside).
//! Median (min–max) into `target/bench/mlflow.md`.
//!
//! `--overhead PAIRS`: the Trainer's logging-overhead benchmark (`cargo bench -p ember --bench
//! overhead_paired -- PAIRS mlflow`) against the server: summaries with the sink off and on.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, ensure};

use super::server::Mlflow;
use crate::stats::Spread;

/// Steps of each round (ten metrics a step).
const STEPS: u64 = 10_000;

/// One figure of one round.
struct Timed {
    seconds: f64,
    loop_seconds: f64,
}

pub(super) fn run(
    mlflow: &Mlflow,
    ember: &Path,
    bench: &Path,
    rounds: usize,
) -> anyhow::Result<String> {
    let peers = [
        "ember",
        "ember-off",
        "mlflow-sync",
        "mlflow-async",
        "mlflow-ceiling",
    ];
    let mut times: Vec<Vec<Timed>> = peers.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (peer, into) in peers.iter().zip(times.iter_mut()) {
            let timed = match *peer {
                "ember" => ember_write(mlflow, ember, round, true)?,
                "ember-off" => ember_write(mlflow, ember, round, false)?,
                python => python_client(mlflow, bench, python.trim_start_matches("mlflow-"))?,
            };
            into.push(timed);
        }
        eprintln!("mlflow: bench round {} of {rounds} done", round + 1);
    }
    let metrics = (STEPS * 10) as f64;
    let rate = |timed: &[Timed]| Spread::of(timed.iter().map(|t| metrics / t.seconds));
    let mut md = format!(
        "# MLflow: metrics a second into one local server\n\n`cargo xtask mlflow --bench --rounds \
         {rounds}`: {STEPS} steps of ten metrics ({} in all) a round, {rounds} rounds side by \
         side; median (min–max).\n\n| peer | metrics/s | until the server has them, s |\n|---|---|---|\n",
        STEPS * 10
    );
    for (peer, timed) in peers.iter().zip(&times) {
        if *peer == "ember-off" {
            continue;
        }
        let (Some(r), Some(s)) = (rate(timed), Spread::of(timed.iter().map(|t| t.seconds))) else {
            continue;
        };
        md.push_str(&format!(
            "| {peer} | {:.0} ({:.0}–{:.0}) | {:.2} ({:.2}–{:.2}) |\n",
            r.median, r.min, r.max, s.median, s.min, s.max
        ));
    }
    let ratio = |a: usize, b: usize| {
        Spread::of(
            times[a]
                .iter()
                .zip(&times[b])
                .map(|(x, y)| y.seconds / x.seconds),
        )
    };
    let loop_cost = Spread::of(
        times[0]
            .iter()
            .zip(&times[1])
            .map(|(on, off)| on.loop_seconds / off.loop_seconds),
    );
    if let (Some(sync), Some(r#async), Some(ceiling), Some(cost)) =
        (ratio(0, 2), ratio(0, 3), ratio(0, 4), loop_cost)
    {
        md.push_str(&format!(
            "\nember against MLflow's synchronous client: {:.2}x ({:.2}–{:.2}); against its \
             asynchronous logging: {:.2}x ({:.2}–{:.2}); against the server's ceiling: {:.2}x \
             ({:.2}–{:.2}). The loop that records, sink on against off (`loop_seconds`): \
             {:.3}x ({:.3}–{:.3}).\n",
            sync.median,
            sync.min,
            sync.max,
            r#async.median,
            r#async.min,
            r#async.max,
            ceiling.median,
            ceiling.min,
            ceiling.max,
            cost.median,
            cost.min,
            cost.max
        ));
    }
    Ok(md)
}

/// `ember bench write --workload scalars10` into a new directory, with the sink or without.
fn ember_write(mlflow: &Mlflow, ember: &Path, round: usize, sink: bool) -> anyhow::Result<Timed> {
    let out = mlflow
        .work
        .join(format!("bench-{round}-{}", if sink { "on" } else { "off" }));
    let mut command = Command::new(ember);
    command
        .args([
            "bench",
            "write",
            "--workload",
            "scalars10",
            "--n",
            &STEPS.to_string(),
        ])
        .arg("--out")
        .arg(&out)
        .env_remove("MLFLOW_TRACKING_URI");
    if sink {
        command.args(["--mlflow", &mlflow.uri()]);
    }
    let report = json_line(command, "ember bench write")?;
    if sink {
        let spool = out.join(".ember-mlflow");
        let sent: u64 = std::fs::read_to_string(spool.join("sent"))?
            .trim()
            .parse()?;
        let spooled = std::fs::metadata(spool.join("spool.jsonl"))?.len();
        ensure!(
            sent == spooled,
            "ember's sink had {sent} of {spooled} bytes acknowledged when its record closed"
        );
        let ids: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(spool.join("run"))?)?;
        let run_id = ids["run_id"].as_str().context("no run id in the spool")?;
        let points: u64 = mlflow.client("count", run_id)?.parse()?;
        ensure!(
            points == STEPS * 10,
            "MLflow holds {points} of ember's {} points",
            STEPS * 10
        );
    }
    Ok(Timed {
        seconds: report["seconds"].as_f64().context("no seconds")?,
        loop_seconds: report["loop_seconds"].as_f64().context("no loop_seconds")?,
    })
}

fn python_client(mlflow: &Mlflow, bench: &Path, mode: &str) -> anyhow::Result<Timed> {
    let mut command = Command::new(&mlflow.python);
    command
        .arg(bench)
        .args([&mlflow.uri(), mode, &STEPS.to_string()]);
    let report = json_line(command, "bench_mlflow.py")?;
    Ok(Timed {
        seconds: report["seconds"].as_f64().context("no seconds")?,
        loop_seconds: report["loop_seconds"].as_f64().context("no loop_seconds")?,
    })
}

/// The JSON line `command` prints last.
fn json_line(mut command: Command, what: &str) -> anyhow::Result<serde_json::Value> {
    let out = command
        .output()
        .with_context(|| format!("starting {what}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{what} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("{what} printed {line:?}"))
}

/// `overhead_paired`'s pairs with the sink off and on, sending to `mlflow`; its output into
/// `target/bench/mlflow-overhead.txt`, its summary line printed.
pub(super) fn overhead(root: &Path, mlflow: &Mlflow, pairs: usize) -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["bench", "-p", "ember", "--bench", "overhead_paired", "--"])
        .args([pairs.to_string().as_str(), "mlflow"])
        .env("MLFLOW_TRACKING_URI", mlflow.uri())
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("starting cargo bench")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let dir = crate::process::target_dir(root).join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("mlflow-overhead.txt");
    std::fs::write(&path, text.as_bytes())?;
    ensure!(output.status.success(), "overhead_paired failed:\n{text}");
    eprintln!(
        "mlflow: the Trainer with the sink off and on: {}\nmlflow: written to {}",
        text.trim().lines().last().unwrap_or_default(),
        path.display()
    );
    Ok(())
}
