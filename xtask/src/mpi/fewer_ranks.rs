//! A job that goes on with fewer ranks, and then with all of them again: `ember train` under
//! `mpirun -n 2` SIGTERMed in its second epoch, resumed by `mpirun -n 1` (one process running
//! both ranks' shards of the data) and SIGTERMed again once it has a checkpoint of its own,
//! then resumed by `mpirun -n 2` to the end. The job ends with the uninterrupted job's model
//! byte for byte, and `ember inspect` shows each step once.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use super::scenarios::{EPOCHS, job_args, ranks, stopped_cleanly};
use crate::mpirun::{RankExits, TASK, Transport, mpirun};
use crate::process::{expect_success, run_limited};
use crate::scenario::{Env, Running, Signalled, StopAndResume, inspect_json};

/// The scenario, in `out/fewer-ranks`, against the uninterrupted job in `out/reference` (from
/// [`resume`](super::scenarios::resume)), which took `reference_took`.
pub(super) fn fewer_ranks(
    (ember, exits): (&Path, &RankExits),
    out: &Path,
    reference_took: Duration,
) -> anyhow::Result<()> {
    let reference = out.join("reference");
    let both = Signalled::Ranks(&[0, 1]);
    let epochs = EPOCHS.to_string();
    let stopped = StopAndResume {
        name: "fewer-ranks",
        args: &job_args(&epochs, ""),
        whom: both,
        after: &[reference_took / 8],
        periods: &[],
    }
    .stop(&ranks(exits.program(), out))?;
    stopped_cleanly(&stopped, both, 2, (ember, exits))?;
    let run = Path::new(&stopped.place);
    let stopped_alone = one_rank_until_stopped((ember, exits), run, out)?;
    let mut again = mpirun(2, Transport::SharedMemory);
    again.arg(ember).args(["train", "--resume"]).arg(run);
    let ran = run_limited(
        again,
        "mpirun -n 2 ember train --resume",
        &out.join("fewer-ranks-2.log"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train --resume after mpirun -n 1")?;
    ensure!(
        crate::runs::model_without_ids(&run.join("model.bpk"))?
            == crate::runs::model_without_ids(&reference.join("model.bpk"))?,
        "the job that went on with 1 rank and then 2 ended with other parameters than the \
         uninterrupted job's"
    );
    each_step_once(ember, run, &reference)?;
    eprintln!(
        "{TASK}: a job of 2 ranks SIGTERMed at step {}, resumed by 1 rank running both \
         ranks' data and SIGTERMed at step {stopped_alone}, then resumed by 2 ranks: the \
         uninterrupted job's parameters, byte for byte, each step once in ember inspect",
        stopped.step
    );
    Ok(())
}

/// Resumes the job of `run` with `mpirun -n 1` and sends its rank SIGTERM once it has written a
/// checkpoint of its own; returns the step it says it was interrupted after.
fn one_rank_until_stopped(
    (ember, exits): (&Path, &RankExits),
    run: &Path,
    out: &Path,
) -> anyhow::Result<u64> {
    let env = ranks(ember, out);
    let place = run.to_string_lossy();
    let before = env.newest_checkpoint(&place)?;
    let log_path = out.join("fewer-ranks-1.log");
    let log = std::fs::File::create(&log_path)?;
    let mut one = mpirun(1, Transport::SharedMemory);
    one.arg(exits.program())
        .args(["train", "--resume"])
        .arg(run);
    let mut job = Running(
        one.stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting mpirun -n 1")?,
    );
    let started = Instant::now();
    while env.newest_checkpoint(&place)? == before {
        if job.0.try_wait()?.is_some() || started.elapsed() > Duration::from_secs(120) {
            bail!(
                "the job resumed by 1 rank ended or hung before a checkpoint of its own:\n{}",
                std::fs::read_to_string(&log_path)?
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let alone = Signalled::Ranks(&[0]);
    let stopped = job.stopped(&env, alone, &place, &log_path)?;
    stopped_cleanly(&stopped, alone, 1, (ember, exits))?;
    ensure!(
        !stopped.output.contains("warning:"),
        "the job resumed by 1 rank warned:\n{}",
        stopped.output
    );
    Ok(stopped.step)
}

/// Every series of `run` holds each step once, and the job's own series (those rank 0 records
/// for the run, not a rank's device times) the steps of the uninterrupted job in `reference`.
fn each_step_once(ember: &Path, run: &Path, reference: &Path) -> anyhow::Result<()> {
    let (got, want) = (steps_by_tag(ember, run)?, steps_by_tag(ember, reference)?);
    for (tag, steps) in &got {
        let unique: BTreeSet<i64> = steps.iter().copied().collect();
        ensure!(
            unique.len() == steps.len(),
            "{}: `{tag}` holds a step more than once: {steps:?}",
            run.display()
        );
    }
    for (tag, steps) in &want {
        if tag.contains("device/") {
            continue;
        }
        ensure!(
            got.get(tag) == Some(steps),
            "{}: `{tag}` has the steps {:?}, the uninterrupted job's {steps:?}",
            run.display(),
            got.get(tag)
        );
    }
    Ok(())
}

/// The steps of every scalar series of the run in `logdir`, as ember inspect reads them.
fn steps_by_tag(
    ember: &Path,
    logdir: &Path,
) -> anyhow::Result<std::collections::BTreeMap<String, Vec<i64>>> {
    let report = inspect_json(ember, logdir)?;
    let mut series = std::collections::BTreeMap::new();
    for run in report["runs"].as_array().into_iter().flatten() {
        for tag in run["tags"].as_array().into_iter().flatten() {
            let Some(values) = tag["values"].as_array() else {
                continue;
            };
            let steps: Vec<i64> = values
                .iter()
                .filter_map(|value| value.as_array()?.first()?.as_i64())
                .collect();
            if steps.len() == values.len() && !steps.is_empty() {
                // A sub-run's series by its place under the run's directory.
                let dir = run["dir"].as_str().unwrap_or_default();
                let under = dir.strip_prefix(&*logdir.to_string_lossy()).unwrap_or(dir);
                let name = tag["tag"].as_str().unwrap_or_default();
                series.insert(format!("{under}:{name}"), steps);
            }
        }
    }
    Ok(series)
}
