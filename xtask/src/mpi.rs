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
//!      whole, with the run's series and each rank's step times.
//!
//! `--bench` instead times `MpiComm`'s all-reduce per gradient size on 1 process and on 2 over
//! shared memory and over TCP
//! (`crates/ember-collective/examples/allreduce.rs`, release build), rounds alternating,
//! into `target/bench/mpi.{md,json}`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::compat::{cargo, skip_or_fail, target_dir};
use crate::process::{
    Ran, build, collect_tags, ensure_installed, expect_success, inspect_json, is_root, on_path,
    run_limited,
};

const TASK: &str = "mpi";

/// Debian's packages for Open MPI and rsmpi's bindgen.
const PACKAGES: &[&str] = &["openmpi-bin", "libopenmpi-dev", "libclang-dev"];

/// The wait of the hang scenario: rank 0 must end the job soon after it.
const HANG_TIMEOUT_SECS: u64 = 5;

pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    if let Err(why) = ensure_mpi() {
        return skip_or_fail(TASK, &why);
    }
    if args.iter().any(|a| a == "--bench") {
        let rounds = match args.iter().position(|a| a == "--rounds") {
            Some(at) => args
                .get(at + 1)
                .context("--rounds needs a number")?
                .parse()
                .context("--rounds needs a number")?,
            None => 3,
        };
        return bench(root, rounds);
    }
    lint(root)?;
    let target = target_dir(root);
    build(
        root,
        &[
            "build",
            "-p",
            "ember",
            "--features",
            "mpi",
            "--example",
            "mpi_ranks",
        ],
    )?;
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
    resume(&ember, &work.join("resume"))?;
    std::fs::remove_dir_all(&work).ok();
    eprintln!("{TASK}: all scenarios passed");
    Ok(())
}

/// Finds what rsmpi needs, installing it when this process may; `Err` says what is missing.
fn ensure_mpi() -> Result<(), String> {
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
enum Transport {
    /// Open MPI's choice on one host: shared memory.
    SharedMemory,
    /// Open MPI's TCP transport over the loopback interface, the one that crosses hosts: the
    /// `ob1` message layer with only the `tcp` (and `self`) byte-transfer layers, so neither
    /// shared memory nor UCX can stand in for it.
    Tcp,
}

impl Transport {
    const ALL: [Transport; 2] = [Transport::SharedMemory, Transport::Tcp];

    fn name(self) -> &'static str {
        match self {
            Transport::SharedMemory => "shared memory",
            Transport::Tcp => "TCP",
        }
    }

    /// A file-name-safe name, for logs and output directories.
    fn slug(self) -> &'static str {
        match self {
            Transport::SharedMemory => "shm",
            Transport::Tcp => "tcp",
        }
    }
}

/// `mpirun` with `ranks` ranks on this machine over `transport` (as root, where Open MPI asks
/// for consent).
fn mpirun(ranks: usize, transport: Transport) -> Command {
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

fn read_f32s(path: &Path) -> anyhow::Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// The control that makes the TCP runs mean something: under the same `ob1` layer with only the
/// `self` transport the ranks cannot reach each other, so the transport named is the one used.
fn transports_are_forced(example: &Path, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let mut job = mpirun(2, Transport::SharedMemory);
    job.args(["--mca", "pml", "ob1", "--mca", "btl", "self"])
        .arg(example)
        .args(["--workers", "2"])
        .arg("--out")
        .arg(out);
    let ran = run_limited(
        job,
        "mpirun -n 2 with no transport between ranks",
        &out.join("control.log"),
    )?;
    // Open MPI words the refusal one of two ways, depending on which of its processes reports
    // it first, and sometimes not at all (its launcher's help-text lookup fails, leaving only
    // `ORTE_ERROR_LOG` lines): then the evidence is that no rank wrote a parameter, since a
    // rank writes its file only once it has joined the others.
    let said = ["unable to reach each other", "is unreachable from another"]
        .iter()
        .any(|words| ran.output.contains(words));
    let trained = std::fs::read_dir(out)?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("params"));
    ensure!(
        !ran.success && (said || !trained),
        "ranks with only the self transport were not refused, so forcing tcp proves nothing:\n{}",
        ran.output
    );
    eprintln!(
        "{TASK}: control: with only Open MPI's `self` transport the ranks cannot reach each other"
    );
    Ok(())
}

fn equivalence(example: &Path, out: &Path, transport: Transport) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let mut single = Command::new(example);
    single
        .arg("--single")
        .args(["--workers", "4"])
        .arg("--out")
        .arg(out);
    let ran = run_limited(single, "one process of 4 workers", &out.join("single.log"))?;
    expect_success(&ran, "one process of 4 workers")?;

    let mut job = mpirun(2, transport);
    job.arg(example)
        .args(["--workers", "2"])
        .arg("--out")
        .arg(out);
    let ran = run_limited(job, "mpirun -n 2 of 2 workers", &out.join("ranks.log"))?;
    expect_success(&ran, "mpirun -n 2 of 2 workers")?;

    let rank0 = std::fs::read(out.join("params.rank0"))?;
    let rank1 = std::fs::read(out.join("params.rank1"))?;
    ensure!(!rank0.is_empty(), "rank 0 recorded no optimizer step");
    ensure!(
        rank0 == rank1,
        "the ranks' parameters differ after some optimizer step"
    );
    let ranks = read_f32s(&out.join("params.rank0"))?;
    let one = read_f32s(&out.join("params.single"))?;
    ensure!(
        ranks.len() == one.len(),
        "the ranks made {} optimizer-step values, one process {}",
        ranks.len(),
        one.len()
    );
    let worst = ranks
        .iter()
        .zip(&one)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    ensure!(
        worst <= 1e-5,
        "2 ranks x 2 workers and 1 process x 4 differ by {worst:e} (more than 1e-5)"
    );
    let steps = ran
        .output
        .lines()
        .find_map(|l| l.strip_prefix("rank 0 of 2: "))
        .unwrap_or("?")
        .to_owned();
    eprintln!(
        "{TASK} over {}: 2 ranks x 2 workers: {steps}; ranks bit-identical after every one; \
         max |ranks - 1 process x 4 workers| = {worst:.1e} ({:.1} s)",
        transport.name(),
        ran.elapsed.as_secs_f64()
    );
    Ok(())
}

fn faults(example: &Path, out: &Path, transport: Transport) -> anyhow::Result<()> {
    let over = transport.name();
    std::fs::create_dir_all(out)?;
    let scenario = |fault: &str, extra: &[&str]| -> anyhow::Result<Ran> {
        let mut job = mpirun(2, transport);
        job.arg(example)
            .args(["--workers", "2", fault])
            .args(extra)
            .arg("--out")
            .arg(out.join(fault.trim_start_matches('-')));
        let what = format!("mpirun -n 2 with {fault}");
        let ran = run_limited(job, &what, &out.join(format!("{}.log", &fault[2..])))?;
        ensure!(
            !ran.success,
            "{what} succeeded; it must fail:\n{}",
            ran.output
        );
        Ok(ran)
    };
    let contains = |ran: &Ran, what: &str, needles: &[&str]| -> anyhow::Result<()> {
        for needle in needles {
            ensure!(
                ran.output.contains(needle),
                "{what}: the job's output does not say `{needle}`:\n{}",
                ran.output
            );
        }
        Ok(())
    };

    let failed = scenario("--fail", &[])?;
    contains(
        &failed,
        "a failing rank",
        &[
            "error: rank 1 of 2: training step",
            "a batch this rank cannot train on",
            "error: rank 0 of 2: training step",
            "rank 1 failed",
        ],
    )?;
    eprintln!(
        "{TASK} over {over}: a rank whose step fails: every rank ends with an error naming rank 1 ({:.1} s)",
        failed.elapsed.as_secs_f64()
    );

    let killed = scenario("--kill", &[])?;
    contains(&killed, "a killed rank", &["rank 1", "signal 9"])?;
    eprintln!(
        "{TASK} over {over}: a rank killed mid-run: mpirun ends the job naming rank 1 ({:.1} s)",
        killed.elapsed.as_secs_f64()
    );

    let hung = scenario("--hang", &["--timeout", &HANG_TIMEOUT_SECS.to_string()])?;
    contains(&hung, "a hung rank", &["error: rank 0 of 2:", "waited"])?;
    eprintln!(
        "{TASK} over {over}: a rank that hangs: rank 0's {HANG_TIMEOUT_SECS} s wait ends the job ({:.1} s)",
        hung.elapsed.as_secs_f64()
    );
    Ok(())
}

fn train(ember: &Path, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let logdir = out.join("run");
    let mut job = mpirun(2, Transport::SharedMemory);
    job.arg(ember)
        .args([
            "train",
            "--epochs",
            "2",
            "--subset",
            "400",
            "--devices",
            "2",
        ])
        .arg("--logdir")
        .arg(&logdir);
    let ran = run_limited(job, "mpirun -n 2 ember train", &out.join("train.log"))?;
    expect_success(&ran, "mpirun -n 2 ember train")?;
    ensure!(
        ran.output.matches("test accuracy:").count() == 1,
        "rank 0 alone reports the result:\n{}",
        ran.output
    );
    let names: Vec<String> = std::fs::read_dir(&logdir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for rank in ["rank0", "rank1"] {
        ensure!(
            names
                .iter()
                .any(|n| n.contains("tfevents") && n.ends_with(rank)),
            "no event file of {rank} in {}: {names:?}",
            logdir.display()
        );
    }
    // Read back as one run by ember's checking reader: every record of both files whole, the
    // run's own series from rank 0 and each rank's device step times.
    let report = inspect_json(ember, &logdir)?;
    let mut tags = Vec::new();
    collect_tags(&report, &mut tags);
    let mut expected = vec!["train/loss".to_owned(), "valid/accuracy".to_owned()];
    for rank in 0..2 {
        for device in 0..2 {
            expected.push(format!("rank/{rank}/device/{device}/step_seconds"));
        }
    }
    for tag in &expected {
        ensure!(
            tags.contains(tag),
            "the run has no `{tag}`; ember inspect found {tags:?}"
        );
    }
    ensure!(
        !tags.iter().any(|t| t.starts_with("device/")),
        "a rank recorded step times without its rank: {tags:?}"
    );
    eprintln!(
        "{TASK}: ember train under mpirun -n 2: one report; both ranks' files read back whole by \
         ember inspect, with the run's series and each rank's step times ({:.1} s)",
        ran.elapsed.as_secs_f64()
    );
    Ok(())
}

/// `ember train` under `mpirun -n 2`, its rank 1 killed with SIGKILL once the first epoch's
/// checkpoint is written (mpirun then ends the whole job), and the job started again with
/// `--resume`: every rank goes on from the same checkpoint, and the job ends with the model and
/// the log of a job that was never killed.
fn resume(ember: &Path, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let job = |logdir: &Path| {
        let mut job = mpirun(2, Transport::SharedMemory);
        job.arg(ember)
            .args(["train", "--epochs", "4", "--devices", "2", "--logdir"])
            .arg(logdir);
        job
    };
    let reference = out.join("reference");
    let ran = run_limited(
        job(&reference),
        "mpirun -n 2 ember train",
        &out.join("reference.log"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train")?;

    let run = out.join("killed");
    let log = std::fs::File::create(out.join("killed.log"))?;
    let mut child = job(&run)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting mpirun")?;
    let started = std::time::Instant::now();
    let checkpoints = run.join("checkpoints");
    let first = loop {
        let found = std::fs::read_dir(&checkpoints)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                // Rank 0's checkpoint, written after every rank's part.
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(".ember") && !name.contains(".rank")
            });
        if found {
            break true;
        }
        if child.try_wait()?.is_some() || started.elapsed() > std::time::Duration::from_secs(120) {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    ensure!(first, "the job ended or hung before its first checkpoint");
    let victim = rank_process(&run, 1).context("finding rank 1's process")?;
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {victim} failed");
    let status = child.wait()?;
    ensure!(
        !status.success(),
        "the job succeeded although rank 1 was killed"
    );

    let resumed = {
        let mut job = mpirun(2, Transport::SharedMemory);
        job.arg(ember).args(["train", "--resume"]).arg(&run);
        job
    };
    let ran = run_limited(
        resumed,
        "mpirun -n 2 ember train --resume",
        &out.join("resumed.log"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train --resume")?;
    ensure!(
        ran.output.contains("resumed from"),
        "the job did not go on from a checkpoint:\n{}",
        ran.output
    );
    ensure!(
        crate::resume::model_without_ids(&run.join("model.bpk"))?
            == crate::resume::model_without_ids(&reference.join("model.bpk"))?,
        "the resumed job's parameters differ from the uninterrupted job's"
    );
    crate::resume::same_values(
        &inspect_json(ember, &reference)?,
        &inspect_json(ember, &run)?,
        &run,
    )?;
    eprintln!(
        "{TASK}: a job whose rank 1 was killed with SIGKILL after its first checkpoint, started \
         again with --resume: every rank went on from the same checkpoint, and the job ended \
         with the uninterrupted job's parameters, byte for byte, and its values in ember inspect \
         ({:.1} s)",
        ran.elapsed.as_secs_f64()
    );
    Ok(())
}

/// The process id of rank `rank` of the `ember train` job writing `logdir`, found by its
/// command line and Open MPI's `OMPI_COMM_WORLD_RANK`.
fn rank_process(logdir: &Path, rank: usize) -> Option<u32> {
    let logdir = logdir.to_string_lossy().into_owned();
    let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            if !cmdline.contains(&logdir)
                || !cmdline.contains("train")
                || cmdline.contains("mpirun")
            {
                return None;
            }
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_bytes())
                .then_some(pid)
        })
}

/// Gradient sizes timed, in `f32` values.
const BENCH_SIZES: &[usize] = &[1_000, 10_000, 100_000, 1_000_000, 10_000_000];

fn bench(root: &Path, rounds: usize) -> anyhow::Result<()> {
    build(
        root,
        &[
            "build",
            "--release",
            "-p",
            "ember-collective",
            "--features",
            "mpi",
            "--example",
            "allreduce",
        ],
    )?;
    let target = target_dir(root);
    let example = target.join("release/examples/allreduce");
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;
    let sizes: Vec<String> = BENCH_SIZES.iter().map(usize::to_string).collect();
    // The jobs timed: one process, and two over each transport.
    let jobs = [
        (1, Transport::SharedMemory),
        (2, Transport::SharedMemory),
        (2, Transport::Tcp),
    ];
    // [job][size] -> every round's median µs.
    let mut figures = vec![vec![Vec::new(); BENCH_SIZES.len()]; jobs.len()];
    for round in 0..rounds.max(1) {
        // Rotated each round, so no job always runs first on a warm or cold machine.
        for offset in 0..jobs.len() {
            let at_job = (offset + round) % jobs.len();
            let (processes, transport) = jobs[at_job];
            let mut job = mpirun(processes, transport);
            job.arg(&example).args(&sizes);
            let ran = run_limited(
                job,
                &format!(
                    "the all-reduce benchmark on {processes} process(es) over {}",
                    transport.name()
                ),
                &out.join("mpi-bench.log"),
            )?;
            expect_success(&ran, "the all-reduce benchmark")?;
            for line in ran.output.lines().filter(|l| l.starts_with("{")) {
                let value: serde_json::Value = serde_json::from_str(line)?;
                let size = value["values"].as_u64().context("values")? as usize;
                let micros = value["median_us"].as_f64().context("median_us")?;
                if let Some(at) = BENCH_SIZES.iter().position(|s| *s == size) {
                    figures[at_job][at].push(micros);
                }
            }
        }
    }
    let summary = |samples: &[f64]| -> (f64, f64, f64) {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        match sorted.as_slice() {
            [] => (f64::NAN, f64::NAN, f64::NAN),
            s => (s[s.len() / 2], s[0], s[s.len() - 1]),
        }
    };
    let mut md = String::from(
        "| gradient (f32 values) | bytes | 1 process: µs per all-reduce | 2 processes, shared memory | bus bandwidth | 2 processes, TCP (loopback) | bus bandwidth |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for (at, size) in BENCH_SIZES.iter().enumerate() {
        let one = summary(&figures[0][at]);
        let shm = summary(&figures[1][at]);
        let tcp = summary(&figures[2][at]);
        let bytes = size * 4;
        // A ring all-reduce moves 2(p-1)/p of the buffer through each link: bytes for p = 2.
        let bandwidth = |micros: f64| bytes as f64 / (micros * 1e-6) / 1e9;
        md.push_str(&format!(
            "| {size} | {bytes} | {:.1} ({:.1}–{:.1}) | {:.1} ({:.1}–{:.1}) | {:.2} GB/s | {:.1} ({:.1}–{:.1}) | {:.2} GB/s |\n",
            one.0,
            one.1,
            one.2,
            shm.0,
            shm.1,
            shm.2,
            bandwidth(shm.0),
            tcp.0,
            tcp.1,
            tcp.2,
            bandwidth(tcp.0),
        ));
        json.push(serde_json::json!({
            "values": size,
            "bytes": bytes,
            "one_process_us": figures[0][at],
            "two_processes_us": figures[1][at],
            "two_processes_tcp_us": figures[2][at],
        }));
    }
    std::fs::write(out.join("mpi.md"), &md)?;
    std::fs::write(
        out.join("mpi.json"),
        serde_json::to_string_pretty(&serde_json::json!({ "rounds": rounds, "sizes": json }))?,
    )?;
    print!("{md}");
    eprintln!("{TASK}: wrote {}", out.join("mpi.md").display());
    Ok(())
}
