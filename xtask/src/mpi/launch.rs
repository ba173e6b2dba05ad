//! How the task starts a job: over which transport the ranks reach each other and the
//! `mpirun` command line for it, with the task's name its messages carry. A module of its own,
//! so that the scenarios (`scenarios.rs`) and the benchmark (`bench.rs`) share it with `mpi.rs`
//! (and `cargo xtask slurm` its plain `mpirun`).

use std::process::Command;

use crate::process::is_root;

/// The name every line the task prints starts with.
pub(super) const TASK: &str = "mpi";

/// How the ranks of a job reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Open MPI's choice on one host: shared memory.
    SharedMemory,
    /// Open MPI's TCP transport over the loopback interface, the one that crosses hosts: the
    /// `ob1` message layer with only the `tcp` (and `self`) byte-transfer layers, so neither
    /// shared memory nor UCX can stand in for it.
    Tcp,
}

impl Transport {
    pub(super) const ALL: [Transport; 2] = [Transport::SharedMemory, Transport::Tcp];

    pub(super) fn name(self) -> &'static str {
        match self {
            Transport::SharedMemory => "shared memory",
            Transport::Tcp => "TCP",
        }
    }

    /// A file-name-safe name, for logs and output directories.
    pub(super) fn slug(self) -> &'static str {
        match self {
            Transport::SharedMemory => "shm",
            Transport::Tcp => "tcp",
        }
    }
}

/// `mpirun` with `ranks` ranks on this machine over `transport` (as root, where Open MPI asks
/// for consent).
pub(crate) fn mpirun(ranks: usize, transport: Transport) -> Command {
    let mut command = Command::new("mpirun");
    command.args(["--oversubscribe", "-n", &ranks.to_string()]);
    if transport == Transport::Tcp {
        command.args([
            "--mca",
            "pml",
            "ob1",
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "--mca",
            "oob_tcp_if_include",
            "lo",
        ]);
    }
    if is_root() {
        command.arg("--allow-run-as-root");
    }
    command
}

/// How `cargo xtask mpi` and `cargo xtask hosts` build ember's `mpi_ranks` example (debug).
pub(crate) const MPI_RANKS_BUILD: &[&str] = &[
    "build",
    "-p",
    "ember",
    "--features",
    "mpi",
    "--example",
    "mpi_ranks",
];

/// How the all-reduce benchmarks build ember-collective's `allreduce` example (release).
pub(crate) const ALLREDUCE_BUILD: &[&str] = &[
    "build",
    "--release",
    "-p",
    "ember-collective",
    "--features",
    "mpi",
    "--example",
    "allreduce",
];
