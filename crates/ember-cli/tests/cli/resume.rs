//! `ember train --resume` as a user types it: after Ctrl-C (the command says how to go on) and
//! after `kill -9`, the run finishes with the model and the log of a run that was never
//! stopped. (`cargo xtask resume` kills at 24 seeded moments and reads the logs with
//! TensorBoard, tbparse, rustboard and MindInsight; this is the user's path through it.)

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ember::read::Summaries;

use super::{Spawned, Training, ember_in, text};
use ember_tests::files_under;

pub(super) const ARGS: &[&str] = &["--epochs", "4", "--checkpoint-every", "5"];

/// Starts `ember train ARGS --logdir run` in `dir`, and once it has finished its first epoch,
/// sends it `signal`. Returns its exit code and stderr.
pub(super) fn stopped_train(dir: &Path, signal: &str) -> (Option<i32>, String) {
    let mut training = Training::past_first_epoch(dir, &[ARGS, &["--logdir", "run"]].concat());
    training.signal(signal);
    let status = training.child.0.wait().unwrap();
    (status.code(), training.printed())
}

/// Every series the log shows, wall times and speeds aside.
pub(super) fn series(run: &Path) -> BTreeMap<String, Vec<(i64, String)>> {
    let summaries = Summaries::read_dir(run).unwrap();
    let mut out = BTreeMap::new();
    for (tag, points) in summaries.scalars {
        if !ember_tests::is_clock_tag(&tag) {
            out.insert(
                tag,
                points
                    .iter()
                    .map(|p| (p.step, format!("{:?}", p.value)))
                    .collect(),
            );
        }
    }
    for (tag, points) in summaries.histograms {
        let points = points
            .iter()
            .map(|p| (p.step, format!("{:?}", p.buckets)))
            .collect();
        out.insert(format!("histogram {tag}"), points);
    }
    for (tag, points) in summaries.texts {
        let points = points
            .iter()
            .map(|p| (p.step, format!("{:?}", p.text)))
            .collect();
        out.insert(format!("text {tag}"), points);
    }
    out
}

/// The trained model's bytes, Burn's random parameter ids zeroed.
pub(super) fn model(run: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(run.join("model.bpk")).unwrap();
    let key = b"hparam_id\x1b";
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(key.len()).position(|w| w == key) {
        let start = at + found + key.len();
        bytes[start..start + 8].fill(0);
        at = start + 8;
    }
    bytes
}

/// Removes the checkpoint files of the run in `run`, its command line left.
pub(super) fn remove_checkpoints(run: &Path) {
    for entry in std::fs::read_dir(run.join("checkpoints")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("ckpt-")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
}

pub(super) fn uninterrupted(dir: &Path) -> std::path::PathBuf {
    let output = ember_in(&[&["train"], ARGS, &["--logdir", "whole"]].concat(), dir);
    assert!(output.status.success(), "{}", text(&output.stderr));
    dir.join("whole")
}

#[test]
fn after_ctrl_c_the_printed_resume_command_finishes_the_run_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let (code, stderr) = stopped_train(dir.path(), "-INT");
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("go on with: ember train --resume run"),
        "{stderr}"
    );
    let output = ember_in(&["train", "--resume", "run"], dir.path());
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains("resumed from run/checkpoints/ckpt-"),
        "{printed}"
    );
    assert!(text(&output.stdout).contains("test accuracy"));
    let run = dir.path().join("run");
    assert_eq!(model(&run), model(&whole));
    // The stopped run's end (a failure status, run/interrupted) is rolled back with the rest.
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn after_kill_9_resume_finishes_the_run_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let (code, _) = stopped_train(dir.path(), "-KILL");
    assert_eq!(code, None, "killed by a signal");
    // No run directory given: the newest under runs/ is taken, so move it there as the
    // default log directory would have put it.
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    let run = dir.path().join("runs").join("2026-12-04T00-00-00Z");
    std::fs::rename(dir.path().join("run"), &run).unwrap();
    let output = ember_in(&["train", "--resume"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(model(&run), model(&whole));
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn resume_refuses_what_would_make_another_run() {
    let dir = tempfile::tempdir().unwrap();
    let output = ember_in(&["train", "--resume", "nowhere"], dir.path());
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("is not a run `ember train` can resume"),
        "{}",
        text(&output.stderr)
    );
    uninterrupted(dir.path());
    let output = ember_in(&["train", "--resume", "whole", "--epochs", "9"], dir.path());
    assert!(
        text(&output.stderr).contains("leave out --epochs"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn a_resume_without_a_checkpoint_refuses_in_one_line_and_restart_trains_the_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let (code, _) = stopped_train(dir.path(), "-KILL");
    assert_eq!(code, None, "killed by a signal");
    let run = dir.path().join("run");
    // What a kill before the first checkpoint leaves: the command line, the log, no checkpoint.
    remove_checkpoints(&run);
    let before = files_under(&run, true);
    let output = ember_in(&["train", "--resume", "run"], dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert_eq!(printed.lines().count(), 1, "{printed}");
    assert!(
        printed.starts_with("error: no checkpoint to resume from in run/checkpoints")
            && printed.contains("ember train --restart run"),
        "{printed}"
    );
    assert_eq!(
        files_under(&run, true),
        before,
        "the refused resume changed the run"
    );

    let output = ember_in(&["train", "--restart", "run"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(model(&run), model(&whole));
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn a_second_run_on_a_live_log_directory_is_refused_at_once_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let live = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--epochs", "300", "--logdir", "live"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the ember binary runs");
    let mut live = Spawned(live);
    let pid = live.0.id();
    let lock = dir
        .path()
        .join("live")
        .join(".ember-locks")
        .join("rank0.lock");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&lock).ok().as_deref() != Some(&format!("{pid}\n")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the live run never locked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    for args in [
        &["train", "--resume", "live"][..],
        &["train", "--logdir", "live", "--epochs", "1"],
    ] {
        let started = std::time::Instant::now();
        let output = ember_in(args, dir.path());
        let took = started.elapsed();
        let printed = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {printed}");
        assert_eq!(printed.lines().count(), 1, "{args:?}: {printed}");
        assert!(
            printed.contains(&format!("live is in use by process {pid}")),
            "{args:?}: {printed}"
        );
        assert!(took < Duration::from_secs(1), "{args:?} took {took:?}");
    }
    assert!(
        live.0.try_wait().unwrap().is_none(),
        "the live run stopped when the second was refused"
    );
}

/// A run stopped on 2 devices (SIGTERM, as a scheduler preempting it) goes on on the one left:
/// `--resume run --devices 1` runs both of each step's batches on it, one after the other, and
/// the run ends with the model and the log of the run that never stopped, each step once.
/// (Devices that would split a step unevenly are refused with nothing changed: the Trainer's
/// `reshard::a_run_is_refused_devices_that_cannot_keep_its_global_batch_and_left_as_it_was`.)
#[test]
fn a_run_stopped_on_two_devices_goes_on_on_one_as_if_never_stopped() {
    goes_on_elsewhere_as_if_never_stopped(&["--devices", "2"], "1");
}

/// Begun on 1 device with an accumulation of 2, a run goes on on 2: each takes one of a
/// window's two steps at once.
#[test]
fn a_run_stopped_on_one_device_goes_on_on_two_as_if_never_stopped() {
    let began = ["--devices", "1", "--grad-accumulation", "2"];
    goes_on_elsewhere_as_if_never_stopped(&began, "2");
}

/// Trains `ARGS` + `placed` whole, and again stopped past its first epoch by SIGTERM; a resume
/// on `resumed` devices ends with the whole run's model and series.
fn goes_on_elsewhere_as_if_never_stopped(placed: &[&str], resumed: &str) {
    let dir = tempfile::tempdir().unwrap();
    let placed = [ARGS, placed].concat();
    let whole = ember_in(
        &[&["train"], &placed[..], &["--logdir", "whole"]].concat(),
        dir.path(),
    );
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    let mut training =
        Training::past_first_epoch(dir.path(), &[&placed[..], &["--logdir", "run"]].concat());
    training.signal("-TERM");
    let stopped = training.child.0.wait().unwrap();
    assert_eq!(stopped.code(), Some(143), "{}", training.printed());
    let run = dir.path().join("run");

    let resumed = ember_in(
        &["train", "--resume", "run", "--devices", resumed],
        dir.path(),
    );
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(text(&resumed.stderr).contains("resumed from"));
    assert!(
        model(&run) == model(&dir.path().join("whole")),
        "the models differ"
    );
    assert_eq!(series(&run), series(&dir.path().join("whole")));
}
