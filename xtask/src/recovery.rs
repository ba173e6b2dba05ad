//! `cargo xtask recovery [--rounds R]`: how long a killed `ember train` takes to train again.
//!
//! For the digits model and a 10.1 M-parameter one (`--hidden 134300`: 64-134300-10), a run
//! is trained until its first checkpoint is whole on the disk, then killed with SIGKILL; then,
//! `R` times, `ember train --resume` is started and timed from its spawn to the line its
//! Trainer logs after the first optimizer step (`ember::recovery`), which gives the Trainer's
//! parts (checkpoint chosen and read, state restored, log rolled back, data position, first
//! step); what is left of the whole is the process starting, the command's admission and its
//! summary record opening. Each resumed run is killed at that line, so the next goes on from
//! the same checkpoint. Beside them, the limit: reading the checkpoint file from the page
//! cache. Median (min–max), into `target/bench/recovery.md`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::process::{build, positive_arg, target_dir};

/// The models: a name and `ember train`'s `--hidden`.
const MODELS: [(&str, &str); 2] = [
    ("digits MLP 64-64-10 (4,810 parameters)", "64"),
    ("MLP 64-134300-10 (10,072,510 parameters)", "134300"),
];

/// The parts the Trainer logs, in its line's order.
const PARTS: [&str; 5] = [
    "checkpoint chosen and read",
    "state restored",
    "log rolled back",
    "data position",
    "first optimizer step",
];

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let rounds = positive_arg(args, "--rounds", 5)?;
    build(root, &["build", "--release", "-p", "ember-cli"])?;
    let target = target_dir(root);
    let ember = target.join("release/ember");
    let work = target.join("recovery");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let mut table = String::from(
        "| model | checkpoint | read from the page cache | kill → training again | process, \
         admission, record | read | restore | rollback | data position | first step |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (index, (name, hidden)) in MODELS.iter().enumerate() {
        let run = work.join(format!("run{index}"));
        let checkpoint = killed_after_a_checkpoint(&ember, &run, hidden)?;
        let (bytes, cached) = page_cache_read(&checkpoint)?;
        let mut rows: Vec<Vec<f64>> = Vec::new();
        for _ in 0..rounds {
            rows.push(resumed_once(&ember, &run)?);
        }
        table.push_str(&row(name, bytes, cached, &rows));
    }
    let out = target.join("bench/recovery.md");
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    std::fs::write(&out, &table)?;
    print!("{table}");
    eprintln!(
        "recovery: {rounds} resume(s) a model; the table is in {}",
        out.display()
    );
    Ok(())
}

/// Trains a run of `hidden` units into `run` until a checkpoint is whole on the disk, kills it
/// with SIGKILL, and returns that checkpoint's path.
fn killed_after_a_checkpoint(ember: &Path, run: &Path, hidden: &str) -> anyhow::Result<PathBuf> {
    let log = std::fs::File::create(run.with_extension("log"))?;
    let mut child = Command::new(ember)
        .args(["train", "--epochs", "1000", "--checkpoint-every", "5"])
        .args(["--hidden", hidden, "--logdir"])
        .arg(run)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let found = loop {
        if let Some(found) = newest_checkpoint(&run.join("checkpoints"))? {
            break found;
        }
        if child.try_wait()?.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "ember train --hidden {hidden} wrote no checkpoint; see {}",
                run.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill()?;
    child.wait()?;
    Ok(found)
}

/// The newest whole checkpoint file of `dir` (a temporary one is not whole yet).
fn newest_checkpoint(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ckpt-") && n.ends_with(".ember") && !n.contains(".rank"))
        .collect();
    names.sort();
    Ok(names.pop().map(|name| dir.join(name)))
}

/// The checkpoint's size, and the milliseconds a read of it takes once it is in the page
/// cache (the fastest any resume can read it).
fn page_cache_read(checkpoint: &Path) -> anyhow::Result<(u64, f64)> {
    let bytes = std::fs::read(checkpoint)?.len() as u64;
    let started = Instant::now();
    let again = std::fs::read(checkpoint)?;
    let cached = started.elapsed().as_secs_f64() * 1e3;
    ensure!(
        again.len() as u64 == bytes,
        "the checkpoint changed while read"
    );
    Ok((bytes, cached))
}

/// One `ember train --resume` of `run`, timed from its spawn to its Trainer's first optimizer
/// step, then killed: the whole, then each part the Trainer logged, in milliseconds.
fn resumed_once(ember: &Path, run: &Path) -> anyhow::Result<Vec<f64>> {
    let started = Instant::now();
    let mut child = Command::new(ember)
        .args(["train", "--resume"])
        .arg(run)
        .env("RUST_LOG", "ember=warn,ember::recovery=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting ember train --resume")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let mut printed = String::new();
    let mut parts = None;
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        if line.contains("training again") {
            let whole = started.elapsed().as_secs_f64() * 1e3;
            parts = Some((whole, line));
            break;
        }
        printed.push_str(&line);
        printed.push('\n');
    }
    child.kill()?;
    child.wait()?;
    let Some((whole, line)) = parts else {
        bail!(
            "ember train --resume {} never trained again:\n{printed}",
            run.display()
        );
    };
    let mut figures = vec![whole];
    for part in PARTS {
        figures.push(ms_after(&line, part).with_context(|| format!("no `{part}` in: {line}"))?);
    }
    Ok(figures)
}

/// The milliseconds after `part` in the Trainer's recovery line (`<part> 12.3 ms`).
fn ms_after(line: &str, part: &str) -> Option<f64> {
    let rest = line.split(part).nth(1)?.trim_start();
    rest.split(' ').next()?.parse().ok()
}

/// The table row of one model: each column's median (min–max) over the rounds.
fn row(name: &str, bytes: u64, cached: f64, rounds: &[Vec<f64>]) -> String {
    let cell = |values: Vec<f64>| {
        let mut values = values;
        values.sort_by(f64::total_cmp);
        let (median, min, max) = (
            values[values.len() / 2],
            values[0],
            values[values.len() - 1],
        );
        format!("{median:.1} ms ({min:.1}–{max:.1})")
    };
    let column = |index: usize| rounds.iter().map(|r| r[index]).collect::<Vec<f64>>();
    // What is not the Trainer's: the whole less its parts, round by round.
    let outside = rounds
        .iter()
        .map(|r| r[0] - r[1..].iter().sum::<f64>())
        .collect();
    let mut cells = vec![
        name.to_owned(),
        format!("{:.1} MB", bytes as f64 / 1e6),
        format!("{cached:.1} ms"),
        cell(column(0)),
        cell(outside),
    ];
    cells.extend((1..=PARTS.len()).map(|index| cell(column(index))));
    format!("| {} |\n", cells.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trainer_s_recovery_line_reads_back_part_by_part() {
        let line = "info: training again 812.4 ms after the resume began: checkpoint chosen and \
                    read 101.5 ms, state restored 220.0 ms, log rolled back 3.2 ms, data position \
                    40.1 ms, first optimizer step 447.6 ms";
        let parts: Vec<f64> = PARTS.iter().map(|p| ms_after(line, p).unwrap()).collect();
        assert_eq!(parts, [101.5, 220.0, 3.2, 40.1, 447.6]);
        let table = row(
            "m",
            2_000_000,
            1.5,
            &[vec![900.0, 100.0, 200.0, 3.0, 40.0, 450.0]],
        );
        assert!(
            table.contains("| 900.0 ms (900.0–900.0) | 107.0 ms (107.0–107.0) |"),
            "{table}"
        );
    }
}
