//! What `ember train` prints when its environment is hostile: the library's warnings reach
//! stderr (RUST_LOG filters them; every one is counted at the end), and a closed stdout and
//! stderr (`ember train 2>&1 | head`) end the printing, never the training.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use ember::read::Summaries;

use super::ember_in;
use super::resume::stopped_train;
use super::{Spawned, exit_within, text};

/// The count of `ember train`'s last report, "N warning(s) and M error(s) logged".
fn warnings_counted(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|line| line.strip_suffix(" error(s) logged"))
        .and_then(|line| line.split(' ').next())
        .and_then(|n| n.parse().ok())
}

/// A run killed after its first epoch, its newest checkpoint torn in half: the resume passes
/// it over for the one before, with the library's warning. Returns the run's directory.
fn torn_newest_checkpoint(dir: &std::path::Path) -> std::path::PathBuf {
    let (code, _) = stopped_train(dir, "-KILL");
    assert_eq!(code, None, "killed by a signal");
    let run = dir.join("run");
    let mut checkpoints: Vec<_> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ckpt-")
        })
        .collect();
    checkpoints.sort();
    assert!(checkpoints.len() >= 2, "{checkpoints:?}");
    let newest = checkpoints.last().unwrap();
    let bytes = std::fs::read(newest).unwrap();
    std::fs::write(newest, &bytes[..bytes.len() / 2]).unwrap();
    run
}

#[test]
fn a_passed_over_torn_checkpoint_is_a_warning_on_stderr_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    torn_newest_checkpoint(dir.path());
    let output = ember_in(&["train", "--resume", "run"], dir.path());
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    let warning = printed
        .lines()
        .find(|line| line.starts_with("warning") && line.contains("ckpt-"));
    assert!(warning.is_some(), "{printed}");
    assert!(
        warnings_counted(&printed).is_some_and(|n| n >= 1),
        "{printed}"
    );
}

#[test]
fn rust_log_hides_warnings_but_they_are_still_counted() {
    let dir = tempfile::tempdir().unwrap();
    torn_newest_checkpoint(dir.path());
    let output = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--resume", "run"])
        .env("RUST_LOG", "error")
        .current_dir(dir.path())
        .output()
        .expect("the ember binary runs");
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(
        !printed.lines().any(|l| l.starts_with("warning")),
        "{printed}"
    );
    assert!(
        warnings_counted(&printed).is_some_and(|n| n >= 1),
        "{printed}"
    );
}

#[test]
fn closed_stdout_and_stderr_end_the_printing_and_training_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--epochs", "3", "--logdir", "run"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ember binary runs");
    let mut child = Spawned(child);
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.starts_with("training a"), "{first}");
    drop(stderr);
    drop(child.0.stdout.take());
    let status = exit_within(&mut child, Duration::from_secs(300));
    assert_eq!(status.code(), Some(0), "{status:?}");
    let run = dir.path().join("run");
    assert!(run.join("model.bpk").is_file());
    // The log is whole: each epoch's test loss.
    let summaries = Summaries::read_dir(&run).unwrap();
    assert_eq!(summaries.scalars["valid/loss"].len(), 3);
}
