//! A Trainer run that dies at any step and is resumed from its checkpoints ends with the
//! parameters of a run that never died, bit for bit, and with a log that every reader shows
//! each step once in, with the uninterrupted run's values.
//!
//! The run has what makes resuming hard: two workers, gradient accumulation over two steps,
//! a shuffling loader (its order per epoch comes from a generator that each epoch advances),
//! Adam (its moments and step count), a linear learning-rate schedule (its position),
//! validation, histograms, and checkpoints mid-epoch. The "crash" is a panic from the step
//! hook, caught; the record is then dropped, which writes out everything it was given, so the
//! log holds more after the last checkpoint than a killed process would leave. (The binary is
//! killed with SIGKILL in `cargo xtask resume`.)

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::tensor::Device;
use ember::pack::proto::tensorboard::{Event, event};
use ember::read::{Scan, Summaries};
use ember::run::Begin;
use ember::{CheckpointConfig, SummaryRecord, TrainError, TrainReport, Trainer, TrainerConfig};
use ember_tests::{Mlp, files_under, parameters, seeded_mlp, shuffled_loader};
use prost::Message;

const EPOCHS: usize = 3;
/// 96 rows, batches of 8 on 2 workers: 6 pool steps an epoch, 18 in all; 9 optimizer steps.
const STEPS: usize = 18;

fn trainer(checkpoints: &Path, crash_at: Option<usize>) -> Trainer<Mlp> {
    trainer_on(2, checkpoints, crash_at)
}

/// [`trainer`] on `devices` workers.
pub(super) fn trainer_on(
    devices: usize,
    checkpoints: &Path,
    crash_at: Option<usize>,
) -> Trainer<Mlp> {
    let device = Device::flex().autodiff();
    let trainer = Trainer::new(
        vec![device; devices],
        AdamConfig::new().init(),
        LinearLrSchedulerConfig::new(0.05, 0.005, 9).init().unwrap(),
        TrainerConfig {
            epochs: EPOCHS,
            grad_accumulation: 2,
            histogram_every: Some(2),
            checkpoints: Some(CheckpointConfig {
                dir: checkpoints.to_path_buf(),
                every: Some(2),
                keep: 2,
            }),
            ..TrainerConfig::default()
        },
    );
    match crash_at {
        Some(step) => trainer.on_step(move |report| {
            if report.step == step as i64 {
                panic!("simulated crash at step {step}");
            }
        }),
        None => trainer,
    }
}

/// Trains from the start or, with `resume`, from the checkpoints; the model is built from
/// another seed each time, so only a checkpoint can give a resumed run its parameters.
fn fit(
    run: &Path,
    crash_at: Option<usize>,
    resume: bool,
    seed: u64,
) -> Result<(Mlp, TrainReport), TrainError> {
    let begin = if resume { Begin::Resume } else { Begin::Fresh };
    fit_hidden(run, crash_at, begin, seed, 4)
}

/// [`fit`] with an [`Mlp`] of `hidden` units, begun as `begin` says.
fn fit_hidden(
    run: &Path,
    crash_at: Option<usize>,
    begin: Begin,
    seed: u64,
    hidden: usize,
) -> Result<(Mlp, TrainReport), TrainError> {
    fit_on(2, run, crash_at, begin, (seed, hidden))
}

/// [`fit_hidden`] on `devices` workers, the model of `(seed, hidden)`.
pub(super) fn fit_on(
    devices: usize,
    run: &Path,
    crash_at: Option<usize>,
    begin: Begin,
    (seed, hidden): (u64, usize),
) -> Result<(Mlp, TrainReport), TrainError> {
    let device = Device::flex().autodiff();
    let model = seeded_mlp(hidden, seed, &device);
    let checkpoints = run.join("checkpoints");
    let mut trainer = trainer_on(devices, &checkpoints, crash_at);
    match begin {
        Begin::Fresh => {}
        Begin::Resume => trainer = trainer.resume_from(&checkpoints),
        Begin::Restart => trainer = trainer.restart(&checkpoints),
        Begin::ResumeIfAny => trainer = trainer.resume_if_any(&checkpoints),
    }
    let mut summary = SummaryRecord::new(run).unwrap();
    let result = trainer.fit(
        model,
        shuffled_loader(96, true, &device),
        Some(shuffled_loader(24, false, &device)),
        Some(&mut summary),
    );
    summary.close().unwrap();
    result
}

/// What a reader shows that does not depend on the clock: every scalar and histogram series
/// as (step, value) pairs, wall times and speeds left out.
pub(super) fn series(run: &Path) -> BTreeMap<String, Vec<(i64, String)>> {
    let summaries = Summaries::read_dir(run).unwrap();
    let mut out = BTreeMap::new();
    for (tag, points) in summaries.scalars {
        if ember_tests::is_clock_tag(&tag) {
            continue;
        }
        let points = points
            .iter()
            .map(|p| (p.step, format!("{:?}", p.value)))
            .collect();
        out.insert(tag, points);
    }
    for (tag, points) in summaries.histograms {
        let points = points
            .iter()
            .map(|p| (p.step, format!("{:?} {:?} {:?}", p.sum, p.count, p.buckets)))
            .collect();
        out.insert(format!("histogram {tag}"), points);
    }
    out
}

/// How many times each hyper-parameter session part and the graph were written.
fn session_parts(run: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.to_string_lossy().contains("tfevents"))
        .collect();
    files.sort();
    for path in files {
        let scan = Scan::file(&path).unwrap();
        assert!(scan.problems.is_empty(), "{path:?}: {:?}", scan.problems);
        for record in scan.records {
            let event = Event::decode(record.data.as_slice()).unwrap();
            match event.what {
                Some(event::What::Summary(summary)) => {
                    for value in summary.value {
                        if value.tag.starts_with("_hparams_/") {
                            *counts.entry(value.tag).or_default() += 1;
                        }
                    }
                }
                Some(event::What::GraphDef(_)) => *counts.entry("graph".into()).or_default() += 1,
                _ => {}
            }
        }
    }
    counts
}

#[test]
fn a_run_resumed_after_a_crash_at_any_step_ends_bit_identical_with_one_log() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (model, report) = fit(&whole, None, false, 1).unwrap();
    let expected = parameters(&model);
    let report_whole = report.clone();
    let expected_series = series(&whole);
    assert_eq!(report.steps, STEPS);
    assert_eq!(report.optimizer_steps, 9);
    // Every 2 optimizer steps (2, 4, 6, 8) and each epoch's end; one step may hold both.
    assert!(report.checkpoints_written >= 6, "{report:?}");
    assert_eq!(expected_series["train/loss"].len(), STEPS);
    assert_eq!(session_parts(&whole).values().copied().max(), Some(1));

    for crash_at in 1..=STEPS {
        let run = dir.path().join(format!("crash-{crash_at}"));
        let crashed = catch_unwind(AssertUnwindSafe(|| fit(&run, Some(crash_at), false, 1)));
        assert!(crashed.is_err(), "the run at {crash_at} did not crash");
        // Crashing before the first checkpoint (at optimizer step 2, pool step 4) leaves
        // none: a resume refuses, and the run is started over, as the user started it, from
        // the same seed. With one, the model's own initialisation must not matter.
        let (begin, seed) = if crash_at > 4 {
            (Begin::Resume, 1000 + crash_at as u64)
        } else {
            let refused = fit(&run, None, true, 1).unwrap_err().to_string();
            assert!(
                refused.contains("no checkpoint to resume from"),
                "{refused}"
            );
            (Begin::Restart, 1)
        };
        let (model, report) = fit_hidden(&run, None, begin, seed, 4).unwrap();
        let context = format!("crash at step {crash_at}, {report:?}");
        let got = parameters(&model);
        assert!(
            got.iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{context}: parameters differ by {}; whole run {report_whole:?}",
            ember_tests::max_difference(&got, &expected)
        );
        assert_eq!(report.steps, STEPS, "{context}");
        assert_eq!(report.resumed_from.is_some(), crash_at > 4, "{context}");
        assert_eq!(series(&run), expected_series, "{context}");
        assert_eq!(session_parts(&run), session_parts(&whole), "{context}");
    }
}

#[test]
fn a_run_whose_optimizer_is_split_over_its_workers_resumes_bit_identical_from_its_sections() {
    // 4 × 70,000 + 1 parameter elements: past the size at which the Trainer splits its
    // optimizer over its 2 workers, so each checkpoint holds one optimizer section a shard.
    const HIDDEN: usize = 70_000;
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (model, _) = fit_hidden(&whole, None, Begin::Fresh, 1, HIDDEN).unwrap();
    let expected = parameters(&model);
    let checkpoint = std::fs::read_dir(whole.join("checkpoints"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        // The directory holds the run's lock directory too.
        .filter(|path| path.is_file())
        .map(|path| std::fs::read(path).unwrap())
        .find(|bytes| bytes.len() > 1000)
        .expect("the run wrote a checkpoint");
    assert!(
        checkpoint.windows(11).any(|w| w == b"optimizer.1"),
        "the checkpoint holds no second optimizer shard"
    );

    let run = dir.path().join("crash");
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        fit_hidden(&run, Some(7), Begin::Fresh, 1, HIDDEN)
    }));
    assert!(crashed.is_err());
    let (model, report) = fit_hidden(&run, None, Begin::Resume, 2, HIDDEN).unwrap();
    assert!(report.resumed_from.is_some(), "{report:?}");
    let got = parameters(&model);
    assert!(
        got.iter()
            .zip(&expected)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "parameters differ by {}",
        ember_tests::max_difference(&got, &expected)
    );
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn a_torn_newest_checkpoint_is_passed_over_for_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (model, _) = fit(&whole, None, false, 1).unwrap();
    let run = dir.path().join("torn");
    let crashed = catch_unwind(AssertUnwindSafe(|| fit(&run, Some(15), false, 1)));
    assert!(crashed.is_err());
    let store = ember::checkpoint::Checkpoints::new(run.join("checkpoints"), 2);
    let newest = store.list().unwrap()[0].1.clone();
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() - 100]).unwrap();
    let (resumed, report) = fit(&run, None, true, 9).unwrap();
    assert_eq!(report.checkpoints_skipped.len(), 1, "{report:?}");
    assert_eq!(report.checkpoints_skipped[0].0, newest);
    assert!(report.resumed_from.is_some());
    assert_eq!(parameters(&resumed), parameters(&model));
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn a_resume_that_finds_no_whole_checkpoint_refuses_and_leaves_the_run_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    // Stopped before its first checkpoint: a log, no checkpoint.
    let early = dir.path().join("early");
    assert!(catch_unwind(AssertUnwindSafe(|| fit(&early, Some(3), false, 1))).is_err());
    // Checkpoints written, then the directory gone (moved, unmounted).
    let gone = dir.path().join("gone");
    assert!(catch_unwind(AssertUnwindSafe(|| fit(&gone, Some(15), false, 1))).is_err());
    std::fs::rename(gone.join("checkpoints"), dir.path().join("elsewhere")).unwrap();
    // Every checkpoint torn.
    let torn = dir.path().join("torn");
    assert!(catch_unwind(AssertUnwindSafe(|| fit(&torn, Some(15), false, 1))).is_err());
    let store = ember::checkpoint::Checkpoints::new(torn.join("checkpoints"), 2);
    for (_, path) in store.list().unwrap() {
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    }
    for (run, why) in [
        (&early, "it holds no checkpoint file"),
        (&gone, "the directory does not exist"),
        (&torn, "passed over: checksum mismatch"),
    ] {
        let files = files_under(run, true);
        let steps = series(run)["train/loss"].len();
        assert!(steps > 0, "{run:?} logged nothing before it stopped");
        let error = fit(run, None, true, 1).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(
                error,
                TrainError::Checkpoint(ember::checkpoint::CheckpointError::NothingToResume { .. })
            ),
            "{run:?}: {message}"
        );
        assert!(
            message.starts_with("no checkpoint to resume from in ") && message.contains(why),
            "{run:?}: {message}"
        );
        assert_eq!(
            files_under(run, true),
            files,
            "{run:?}: the refused resume changed the run"
        );
        assert_eq!(series(run)["train/loss"].len(), steps, "{run:?}");
    }
}

#[test]
fn starting_a_run_over_discards_its_checkpoints_and_log_and_ends_as_a_fresh_run() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (model, _) = fit(&whole, None, false, 1).unwrap();
    let run = dir.path().join("run");
    assert!(catch_unwind(AssertUnwindSafe(|| fit(&run, Some(11), false, 1))).is_err());
    std::fs::write(run.join("notes.txt"), b"the user's own file").unwrap();
    let (restarted, report) = fit_hidden(&run, None, Begin::Restart, 1, 4).unwrap();
    assert_eq!(report.resumed_from, None);
    assert_eq!(parameters(&restarted), parameters(&model));
    assert_eq!(series(&run), series(&whole));
    assert_eq!(session_parts(&run), session_parts(&whole));
    assert_eq!(
        std::fs::read(run.join("notes.txt")).unwrap(),
        b"the user's own file"
    );
    // The old checkpoints went: the newest now is the new run's last, at its end.
    let (_, report) = fit(&run, None, true, 5).unwrap();
    assert_eq!(report.steps, STEPS);
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn a_live_run_s_directories_refuse_a_second_writer_and_its_resume() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let checkpoints = run.join("checkpoints");
    let device = Device::flex().autodiff();
    let refusals = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = refusals.clone();
    let (run_in_hook, checkpoints_in_hook) = (run.clone(), checkpoints.clone());
    let trainer = trainer(&checkpoints, None).on_step(move |report| {
        if report.step != 6 {
            return;
        }
        // A second record on the live log, and a resume of the live run.
        let record = SummaryRecord::new(&run_in_hook).map(drop);
        let device = Device::flex().autodiff();
        let mut summary = None;
        let resumed = trainer(&checkpoints_in_hook, None)
            .resume_from(&checkpoints_in_hook)
            .fit(
                seeded_mlp(4, 1, &device),
                shuffled_loader(96, true, &device),
                None,
                summary.as_mut(),
            )
            .map(drop);
        seen.lock().unwrap().extend([
            record.map_err(|e| e.to_string()),
            resumed.map_err(|e| e.to_string()),
        ]);
    });
    let mut summary = SummaryRecord::new(&run).unwrap();
    let (model, _) = trainer
        .fit(
            seeded_mlp(4, 1, &device),
            shuffled_loader(96, true, &device),
            Some(shuffled_loader(24, false, &device)),
            Some(&mut summary),
        )
        .unwrap();
    summary.close().unwrap();
    let me = format!("in use by process {}", std::process::id());
    let refusals = refusals.lock().unwrap();
    assert_eq!(refusals.len(), 2);
    for refusal in refusals.iter() {
        assert!(
            refusal.as_ref().is_err_and(|e| e.contains(&me)),
            "{refusals:?}"
        );
    }
    // The live run was not disturbed: it ends as an undisturbed one does.
    let whole = dir.path().join("whole");
    let (expected, _) = fit(&whole, None, false, 1).unwrap();
    assert_eq!(parameters(&model), parameters(&expected));
    assert_eq!(series(&run), series(&whole));
    // Both let go at the end: the directories take a writer again.
    drop(SummaryRecord::new(&run).unwrap());
}

#[test]
fn a_checkpoint_with_a_crafted_position_is_refused_with_a_typed_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    assert!(catch_unwind(AssertUnwindSafe(|| fit(&run, Some(15), false, 1))).is_err());
    let store = ember::checkpoint::Checkpoints::new(run.join("checkpoints"), 2);
    let newest = store.list().unwrap()[0].1.clone();
    let original = std::fs::read(&newest).unwrap();
    let checkpoint = ember::checkpoint::Checkpoint::decode(&original).unwrap();
    let meta = String::from_utf8(checkpoint.section("meta").unwrap().to_vec()).unwrap();
    for (changes, expected) in [
        (&[("epoch", "0")][..], "`epoch=0`: epochs count from 1"),
        (
            &[("epoch", "99999999999999999999999")],
            "`epoch=99999999999999999999999`",
        ),
        (
            &[("epoch", "1125899906842624")],
            "`epoch=1125899906842624` is past any run's count",
        ),
        (&[("epoch", "1000000")], "past this run's 3 epoch(s)"),
        // Refused before the log is rolled back: each step draws at least one of the items.
        (
            &[("epoch_done", "false"), ("step_in_epoch", "1000")],
            "past this run's 96 training item(s) an epoch",
        ),
        (
            &[("epoch_done", "false"), ("step_in_epoch", "50")],
            "past this run's 6 steps",
        ),
        (
            &[("examples", "18446744073709551615")],
            "`examples=18446744073709551615`",
        ),
        (&[("correct", "7")], "`correct=7` is more than `judged=0`"),
        (&[("steps", "-1")], "`steps=-1`"),
    ] {
        let crafted: Vec<String> = meta
            .lines()
            .map(|line| {
                let key = line.split_once('=').map_or("", |(k, _)| k);
                match changes.iter().find(|(k, _)| *k == key) {
                    Some((k, v)) => format!("{k}={v}"),
                    None => line.to_owned(),
                }
            })
            .collect();
        let file = checkpoint
            .clone()
            .with("meta", crafted.join("\n").into_bytes())
            .encode();
        std::fs::write(&newest, file).unwrap();
        let result = catch_unwind(AssertUnwindSafe(|| fit(&run, None, true, 1)));
        let error = match result {
            Ok(Err(error)) => error,
            Ok(Ok(_)) => panic!("{changes:?} was resumed from"),
            Err(_) => panic!("{changes:?} panicked"),
        };
        assert!(
            matches!(error, TrainError::Checkpoint(_)),
            "{changes:?}: {error}"
        );
        assert!(error.to_string().contains(expected), "{changes:?}: {error}");
        std::fs::write(&newest, &original).unwrap();
    }
    // The checkpoint as it was still resumes.
    let (_, report) = fit(&run, None, true, 1).unwrap();
    assert_eq!(report.resumed_from, Some(newest));
}

/// Before: the flush before a checkpoint logged its error and dropped it, so under
/// `ErrorPolicy::Raise` the checkpoint was taken over a log that had lost records.
#[test]
fn a_write_error_met_at_a_checkpoint_is_raised_under_raise_and_no_checkpoint_is_taken() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let checkpoints = run.join("checkpoints");
    let disk_full = Arc::new(AtomicBool::new(false));
    let full = disk_full.clone();
    let mut summary = SummaryRecord::builder(&run)
        .error_policy(ember::ErrorPolicy::Raise)
        .writer_options(move |o| {
            o.free_space = ember::FreeSpaceSource::new(move |_: &Path| {
                Ok(if full.load(Ordering::SeqCst) {
                    0
                } else {
                    u64::MAX
                })
            });
        })
        .build()
        .unwrap();
    let full = disk_full.clone();
    let device = Device::flex().autodiff();
    let result = trainer(&checkpoints, None)
        .on_epoch(move |_, report, step, summary| {
            if report.epoch == EPOCHS {
                // The disk fills with this epoch's values still queued: the flush before the
                // epoch's checkpoint is where the writer meets it.
                full.store(true, Ordering::SeqCst);
                if let Some(summary) = summary {
                    summary.add_scalar("last/epoch", 1.0, step)?;
                }
            }
            Ok(())
        })
        .fit(
            seeded_mlp(4, 1, &device),
            shuffled_loader(96, true, &device),
            None,
            Some(&mut summary),
        );
    let error = result.unwrap_err();
    assert!(matches!(error, TrainError::Summary(_)), "{error}");
    let store = ember::checkpoint::Checkpoints::new(&checkpoints, 2);
    let newest = store.latest().unwrap().unwrap().checkpoint;
    let meta = std::str::from_utf8(newest.section("meta").unwrap()).unwrap();
    assert!(
        !(meta.contains(&format!("\nepoch={EPOCHS}\n")) && meta.contains("epoch_done=true")),
        "the last epoch's checkpoint was taken over the failed flush:\n{meta}"
    );
    drop(summary);
}

/// A resumed run reports how long each part of going on took, up to its first optimizer step;
/// a fresh run reports none.
#[test]
fn a_resumed_run_reports_its_recovery_part_by_part() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let crashed = catch_unwind(AssertUnwindSafe(|| fit(&run, Some(6), false, 1)));
    assert!(crashed.is_err());
    let (_, report) = fit(&run, None, true, 1).unwrap();
    let recovery = report.recovery.expect("a resumed run reports its recovery");
    assert!(recovery.read > std::time::Duration::ZERO, "{recovery:?}");
    assert!(recovery.restore > std::time::Duration::ZERO, "{recovery:?}");
    assert!(
        recovery.first_step > std::time::Duration::ZERO,
        "{recovery:?}"
    );
    assert_eq!(
        recovery.total(),
        recovery.read
            + recovery.restore
            + recovery.rollback
            + recovery.data_position
            + recovery.first_step
    );
    let (_, fresh) = fit(&dir.path().join("fresh"), None, false, 1).unwrap();
    assert_eq!(fresh.recovery, None);
}
