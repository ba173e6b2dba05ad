//! Scenario (a): `ember train` as one rank on each of two hosts, over TCP between them, into
//! the bucket, against the same job of two ranks on one host (shared memory) into a local
//! directory: the same model, byte for byte, and the same values in `ember inspect` and in
//! TensorBoard's S3 reader. Hosts change where the bytes travel, not what is computed.
//!
//! One process of 2 workers is not that computation (each rank trains its own shard, the
//! workers of one process share one loader), so against one process the scenario compares as
//! `cargo xtask mpi` does: ember's `mpi_ranks` example as 2 hosts x 2 workers against
//! `--single` with 4 workers, the ranks' parameters after every optimizer step the same bytes
//! on both hosts and within 1e-5 of the one process's.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, ensure};

use super::check::Check;
use super::launch::{KEEPALIVE, TASK};
use crate::process::is_root;
use crate::scenario::{Env, Expected};

/// The job every scenario trains: one worker per rank, a checkpoint every few steps, and the
/// collective timeout of the cut-link scenario (which resumes it with these arguments). About
/// 5 s on two hosts, long enough to cut a link mid-run.
pub(super) const TRAIN: &[&str] = &[
    "train",
    "--epochs",
    "12",
    "--devices",
    "1",
    "--checkpoint-every",
    "10",
    "--collective-timeout",
    "5",
];

/// The run of the two hosts in the bucket, which the cut-link scenario's resumed run must
/// equal.
pub(super) const URL: &str = "s3://ember/equal";

/// Runs the scenario; returns the one-host run's directory and how long the hosts' job took.
pub(super) fn equivalence(check: &Check) -> anyhow::Result<(PathBuf, f64)> {
    let mut hosts = check.launch(TRAIN);
    hosts.args(["--logdir", URL]);
    // Nothing is cut here: this job runs as a user's would with Open MPI's keepalive unset,
    // which rank 0 must warn of when it starts.
    for (name, _) in KEEPALIVE {
        hosts.env_remove(name);
    }
    let ran = check.succeed(hosts, "equal-hosts")?;
    ensure!(
        ran.output.matches("test accuracy:").count() == 1,
        "rank 0 alone reports the result:\n{}",
        ran.output
    );
    let warning = ran
        .output
        .lines()
        .find(|line| line.contains("warning: Open MPI's keepalive is not set"))
        .with_context(|| {
            format!(
                "no keepalive warning with the keepalive unset:\n{}",
                ran.output
            )
        })?;
    ensure!(
        ran.output.matches("keepalive is not set").count() == 1,
        "rank 0 alone warns of the keepalive:\n{}",
        ran.output
    );
    let seconds = ran.elapsed.as_secs_f64();

    let one_host = check.work.join("equal-one-host");
    let mut job = Command::new("mpirun");
    job.args(["--oversubscribe", "-n", "2"]);
    if is_root() {
        job.arg("--allow-run-as-root");
    }
    job.arg(check.ember)
        .args(TRAIN)
        .arg("--logdir")
        .arg(&one_host);
    check.succeed(job, "equal-one-host")?;

    Expected::of_dir(check.ember, &one_host)?
        .check(check, URL)
        .context("2 hosts x 1 rank against 2 ranks on one host")?;
    check.tensorboard_same(URL, &one_host)?;
    eprintln!(
        "{TASK}: (a) 2 hosts x 1 rank over TCP ({seconds:.1} s) train the model of 2 ranks on \
         one host, byte for byte; ember inspect and TensorBoard's S3 reader show the same values; \
         with the keepalive unset rank 0 printed `{}`",
        warning.trim()
    );
    Ok((one_host, seconds))
}

/// `mpi_ranks` as 2 hosts x 2 workers against one process of 4 workers; returns the largest
/// difference of a parameter after any optimizer step.
pub(super) fn against_one_process(check: &Check) -> anyhow::Result<f32> {
    let out = check.work.join("ranks");
    std::fs::create_dir_all(&out)?;
    let out_arg = out.to_str().context("a path that is not UTF-8")?;
    let mut single = Command::new(check.ranks);
    single.args(["--single", "--workers", "4", "--out", out_arg]);
    check.succeed(single, "ranks-single")?;
    let hosts = check.on_hosts(check.ranks, &["--workers", "2", "--out", out_arg]);
    check.succeed(hosts, "ranks-hosts")?;
    let worst = crate::mpirun::ranks_agree_with_one_process(&out, "2 hosts x 2 workers")?;
    eprintln!(
        "{TASK}: (a) mpi_ranks on 2 hosts x 2 workers: both hosts' parameters the same bytes \
         after every optimizer step, within {worst:.1e} of one process of 4 workers"
    );
    Ok(worst)
}
