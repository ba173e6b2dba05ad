//! `cargo xtask hosts`: ember's ranks on hosts of their own, with a network between them that
//! can be cut and slowed, which `cargo xtask mpi` (every rank on one host, over loopback)
//! cannot show.
//!
//! Each host is a Linux network namespace with its own address, loopback, host name and
//! `TMPDIR`, joined by a veth link to a bridge in the root namespace (`hosts/net.rs`, subnet
//! 10.203.7.0/24, no route out). `mpirun` runs in the root namespace and starts one rank per
//! host through Open MPI's remote-shell launcher, pointed at a script that does what `ssh`
//! does on real hosts (`hosts/launch.rs`); the ranks reach each other over Open MPI's TCP
//! transport on the hosts' addresses. The S3 server (moto) listens on the bridge's address,
//! and every run's log directory is an `s3://` URL, so no two ranks share a directory on disk.
//!
//! Scenarios, each checked by what the readers show afterwards:
//! - (a) `hosts/equivalence.rs`: 2 hosts x 1 rank train the model of 2 ranks on one host, byte
//!   for byte, with the same values in `ember inspect` and TensorBoard's S3 reader.
//! - (b) `hosts/cut.rs`: one host's link goes down mid-run: every process of the job on both
//!   sides (`mpirun`, the `orted`s, the ranks) is gone within a bound of the cut, the output
//!   names the lost host, `ember push` on each host ships what its writers accepted, and the
//!   job resumed from the bucket ends as the uninterrupted one did.
//! - (c) `hosts/slow.rs`: the links limited to 1 Gbit/s and 100 Mbit/s: the all-reduce's cost
//!   per gradient size against the α–β model, and the scaling benchmark's step time, into
//!   `target/bench/hosts.{md,json}`.
//!
//! Needs root, `ip`, `tc` and `unshare`, Open MPI (installed as `cargo xtask mpi` installs it),
//! and Python with PyPI for moto and TensorBoard; without them it skips in one line, which is a
//! failure under `CI=true`. Namespaces, links, qdiscs, moto and every process started are
//! removed at the end, when a scenario fails too, and at the start, when an earlier run was
//! killed before it could.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::process::{build, is_root, on_path, run_limited, skip_or_fail, target_dir};
use crate::server::S3_REQUIREMENTS;
use crate::venv::{VenvError, ensure_venv};

mod check;
mod cut;
mod equivalence;
mod launch;
mod net;
mod report;
mod slow;
mod store;
mod terminated;

use check::{Check, Profile};
use launch::{Cluster, TASK, hold_machine, kill_leftovers};
use net::Network;

pub(crate) fn run(root: &Path, release: bool) -> anyhow::Result<()> {
    let profile = match release {
        false => Profile::Debug,
        true => Profile::Release,
    };
    let target = target_dir(root);
    let Some(python) = ready(&target)? else {
        return Ok(());
    };
    build_programs(root, profile)?;
    let _machine = hold_machine()?;
    let work = target.join("hosts-check");
    kill_leftovers(&work.join("agent"))?;
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let bin = work.join("bin");
    let ember = installed_programs(root, &target, &bin, profile)?;

    // Dropped in reverse: the server, then the network with every process left inside it.
    let network = Network::up()?;
    let (_server, endpoint) = store::start(root, &python, &work.join("moto.log"))?;
    let cluster = Cluster::new(&work, &network, &endpoint)?;
    let check = Check {
        root,
        python: &python,
        ember: &ember,
        ranks: &bin.join("mpi_ranks"),
        allreduce: &bin.join("allreduce"),
        work: &work,
        store: crate::scenario::Store::new("s3", &ember, &work, |command| cluster.s3(command))?,
        network: &network,
        cluster: &cluster,
    };
    one_rank_per_host(&check)?;
    let (one_host, equal_seconds) = equivalence::equivalence(&check)?;
    let worst = equivalence::against_one_process(&check)?;
    let cut = cut::cut(&check, &one_host)?;
    terminated::terminated(&check, &one_host, equal_seconds)?;
    let rates = slow::slow(&check)?;
    let md = report::write(
        &target.join("bench"),
        profile,
        (equal_seconds, worst),
        &cut,
        &rates,
    )?;
    eprintln!("{md}");
    eprintln!("{TASK}: all scenarios passed; report in target/bench/hosts.md");
    Ok(())
}

/// The S3 venv's Python, or `None` when the machine lacks what the task needs (said in one
/// line; an error under CI).
fn ready(target: &Path) -> anyhow::Result<Option<PathBuf>> {
    if !is_root() {
        skip_or_fail(TASK, "network namespaces need root")?;
        return Ok(None);
    }
    if let Some(tool) = ["ip", "tc", "unshare"].into_iter().find(|t| !on_path(t)) {
        skip_or_fail(TASK, &format!("no `{tool}` (Debian: iproute2, util-linux)"))?;
        return Ok(None);
    }
    if let Some(why) = Network::cannot() {
        skip_or_fail(TASK, &why)?;
        return Ok(None);
    }
    if let Err(why) = crate::mpirun::ensure_mpi() {
        skip_or_fail(TASK, &why)?;
        return Ok(None);
    }
    match ensure_venv(&target.join("s3-venv"), S3_REQUIREMENTS) {
        Ok(python) => Ok(Some(python)),
        Err(VenvError::Unavailable(why)) => skip_or_fail(TASK, &why).map(|()| None),
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// `ember` with MPI and object stores in `profile`, the all-reduce benchmark (release: it
/// builds no Burn), and the `mpi_ranks` example as `cargo xtask mpi` builds it (debug, so CI
/// finds it built).
fn build_programs(root: &Path, profile: Profile) -> anyhow::Result<()> {
    build(root, crate::mpirun::MPI_RANKS_BUILD)?;
    let mut ember = vec!["build", "-p", "ember-cli", "--features", "mpi,object-store"];
    if profile == Profile::Release {
        ember.push("--release");
    }
    build(root, &ember)?;
    build(root, crate::mpirun::ALLREDUCE_BUILD)
}

/// Copies the programs the task runs into `bin`, and returns `ember`'s copy: the target
/// directory is shared, and any other build of `ember-cli` there (another task, another
/// engineer) replaces `ember` with its own features at any moment. The copy must have
/// this task's (`push` and `--collective-timeout`); when it has not, another build got in
/// between, and the programs are built and copied again (at most three times).
fn installed_programs(
    root: &Path,
    target: &Path,
    bin: &Path,
    profile: Profile,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(bin)?;
    let ember = bin.join("ember");
    for attempt in 0..3 {
        if attempt > 0 {
            build_programs(root, profile)?;
        }
        let built_ember = format!("{}/ember", profile.dir());
        for (from, to) in [
            (built_ember.as_str(), "ember"),
            ("debug/examples/mpi_ranks", "mpi_ranks"),
            ("release/examples/allreduce", "allreduce"),
        ] {
            std::fs::copy(target.join(from), bin.join(to))
                .with_context(|| format!("copying {from}"))?;
        }
        let help = |args: &[&str]| {
            Command::new(&ember)
                .args(args)
                .output()
                .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        };
        if help(&["--help"])?.contains("push")
            && help(&["train", "--help"])?.contains("--collective-timeout")
        {
            return Ok(ember);
        }
    }
    anyhow::bail!(
        "{} keeps being replaced by a build of other features; run the task when no other \
         build of ember-cli shares the target directory",
        target.join(profile.dir()).join("ember").display()
    )
}

/// Each rank runs on a host of its own: rank r on host r, under that host's name.
fn one_rank_per_host(check: &Check) -> anyhow::Result<()> {
    let mut job = check.cluster.mpirun();
    job.args([
        "sh",
        "-c",
        "echo \"$(hostname) rank $OMPI_COMM_WORLD_RANK\"",
    ]);
    let ran = run_limited(job, "mpirun of hostname", &check.work.join("hostname.log"))?;
    for host in 0..check.network.hosts.len() {
        let line = format!("h{host} rank {host}");
        ensure!(
            ran.success && ran.output.contains(&line),
            "rank {host} did not run on host h{host}:\n{}",
            ran.output
        );
    }
    eprintln!("{TASK}: mpirun starts rank 0 on h0 and rank 1 on h1 through its remote-shell agent");
    Ok(())
}
