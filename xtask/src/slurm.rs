//! `cargo xtask slurm`: ember's batch script (`examples/slurm/train.sbatch`) under a real Slurm
//! cluster on this machine.
//!
//! 1. As root, installs Debian's `slurm-wlm` (22.05) and `munge` (and Open MPI, as `cargo xtask
//!    mpi` does) when missing; not root, or without them, the task is skipped in one line,
//!    except under `CI=true`, where that is a failure.
//! 2. Starts a cluster of one node, this machine with its cores: `munged` with a key of its
//!    own, `slurmctld` and `slurmd` as root (`ProctrackType=proctrack/linuxproc`,
//!    `TaskPlugin=task/none`: no cgroups needed), state and logs under the target directory's
//!    `slurm-check/`, on ports of its own; all three are stopped at the end, on failure too.
//! 3. Builds `ember` with `--features mpi` and runs the scenarios of `slurm/jobs.rs`: the
//!    script's 2-rank job against plain `mpirun`; the same job signalled by its time limit
//!    (`--time=1 --signal=B:TERM@30`) and requeued by its own script; preempted by `scontrol
//!    requeue` at 3 seeded moments; and cancelled by `scancel`. Each job that ends must end
//!    with the plain job's model byte for byte and its log read by `ember inspect` and by
//!    TensorBoard's loaders (`xtask/resume/check_tensorboard.py`) as the plain job's, each step
//!    once.
//!
//! Two things Slurm 22.05 does that the scenarios are built around: a requeued job waits
//! `cred_expire` seconds (120 by default; 5 here) before it may start again; and `slurmctld`
//! checks time limits (and sends `--signal`'s warning) every 30 s from its start, so a warning
//! comes up to 30 s before the time asked for (the man page says up to 60 s).

use std::path::Path;
use std::time::Instant;

use anyhow::Context;

use crate::process::{build, ensure_installed, is_root, on_path, skip_or_fail, target_dir};

mod cluster;
mod jobs;

use cluster::{Cluster, TASK};

/// Debian's packages: the scheduler's daemons and commands, and its authentication.
const PACKAGES: &[&str] = &["slurm-wlm", "munge"];

/// The batch script the scenarios submit, as users do.
const SCRIPT: &str = "examples/slurm/train.sbatch";

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    if !is_root() {
        return skip_or_fail(TASK, "the cluster's daemons run as root; run it as root");
    }
    if let Err(why) = crate::mpirun::ensure_mpi() {
        return skip_or_fail(TASK, &why);
    }
    if let Err(why) = ensure_installed(TASK, PACKAGES, missing) {
        return skip_or_fail(TASK, &why);
    }
    let started = Instant::now();
    build(root, &["build", "-p", "ember-cli", "--features", "mpi"])?;
    let target = target_dir(root);
    let work = target.join("slurm-check");
    if work.exists() {
        cluster::stop_left_over(&work);
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    let cluster = Cluster::start(&work)?;
    eprintln!(
        "{TASK}: a cluster of one node ({} cores) up in {:.1} s",
        cluster.cores,
        started.elapsed().as_secs_f64()
    );
    let jobs = jobs::Jobs {
        cluster: &cluster,
        ember: target.join("debug/ember"),
        script: root.join(SCRIPT),
        runs: work.join("runs"),
    };
    jobs.run_all(root, &target)?;
    drop(cluster);
    eprintln!(
        "{TASK}: all scenarios passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn missing() -> Vec<&'static str> {
    ["sbatch", "slurmctld", "slurmd", "munged", "mungekey"]
        .into_iter()
        .filter(|tool| !on_path(tool) && !cluster::sbin(tool).is_file())
        .collect()
}
