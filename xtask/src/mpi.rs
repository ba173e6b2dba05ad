//! `cargo xtask mpi [--bench]`: ember across processes, under the system's `mpirun`.
//!
//! 1. Finds Open MPI (`mpirun`, `mpicc`) and libclang (rsmpi's bindgen needs it); as root with
//!    `apt-get`, installs Debian's `openmpi-bin libopenmpi-dev libclang-dev` when missing.
//!    Without them the task is skipped in one line, except under `CI=true`, where that is a
//!    failure.
//! 2. Lints the `mpi` feature's code and builds its docs (`-D warnings` both), which the
//!    workspace's clippy and `cargo xtask features`, built without MPI, do not see.
//! 3. Builds `crates/ember/examples/mpi_ranks.rs` and `ember` with `--features mpi`, and runs,
//!    each under a wall-clock limit:
//!    - one process with 4 workers (`--single`), then `mpirun -n 2` of 2 workers each, on the
//!      same data: the ranks' parameters after every optimizer step must be the same bytes,
//!      and within 1e-5 of the single process's;
//!    - a rank whose step panics: every rank must end with an error, rank 1 with its own and
//!      rank 0 naming rank 1;
//!    - a rank killed (SIGKILL) mid-run: `mpirun` must end the job with an error naming rank 1;
//!    - a rank that hangs: rank 0's bounded wait must end the job, saying so;
//!    - each of the above twice: over shared memory, and over Open MPI's TCP transport on the
//!      loopback interface (`--mca pml ob1 --mca btl tcp,self`), what crosses hosts;
//!    - `ember train` under `mpirun -n 2`: rank 0 reports, both ranks write their event files
//!      (`.rank0`, `.rank1`) into the one run directory, and `ember inspect` reads them back
//!      whole, with the run's series and each rank's step times; killed, SIGTERMed (through
//!      `mpirun`, on both ranks, on one: every rank exits with 143, its log closed) and resumed
//!      (`scenarios.rs`); and SIGTERMed, resumed by `mpirun -n 1`, SIGTERMed again and resumed
//!      by `mpirun -n 2` (`fewer_ranks.rs`): the uninterrupted job's model byte for byte, each
//!      step once.
//!
//! `--bench` instead times `MpiComm`'s all-reduce per gradient size on 1 process and on 2 over
//! shared memory and over TCP
//! (`crates/ember-collective/examples/allreduce.rs`, release build), rounds alternating,
//! into `target/bench/mpi.{md,json}`.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};

use crate::process::{build, cargo, skip_or_fail, target_dir};

mod bench;
mod fewer_ranks;
mod scenarios;

use crate::mpirun::{MPI_RANKS_BUILD, RankExits, TASK, Transport, ensure_mpi};
use bench::bench;
use fewer_ranks::fewer_ranks;
use scenarios::{equivalence, faults, resume, terminated, train, transports_are_forced};

/// Checks the ranks, or with `bench_rounds` measures the all-reduce that many rounds.
pub(crate) fn run(root: &Path, bench_rounds: Option<usize>) -> anyhow::Result<()> {
    if let Err(why) = ensure_mpi() {
        return skip_or_fail(TASK, &why);
    }
    if let Some(rounds) = bench_rounds {
        return bench(root, rounds);
    }
    lint(root)?;
    let target = target_dir(root);
    build(root, MPI_RANKS_BUILD)?;
    build(root, &["build", "-p", "ember-cli", "--features", "mpi"])?;
    let example = target.join("debug/examples/mpi_ranks");
    let ember = target.join("debug/ember");
    let work = tempdir(&target)?;

    transports_are_forced(&example, &work.join("control"))?;
    for transport in Transport::ALL {
        let out = work.join(transport.slug());
        equivalence(&example, &out.join("params"), transport)?;
        faults(&example, &out.join("faults"), transport)?;
    }
    train(&ember, &work.join("train"))?;
    let reference_took = resume(&ember, &work.join("resume"))?;
    let exits = RankExits::new(&work.join("exits"), &ember)?;
    terminated((&ember, &exits), &work.join("resume"), (root, &target))?;
    fewer_ranks((&ember, &exits), &work.join("resume"), reference_took)?;
    std::fs::remove_dir_all(&work).ok();
    eprintln!("{TASK}: all scenarios passed");
    Ok(())
}

fn lint(root: &Path) -> anyhow::Result<()> {
    build(
        root,
        &[
            "clippy",
            "-p",
            "ember-collective",
            "-p",
            "ember",
            "-p",
            "ember-cli",
            "--features",
            "ember-collective/mpi,ember/mpi,ember-cli/mpi",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    // The feature's docs, as `cargo xtask features` checks the default ones.
    let status = cargo()
        .args(["doc", "--no-deps", "-p", "ember-collective", "-p", "ember"])
        .args(["--features", "ember-collective/mpi,ember/mpi"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(root)
        .status()
        .context("starting cargo doc")?;
    ensure!(
        status.success(),
        "the mpi feature's docs do not build ({status})"
    );
    Ok(())
}

fn tempdir(target: &Path) -> anyhow::Result<PathBuf> {
    let dir = target.join(format!("mpi-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
