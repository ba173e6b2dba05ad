//! `ember train`'s locks against what a user's environment does to a live run directory: its
//! lock files deleted by a clean-up script (a second run is still refused, and the first
//! finishes with each step once), and the directory itself deleted and made again (the old
//! run stops with an error and writes nothing into the new one).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ember::pack::hparams_tags;
use ember::pack::proto::tensorboard::{self, hparams};
use ember::read::{Scan, Summaries};
use prost::Message;

use super::{Spawned, ember_in, exit_within, text};

/// Starts `ember train ARGS --logdir run` in `dir` and waits until it has locked the run and
/// written its first checkpoint.
fn live_train(dir: &Path, args: &[&str]) -> Spawned {
    let child = Command::new(env!("CARGO_BIN_EXE_ember"))
        .arg("train")
        .args(args)
        .args(["--logdir", "run"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ember binary runs");
    let mut live = Spawned(child);
    let checkpoints = dir.join("run").join("checkpoints");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_dir(&checkpoints).is_ok_and(|mut entries| {
        entries.any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".ember"))
    }) {
        assert!(live.0.try_wait().unwrap().is_none(), "the run ended early");
        assert!(Instant::now() < deadline, "the run wrote no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    live
}

/// Removes `path` as `rm -rf` run until it succeeds would: the live run may make a file in a
/// directory between its listing and its removal.
fn remove_while_written(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(error) = std::fs::remove_dir_all(path) {
        assert!(
            error.kind() == std::io::ErrorKind::DirectoryNotEmpty && Instant::now() < deadline,
            "{} cannot be removed: {error}",
            path.display()
        );
    }
}

/// How many session ends the run's event files hold.
fn session_ends(run: &Path) -> usize {
    let mut ends = 0;
    for entry in std::fs::read_dir(run).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().contains("tfevents") {
            continue;
        }
        let scan = Scan::file(&path).unwrap();
        assert!(scan.problems.is_empty(), "{path:?}: {:?}", scan.problems);
        for record in scan.records {
            let event = tensorboard::Event::decode(record.data.as_slice()).unwrap();
            let Some(tensorboard::event::What::Summary(summary)) = event.what else {
                continue;
            };
            for value in summary.value {
                if value.tag != hparams_tags::SESSION_END_INFO {
                    continue;
                }
                let plugin = value.metadata.unwrap().plugin_data.unwrap();
                let data = hparams::HParamsPluginData::decode(plugin.content.as_slice()).unwrap();
                ends += usize::from(matches!(
                    data.data,
                    Some(hparams::h_params_plugin_data::Data::SessionEndInfo(_))
                ));
            }
        }
    }
    ends
}

/// Asserts the run's log holds each step of `train/loss` once, from 1 to its last, and one
/// session end.
fn assert_each_step_once(run: &Path) {
    let summaries = Summaries::read_dir(run).unwrap();
    let steps: Vec<i64> = summaries.scalars["train/loss"]
        .iter()
        .map(|p| p.step)
        .collect();
    let last = *steps.last().unwrap();
    assert_eq!(steps, (1..=last).collect::<Vec<_>>(), "train/loss steps");
    assert_eq!(session_ends(run), 1, "session ends");
}

#[test]
fn deleted_lock_files_keep_a_second_run_out_and_the_first_finishes_with_each_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--epochs", "10", "--checkpoint-every", "5"];
    let mut live = live_train(dir.path(), &args);
    let pid = live.0.id();
    let run = dir.path().join("run");
    // A clean-up script (`git clean -fdx`, say) deletes every lock file of the run.
    for locks in [
        run.join(".ember-locks"),
        run.join("checkpoints/.ember-locks"),
    ] {
        remove_while_written(&locks);
    }
    for args in [
        &["train", "--resume", "run"][..],
        &["train", "--restart", "run"],
        &["train", "--logdir", "run", "--epochs", "1"],
    ] {
        let output = ember_in(args, dir.path());
        let printed = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {printed}");
        assert!(
            printed.contains(&format!("run is in use by process {pid}")),
            "{args:?}: {printed}"
        );
    }
    // The live run makes its checkpoint directory's lock file again at its next checkpoint.
    let lock = run.join("checkpoints/.ember-locks/rank0.lock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&lock).ok() != Some(format!("{pid}\n")) {
        assert!(
            Instant::now() < deadline,
            "the lock file was not made again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let status = exit_within(&mut live, Duration::from_secs(300));
    assert!(status.success(), "the live run: {status:?}");
    assert!(run.join("model.bpk").is_file());
    assert_each_step_once(&run);
}

#[test]
fn a_run_directory_deleted_and_made_again_gets_nothing_from_the_old_run() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--epochs", "300", "--checkpoint-every", "5"];
    let mut live = live_train(dir.path(), &args);
    let run = dir.path().join("run");
    remove_while_written(&run);
    std::fs::create_dir(&run).unwrap();
    let status = exit_within(&mut live, Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut live.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is no longer this writer's: the directory was deleted"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&run).unwrap().collect();
    assert!(
        left.is_empty(),
        "the old run wrote {left:?} into the new directory"
    );

    // The new directory is a run's of its own.
    let output = ember_in(&["train", "--logdir", "run", "--epochs", "1"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_each_step_once(&run);
}
