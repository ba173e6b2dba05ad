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
//!
//! With `--s3`, the runs' log directories (and so their checkpoints) are in a bucket of moto's
//! S3 server on loopback (as `cargo xtask objects` runs it), and the limit is one GET of the
//! checkpoint object; into `target/bench/recovery-s3.md`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::process::{build, target_dir};
use crate::server::{LOOPBACK, S3_REQUIREMENTS, Server, free_port, moto, s3_env, s3_keys};
use crate::venv::ensure_venv;

/// Gets object `argv[2]` of bucket `argv[1]` twice with boto3; prints its size and the second
/// GET's milliseconds.
const GET_TWICE: &str = "import os, sys, time, boto3
s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'])
get = lambda: s3.get_object(Bucket=sys.argv[1], Key=sys.argv[2])['Body'].read()
get()
started = time.perf_counter()
body = get()
print(len(body), (time.perf_counter() - started) * 1e3)";

/// The bucket of `--s3`'s runs.
const BUCKET: &str = "recovery";

/// Where the runs' log directories are.
enum Place {
    Disk,
    /// Moto's S3 server (stopped when dropped), at its endpoint.
    S3 {
        _server: Server,
        endpoint: String,
        python: std::path::PathBuf,
    },
}

impl Place {
    /// The log directory of run `name` under `work`.
    fn logdir(&self, work: &Path, name: &str) -> String {
        match self {
            Self::Disk => work.join(name).to_string_lossy().into_owned(),
            Self::S3 { .. } => format!("s3://{BUCKET}/{name}"),
        }
    }

    /// `ember` with what it needs to reach the place.
    fn ember(&self, ember: &Path) -> Command {
        let mut command = Command::new(ember);
        if let Self::S3 { endpoint, .. } = self {
            s3_env(&mut command, endpoint);
        }
        command
    }

    /// The newest whole checkpoint of the run in `logdir` (a temporary one is not whole yet).
    fn newest_checkpoint(&self, logdir: &str) -> anyhow::Result<Option<String>> {
        let names = match self {
            Self::Disk => crate::runs::file_names(&Path::new(logdir).join("checkpoints")),
            Self::S3 { endpoint, .. } => {
                let run = logdir.trim_start_matches(&format!("s3://{BUCKET}/"));
                s3_keys(endpoint, BUCKET, &format!("{run}/checkpoints/"))?
            }
        };
        Ok(crate::runs::newest_checkpoint(names).map(|name| {
            let file = name.rsplit('/').next().unwrap_or_default();
            format!("{logdir}/checkpoints/{file}")
        }))
    }

    /// The checkpoint's size, and the milliseconds the fastest read of it takes: from the
    /// page cache (read once before), or one GET of its object (boto3's, signed as moto
    /// wants, the second of two).
    fn limit(&self, checkpoint: &str) -> anyhow::Result<(u64, f64)> {
        let Self::S3 {
            endpoint, python, ..
        } = self
        else {
            let bytes = std::fs::read(checkpoint)?.len() as u64;
            let started = Instant::now();
            let again = std::fs::read(checkpoint)?;
            let took = started.elapsed().as_secs_f64() * 1e3;
            ensure!(
                again.len() as u64 == bytes,
                "the checkpoint changed while read"
            );
            return Ok((bytes, took));
        };
        let key = checkpoint.trim_start_matches(&format!("s3://{BUCKET}/"));
        let mut get = Command::new(python);
        get.args(["-c", GET_TWICE, BUCKET, key]);
        s3_env(&mut get, endpoint);
        let out = get.output()?;
        ensure!(
            out.status.success(),
            "timing a GET of {checkpoint}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fields = text.split_whitespace();
        let bytes = fields.next().and_then(|f| f.parse().ok());
        let took = fields.next().and_then(|f| f.parse().ok());
        bytes
            .zip(took)
            .with_context(|| format!("the GET timing said {text:?}"))
    }
}

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

pub(crate) fn run(root: &Path, rounds: usize, s3: bool) -> anyhow::Result<()> {
    let features: &[&str] = if s3 {
        &["--features", "object-store"]
    } else {
        &[]
    };
    build(
        root,
        &[&["build", "--release", "-p", "ember-cli"], features].concat(),
    )?;
    let target = target_dir(root);
    let ember = target.join("release/ember");
    let work = target.join("recovery");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    let place = match s3 {
        false => Place::Disk,
        true => start_s3(root, &target, &work)?,
    };
    let limit = match place {
        Place::Disk => "read from the page cache",
        Place::S3 { .. } => "one GET of the object",
    };
    let mut table = format!(
        "| model | checkpoint | {limit} | kill → training again | process, admission, record | \
         read | restore | rollback | data position | first step |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (index, (name, hidden)) in MODELS.iter().enumerate() {
        let run = place.logdir(&work, &format!("run{index}"));
        let log = work.join(format!("run{index}.log"));
        let checkpoint = killed_after_a_checkpoint(&place, &ember, (&run, &log), hidden)?;
        let (bytes, cached) = place.limit(&checkpoint)?;
        let mut rows: Vec<Vec<f64>> = Vec::new();
        for _ in 0..rounds {
            rows.push(resumed_once(&place, &ember, &run)?);
        }
        table.push_str(&row(name, bytes, cached, &rows));
    }
    let out = target.join(match place {
        Place::Disk => "bench/recovery.md",
        Place::S3 { .. } => "bench/recovery-s3.md",
    });
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    std::fs::write(&out, &table)?;
    print!("{table}");
    eprintln!(
        "recovery: {rounds} resume(s) a model; the table is in {}",
        out.display()
    );
    Ok(())
}

/// Moto's S3 server on a free loopback port, in the venv `cargo xtask objects` uses, with the
/// runs' bucket made.
fn start_s3(root: &Path, target: &Path, work: &Path) -> anyhow::Result<Place> {
    let python = ensure_venv(&target.join("s3-venv"), S3_REQUIREMENTS)
        .map_err(|error| anyhow::anyhow!("moto's venv: {error:?}"))?;
    let port = free_port()?;
    let server = moto(&python, (LOOPBACK, port), &[], &work.join("moto.log"))?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut bucket = Command::new(&python);
    bucket
        .arg(root.join("xtask/objects/check_s3.py"))
        .args(["bucket", &endpoint, BUCKET]);
    s3_env(&mut bucket, &endpoint);
    ensure!(bucket.status()?.success(), "creating the bucket failed");
    Ok(Place::S3 {
        _server: server,
        endpoint,
        python,
    })
}

/// Trains a run of `hidden` units into `run` (its output into `log`) until a checkpoint is
/// whole in its place, kills it with SIGKILL, and returns that checkpoint's path or URL.
fn killed_after_a_checkpoint(
    place: &Place,
    ember: &Path,
    (run, log): (&str, &Path),
    hidden: &str,
) -> anyhow::Result<String> {
    let log = std::fs::File::create(log)?;
    let mut child = place
        .ember(ember)
        .args(["train", "--epochs", "1000", "--checkpoint-every", "5"])
        .args(["--hidden", hidden, "--logdir"])
        .arg(run)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let found = loop {
        if let Some(found) = place.newest_checkpoint(run)? {
            break found;
        }
        if child.try_wait()?.is_some() || Instant::now() > deadline {
            let _ = child.kill();
            bail!("ember train --hidden {hidden} wrote no checkpoint; see {run}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill()?;
    child.wait()?;
    Ok(found)
}

/// One `ember train --resume` of `run`, timed from its spawn to its Trainer's first optimizer
/// step, then killed: the whole, then each part the Trainer logged, in milliseconds.
fn resumed_once(place: &Place, ember: &Path, run: &str) -> anyhow::Result<Vec<f64>> {
    let started = Instant::now();
    let mut child = place
        .ember(ember)
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
        bail!("ember train --resume {run} never trained again:\n{printed}");
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
    let cell = |values: Vec<f64>| match crate::stats::Spread::of(values) {
        Some(s) => format!("{:.1} ms ({:.1}–{:.1})", s.median, s.min, s.max),
        None => "–".to_owned(),
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
