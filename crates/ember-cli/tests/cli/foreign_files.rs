//! `ember train --resume` in a run directory other tools write in too (issue 41): an
//! evaluator's event file in a subdirectory, a backup copy of the run's own event file, an
//! empty directory. The resume rolls back only what the run wrote: each is left byte for byte,
//! and the run's log shows each step once. A checkpoint without its `log` section is refused
//! with the run's files unchanged, not taken for an empty log.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ember::checkpoint::{Checkpoint, read, write_durably};
use ember::read::Summaries;

use super::{Spawned, ember_in, files, text};
use ember_tests::files_under;

/// Small enough for a debug build, long enough to be killed well before its end.
const ARGS: &[&str] = &[
    "--batch-size",
    "1",
    "--subset",
    "300",
    "--epochs",
    "3",
    "--checkpoint-every",
    "40",
];

/// The whole checkpoints of `run`, oldest first.
fn checkpoints(run: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(run.join("checkpoints"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    let name = p.file_name().unwrap().to_string_lossy();
                    name.starts_with("ckpt-") && name.ends_with(".ember")
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// `ember train ARGS --logdir ev` in `dir`, killed with SIGKILL once its first checkpoint is
/// there. Returns the run directory.
fn killed_after_a_checkpoint(dir: &Path) -> PathBuf {
    let run = dir.join("ev");
    let child = Command::new(env!("CARGO_BIN_EXE_ember"))
        .arg("train")
        .args(ARGS)
        .args(["--logdir", "ev"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the ember binary runs");
    let mut child = Spawned(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoints(&run).is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint was written");
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the run ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Some steps past the checkpoint, for the resume to roll back.
    std::thread::sleep(Duration::from_millis(300));
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(
        !run.join("model.bpk").exists(),
        "the run finished before the kill"
    );
    run
}

/// What an evaluator writing into the run directory leaves: an event file of its own.
fn evaluator_bytes() -> Vec<u8> {
    (0..6000u32).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn a_resume_leaves_another_tools_file_a_copy_and_an_empty_directory_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let run = killed_after_a_checkpoint(dir.path());
    let ours = files(&run, "tfevents");
    assert_eq!(ours.len(), 1, "{ours:?}");
    let evaluator = run.join("eval/events.out.tfevents.1700000000.h.1.0");
    std::fs::create_dir_all(evaluator.parent().unwrap()).unwrap();
    std::fs::write(&evaluator, evaluator_bytes()).unwrap();
    let copy = run.join("backup").join(ours[0].file_name().unwrap());
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    let copied = std::fs::read(&ours[0]).unwrap();
    std::fs::write(&copy, &copied).unwrap();
    std::fs::create_dir(run.join("emptydir")).unwrap();

    let output = ember_in(&["train", "--resume", "ev"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(run.join("model.bpk").is_file());

    assert_eq!(std::fs::read(&evaluator).unwrap(), evaluator_bytes());
    assert_eq!(std::fs::read(&copy).unwrap(), copied);
    assert!(run.join("emptydir").is_dir());
    assert_eq!(std::fs::read_dir(run.join("emptydir")).unwrap().count(), 0);
    let summaries = Summaries::read_dir(&run).unwrap();
    let loss = summaries.scalars.get("train/loss").expect("train/loss");
    assert!(!loss.is_empty());
    for (tag, points) in &summaries.scalars {
        let mut seen = BTreeSet::new();
        for point in points {
            assert!(
                seen.insert(point.step),
                "{tag} at step {} twice",
                point.step
            );
        }
    }
}

/// The names of a checkpoint's sections, read from its documented layout.
fn section_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let count = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
    let mut at = 16;
    let mut names = Vec::new();
    for _ in 0..count {
        let name_len = u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
        at += 2;
        names.push(String::from_utf8(bytes[at..at + name_len].to_vec()).unwrap());
        at += name_len;
        let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        at += 8 + len;
    }
    names
}

#[test]
fn a_checkpoint_without_its_log_section_is_refused_and_the_log_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let run = killed_after_a_checkpoint(dir.path());
    let newest = checkpoints(&run).pop().unwrap();
    let whole = read(&newest).unwrap();
    let names = section_names(&newest);
    assert!(names.iter().any(|n| n == "log"), "{names:?}");
    let without_log = names
        .iter()
        .filter(|name| *name != "log")
        .fold(Checkpoint::new(), |checkpoint, name| {
            checkpoint.with(name, whole.section(name).unwrap().to_vec())
        });
    let file_name = newest.file_name().unwrap().to_str().unwrap();
    write_durably(newest.parent().unwrap(), file_name, &without_log).unwrap();
    let before = files_under(&run, true);

    let output = ember_in(&["train", "--resume", "ev"], dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("`log` section"), "{printed}");
    let after = files_under(&run, true);
    let ours = files(&run, "tfevents");
    assert_eq!(ours.len(), 1, "{ours:?}");
    let ours = ours[0].strip_prefix(&run).unwrap();
    assert!(before.contains_key(ours), "{ours:?}");
    assert_eq!(after.get(ours), before.get(ours), "the event file changed");
    assert_eq!(
        after
            .keys()
            .filter(|p| !p.starts_with(".ember-locks"))
            .collect::<Vec<_>>(),
        before
            .keys()
            .filter(|p| !p.starts_with(".ember-locks"))
            .collect::<Vec<_>>()
    );
}

/// What a Burn program leaves in its artifact directory: its model, its config, its own
/// checkpoints, event files of its splits.
fn burn_program_s_directory(dir: &Path) {
    std::fs::create_dir_all(dir.join("checkpoints")).unwrap();
    std::fs::create_dir_all(dir.join("train")).unwrap();
    std::fs::write(dir.join("model.bpk"), evaluator_bytes()).unwrap();
    std::fs::write(dir.join("config.json"), br#"{"lr":0.1}"#).unwrap();
    std::fs::write(dir.join("checkpoints/epoch=3.ckpt"), b"burn's checkpoint").unwrap();
    let events = dir.join("train/events.out.tfevents.1700000000.h.1.0");
    std::fs::write(events, evaluator_bytes()).unwrap();
}

/// Issue 52: `ember train` (fresh, and with `--resume-if-any`) in a directory holding another
/// program's `model.bpk` replaced it without a word.
#[test]
fn another_program_s_model_is_never_replaced_and_its_directory_is_left_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let fx2 = dir.path().join("fx2");
    burn_program_s_directory(&fx2);
    let before = files_under(&fx2, true);
    for line in [
        &["train", "--resume-if-any", "--logdir", "fx2"][..],
        &["train", "--logdir", "fx2"],
        &["train", "--restart", "fx2"],
    ] {
        let output = ember_in(&[line, ARGS].concat(), dir.path());
        let printed = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{line:?}: {printed}");
        assert!(
            printed.contains("fx2/model.bpk is not this run's"),
            "{line:?}: {printed}"
        );
        assert_eq!(
            files_under(&fx2, true),
            before,
            "{line:?} changed the directory"
        );
    }
}

/// Issue 52: a `--logdir` that is a link into a stopped run's `checkpoints/` was admitted, the
/// new run's files written among the other run's checkpoints.
#[cfg(unix)]
#[test]
fn a_log_directory_linked_into_another_run_s_checkpoints_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = killed_after_a_checkpoint(dir.path());
    std::os::unix::fs::symlink(run.join("checkpoints"), dir.path().join("link")).unwrap();
    let before = files_under(&run, true);
    let output = ember_in(&[&["train", "--logdir", "link"], ARGS].concat(), dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("of another run"), "{printed}");
    assert_eq!(files_under(&run, true), before);
}

/// Issue 52: a log directory whose checkpoints' paths the system cannot open failed at the first
/// checkpoint, after training had begun.
#[test]
fn a_path_too_long_for_checkpoints_is_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    // 4,048 bytes from the root, as reported: the directory itself opens, a checkpoint's
    // temporary file beside it (4,048 + `/checkpoints/` + its name) would not.
    let mut logdir = std::path::PathBuf::from("l");
    let length = |logdir: &Path| dir.path().join(logdir).as_os_str().len();
    while length(&logdir) + 201 < 4048 {
        logdir.push("d".repeat(200));
    }
    logdir.push("e".repeat(4048 - length(&logdir) - 1));
    assert_eq!(length(&logdir), 4048);
    let output = ember_in(
        &[&["train", "--logdir", logdir.to_str().unwrap()], ARGS].concat(),
        dir.path(),
    );
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("choose a shorter path"), "{printed}");
    assert!(!printed.contains("epoch 1/"), "{printed}");
    assert!(
        !dir.path().join("l").exists(),
        "the refused run made its directory"
    );
}

/// Issue 52: `ember train --restart R ARGS 2>&1 | true` on a run without its record exited 101:
/// a panic writing its notice to a closed stderr.
#[test]
fn a_closed_stderr_costs_the_notices_not_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args([&["train", "--restart", "gone"], ARGS].concat())
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(dir.path().join("gone/model.bpk").is_file());
}
