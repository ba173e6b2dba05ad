//! Which runs `ember train` admits to a directory, decided by ember's one admission check: a
//! run with no checkpoints of its own is kept out of another run's directory, bare `--resume`
//! takes the newest run that has not finished, a batch size or data set size edited in the run's
//! record (`run.json`) is refused naming both values, and a run whose record is lost goes on,
//! or is restarted, with the arguments given.

use std::path::Path;
use std::process::Output;

use ember::read::Summaries;

use super::{Training, ember_in, text};
use ember_tests::files_under;

/// Small runs: 240 training digits on 2 workers, 4 steps an epoch.
const SMALL: &[&str] = &["--subset", "300", "--epochs", "2"];

/// `ember train ARGS` in `dir`, which must succeed.
fn train(args: &[&str], dir: &Path) -> Output {
    let output = ember_in(&[&["train"], args].concat(), dir);
    assert!(output.status.success(), "{}", text(&output.stderr));
    output
}

/// Starts `ember train ARGS` in `dir` and stops it with Ctrl-C once its first epoch is done:
/// a run with checkpoints that has not finished.
fn interrupted(args: &[&str], dir: &Path) {
    let mut training = Training::past_first_epoch(dir, args);
    training.signal("-INT");
    assert_eq!(training.child.0.wait().unwrap().code(), Some(130));
}

/// The steps of the run's `train/loss` series, as its log shows them.
fn loss_steps(run: &Path) -> Vec<i64> {
    let summaries = Summaries::read_dir(run).unwrap();
    summaries.scalars["train/loss"]
        .iter()
        .map(|p| p.step)
        .collect()
}

#[test]
fn a_run_without_checkpoints_is_refused_in_another_runs_directory() {
    let dir = tempfile::tempdir().unwrap();
    train(&[SMALL, &["--logdir", "run"]].concat(), dir.path());
    let run = dir.path().join("run");
    let before = files_under(&run, true);
    assert!(before.contains_key(Path::new("model.bpk")));

    let output = ember_in(
        &[&["train"], SMALL, &["--no-checkpoints", "--logdir", "run"]].concat(),
        dir.path(),
    );
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("holds the checkpoints of another run or its log"),
        "{printed}"
    );
    // The first run's model, event files and checkpoints, byte for byte.
    assert_eq!(files_under(&run, true), before);

    // Its log alone keeps a run out too: no checkpoints left, the event file stays the run's.
    std::fs::remove_dir_all(run.join("checkpoints")).unwrap();
    let before = files_under(&run, true);
    let output = ember_in(
        &[&["train"], SMALL, &["--no-checkpoints", "--logdir", "run"]].concat(),
        dir.path(),
    );
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("events.out.tfevents."), "{printed}");
    assert_eq!(files_under(&run, true), before);
    assert_eq!(loss_steps(&run), (1..=8).collect::<Vec<_>>());
}

#[test]
fn bare_resume_takes_the_newest_unfinished_run() {
    let dir = tempfile::tempdir().unwrap();
    let older = "runs/2026-01-01T00-00-00Z";
    let newer = "runs/2026-01-02T00-00-00Z";
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    interrupted(
        &["--subset", "300", "--epochs", "60", "--logdir", older],
        dir.path(),
    );
    train(&[SMALL, &["--logdir", newer]].concat(), dir.path());
    let finished = files_under(&dir.path().join(newer), true);

    let output = train(&["--resume"], dir.path());
    let printed = text(&output.stderr);
    assert!(
        printed.contains(&format!("resumed from {older}/checkpoints/ckpt-")),
        "{printed}"
    );
    assert_eq!(files_under(&dir.path().join(newer), true), finished);
    let steps = loss_steps(&dir.path().join(older));
    assert_eq!(steps, (1..=240).collect::<Vec<_>>());

    // Both finished now: nothing to resume, and nothing changed.
    let runs = files_under(&dir.path().join("runs"), true);
    let output = ember_in(&["train", "--resume"], dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("every run under runs has finished"),
        "{printed}"
    );
    assert_eq!(files_under(&dir.path().join("runs"), true), runs);

    // Named, a finished run is refused as well.
    let output = ember_in(&["train", "--resume", newer], dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("has finished"), "{printed}");
    assert_eq!(files_under(&dir.path().join("runs"), true), runs);
}

#[test]
fn a_setting_edited_in_the_command_is_refused_naming_both_values() {
    let dir = tempfile::tempdir().unwrap();
    interrupted(
        &[
            "--subset",
            "300",
            "--epochs",
            "60",
            "--batch-size",
            "16",
            "--logdir",
            "run",
        ],
        dir.path(),
    );
    let command = dir.path().join("run/checkpoints/run.json");
    let saved = std::fs::read_to_string(&command).unwrap();
    assert!(saved.contains(r#""--batch-size","16""#), "{saved}");
    std::fs::write(
        &command,
        saved.replace(r#""--batch-size","16""#, r#""--batch-size","40""#),
    )
    .unwrap();
    resume_is_refused_leaving_the_run(dir.path(), "batch_size: 16 there, 40 here");

    // Another data set size is refused the same way: 320 training digits of 400, not 240.
    std::fs::write(
        &command,
        saved.replace(r#""--subset","300""#, r#""--subset","400""#),
    )
    .unwrap();
    resume_is_refused_leaving_the_run(dir.path(), "train_examples: 240 there, 320 here");

    // As it was recorded, the run goes on.
    std::fs::write(&command, &saved).unwrap();
    let output = ember_in(&["train", "--resume", "run"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn a_run_whose_record_is_lost_goes_on_or_restarts_with_the_arguments_given() {
    let dir = tempfile::tempdir().unwrap();
    interrupted(
        &["--subset", "300", "--epochs", "60", "--logdir", "run"],
        dir.path(),
    );
    let run = dir.path().join("run");
    std::fs::remove_file(run.join("checkpoints/run.json")).unwrap();

    // Its checkpoint says what it was: a resume with other arguments is refused, naming them.
    resume_is_refused_leaving_the_run(dir.path(), "train_examples: 240 there, 1438 here");

    let output = train(&[&["--restart", "run"], SMALL].concat(), dir.path());
    assert!(text(&output.stdout).contains("test accuracy"));
    // The restarted run's log holds each of its steps once, from its first.
    assert_eq!(loss_steps(&run), (1..=8).collect::<Vec<_>>());
    let saved = std::fs::read_to_string(run.join("checkpoints/run.json")).unwrap();
    assert!(
        saved.contains(r#""--epochs","2""#) && !saved.contains("--restart"),
        "{saved}"
    );
    // Recorded again, the command makes the run whole: it has finished.
    let output = ember_in(&["train", "--resume", "run"], dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("has finished"), "{printed}");
}

/// `ember train --resume run` in `dir` is refused with a line that says `says`, and every file
/// of the run is as it was.
fn resume_is_refused_leaving_the_run(dir: &Path, says: &str) {
    let run = dir.join("run");
    let before = files_under(&run, true);
    let output = ember_in(&["train", "--resume", "run"], dir);
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains(says), "{printed}");
    assert_eq!(files_under(&run, true), before);
}

/// The id `run`'s record names.
fn run_id(run: &Path) -> String {
    let record = ember::run::RunRecord::read(&run.join("checkpoints")).unwrap();
    record.and_then(|r| r.id).expect("a run's id").to_string()
}

/// Issue 52: run A's checkpoint copied into run B's directory was resumed without a word, A's
/// model taken for B's and B's own event file removed by the rollback.
#[test]
fn another_run_s_checkpoint_is_refused_naming_both_runs_and_neither_changes() {
    let dir = tempfile::tempdir().unwrap();
    for run in ["a", "b"] {
        interrupted(
            &["--subset", "300", "--epochs", "60", "--logdir", run],
            dir.path(),
        );
    }
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let newest = |run: &Path| {
        let mut found: Vec<_> = std::fs::read_dir(run.join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("ckpt-") && name.ends_with(".ember"))
            .collect();
        found.sort();
        found.pop().unwrap()
    };
    // B's newest checkpoint replaced by A's, as a copy under B's own name.
    let name = newest(&b);
    std::fs::copy(
        a.join("checkpoints").join(newest(&a)),
        b.join("checkpoints").join(&name),
    )
    .unwrap();
    let (before_a, before_b) = (files_under(&a, true), files_under(&b, true));
    let output = ember_in(&["train", "--resume", "b"], dir.path());
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains(&run_id(&a)) && printed.contains(&run_id(&b)),
        "{printed}"
    );
    assert!(printed.contains("taken by run"), "{printed}");
    assert_eq!(files_under(&a, true), before_a);
    assert_eq!(files_under(&b, true), before_b);
}

/// Issue 52: `--lr` or `--format` edited into the run's recorded command was resumed without a
/// word.
#[test]
fn a_learning_rate_or_format_edited_into_the_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    interrupted(
        &["--subset", "300", "--epochs", "60", "--logdir", "run"],
        dir.path(),
    );
    let record = dir.path().join("run/checkpoints/run.json");
    let saved = std::fs::read_to_string(&record).unwrap();
    let edited = |extra: &str| saved.replace(r#""--epochs""#, &format!("{extra},\"--epochs\""));
    std::fs::write(&record, edited(r#""--lr","0.05""#)).unwrap();
    resume_is_refused_leaving_the_run(dir.path(), "learning_rate: 0.01 there, 0.05 here");
    std::fs::write(&record, edited(r#""--format","mindinsight""#)).unwrap();
    resume_is_refused_leaving_the_run(dir.path(), "format: tensorboard there, mindinsight here");
}

/// Issue 52: bare `--resume` stopped at a newer run whose record does not read, instead of
/// passing it over.
#[test]
fn bare_resume_passes_over_a_run_whose_record_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let older = "runs/2026-01-01T00-00-00Z";
    let newer = dir.path().join("runs/2026-01-02T00-00-00Z");
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    interrupted(
        &["--subset", "300", "--epochs", "3", "--logdir", older],
        dir.path(),
    );
    std::fs::create_dir_all(newer.join("checkpoints")).unwrap();
    std::fs::write(newer.join("checkpoints/run.json"), b"{not json").unwrap();
    let output = train(&["--resume"], dir.path());
    let printed = text(&output.stderr);
    assert!(
        printed.contains("passing over runs/2026-01-02T00-00-00Z"),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("resumed from {older}/checkpoints/ckpt-")),
        "{printed}"
    );
}
