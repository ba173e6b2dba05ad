//! The scenarios run under `mpirun`: the transports forced, two ranks against one process,
//! a failing, a killed and a hung rank, `ember train` across ranks, a killed rank resumed, and
//! a job stopped by SIGTERM mid-epoch resumed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};

use crate::mpirun::{RankExits, TASK, Transport, mpirun};
use crate::process::{Ran, collect_tags, expect_success, run_limited};
use crate::scenario::{
    Env, Expected, Local, Running, Signalled, StopAndResume, Stopped, inspect_json,
};

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

    let worst = crate::mpirun::ranks_agree_with_one_process(out, "2 ranks x 2 workers")?;
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
    let epochs = EPOCHS.to_string();
    let ran = run_limited(
        ranks(ember, out).launch(&job_args(&epochs, &reference.to_string_lossy())),
        "mpirun -n 2 ember train",
        &out.join("reference.log"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train")?;
    let reference_took = ran.elapsed;

    let env = ranks(ember, out);
    let run = env.place("killed");
    let mut job = Running::until_first_checkpoint(
        &env,
        &job_args(&epochs, &run),
        &run,
        &out.join("killed.log"),
    )?;
    let victim = crate::runs::rank_process(&run, 1).context("finding rank 1's process")?;
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -KILL {victim} failed");
    ensure!(
        !job.0.wait()?.success(),
        "the job succeeded although rank 1 was killed"
    );

    let ran = Expected::of_dir(ember, &reference)?.resumed_to_the_end(&env, &run)?;
    eprintln!(
        "{TASK}: a job whose rank 1 was killed with SIGKILL after its first checkpoint, started \
         again with --resume: every rank went on from the same checkpoint, and the job ended \
         with the uninterrupted job's parameters, byte for byte, and its values in ember inspect \
         ({:.1} s)",
        ran.elapsed.as_secs_f64()
    );
    Ok(reference_took)
}

/// The epochs of the job the scenarios of `ember train` under mpirun run.
pub(super) const EPOCHS: u32 = 4;

/// The epochs of the job [`terminated`] stops, the Slurm task's: long enough, on a machine a few
/// times faster than a debug build on 2 cores, that the SIGTERM `mpirun` passes on a second
/// after it got its own reaches the ranks mid-run.
const STOPPED_EPOCHS: u32 = 60;

/// `ember train`'s arguments of the scenarios' job of `epochs` (2 workers a rank), into
/// `logdir` where one is given.
pub(super) fn job_args<'a>(epochs: &'a str, logdir: &'a str) -> Vec<&'a str> {
    let mut args = vec!["train", "--epochs", epochs, "--devices", "2"];
    if !logdir.is_empty() {
        args.extend(["--logdir", logdir]);
    }
    args
}

/// Runs under `out` of `program` (`ember`, or [`RankExits`]' script running it) as 2 ranks on
/// this machine, over shared memory.
pub(super) fn ranks(program: &Path, out: &Path) -> Local {
    Local::new(program, out).under(&mpirun(2, Transport::SharedMemory))
}

/// `ember train` under `mpirun -n 2` sent SIGTERM mid-run, mid-epoch: through `mpirun`, on
/// every rank at once (as Slurm stops a job), then on rank 1 alone. Every rank stops at the
/// same optimizer step and checkpoints there, closes its log and exits with 143
/// ([`stopped_cleanly`]); `--resume` goes on from that checkpoint (the newest) and the job ends
/// as the uninterrupted one, run first into `out/long-reference`, did. The resumed jobs are
/// then read by TensorBoard's loaders, tbparse and rustboard as the uninterrupted one is, each
/// step once.
pub(super) fn terminated(
    (ember, exits): (&Path, &RankExits),
    out: &Path,
    (root, target): (&Path, &Path),
) -> anyhow::Result<()> {
    let reference = out.join("long-reference");
    let epochs = STOPPED_EPOCHS.to_string();
    let ran = run_limited(
        ranks(ember, out).launch(&job_args(&epochs, &reference.to_string_lossy())),
        "mpirun -n 2 ember train",
        &out.join("long-reference.log"),
    )?;
    expect_success(&ran, "mpirun -n 2 ember train")?;
    let expected = Expected::of_dir(ember, &reference)?;
    // A signal that lands at an epoch's end stops the job there, which is not the case at
    // stake: the next moment is tried.
    let epoch_steps = [epoch_steps(ember, &reference)?];
    let after = [1, 2, 3].map(|sixteenths| ran.elapsed * sixteenths / 16);
    let mut resumed = Vec::new();
    for (name, whom) in [
        ("terminated-mpirun", Signalled::Launcher),
        ("terminated-2", Signalled::Ranks(&[0, 1])),
        ("terminated-1", Signalled::Ranks(&[1])),
    ] {
        let stopped = StopAndResume {
            name,
            args: &job_args(&epochs, ""),
            whom,
            after: &after,
            periods: &epoch_steps,
        }
        .stop(&ranks(exits.program(), out))?;
        let took = stopped_cleanly(&stopped, whom, 2, (ember, exits))?;
        stopped.resumed(&ranks(ember, out), &expected)?;
        eprintln!(
            "{TASK}: SIGTERM to {whom} mid-epoch: every rank stopped at step {}, checkpointed \
             there, closed its log and exited with 143, the last {:.2} s after the signal; the \
             job resumed from the checkpoint ended with the uninterrupted job's parameters, byte \
             for byte, and its values in ember inspect",
            stopped.step,
            took.as_secs_f64()
        );
        resumed.push(
            Path::new(&stopped.place)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    let resumed: Vec<&str> = resumed.iter().map(String::as_str).collect();
    crate::readers::tensorboard_reads_as(TASK, (root, target), out, "long-reference", &resumed)?;
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

/// What only `mpirun` on this machine shows of a job of `ranks` ranks stopped by SIGTERM
/// (`exits` recorded how each ended): every rank exited with 143, having closed its log, and
/// rank 0's log holds `run/interrupted` at the step the job says it stopped after; `mpirun`
/// exits with 143 where ranks alone were signalled (signalled itself, Open MPI's `mpirun` ends
/// with a status of its own, 1). Returns the time from the signal to the last rank's exit.
pub(super) fn stopped_cleanly(
    stopped: &Stopped,
    whom: Signalled<'_>,
    ranks: usize,
    (ember, exits): (&Path, &RankExits),
) -> anyhow::Result<Duration> {
    let Stopped {
        place,
        step,
        output,
        status,
        sent,
        ..
    } = stopped;
    let exited = exits.take(ranks)?;
    // `StopAndResume::stop` tries another moment where a signal lands on an epoch's end: each
    // rank's last exit is the stop's, those before it the set-aside tries'.
    let last: Vec<Option<&crate::mpirun::Exit>> = exited.iter().map(|runs| runs.last()).collect();
    let statuses: Vec<Option<i32>> = last.iter().map(|exit| exit.map(|e| e.status)).collect();
    ensure!(
        statuses.iter().all(|status| *status == Some(143)),
        "SIGTERM to {whom}: the ranks exited with {statuses:?} (137: SIGKILL), not 143 each; \
         mpirun {status}:\n{output}"
    );
    if let Signalled::Ranks(_) = whom {
        ensure!(
            status.code() == Some(143),
            "SIGTERM to {whom}: mpirun {status}, not 143:\n{output}"
        );
    }
    let unsealed = crate::runs::unsealed_event_files(Path::new(place))?;
    ensure!(
        unsealed.is_empty(),
        "SIGTERM to {whom}: event files no rank closed: {unsealed:?}"
    );
    let report = inspect_json(ember, Path::new(place))?;
    let interrupted = report["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .find(|tag| tag["tag"] == "run/interrupted");
    ensure!(
        interrupted.is_some_and(|tag| tag["count"] == 1 && tag["step_max"] == *step),
        "SIGTERM to {whom} stopped the job at step {step}; its log's run/interrupted: \
         {interrupted:?}"
    );
    Ok(last
        .iter()
        .flatten()
        .map(|exit| exit.at.duration_since(*sent).unwrap_or_default())
        .max()
        .unwrap_or_default())
}
