//! How a task starts an MPI job: Open MPI found (or installed), over which transport the ranks
//! reach each other and the `mpirun` command line for it. Shared by `cargo xtask mpi`, `slurm`
//! (its plain `mpirun`), `hosts` and `scaling --mpi`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, ensure};

use crate::process::{ensure_installed, is_root, on_path};

/// The name every line the task prints starts with.
pub(crate) const TASK: &str = "mpi";

/// Debian's packages for Open MPI and rsmpi's bindgen.
const PACKAGES: &[&str] = &["openmpi-bin", "libopenmpi-dev", "libclang-dev"];

/// Finds what rsmpi needs, installing it when this process may; `Err` says what is missing.
pub(crate) fn ensure_mpi() -> Result<(), String> {
    ensure_installed(TASK, PACKAGES, missing)
}

fn missing() -> Vec<&'static str> {
    let mut missing = Vec::new();
    for tool in ["mpirun", "mpicc"] {
        if !on_path(tool) {
            missing.push(tool);
        }
    }
    if !has_libclang() {
        missing.push("libclang");
    }
    missing
}

fn has_libclang() -> bool {
    if let Some(dir) = std::env::var_os("LIBCLANG_PATH") {
        return Path::new(&dir).is_dir();
    }
    let Ok(lib) = std::fs::read_dir("/usr/lib") else {
        return false;
    };
    lib.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
        .any(|e| {
            std::fs::read_dir(e.path().join("lib")).is_ok_and(|files| {
                files
                    .flatten()
                    .any(|f| f.file_name().to_string_lossy().starts_with("libclang.so"))
            })
        })
}

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
    pub(crate) const ALL: [Transport; 2] = [Transport::SharedMemory, Transport::Tcp];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::SharedMemory => "shared memory",
            Transport::Tcp => "TCP",
        }
    }

    /// A file-name-safe name, for logs and output directories.
    pub(crate) fn slug(self) -> &'static str {
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

/// Each rank's exit status, which `mpirun` does not tell (signalled itself, it exits with a
/// status of its own; otherwise with the first failed rank's): a script that `mpirun` runs in
/// place of a rank's program runs it and appends the status it ended with, and when, to
/// `exit.rank<r>` beside the script.
///
/// The program runs in the rank's process group, which `mpirun` signals, its SIGKILL included,
/// as the child of a process outside that group, which sees its status however it ends: Open
/// MPI SIGKILLs every rank's group as soon as one rank's process ends, and a shell in the group
/// could be killed between its program's end and its record. The record holds `mpirun` up by
/// a moment (Perl appending a line) between a rank's end and that SIGKILL.
pub(crate) struct RankExits {
    dir: PathBuf,
    script: PathBuf,
}

/// The script, with `__PROGRAM__` and `__DIR__` to fill in.
const RANK_SCRIPT: &str = r#"#!/usr/bin/perl
use strict;
use warnings;
use POSIX ();
use Time::HiRes ();
my $group = getpgrp();
# This process is the rank mpirun knows: it lasts until the program has ended.
$SIG{$_} = 'IGNORE' for qw(TERM INT HUP);
my $recorder = fork() // die "fork: $!";
if ($recorder == 0) {
    POSIX::setpgid(0, 0) // die "setpgid: $!";
    my $program = fork() // die "fork: $!";
    if ($program == 0) {
        POSIX::setpgid(0, $group) // die "setpgid: $!";
        $SIG{$_} = 'DEFAULT' for qw(TERM INT HUP);
        exec { __PROGRAM__ } __PROGRAM__, @ARGV or die "exec: $!";
    }
    waitpid($program, 0);
    my $status = ($? & 127) ? 128 + ($? & 127) : $? >> 8;
    open(my $exits, '>>', __DIR__ . "/exit.rank$ENV{OMPI_COMM_WORLD_RANK}") or die "open: $!";
    printf $exits "%d %.6f\n", $status, Time::HiRes::time();
    close($exits) or die "close: $!";
    exit($status);
}
waitpid($recorder, 0);
exit($? >> 8);
"#;

impl RankExits {
    /// The script, in `dir`, running `program` with the arguments it is given.
    pub(crate) fn new(dir: &Path, program: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let quoted = |path: &Path| -> anyhow::Result<String> {
            let text = path.to_str().context("a path that is not UTF-8")?;
            ensure!(
                !text.contains(['\'', '\\']),
                "a path with a quote or a backslash: {text}"
            );
            Ok(format!("'{text}'"))
        };
        let text = RANK_SCRIPT
            .replace("__PROGRAM__", &quoted(program)?)
            .replace("__DIR__", &quoted(dir)?);
        let script = dir.join("rank");
        std::fs::write(&script, text).with_context(|| format!("writing {}", script.display()))?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            script,
        })
    }

    /// What `mpirun` runs in place of the program.
    pub(crate) fn program(&self) -> &Path {
        &self.script
    }

    /// How each of `ranks` ranks ended, run after run, forgotten once read. Waits a while for
    /// every rank's first: a rank's record may come after `mpirun`'s end.
    pub(crate) fn take(&self, ranks: usize) -> anyhow::Result<Vec<Vec<Exit>>> {
        let path = |rank: usize| self.dir.join(format!("exit.rank{rank}"));
        let started = std::time::Instant::now();
        let recorded = |rank| std::fs::metadata(path(rank)).is_ok_and(|m| m.len() > 0);
        while !(0..ranks).all(recorded) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        (0..ranks)
            .map(|rank| {
                let path = path(rank);
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
                };
                std::fs::remove_file(&path).ok();
                text.lines()
                    .map(|line| {
                        let (status, at) = line.split_once(' ').unwrap_or((line, ""));
                        Ok(Exit {
                            status: status.parse()?,
                            at: UNIX_EPOCH + Duration::try_from_secs_f64(at.parse()?)?,
                        })
                    })
                    .collect::<anyhow::Result<_>>()
                    .with_context(|| format!("{}: `{text}`", path.display()))
            })
            .collect()
    }
}

/// How a rank's program ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exit {
    /// Its exit status; 128 + the signal that killed it, as shells give it.
    pub(crate) status: i32,
    pub(crate) at: SystemTime,
}

/// What `mpi_ranks` wrote into `out` holds: both ranks' parameters the same bytes after every
/// optimizer step (`params.rank0`, `params.rank1`), and within 1e-5 of one process of as many
/// workers (`params.single`). `job` names the job in a failure ("2 hosts x 2 workers").
/// Returns the largest difference from the one process.
pub(crate) fn ranks_agree_with_one_process(out: &Path, job: &str) -> anyhow::Result<f32> {
    let rank0 = read_f32s(&out.join("params.rank0"))?;
    let rank1 = read_f32s(&out.join("params.rank1"))?;
    let one = read_f32s(&out.join("params.single"))?;
    ensure!(!rank0.is_empty(), "rank 0 recorded no optimizer step");
    ensure!(
        rank0
            .iter()
            .map(|v| v.to_bits())
            .eq(rank1.iter().map(|v| v.to_bits())),
        "{job}: the ranks' parameters differ after some optimizer step"
    );
    ensure!(
        rank0.len() == one.len(),
        "{job} made {} optimizer-step values, one process {}",
        rank0.len(),
        one.len()
    );
    let worst = rank0
        .iter()
        .zip(&one)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    ensure!(
        worst <= 1e-5,
        "{job} and 1 process of as many workers differ by {worst:e} (more than 1e-5)"
    );
    Ok(worst)
}

fn read_f32s(path: &Path) -> anyhow::Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}
