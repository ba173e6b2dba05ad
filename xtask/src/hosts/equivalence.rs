//! Scenario (a): `ember train` as one rank on each of two hosts, over TCP between them, into
//! the bucket, against the same job of two ranks on one host (shared memory) into a local
//! directory: the same model, byte for byte, and the same values in `ember inspect` and in
//! TensorBoard's S3 reader. Hosts change where the bytes travel, not what is computed.

use std::path::PathBuf;
use std::process::Command;

use anyhow::ensure;

use super::check::Check;
use super::launch::TASK;
use crate::process::{inspect_json, is_root};
use crate::resume::{model_without_ids, same_values};

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
    let mut hosts = check.on_hosts(check.ember, TRAIN);
    hosts.args(["--logdir", URL]);
    let ran = check.succeed(hosts, "equal-hosts")?;
    ensure!(
        ran.output.matches("test accuracy:").count() == 1,
        "rank 0 alone reports the result:\n{}",
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

    let pulled = check.pull(URL, "equal-pulled")?;
    ensure!(
        model_without_ids(&pulled.join("model.bpk"))?
            == model_without_ids(&one_host.join("model.bpk"))?,
        "the model of 2 hosts x 1 rank differs from 2 ranks on one host"
    );
    same_values(
        &inspect_json(check.ember, &one_host)?,
        &check.inspect(URL)?,
        std::path::Path::new(URL),
    )?;
    check.tensorboard_same(URL, &one_host)?;
    eprintln!(
        "{TASK}: (a) 2 hosts x 1 rank over TCP ({seconds:.1} s) train the model of 2 ranks on \
         one host, byte for byte; ember inspect and TensorBoard's S3 reader show the same values"
    );
    Ok((one_host, seconds))
}
