//! (With the `object-store` feature.) Runs whose log and checkpoints are in an object store (a
//! `file://` one): resumed from the bucket bit for bit with one log; stopped with `LeaseLost`
//! once another writer takes their lease over; checkpoints written only once their log is in
//! the store; and (`ranks.rs`) a job of ranks whose store stops taking one rank's log.

mod ranks;

use burn::tensor::Device;
use ember_tests::parameters;

use super::*;

/// A run whose log and checkpoints are in an object store (a `file://` one) and which dies at
/// any step ends, resumed from the bucket, with the uninterrupted run's parameters bit for bit,
/// and a log in the bucket that shows each step once with the uninterrupted run's values.
#[test]
fn a_run_in_a_bucket_resumes_from_the_bucket_bit_identical_with_one_log() {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    let bucket = tempfile::tempdir().unwrap();
    let (whole, result) = fit_in_bucket(bucket.path(), "whole", |_| None, false, 1);
    let (expected, _) = result.unwrap();
    let expected_series = comparable_series(&whole);
    assert_eq!(expected_series["train/loss"].len(), 12);
    for crash_at in [5, 8, 11] {
        let run = format!("crash-{crash_at}");
        let crashed = catch_unwind(AssertUnwindSafe(|| {
            fit_in_bucket(bucket.path(), &run, |_| Some(crash(crash_at)), false, 1)
        }));
        assert!(crashed.is_err());
        let (url, result) =
            fit_in_bucket(bucket.path(), &run, |_| None, true, 100 + crash_at as u64);
        let (got, report) = result.unwrap();
        assert!(
            report.resumed_from.is_some(),
            "crash at {crash_at}: {report:?}"
        );
        assert_eq!(got, expected, "crash at {crash_at}: parameters differ");
        assert_eq!(
            comparable_series(&url),
            expected_series,
            "crash at {crash_at}"
        );
    }
}

/// Before: a run in a bucket whose lease another writer took over (it had stopped past the
/// lease's stale time) logged that two writers might now write the run and trained on, its
/// records and checkpoints landing beside the new holder's. Now the first record after the
/// loss ends the run with `LeaseLost`, whatever the record's error policy (here the default,
/// which logs a failed record and goes on), and nothing it records or checkpoints after the
/// loss reaches the bucket.
#[test]
fn a_run_in_a_bucket_whose_lease_is_taken_over_stops_with_lease_lost() {
    use ember_write::remote::RemoteError;

    let bucket = tempfile::tempdir().unwrap();
    let dir = bucket.path().join("taken");
    let taken_over = |summary: &SummaryRecord| -> Option<OnStep> {
        let claim = summary.claim().unwrap();
        let dir = dir.clone();
        Some(Box::new(move |report: &StepReport| {
            if report.step != 5 {
                return;
            }
            let waited = std::time::Instant::now();
            let deadline = std::time::Duration::from_secs(60);
            while !dir.join("checkpoints/ckpt-000000000001.ember").exists() {
                assert!(
                    waited.elapsed() < deadline,
                    "the first checkpoint never came"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // Another host's writer takes the lease over, as after this one stopped.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis();
            let theirs = format!("host=elsewhere\npid=4242\ntaken={now}\nrenewed={now}\n");
            std::fs::write(dir.join(".ember-lease"), theirs).unwrap();
            while !claim.is_lost() {
                assert!(
                    waited.elapsed() < deadline,
                    "the lease was never found lost"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }))
    };
    let (url, result) = fit_in_bucket(bucket.path(), "taken", taken_over, false, 1);
    let error = result.unwrap_err();
    assert!(
        matches!(
            &error,
            TrainError::Summary(SummaryError::Remote(RemoteError::LeaseLost {
                holder: Some(holder),
                ..
            })) if holder.pid == 4242
        ),
        "{error}"
    );
    let steps: Vec<i64> = comparable_series(&url)["train/loss"]
        .iter()
        .map(|(step, _)| *step)
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]) && steps.last() <= Some(&5),
        "{steps:?}"
    );
    let mut checkpoints: Vec<String> = std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != crate::run::RECORD_FILE)
        .collect();
    checkpoints.sort();
    assert_eq!(checkpoints, ["ckpt-000000000001.ember"]);
    let lease = std::fs::read_to_string(dir.join(".ember-lease")).unwrap();
    assert!(
        lease.contains("pid=4242"),
        "the lost lease was released: {lease}"
    );
}

/// A crash at pool step `step`, for [`fit_in_bucket`].
fn crash(step: usize) -> OnStep {
    Box::new(move |report: &StepReport| {
        if report.step == step as i64 {
            panic!("simulated crash at step {step}");
        }
    })
}

type OnStep = Box<dyn FnMut(&StepReport) + Send>;

/// A checkpoint in a bucket is written only once the log up to it is in the store (that a cut
/// the store refuses is an error is `ember-write`'s `cut` tests' to show): while the store
/// refuses the log's segments the run goes on, and whichever checkpoints it writes meanwhile
/// or after hold whole logs: crashed, and resumed from its newest, the run ends as one never
/// stopped, each step once in its log.
#[test]
fn a_checkpoint_in_a_bucket_is_written_only_once_its_log_up_to_it_is_in_the_store() {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    let bucket = tempfile::tempdir().unwrap();
    let (whole, result) = fit_in_bucket(bucket.path(), "whole", |_| None, false, 1);
    let (expected, whole_report) = result.unwrap();
    let expected_series = comparable_series(&whole);
    assert_eq!(whole_report.checkpoints_written, 4, "{whole_report:?}");
    // The segments' next names taken by directories from step 5 (once the first checkpoint,
    // at step 4, is written, which is after its log's segments are) to step 9: the log's
    // uploads fail meanwhile, its checkpoints' objects do not. The checkpoints at steps 4, 6
    // (the epoch's end), 8 and 12 are written on threads of their own, so which of those at 6
    // and 8 meet the refusal depends on how far training has gone on by then.
    let segments_refused = |dir: std::path::PathBuf, crash_at: Option<i64>| -> OnStep {
        Box::new(move |report: &StepReport| match report.step {
            5 => {
                let first = dir.join("checkpoints/ckpt-000000000001.ember");
                let waited = std::time::Instant::now();
                while !first.exists() && waited.elapsed() < std::time::Duration::from_secs(60) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                refuse_next_segments(&dir, true);
            }
            9 => refuse_next_segments(&dir, false),
            step if Some(step) == crash_at => panic!("simulated crash at step {step}"),
            _ => {}
        })
    };
    let refused = bucket.path().join("refused");
    let (url, result) = fit_in_bucket(
        bucket.path(),
        "refused",
        |_| Some(segments_refused(refused.clone(), None)),
        false,
        1,
    );
    let (got, report) = result.unwrap();
    // The first and the last are written whatever the timing.
    assert!((2..=4).contains(&report.checkpoints_written), "{report:?}");
    assert_eq!(got, expected);
    assert_eq!(comparable_series(&url), expected_series);

    let crashed = bucket.path().join("crashed");
    let hook = segments_refused(crashed.clone(), Some(10));
    let run = catch_unwind(AssertUnwindSafe(|| {
        fit_in_bucket(bucket.path(), "crashed", |_| Some(hook), false, 1)
    }));
    assert!(run.is_err());
    let (url, result) = fit_in_bucket(bucket.path(), "crashed", |_| None, true, 7);
    let (got, report) = result.unwrap();
    assert!(report.resumed_from.is_some(), "{report:?}");
    assert_eq!(got, expected);
    assert_eq!(comparable_series(&url), expected_series);
}

/// Makes (or removes) directories at the next 100 segment names of every event file in the
/// file-store run directory `dir`, so that their uploads fail.
fn refuse_next_segments(dir: &std::path::Path, refuse: bool) {
    let mut last: std::collections::BTreeMap<String, u32> = Default::default();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((file, segment)) = name.rsplit_once('.') else {
            continue;
        };
        if file.starts_with("events.out.tfevents.")
            && let Ok(segment) = segment.parse::<u32>()
        {
            let at = last.entry(file.to_owned()).or_default();
            *at = (*at).max(segment);
        }
    }
    for (file, segment) in last {
        for next in segment + 1..segment + 100 {
            let path = dir.join(format!("{file}.{next:08}"));
            if refuse {
                std::fs::create_dir_all(&path).unwrap();
            } else if path.is_dir() {
                std::fs::remove_dir(&path).unwrap();
            }
        }
    }
}

/// Trains run `run` with its log and checkpoints under `file://<bucket>/<run>`: 2 workers,
/// accumulation 2, histograms and a checkpoint every 2 optimizer steps; what `on_step` makes
/// of the run's record, after each step (a crash, say), and resuming from the bucket's
/// checkpoints when `resume`. `seed`
/// initialises the model (a resumed run's must not matter). Returns the run's URL and its
/// parameters.
fn fit_in_bucket(
    bucket: &std::path::Path,
    run: &str,
    on_step: impl FnOnce(&SummaryRecord) -> Option<OnStep>,
    resume: bool,
    seed: u64,
) -> (String, Result<(Vec<f32>, TrainReport), TrainError>) {
    use burn::optim::AdamConfig;
    use ember_tests::{seeded_mlp, shuffled_loader};

    let url = format!("file://{}/{run}", bucket.display());
    std::fs::create_dir_all(bucket.join(run)).unwrap();
    let checkpoints = PathBuf::from(format!("{url}/checkpoints"));
    let device = Device::flex().autodiff();
    let mut trainer = Trainer::new(
        vec![device.clone(), device.clone()],
        AdamConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs: 2,
            grad_accumulation: 2,
            histogram_every: Some(2),
            checkpoints: Some(CheckpointConfig {
                dir: checkpoints.clone(),
                every: Some(2),
                keep: 2,
            }),
            ..TrainerConfig::default()
        },
    );
    if resume {
        trainer = trainer.resume_from(&checkpoints);
    }
    let mut summary = SummaryRecord::new(&url).unwrap();
    if let Some(on_step) = on_step(&summary) {
        trainer = trainer.on_step(on_step);
    }
    let result = trainer.fit(
        seeded_mlp(4, seed, &device),
        shuffled_loader(96, true, &device),
        Some(shuffled_loader(24, false, &device)),
        Some(&mut summary),
    );
    // A run that failed may fail to close too (its lease lost).
    let closed = summary.close();
    if result.is_ok() {
        closed.unwrap();
    }
    let result = result.map(|(model, report)| (parameters(&model), report));
    (url, result)
}

/// Every scalar and histogram series of the run at `url`, wall-clock series aside, each value
/// as its exact debug text.
fn comparable_series(url: &str) -> std::collections::BTreeMap<String, Vec<(i64, String)>> {
    let read = crate::read::Summaries::read_dir(url).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for (tag, points) in read.scalars {
        if ember_tests::is_clock_tag(&tag) {
            continue;
        }
        let values = points.iter().map(|p| (p.step, format!("{:?}", p.value)));
        out.insert(tag, values.collect());
    }
    for (tag, points) in read.histograms {
        let values = points.iter().map(|p| (p.step, format!("{:?}", p.buckets)));
        out.insert(format!("histogram {tag}"), values.collect());
    }
    out
}
