//! The object-store scenarios that run alike against every store (moto's S3, fake-gcs-server
//! and Azurite): a run killed with SIGKILL then `ember push`ed (and one resumed first), two runs
//! into one URL at once, runs killed at seeded moments and resumed from the bucket, a run
//! stopped past its lease and taken over, `ember inspect` and `ember pull` of a URL. A module of their own, so that `objects` and its Google
//! and Azure parts share them without one reaching into another.

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::process::{expect_success, kill_after, run_limited};

/// Every scenario of this module against the store of `scheme` (`s3`, `az`), its bucket
/// `ember`: `ember` makes the command (its `TMPDIR` `work/tmp`), logs go under `work`.
pub(crate) fn against(
    ember: &dyn Fn(&[&str]) -> Command,
    scheme: &str,
    work: &Path,
    task: &str,
) -> anyhow::Result<()> {
    let tmp = work.join("tmp");
    let url = |run: &str| format!("{scheme}://ember/{run}");
    let log = |name: &str| work.join(format!("{scheme}-{name}.log"));
    killed_then_pushed(ember, &url("pushed"), &tmp, &log("pushed"), task)?;
    resumed_then_pushed(ember, &url("repushed"), &tmp, &log("repushed"), task)?;
    two_at_once(ember, &format!("{scheme}://ember"), task)?;
    resumed_while_running(ember, &url("live"), task)
}

/// `ember push` of every staging directory the runs' `TMPDIR` holds, which must succeed.
fn push(ember: &dyn Fn(&[&str]) -> Command) -> anyhow::Result<()> {
    let push = ember(&["push"]).output().context("starting ember push")?;
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

/// The points (`[step, wall time, value…]`) of `tag` in an `ember inspect --json --values`
/// report, of every run in it.
pub(crate) fn points<'a>(
    inspected: &'a serde_json::Value,
    tag: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    inspected["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .filter(move |found| found["tag"] == tag)
        .flat_map(|found| found["values"].as_array().into_iter().flatten())
}

/// `ember inspect --json --values` of `url`, `ember` making the command.
pub(crate) fn inspect(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
) -> anyhow::Result<serde_json::Value> {
    let out = succeeded(
        ember(&["inspect", "--json", "--values", url]),
        &format!("ember inspect {url}"),
    )?;
    serde_json::from_slice(&out).context("parsing ember inspect --json")
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

/// `ember train ARGS --logdir url` (`ember` making the command), which must end well, its
/// output to `log`; how long it took.
pub(crate) fn train_into(
    ember: &dyn Fn(&[&str]) -> Command,
    args: &[&str],
    url: &str,
    log: &Path,
) -> anyhow::Result<Duration> {
    let mut train = ember(args);
    train.args(["--logdir", url]);
    let ran = run_limited(train, "ember train --logdir URL", log)?;
    expect_success(&ran, &format!("ember train --logdir {url}"))?;
    Ok(ran.elapsed)
}

/// A run into `url` killed with SIGKILL mid-run: whole records and no step missing; then
/// `ember push` (its staging under `tmp`, the `TMPDIR` `ember` gives the runs) ships what the
/// kill left, no step lost or repeated, and leaves no staging directory.
fn killed_then_pushed(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
    tmp: &Path,
    log: &Path,
    task: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(tmp)?;
    let train = ember(&[
        "train",
        "--epochs",
        "5000",
        "--subset",
        "400",
        "--devices",
        "2",
        "--logdir",
        url,
    ]);
    kill_after(train, log, Duration::from_secs(6))?;
    let before = loss_steps(&inspect(ember, url)?)?;
    push(ember)?;
    let after = loss_steps(&inspect(ember, url)?)?;
    ensure!(
        after >= before,
        "ember push lost steps: {after} after, {before} before"
    );
    let left = std::fs::read_dir(tmp)?
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
fn resumed_then_pushed(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
    tmp: &Path,
    log: &Path,
    task: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(tmp)?;
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
    kill_after(ember(&args), log, Duration::from_secs(4))?;
    let resumed = ember(&["train", "--resume", url])
        .output()
        .context("starting ember train --resume")?;
    ensure!(
        resumed.status.success(),
        "ember train --resume {url} failed:\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let steps = loss_steps(&inspect(ember, url)?)?;
    push(ember)?;
    let after = loss_steps(&inspect(ember, url)?)?;
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
fn two_at_once(ember: &dyn Fn(&[&str]) -> Command, base: &str, task: &str) -> anyhow::Result<()> {
    for (format, ending) in [("tensorboard", ""), ("mindinsight", "_MS")] {
        let url = format!("{base}/twice-{format}");
        let args = [
            "train", "--epochs", "2", "--subset", "400", "--format", format, "--logdir", &url,
        ];
        let children: Vec<_> = (0..2)
            .map(|_| {
                ember(&args)
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
        let inspected = inspect(ember, &url)?;
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
fn resumed_while_running(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
    task: &str,
) -> anyhow::Result<()> {
    let first = ember(&[
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
    let second = ember(&["train", "--resume", url])
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
    let steps = loss_steps(&inspect(ember, url)?)?;
    eprintln!(
        "{task}: ember train --resume {url} while the run trains is refused naming its pid; the \
         run ends with train/loss at steps 1..{steps}, each once"
    );
    Ok(())
}

/// What became of a run [`killed_and_resumed`] killed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterKill {
    /// Resumed from its newest checkpoint in the bucket.
    Resumed,
    /// Killed before its first checkpoint: refused by `--resume`, trained again by `--restart`.
    Restarted,
    /// Killed after its last checkpoint, while it closed: refused by `--resume` as finished,
    /// trained again by `--restart`.
    FinishedThenRestarted,
    /// It ended before the kill (a loaded machine runs faster than the run the kill moments
    /// were spread over): whole as it is.
    EndedFirst,
}

/// `ember train ARGS --logdir url` killed with SIGKILL after `at`, then resumed from the
/// bucket, or, refused for want of a whole checkpoint, restarted.
pub(crate) fn killed_and_resumed(
    ember: &dyn Fn(&[&str]) -> Command,
    args: &[&str],
    url: &str,
    run: &Path,
    at: Duration,
) -> anyhow::Result<AfterKill> {
    let mut train = ember(args);
    train.args(["--logdir", url]);
    if !crate::runs::start_and_kill(train, run, at)? {
        return Ok(AfterKill::EndedFirst);
    }
    let mut ran = run_limited(
        ember(&["train", "--resume", url]),
        "ember train --resume URL",
        &run.with_extension("resume.log"),
    )?;
    // Killed before its command line reached the bucket, the run cannot say how it was
    // started: `--restart` then takes the arguments again.
    let command_lost = !ran.success && ran.output.contains("is not a run `ember train` can resume");
    let after = match ran.success {
        true => AfterKill::Resumed,
        false if command_lost || ran.output.contains("no checkpoint to resume from") => {
            AfterKill::Restarted
        }
        false if ran.output.contains("has finished") => AfterKill::FinishedThenRestarted,
        false => AfterKill::Resumed,
    };
    if after != AfterKill::Resumed {
        let mut restart = ember(&["train", "--restart", url]);
        if command_lost {
            restart.args(args.iter().skip_while(|&&arg| arg == "train"));
        }
        ran = run_limited(
            restart,
            "ember train --restart URL",
            &run.with_extension("restart.log"),
        )?;
    }
    expect_success(&ran, &format!("resuming {url} (killed after {at:?})"))?;
    Ok(after)
}

/// How many of `runs` went each way, in words.
pub(crate) fn after_kills(runs: &[AfterKill]) -> String {
    let count = |way| runs.iter().filter(|&&run| run == way).count();
    format!(
        "{} resumed, {} killed before their first checkpoint and {} after their last, refused \
         and restarted, {} ended before their kill",
        count(AfterKill::Resumed),
        count(AfterKill::Restarted),
        count(AfterKill::FinishedThenRestarted),
        count(AfterKill::EndedFirst)
    )
}

/// `ember pull url into`.
pub(crate) fn pull(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
    into: &Path,
) -> anyhow::Result<()> {
    let mut pull = ember(&["pull", url]);
    pull.arg(into);
    succeeded(pull, &format!("ember pull {url}")).map(drop)
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

/// The runs of [`resumed_from_the_bucket`]: how many, the seed of their kill moments, and the
/// same run trained locally without a kill (`ember train RESUMED_ARGS --logdir local`).
pub(crate) struct Kills<'a> {
    pub(crate) count: usize,
    pub(crate) seed: u64,
    pub(crate) local: &'a Path,
}

/// `ember train RESUMED_ARGS --logdir SCHEME://ember/resumed-NN` killed with SIGKILL at seeded
/// moments and resumed with `--resume` (or, killed before its first checkpoint, refused and
/// then `--restart`ed): each, brought back by `ember pull`, ends with the local uninterrupted
/// run's model byte for byte, and `ember inspect` of its URL shows its values, each step once.
/// `ember` makes the commands (`ember_binary` inspects the local run), logs go under `work`;
/// returns the last run's URL and what became of each run.
pub(crate) fn resumed_from_the_bucket(
    ember: &dyn Fn(&[&str]) -> Command,
    ember_binary: &Path,
    scheme: &str,
    work: &Path,
    kills: &Kills,
) -> anyhow::Result<(String, Vec<AfterKill>)> {
    let reference = crate::process::inspect_json(ember_binary, kills.local)?;
    let reference_model = crate::runs::model_without_ids(&kills.local.join("model.bpk"))?;
    // The kill moments are spread over an uninterrupted run into the bucket (which starts
    // slower than a local one: the store is tried first), as `cargo xtask resume` spreads them
    // over its reference run.
    let took = train_into(
        ember,
        RESUMED_ARGS,
        &format!("{scheme}://ember/resumed-reference"),
        &work.join(format!("{scheme}-resumed-reference.log")),
    )?;
    let mut rng = crate::runs::XorShift(kills.seed);
    let (mut after, mut last) = (Vec::new(), String::new());
    for kill in 0..kills.count {
        let url = format!("{scheme}://ember/resumed-{kill:02}");
        let run = work.join(format!("{scheme}-resumed-{kill:02}"));
        let at = took.mul_f64(rng.unit());
        after.push(killed_and_resumed(ember, RESUMED_ARGS, &url, &run, at)?);
        let pulled = work.join(format!("{scheme}-resumed-{kill:02}-pulled"));
        pull(ember, &url, &pulled)?;
        ensure!(
            crate::runs::model_without_ids(&pulled.join("model.bpk"))? == reference_model,
            "{url}: the resumed run's parameters differ from the uninterrupted run's"
        );
        crate::runs::same_values(&reference, &inspect(ember, &url)?, Path::new(&url))?;
        last = url;
    }
    Ok((last, after))
}

/// `ember train RESUMED_ARGS --logdir url` stopped with SIGSTOP once `checkpointed` says its
/// first checkpoint is in the bucket (as `scontrol suspend` or a paused VM stops a run), for
/// longer than its lease lives: `ember train --resume url` of another process waits the lease
/// out, takes the run over and trains it to its end. Sent SIGCONT, the first must fail with the
/// lost lease's `error:` line (returned), having written nothing more: pulled, the run has the
/// uninterrupted run's (`local`, trained by `ember_binary`) model byte for byte and its values
/// in `ember inspect`, each step once. Before, the first logged "two writers may now write the
/// run" and trained on, and both wrote checkpoints, segments and the model under one prefix.
pub(crate) fn stopped_past_its_lease(
    ember: &dyn Fn(&[&str]) -> Command,
    (ember_binary, local): (&Path, &Path),
    (url, checkpointed): (&str, &dyn Fn() -> anyhow::Result<bool>),
    work: &Path,
) -> anyhow::Result<String> {
    let mut first = ember(RESUMED_ARGS);
    first.args(["--logdir", url]);
    let log_path = work.join("stopped.log");
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
        ember(&["train", "--resume", url]),
        "ember train --resume of a stopped run",
        &work.join("stopped-resume.log"),
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
    let pulled = work.join("stopped-pulled");
    pull(ember, url, &pulled)?;
    ensure!(
        crate::runs::model_without_ids(&pulled.join("model.bpk"))?
            == crate::runs::model_without_ids(&local.join("model.bpk"))?,
        "{url}: the model is not the resumed run's, which is the uninterrupted run's"
    );
    let reference = crate::process::inspect_json(ember_binary, local)?;
    crate::runs::same_values(&reference, &inspect(ember, url)?, Path::new(url))?;
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
