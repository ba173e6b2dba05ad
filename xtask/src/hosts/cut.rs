//! Scenario (b): host 1's cable pulled (`ip link set <veth> down`) mid-run, after the job's
//! first whole checkpoint is in the bucket. Every process of the job on both sides of the cut
//! (`mpirun`, each host's `orted`, both ranks) must be gone within [`BOUND`] of the cut, and
//! the job's output must name the host it lost (rank 1's). With the link back, `ember push` on
//! each host ships what its writers had accepted and not yet shipped (rank 0's train/loss and
//! the cut host's own step times in the bucket then reach the cut, no step missing), and
//! `mpirun … ember train --resume s3://…` ends with the uninterrupted run's model, byte for
//! byte, and its values, each step once, in `ember inspect` and TensorBoard's S3 reader.
//!
//! What ends the job is Open MPI's keepalive on its control connections
//! ([`KEEPALIVE`](super::launch::KEEPALIVE)), which must find the cut before the ranks' own
//! collective timeout makes them abort: see docs/benchmarks.md, "Across hosts".

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use super::check::Check;
use super::equivalence::TRAIN;
use super::launch::TASK;
use crate::scenario::{Env, Expected, Running};

/// The run in the bucket whose host loses its link.
const URL: &str = "s3://ember/cut";

/// How long after the cut every process of the job may still run: Open MPI's keepalive finds
/// the silent connection dead in about 3 s (`launch::KEEPALIVE`), under the collective
/// timeout of 5 s; the rest is the job's teardown.
pub(super) const BOUND: Duration = Duration::from_secs(10);

/// What the scenario measured.
pub(super) struct CutFigures {
    /// From the cut until no process of the job was left, on either side.
    pub(super) gone_after: Duration,
    /// The line of the job's output that names the lost host.
    pub(super) named: String,
    /// train/loss steps (rank 0, on the connected host) in the bucket before and after
    /// `ember push`.
    pub(super) loss: (usize, usize),
    /// Steps of the cut host's rank 1 (its step times) in the bucket before and after.
    pub(super) cut_host: (usize, usize),
}

pub(super) fn cut(check: &Check, reference: &Path) -> anyhow::Result<CutFigures> {
    let log_path = check.work.join("cut.log");
    let args: Vec<&str> = TRAIN.iter().copied().chain(["--logdir", URL]).collect();
    let mut running = Running::until_first_checkpoint(check, &args, URL, &log_path)?;
    check.network.link(1, false)?;
    let gone_after = all_gone(check, &mut running)?;
    ensure!(
        running.0.try_wait()?.is_some_and(|s| !s.success()),
        "mpirun succeeded although a host was cut off"
    );
    let output = std::fs::read_to_string(&log_path)?;
    ensure!(
        !output.contains("keepalive"),
        "a keepalive warning although it is set shorter than the timeout:\n{output}"
    );
    let lost = &check.cluster.addrs[1];
    let named = output
        .lines()
        .find(|l| l.contains(lost.as_str()) || l.contains("rank 1"))
        .with_context(|| format!("the job's output names neither {lost} nor rank 1:\n{output}"))?
        .trim()
        .to_owned();
    check.network.link(1, true)?;
    check.network.reachable()?;

    let (loss, cut_host) = pushed(check)?;
    Expected::of_dir(check.ember, reference)?.resumed_to_the_end(check, URL)?;
    check.tensorboard_same(URL, reference)?;
    eprintln!(
        "{TASK}: (b) host 1's link cut mid-run: every process of the job gone {:.1} s after the \
         cut (bound {:.0} s), the output naming the lost host (`{named}`); after ember push on \
         each host the bucket has train/loss at steps 1..{} (1..{} before) and the cut host's \
         step times at 1..{} (1..{} before); the job resumed from the bucket ends with the \
         uninterrupted job's model byte for byte, each step once in ember inspect and \
         TensorBoard's S3 reader",
        gone_after.as_secs_f64(),
        BOUND.as_secs_f64(),
        loss.1,
        loss.0,
        cut_host.1,
        cut_host.0
    );
    Ok(CutFigures {
        gone_after,
        named,
        loss,
        cut_host,
    })
}

/// Waits (at most [`BOUND`]) until `mpirun`, the hosts' processes and every process of the
/// job anywhere (its URL or the task's agent on the command line) are gone; returns how long
/// that took from the cut.
fn all_gone(check: &Check, running: &mut Running) -> anyhow::Result<Duration> {
    let cut = Instant::now();
    let agent = check.cluster.agent().to_string_lossy().into_owned();
    loop {
        let mpirun = running.0.try_wait()?.is_none();
        let mut left: Vec<String> = (0..check.network.hosts.len())
            .flat_map(|host| check.network.pids(host))
            .map(|pid| format!("{pid} in a host's namespace"))
            .collect();
        left.extend(
            processes_with(&[&agent, URL])
                .into_iter()
                .map(|(pid, cmd)| format!("{pid} {cmd}")),
        );
        if !mpirun && left.is_empty() {
            return Ok(cut.elapsed());
        }
        ensure!(
            cut.elapsed() < BOUND,
            "{:.0?} after host 1's link went down, the job still runs (mpirun {}): {left:?}",
            BOUND,
            if mpirun { "running" } else { "gone" }
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Processes of this machine (but this one) whose command line holds one of `needles`.
fn processes_with(needles: &[&str]) -> Vec<(u32, String)> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (pid != me && needles.iter().any(|n| cmdline.contains(n)))
                .then(|| (pid, cmdline.chars().take(120).collect()))
        })
        .collect()
}

/// The series of rank 0 (the connected host) and of rank 1 (the cut one) in the bucket.
const LOSS: &str = "train/loss";
const CUT_HOST: &str = "rank/1/device/0/step_seconds";

/// `ember push` on each host (its own `TMPDIR`): afterwards no staging is left, both series in
/// the bucket have steps 1..N, none missing, no fewer than before, and the cut host's reaches
/// the step rank 0's had reached (the ranks step together: what rank 1 had accepted before
/// the cut is there). Returns both series' step counts before and after.
fn pushed(check: &Check) -> anyhow::Result<((usize, usize), (usize, usize))> {
    let inspected = check.inspect(URL)?;
    let before = (steps(&inspected, LOSS)?, steps(&inspected, CUT_HOST)?);
    for host in 0..check.cluster.tmp.len() {
        let mut push = check.cluster.on_host(host, check.ember);
        push.arg("push");
        let ran = check.succeed(push, &format!("cut-push-h{host}"))?;
        let left = staging_left(&check.cluster.tmp[host])?;
        ensure!(
            left == 0,
            "{left} staging directories left on host {host} after ember push:\n{}",
            ran.output
        );
    }
    let inspected = check.inspect(URL)?;
    let after = (steps(&inspected, LOSS)?, steps(&inspected, CUT_HOST)?);
    ensure!(
        after.0 >= before.0 && after.1 >= before.1,
        "ember push lost steps: {after:?} after, {before:?} before ({LOSS}, {CUT_HOST})"
    );
    ensure!(
        after.0 > 0 && after.1 + 1 >= after.0,
        "the cut host's {CUT_HOST} stops at step {} in the bucket, rank 0's {LOSS} at {}: what \
         rank 1 had accepted is lost",
        after.1,
        after.0
    );
    Ok(((before.0, after.0), (before.1, after.1)))
}

/// The number of steps of `tag` in an `ember inspect --json --values` report, which must be
/// 1..N with none missing or twice (0: none yet).
fn steps(inspected: &serde_json::Value, tag: &str) -> anyhow::Result<usize> {
    let mut steps: Vec<i64> = inspected["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .filter(|t| t["tag"] == tag)
        .flat_map(|t| t["values"].as_array().into_iter().flatten())
        .filter_map(|point| point[0].as_i64())
        .collect();
    steps.sort_unstable();
    let expected: Vec<i64> = (1..=steps.len() as i64).collect();
    ensure!(
        steps == expected,
        "{tag} steps in the bucket are not 1..N: {:?}",
        &steps[..steps.len().min(20)]
    );
    Ok(steps.len())
}

/// The staging directories left under `tmp` (`ember-staging-<uid>/*`).
fn staging_left(tmp: &Path) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(tmp)?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("ember-staging-")
        })
        .flat_map(|parent| std::fs::read_dir(parent.path()).into_iter().flatten())
        .count())
}
