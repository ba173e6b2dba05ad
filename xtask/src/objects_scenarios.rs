//! The object-store scenarios that run alike against every store (moto's S3 and Azurite): a
//! run killed with SIGKILL then `ember push`ed (and one resumed first), two runs into one URL at once, and `ember
//! inspect` of a URL. A module of their own, so that `objects` and its Azure part share them
//! without either reaching into the other.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};

use crate::process::kill_after;

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
    let mut steps: Vec<i64> = inspected["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .filter(|tag| tag["tag"] == "train/loss")
        .flat_map(|tag| tag["values"].as_array().into_iter().flatten())
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

/// `ember inspect --json --values` of `url`, `ember` making the command.
pub(crate) fn inspect(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
) -> anyhow::Result<serde_json::Value> {
    let out = ember(&["inspect", "--json", "--values", url])
        .output()
        .context("starting ember inspect")?;
    ensure!(
        out.status.success(),
        "ember inspect {url} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("parsing ember inspect --json")
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
