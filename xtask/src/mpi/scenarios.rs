//! The scenarios run under `mpirun`: the transports forced, two ranks against one process,
//! a failing, a killed and a hung rank, `ember train` across ranks, a killed rank resumed, and
//! a job stopped by SIGTERM mid-epoch resumed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};

use super::launch::{TASK, Transport, mpirun};
use crate::process::{Ran, collect_tags, expect_success, inspect_json, run_limited};

/// The wait of the hang scenario: rank 0 must end the job soon after it.
const HANG_TIMEOUT_SECS: u64 = 5;

/// The control that makes the TCP runs mean something: under the same `ob1` layer with only the
/// `self` transport the ranks cannot reach each other, so the transport named is the one used.
pub(super) fn transports_are_forced(example: &Path, out: &Path) -> anyhow::Result<()> {
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

pub(super) fn equivalence(example: &Path, out: &Path, transport: Transport) -> anyhow::Result<()> {
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

pub(super) fn faults(example: &Path, out: &Path, transport: Transport) -> anyhow::Result<()> {
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

pub(super) fn train(ember: &Path, out: &Path) -> anyhow::Result<()> {
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
/// Returns how long the uninterrupted job took, which ran into `out/reference`.
pub(super) fn resume(ember: &Path, out: &Path) -> anyhow::Result<Duration> {
    std::fs::create_dir_all(out)?;
    let reference = out.join("reference");
    let ran = run_limited(
        job(ember, &reference),
        "mpirun -n 2 ember train",
        &out.join("reference.log"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train")?;
    let reference_took = ran.elapsed;

    let run = out.join("killed");
    let log = std::fs::File::create(out.join("killed.log"))?;
    let mut child = job(ember, &run)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting mpirun")?;
    let first = wait_for_first_checkpoint(&mut child, &run)?;
    ensure!(first, "the job ended or hung before its first checkpoint");
    let victim =
        crate::runs::rank_process(&run.to_string_lossy(), 1).context("finding rank 1's process")?;
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {victim} failed");
    let status = child.wait()?;
    ensure!(
        !status.success(),
        "the job succeeded although rank 1 was killed"
    );

    let ran = resume_like(ember, &run, &reference, &out.join("resumed.log"))?;
    eprintln!(
        "{TASK}: a job whose rank 1 was killed with SIGKILL after its first checkpoint, started \
         again with --resume: every rank went on from the same checkpoint, and the job ended \
         with the uninterrupted job's parameters, byte for byte, and its values in ember inspect \
         ({:.1} s)",
        ran.elapsed.as_secs_f64()
    );
    Ok(reference_took)
}

/// The job every scenario of `ember train` under mpirun runs: 2 ranks of 2 workers, 4 epochs.
fn job(ember: &Path, logdir: &Path) -> Command {
    let mut job = mpirun(2, Transport::SharedMemory);
    job.arg(ember)
        .args(["train", "--epochs", "4", "--devices", "2", "--logdir"])
        .arg(logdir);
    job
}

/// Resumes the job of `run` with `--resume` and checks that it ends as the uninterrupted job
/// in `reference` did: its model byte for byte, its values in ember inspect, each step once.
fn resume_like(ember: &Path, run: &Path, reference: &Path, log: &Path) -> anyhow::Result<Ran> {
    let mut resumed = mpirun(2, Transport::SharedMemory);
    resumed.arg(ember).args(["train", "--resume"]).arg(run);
    let ran = run_limited(resumed, "mpirun -n 2 ember train --resume", log)?;
    expect_success(&ran, "mpirun -n 2 ember train --resume")?;
    ensure!(
        ran.output.contains("resumed from"),
        "the job did not go on from a checkpoint:\n{}",
        ran.output
    );
    ensure!(
        crate::runs::model_without_ids(&run.join("model.bpk"))?
            == crate::runs::model_without_ids(&reference.join("model.bpk"))?,
        "the resumed job's parameters differ from the uninterrupted job's"
    );
    crate::runs::same_values(
        &inspect_json(ember, reference)?,
        &inspect_json(ember, run)?,
        run,
    )?;
    Ok(ran)
}

/// `ember train` under `mpirun -n 2` sent SIGTERM in the middle of its second epoch: on
/// every rank at once (as Slurm stops a job), then on rank 1 alone. Every rank stops at the
/// same optimizer step and checkpoints there, mid-epoch; the job exits with 143; `--resume`
/// goes on from that checkpoint (the newest) and the job ends as the uninterrupted one did.
/// `reference_took` times the uninterrupted job in `out/reference` (from [`resume`]). Both
/// resumed jobs are then read by TensorBoard's loaders, tbparse and rustboard as the
/// uninterrupted one is, each step once.
pub(super) fn terminated(
    ember: &Path,
    out: &Path,
    reference_took: Duration,
    (root, target): (&Path, &Path),
) -> anyhow::Result<()> {
    let reference = out.join("reference");
    let epoch_steps = epoch_steps(ember, &reference)?;
    for ranks in [&[0, 1][..], &[1]] {
        let name = format!("terminated-{}", ranks.len());
        let run = out.join(&name);
        // The second epoch is about a quarter of the job; a signal that lands at an epoch's
        // end stops the job there, which is not the case at stake: the next moment is tried.
        let mut mid_epoch = None;
        for eighths in [1, 2, 3] {
            std::fs::remove_dir_all(&run).ok();
            let at = reference_took * eighths / 16;
            let stopped = terminate_after_first_checkpoint(ember, &run, ranks, at, out)?;
            if !stopped.is_multiple_of(epoch_steps) {
                mid_epoch = Some(stopped);
                break;
            }
        }
        let stopped = mid_epoch.with_context(|| {
            format!("SIGTERM to ranks {ranks:?} never stopped the job in the middle of an epoch")
        })?;
        let newest = newest_checkpoint(&run.join("checkpoints"))?;
        let ran = resume_like(ember, &run, &reference, &out.join(format!("{name}.log")))?;
        ensure!(
            ran.output.contains(&newest),
            "ranks {ranks:?} terminated at step {stopped}: the job did not go on from the stop's \
             checkpoint {newest}:\n{}",
            ran.output
        );
        eprintln!(
            "{TASK}: SIGTERM to ranks {ranks:?} in the second epoch: every rank stopped at step \
             {stopped} and checkpointed there, and the job resumed from it ended with the \
             uninterrupted job's parameters, byte for byte, and its values in ember inspect"
        );
    }
    crate::resume::readers::tensorboard_reads_as(
        TASK,
        (root, target),
        out,
        "reference",
        &["terminated-2", "terminated-1"],
    )?;
    Ok(())
}

/// The steps an epoch of the run in `logdir` takes: the step of its first `epoch` record.
fn epoch_steps(ember: &Path, logdir: &Path) -> anyhow::Result<u64> {
    let report = inspect_json(ember, logdir)?;
    report["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .find(|tag| tag["tag"] == "epoch")
        .and_then(|tag| tag["step_min"].as_u64())
        .filter(|steps| *steps > 0)
        .with_context(|| format!("{} has no `epoch` series", logdir.display()))
}

/// Starts the job into `run`, sends SIGTERM to `ranks` `at` after its first checkpoint, and
/// returns the step the job says it was interrupted after (it must exit with 143).
pub(super) fn terminate_after_first_checkpoint(
    ember: &Path,
    run: &Path,
    ranks: &[usize],
    at: Duration,
    out: &Path,
) -> anyhow::Result<u64> {
    let log_path = out.join("terminated.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = job(ember, run)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting mpirun")?;
    let first = wait_for_first_checkpoint(&mut child, run)?;
    ensure!(first, "the job ended or hung before its first checkpoint");
    std::thread::sleep(at);
    Ok(stop_ranks(&mut child, run, ranks, &log_path)?.0)
}

/// Sends SIGTERM to `ranks` of the job writing `run` (`child` is its `mpirun`, its output in
/// `log_path`) and waits for it: it must not end as a finished one. Returns the step it says it
/// was interrupted after, and its output.
pub(super) fn stop_ranks(
    child: &mut std::process::Child,
    run: &Path,
    ranks: &[usize],
    log_path: &Path,
) -> anyhow::Result<(u64, String)> {
    for rank in ranks {
        let pid = crate::runs::rank_process(&run.to_string_lossy(), *rank)
            .with_context(|| format!("finding rank {rank}"))?;
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        ensure!(sent.success(), "kill -TERM {pid} failed");
    }
    let status = child.wait()?;
    let output = std::fs::read_to_string(log_path)?;
    ensure!(
        !status.success(),
        "the job ended as a finished one after SIGTERM:\n{output}"
    );
    let stopped = output
        .split("interrupted after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|steps| steps.parse().ok())
        .with_context(|| format!("the stopped job did not say where it stopped:\n{output}"))?;
    Ok((stopped, output))
}

/// The file name of the newest checkpoint of rank 0 in `dir`.
pub(super) fn newest_checkpoint(dir: &Path) -> anyhow::Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".ember") && !name.contains(".rank"))
        .collect();
    names.sort();
    names
        .pop()
        .with_context(|| format!("no checkpoint in {}", dir.display()))
}

/// Waits until rank 0's first checkpoint of the job writing `run` is there (`true`), or the
/// job has ended or two minutes have passed (`false`).
fn wait_for_first_checkpoint(child: &mut std::process::Child, run: &Path) -> anyhow::Result<bool> {
    let started = std::time::Instant::now();
    let checkpoints = run.join("checkpoints");
    Ok(loop {
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
    })
}

fn read_f32s(path: &Path) -> anyhow::Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}
