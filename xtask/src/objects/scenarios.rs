//! The object-store scenarios that run alike against every store (moto's S3, fake-gcs-server
//! and Azurite), each given the store as a [`Store`] env: a run killed with SIGKILL then
//! `ember push`ed (and one resumed first), two runs into one URL at once, runs killed at seeded
//! moments and resumed from the bucket, a run stopped past its lease and taken over. A module
//! of their own, so that `objects` and its Google and Azure parts share them without one
//! reaching into another.

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::objects::clouds::Part;
use crate::process::{Ran, expect_success, kill_after, run_limited};
use crate::readers::StoreReader;
use crate::scenario::{Env, Expected, KillAndResume, Program, Store, Walked, points};

/// Every scenario of this module against `store`.
pub(crate) fn against(store: &Store, task: &str) -> anyhow::Result<()> {
    killed_then_pushed(store, &store.place("pushed"), task)?;
    resumed_then_pushed(store, &store.place("repushed"), task)?;
    two_at_once(store, task)?;
    resumed_while_running(store, &store.place("live"), task)
}

/// `ember train TRAIN_ARGS` into `part`'s store at `url`, and the same run `local` on the
/// disk: the run in the store is the local run (its model byte for byte, its values in `ember
/// inspect` of the URL); TensorBoard's loader (`reader`) shows every value of every kind as
/// the local run's, and its page the run's `train/loss`.
pub(crate) fn every_value(
    part: &Part,
    reader: &StoreReader,
    url: &str,
    local: &Expected,
) -> anyhow::Result<()> {
    let store = &part.store;
    let took = train_into(store, TRAIN_ARGS, url, &store.log(url, "train"))?;
    local.check(store, url)?;
    let task = format!("objects ({})", store.name());
    eprintln!(
        "{task}: ember train --logdir {url} ({:.1} s): the local run's model and values",
        took.as_secs_f64()
    );
    let said = reader.loads(part.root, url, &local.place(), &store.log(url, "loader"))?;
    eprintln!("{task}: {said}");
    crate::objects::clouds::page_shows(reader, part.root, &store.binary, url, &local.place())
}

/// The run every store's write-and-read scenario trains: about five seconds in a debug build,
/// segments shipped at intervals, then the rest at close.
pub(crate) const TRAIN_ARGS: &[&str] = &["train", "--epochs", "20", "--devices", "2"];

/// The run a scenario kills mid-run: far longer than the seconds it gets, on any machine.
pub(crate) const KILLED_ARGS: &[&str] = &[
    "train",
    "--epochs",
    "5000",
    "--subset",
    "400",
    "--devices",
    "2",
];

/// `ember push` of every staging directory the runs' `TMPDIR` holds, which must succeed.
fn push(store: &Store) -> anyhow::Result<()> {
    let push = store
        .ember(&["push"])
        .output()
        .context("starting ember push")?;
    ensure!(
        push.status.success(),
        "ember push failed:\n{}{}",
        String::from_utf8_lossy(&push.stdout),
        String::from_utf8_lossy(&push.stderr)
    );
    Ok(())
}

/// The last step of `train/loss` in an `ember inspect --json --values` report, checking that
/// the steps are 1..N with none missing.
fn loss_steps(inspected: &serde_json::Value) -> anyhow::Result<i64> {
    let mut steps: Vec<i64> = points(inspected, "train/loss")
        .filter_map(|point| point[0].as_i64())
        .collect();
    steps.sort_unstable();
    ensure!(!steps.is_empty(), "no train/loss in the killed run");
    let expected: Vec<i64> = (1..=steps.len() as i64).collect();
    ensure!(
        steps == expected,
        "train/loss steps are not 1..N: {:?}…",
        &steps[..steps.len().min(20)]
    );
    Ok(steps.len() as i64)
}

/// The first 4,000 characters of `text`: enough of a report to tell what went wrong.
fn truncated(text: &str) -> String {
    text.chars().take(4000).collect()
}

/// What `command` printed, once it has ended well; an error with what it said otherwise.
pub(crate) fn succeeded(mut command: Command, what: &str) -> anyhow::Result<Vec<u8>> {
    let out = command
        .output()
        .with_context(|| format!("starting {what}"))?;
    // ember inspect --json reports what it found wrong on stdout: both, to tell why.
    ensure!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stderr),
        truncated(&String::from_utf8_lossy(&out.stdout))
    );
    Ok(out.stdout)
}

/// `ember train ARGS --logdir url` in `store`, which must end well, its
/// output to `log`; how long it took.
pub(crate) fn train_into(
    store: &Store,
    args: &[&str],
    url: &str,
    log: &Path,
) -> anyhow::Result<Duration> {
    let mut train = store.ember(args);
    train.args(["--logdir", url]);
    let ran = run_limited(train, "ember train --logdir URL", log)?;
    expect_success(&ran, &format!("ember train --logdir {url}"))?;
    Ok(ran.elapsed)
}

/// A run into `url` killed with SIGKILL mid-run: whole records and no step missing; then
/// `ember push` (its staging under `tmp`, the `TMPDIR` `ember` gives the runs) ships what the
/// kill left, no step lost or repeated, and leaves no staging directory.
fn killed_then_pushed(store: &Store, url: &str, task: &str) -> anyhow::Result<()> {
    let tmp = store.work().join("tmp");
    let mut train = store.ember(KILLED_ARGS);
    train.args(["--logdir", url]);
    kill_after(train, &store.log(url, "killed"), Duration::from_secs(6))?;
    let before = loss_steps(&store.inspect(url)?)?;
    push(store)?;
    let after = loss_steps(&store.inspect(url)?)?;
    ensure!(
        after >= before,
        "ember push lost steps: {after} after, {before} before"
    );
    let left = std::fs::read_dir(&tmp)?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("ember-staging-")
        })
        .flat_map(|parent| std::fs::read_dir(parent.path()).into_iter().flatten())
        .count();
    ensure!(
        left == 0,
        "{left} staging directories left after ember push"
    );
    eprintln!(
        "{task}: after SIGKILL, whole records with train/loss at steps 1..{before}, none \
         missing; ember push shipped the staging the kill left: 1..{after}"
    );
    Ok(())
}

/// A run into `url` killed with SIGKILL after its first checkpoints, with records it had not
/// shipped in its staging directory (under `tmp`); resumed to its end; then `ember push`: the
/// killed run's unshipped records came after the checkpoint the resume went back to, and the
/// push must not bring them back. Before, it shipped them after the resumed run's own, and the
/// log held those steps twice.
fn resumed_then_pushed(store: &Store, url: &str, task: &str) -> anyhow::Result<()> {
    let args = [
        "train",
        "--epochs",
        "4",
        "--batch-size",
        "2",
        "--checkpoint-every",
        "100",
        "--logdir",
        url,
    ];
    kill_after(
        store.ember(&args),
        &store.log(url, "killed"),
        Duration::from_secs(4),
    )?;
    let resumed = store
        .ember(&["train", "--resume", url])
        .output()
        .context("starting ember train --resume")?;
    ensure!(
        resumed.status.success(),
        "ember train --resume {url} failed:\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let steps = loss_steps(&store.inspect(url)?)?;
    push(store)?;
    let after = loss_steps(&store.inspect(url)?)?;
    ensure!(
        after == steps,
        "ember push after the resume changed the log: train/loss at 1..{after}, 1..{steps} before"
    );
    eprintln!(
        "{task}: a run killed and resumed to its end, then ember push: train/loss at steps \
         1..{steps}, each once; nothing the resume rolled back shipped again"
    );
    Ok(())
}

/// Two runs into one URL under `base` at the same moment, in both formats: one is let in, and
/// the other refused (by the first's lease, or, once the first has checkpointed, as another
/// run's directory), and the store holds the one run's summary file, whole. Before, both were
/// let in (and, earlier still, two MindInsight-format runs of one host and rank in one second
/// had one name, and the second's PUTs replaced the first's).
fn two_at_once(store: &Store, task: &str) -> anyhow::Result<()> {
    for (format, ending) in [("tensorboard", ""), ("mindinsight", "_MS")] {
        let url = store.place(&format!("twice-{format}"));
        let args = [
            "train", "--epochs", "2", "--subset", "400", "--format", format, "--logdir", &url,
        ];
        let children: Vec<_> = (0..2)
            .map(|_| {
                store
                    .ember(&args)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
            })
            .collect::<Result<_, _>>()
            .context("starting ember train")?;
        let mut refusals = Vec::new();
        for child in children {
            let out = child.wait_with_output()?;
            if !out.status.success() {
                refusals.push(String::from_utf8_lossy(&out.stderr).into_owned());
            }
        }
        ensure!(
            refusals.len() == 1,
            "two runs into {url} at once: {} refused (one should be):\n{}",
            refusals.len(),
            refusals.join("\n")
        );
        ensure!(
            refusals[0].contains("is in use by process") || refusals[0].contains("another run"),
            "the second run into {url} was refused for another reason:\n{}",
            refusals[0]
        );
        let inspected = store.inspect(&url)?;
        let files: Vec<String> = inspected["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|run| run["files"].as_array().into_iter().flatten())
            .filter_map(|file| file["path"].as_str().map(str::to_owned))
            .filter(|path| {
                let name = path.rsplit('/').next().unwrap_or(path);
                (name.contains("tfevents") || name.contains(".summary."))
                    && (ending.is_empty() || name.ends_with(ending))
            })
            .collect();
        ensure!(
            files.len() == 1,
            "two runs into {url} left {} summary file(s): {files:?}",
            files.len()
        );
        loss_steps(&inspected)?;
    }
    eprintln!(
        "{task}: of two runs into one URL at once, one is refused and the other's summary file \
         is whole, in both formats"
    );
    Ok(())
}

/// `ember train --resume URL` while the run in `url` still trains: refused, naming the first
/// run's process, before it writes anything; the first run then ends with each step once.
/// Before, a bucket run was never locked: both exited 0, and the log held steps twice.
fn resumed_while_running(store: &Store, url: &str, task: &str) -> anyhow::Result<()> {
    let first = store
        .ember(&[
            "train",
            "--epochs",
            "10",
            "--batch-size",
            "2",
            "--checkpoint-every",
            "300",
            "--logdir",
            url,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting ember train")?;
    let pid = first.id();
    std::thread::sleep(Duration::from_millis(2500));
    let second = store
        .ember(&["train", "--resume", url])
        .output()
        .context("starting ember train --resume")?;
    let stderr = String::from_utf8_lossy(&second.stderr).into_owned();
    let mut first = first;
    ensure!(
        first.try_wait()?.is_none(),
        "the run into {url} ended before the second was tried: make it longer"
    );
    let out = first.wait_with_output()?;
    ensure!(
        out.status.success(),
        "the first run into {url} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        !second.status.success(),
        "ember train --resume {url} was let in while the first run trained"
    );
    ensure!(
        stderr.contains(&format!("is in use by process {pid} on host")),
        "ember train --resume {url} while the first run (pid {pid}) trained was refused without \
         naming it:\n{stderr}"
    );
    let steps = loss_steps(&store.inspect(url)?)?;
    eprintln!(
        "{task}: ember train --resume {url} while the run trains is refused naming its pid; the \
         run ends with train/loss at steps 1..{steps}, each once"
    );
    Ok(())
}

/// The runs killed and resumed in the bucket: short, with a checkpoint every optimizer step.
pub(crate) const RESUMED_ARGS: &[&str] = &[
    "train",
    "--epochs",
    "3",
    "--devices",
    "2",
    "--checkpoint-every",
    "1",
];

/// `ember train RESUMED_ARGS` into `store` killed with SIGKILL at `kills` moments drawn from
/// `seed` and resumed from the bucket (or, killed before its first checkpoint, refused and then
/// `--restart`ed): each, brought back by `ember pull`, ends as `expected` (the same run
/// trained locally without a kill): its model byte for byte, and `ember inspect` of its URL
/// shows its values, each step once.
pub(crate) fn resumed_from_the_bucket(
    store: &Store,
    expected: &Expected,
    kills: usize,
    seed: u64,
) -> anyhow::Result<Walked> {
    KillAndResume {
        program: Program::cli(&RESUMED_ARGS[1..]),
        prefix: "resumed-",
        kills,
        seed,
        expected: Some(expected),
    }
    .walk(store)
}

/// `ember train RESUMED_ARGS --logdir url` stopped with SIGSTOP once `checkpointed` says its
/// first checkpoint is in the bucket (as `scontrol suspend` or a paused VM stops a run), for
/// longer than its lease lives: `ember train --resume url` of another process waits the lease
/// out, takes the run over and trains it to its end. Sent SIGCONT, the first must fail with the
/// lost lease's `error:` line (returned), having written nothing more: pulled, the run has the
/// uninterrupted run's (`expected`) model byte for byte and its values
/// in `ember inspect`, each step once. Before, the first logged "two writers may now write the
/// run" and trained on, and both wrote checkpoints, segments and the model under one prefix.
pub(crate) fn stopped_past_its_lease(
    store: &Store,
    expected: &Expected,
    (url, checkpointed): (&str, &dyn Fn() -> anyhow::Result<bool>),
) -> anyhow::Result<String> {
    let mut first = store.ember(RESUMED_ARGS);
    first.args(["--logdir", url]);
    let log_path = store.log(url, "train");
    let log = std::fs::File::create(&log_path)?;
    let mut first = first
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    let started = Instant::now();
    while !checkpointed()? {
        ensure!(
            first.try_wait()?.is_none() && started.elapsed() < Duration::from_secs(120),
            "the run ended, or took two minutes, before its first checkpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&first, "-STOP")?;
    let resumed = run_limited(
        store.ember(&["train", "--resume", url]),
        "ember train --resume of a stopped run",
        &store.log(url, "resume"),
    );
    signal(&first, "-CONT")?;
    expect_success(&resumed?, "ember train --resume beside a stopped run")?;
    let status = ended_within(&mut first, Duration::from_secs(60))?;
    let said = std::fs::read_to_string(&log_path)?;
    let lost = said
        .lines()
        .find(|line| line.starts_with("error: ") && line.contains("is no longer this writer's"));
    let Some(lost) = lost.filter(|_| !status.success()) else {
        bail!("the run taken over went on ({status}):\n{said}");
    };
    expected.check(store, url)?;
    Ok(format!("{status}: {lost}"))
}

/// Sends `child` the signal `which` (`-STOP`, `-CONT`).
fn signal(child: &Child, which: &str) -> anyhow::Result<()> {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args([which, &pid]).status()?;
    ensure!(sent.success(), "kill {which} {pid} failed");
    Ok(())
}

/// How `child` ended, once it has, within `limit` (killed past it).
fn ended_within(child: &mut Child, limit: Duration) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            bail!("the run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one line a failed `ember train` printed, which names `url` and says `what`, before any
/// training.
pub(crate) fn one_error_line(ran: &Ran, url: &str, what: &str) -> anyhow::Result<String> {
    ensure!(!ran.success, "ember train into {url} succeeded");
    let lines: Vec<&str> = ran
        .output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.len() != 1
        || !lines[0].starts_with("error: ")
        || !lines[0].contains(url)
        || !lines[0].contains(what)
    {
        bail!(
            "expected one error line naming {url} and saying `{what}`:\n{}",
            ran.output
        );
    }
    ensure!(
        !ran.output.contains("epoch 1/"),
        "training started although the store cannot be used:\n{}",
        ran.output
    );
    Ok(lines[0].to_owned())
}
