//! (c) The job across the two hosts, its log and checkpoints in the bucket, sent SIGTERM on
//! both ranks in the middle of an epoch, as a scheduler stops a job: every rank stops after
//! the same step and checkpoints there; `mpirun` exits; `ember train --resume` from the bucket
//! goes on from that checkpoint and ends with the uninterrupted job's model byte for byte, each
//! step once in `ember inspect` and TensorBoard's S3 reader.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use super::check::Check;
use super::cut::{newest_checkpoint, resumed, until_checkpoint};
use super::launch::TASK;

/// [`TRAIN`](super::equivalence::TRAIN)'s checkpoint period and an epoch's steps on two hosts
/// of one worker: a stop at neither could be taken for another checkpoint.
const PERIODS: [u64; 2] = [10, 23];

/// Runs the scenario; `reference` is the one-host run, `took` how long the hosts' job took.
pub(super) fn terminated(
    check: &Check,
    endpoint: &str,
    reference: &Path,
    took: f64,
) -> anyhow::Result<()> {
    for (attempt, share) in [0.3, 0.45, 0.6].into_iter().enumerate() {
        let url = format!("s3://ember/term{attempt}");
        let log = check.work.join(format!("term{attempt}.log"));
        let mut running = until_checkpoint(check, endpoint, &url, &log)?;
        std::thread::sleep(Duration::from_secs_f64(took * share));
        for rank in 0..2 {
            let pid = crate::runs::rank_process(&url, rank)
                .with_context(|| format!("finding rank {rank} of the job"))?;
            let sent = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()?;
            ensure!(sent.success(), "kill -TERM {pid} failed");
        }
        let sent = Instant::now();
        let status = loop {
            if let Some(status) = running.0.try_wait()? {
                break status;
            }
            ensure!(
                sent.elapsed() < Duration::from_secs(30),
                "the job went on after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let output = std::fs::read_to_string(&log)?;
        ensure!(
            !status.success(),
            "the job ended as a finished one after SIGTERM:\n{output}"
        );
        let stopped = crate::scenario::interrupted_after(&output)
            .with_context(|| format!("the stopped job did not say where it stopped:\n{output}"))?;
        if PERIODS.iter().any(|period| stopped.is_multiple_of(*period)) {
            continue;
        }
        let newest = newest_checkpoint(endpoint, &url)?.context("no checkpoint in the bucket")?;
        let name = newest.rsplit('/').next().unwrap_or(&newest);
        let printed = resumed(check, &url, reference)?;
        ensure!(
            printed.contains(name),
            "the job stopped at step {stopped} did not go on from the stop's checkpoint {name}:\n{printed}"
        );
        eprintln!(
            "{TASK}: (c) SIGTERM to both ranks on their hosts, log in the bucket: every rank \
             stopped at step {stopped} and checkpointed there ({name}); resumed from the bucket, \
             the job ended with the uninterrupted job's model byte for byte, each step once in \
             ember inspect and TensorBoard's S3 reader ({:.1} s to stop)",
            sent.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    anyhow::bail!("SIGTERM never stopped the job away from a periodic or epoch-end checkpoint")
}
