//! `ember train --resume-if-any --logdir R`: the one command line a batch script runs at a
//! job's first start and at every requeue. Fresh where R holds nothing, going on where R holds
//! this command's unfinished run (started over where it stopped before its first checkpoint),
//! nothing done where it has finished, refused where R holds a run of another command or a
//! live one; each ends with the model and log of a run never stopped.

use std::path::Path;
use std::process::Output;

use super::resume::{ARGS, model, remove_checkpoints, series, uninterrupted};
use super::{Training, ember_in, text};
use ember_tests::files_under;

/// `ember train --resume-if-any --logdir run ARGS extra` in `dir`.
fn requeued(dir: &Path, extra: &[&str]) -> Output {
    let line = [
        &["train", "--resume-if-any", "--logdir", "run"],
        ARGS,
        extra,
    ]
    .concat();
    ember_in(&line, dir)
}

/// `ember train --resume-if-any --logdir run ARGS` in `dir`, once its first epoch is done.
fn running(dir: &Path) -> Training {
    let line = [&["--resume-if-any", "--logdir", "run"], ARGS].concat();
    Training::past_first_epoch(dir, &line)
}

/// Kills `training` with SIGKILL, and waits for it to be gone.
fn kill_9(mut training: Training) {
    training.signal("-KILL");
    training.child.0.wait().unwrap();
}

/// The run in `dir/run` has the model and every series of `whole`, each step once.
fn assert_as_whole(dir: &Path, whole: &Path) {
    let run = dir.join("run");
    assert_eq!(model(&run), model(whole));
    assert_eq!(series(&run), series(whole));
}

#[test]
fn the_same_command_starts_a_run_then_does_nothing_once_it_has_finished() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let first = requeued(dir.path(), &[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(!text(&first.stderr).contains("resumed from"));
    assert_as_whole(dir.path(), &whole);

    let run = dir.path().join("run");
    let finished = files_under(&run, true);
    let again = requeued(dir.path(), &[]);
    let printed = text(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{printed}");
    assert!(
        printed.contains("run: the run has trained all its 4 epoch(s); nothing to do"),
        "{printed}"
    );
    assert!(
        files_under(&run, true) == finished,
        "a finished run was changed"
    );
}

/// Issue 52: a run stopped by SIGTERM saved its partial model as `model.bpk`; a requeue killed
/// after its final checkpoint but before its model then said "nothing to do" over it. Without
/// the SIGTERM the same kill left a run refused until `--restart`, which trained every epoch
/// again.
#[test]
fn model_bpk_is_only_the_trained_model_and_a_run_trained_without_one_finishes_from_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let run = dir.path().join("run");
    let mut training = running(dir.path());
    training.signal("-TERM");
    assert_eq!(training.child.0.wait().unwrap().code(), Some(143));
    assert!(
        !run.join("model.bpk").exists(),
        "a stopped run saved model.bpk"
    );
    assert!(run.join("model.interrupted.bpk").is_file());

    let output = requeued(dir.path(), &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_as_whole(dir.path(), &whole);
    assert!(!run.join("model.interrupted.bpk").exists());

    // What a kill between the final checkpoint and the model leaves: the checkpoint, and no model
    // of this run's (here a stale one in its place, as an older ember's stopped run saved).
    std::fs::write(run.join("model.bpk"), b"a stale model").unwrap();
    std::fs::remove_file(run.join("model.json")).unwrap();
    let output = requeued(dir.path(), &[]);
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(!printed.contains("nothing to do"), "{printed}");
    assert!(
        !printed.lines().any(|line| line.starts_with("epoch ")),
        "an epoch was trained again:\n{printed}"
    );
    assert!(
        printed.contains("resumed from run/checkpoints/ckpt-"),
        "{printed}"
    );
    assert_as_whole(dir.path(), &whole);
    // Now it has its model: done.
    let again = requeued(dir.path(), &[]);
    assert!(text(&again.stderr).contains("nothing to do"));
}

/// A finished run started over with `--restart` and killed before its end is not finished: the
/// model of its earlier training is removed with its checkpoints, so the requeue goes on with
/// the restart rather than saying "nothing to do" over the old model.
#[test]
fn a_finished_run_restarted_and_killed_goes_on_and_is_not_taken_for_finished() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let first = requeued(dir.path(), &[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let run = dir.path().join("run");
    kill_9(Training::past_first_epoch(
        dir.path(),
        &["--restart", "run"],
    ));
    assert!(!run.join("model.bpk").exists(), "the old model was kept");

    let output = requeued(dir.path(), &[]);
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(!printed.contains("nothing to do"), "{printed}");
    assert!(
        printed.contains("resumed from run/checkpoints/ckpt-"),
        "{printed}"
    );
    assert_as_whole(dir.path(), &whole);
}

/// Issue 52: a run whose record (once `command.json`) was lost was refused by `--resume-if-any`
/// as "another run", though the command line has its arguments.
#[test]
fn a_run_whose_record_is_lost_goes_on_with_the_arguments_of_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    kill_9(running(dir.path()));
    let run = dir.path().join("run");
    let id = |run: &Path| {
        let record = ember::run::RunRecord::read(&run.join("checkpoints")).unwrap();
        record.and_then(|record| record.id)
    };
    let started_as = id(&run).expect("a run's id");
    std::fs::remove_file(run.join("checkpoints/run.json")).unwrap();

    let output = requeued(dir.path(), &[]);
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains("resumed from run/checkpoints/ckpt-"),
        "{printed}"
    );
    assert_as_whole(dir.path(), &whole);
    // Recorded again, under the id its checkpoints name.
    assert_eq!(id(&run), Some(started_as));
}

#[test]
fn the_same_command_goes_on_with_its_killed_run_and_a_live_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let training = running(dir.path());
    let live = requeued(dir.path(), &[]);
    let refusal = text(&live.stderr);
    assert_eq!(live.status.code(), Some(1), "{refusal}");
    let pid = training.child.0.id();
    assert!(refusal.contains(&format!("process {pid}")), "{refusal}");
    kill_9(training);

    let output = requeued(dir.path(), &[]);
    let printed = text(&output.stderr);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains("resumed from run/checkpoints/ckpt-"),
        "{printed}"
    );
    assert_as_whole(dir.path(), &whole);
}

#[test]
fn a_run_stopped_before_its_first_checkpoint_is_trained_again_from_its_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    kill_9(running(dir.path()));
    // What a kill before the first checkpoint leaves: the command line, the log, no checkpoint.
    remove_checkpoints(&dir.path().join("run"));

    let output = requeued(dir.path(), &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_as_whole(dir.path(), &whole);
}

#[test]
fn another_command_in_the_same_log_directory_is_refused_naming_each_difference() {
    let dir = tempfile::tempdir().unwrap();
    kill_9(running(dir.path()));
    let run = dir.path().join("run");
    let stopped = files_under(&run, true);

    let output = requeued(dir.path(), &["--hidden", "32", "--batch-size", "16"]);
    let refusal = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{refusal}");
    assert!(refusal.contains("run holds another run"), "{refusal}");
    assert!(
        refusal.contains("--batch-size: 32 there, 16 here")
            && refusal.contains("--hidden: 64 there, 32 here"),
        "{refusal}"
    );
    assert!(
        files_under(&run, true) == stopped,
        "a refused run changed the directory"
    );
    // A directory another program's run left files in is refused too, as a fresh run is.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("events.out.tfevents.1700000000.host.1.0"), b"").unwrap();
    let line = [&["train", "--resume-if-any", "--logdir", "foreign"], ARGS].concat();
    let output = ember_in(&line, dir.path());
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("of another run"));
}
