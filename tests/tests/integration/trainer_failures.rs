//! The Trainer when things go wrong: a failed or stopped run records how it ended and leaves the
//! caller's record open; a summary error stops training only under `ErrorPolicy::Raise`; a full
//! log disk costs the log, not the run; a slow device is named; system scalars are sampled off
//! the training thread.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::pack::hparams_tags;
use ember::pack::proto::tensorboard::{Event, event, hparams};
use ember::read::Scan;
use ember::{
    ErrorPolicy, SummaryError, SummaryRecord, TrainError, TrainReport, Trainer, TrainerConfig,
};
use ember_tests::{Mlp, PoisonedLoader, parameters, regression_loader};
use prost::Message;

use super::trainer::{events, tag_steps, trainer};

/// The status of every `_hparams_/session_end_info` value, with its step.
fn session_ends(events: &[(String, Event)]) -> Vec<(i64, hparams::Status)> {
    let mut ends = Vec::new();
    for (_, event) in events {
        let Some(event::What::Summary(summary)) = &event.what else {
            continue;
        };
        for value in &summary.value {
            if value.tag != hparams_tags::SESSION_END_INFO {
                continue;
            }
            let content = &value
                .metadata
                .as_ref()
                .unwrap()
                .plugin_data
                .as_ref()
                .unwrap()
                .content;
            match hparams::HParamsPluginData::decode(content.as_slice())
                .unwrap()
                .data
            {
                Some(hparams::h_params_plugin_data::Data::SessionEndInfo(end)) => {
                    ends.push((event.step, end.status()));
                }
                other => panic!("a session end holds {other:?}"),
            }
        }
    }
    ends
}

/// Training on 2 workers over 64 rows in batches of 8 (4 steps an epoch), poisoned at row 40:
/// device 1's second batch, so step 2 of epoch 1 fails.
fn fit_poisoned(summary: &mut SummaryRecord) -> Result<(Mlp, TrainReport), TrainError> {
    let device = Device::flex().autodiff();
    let train = PoisonedLoader::wrap(regression_loader(1, 64, 8, &device), 40, "poisoned batch");
    trainer(2).fit(Mlp::new(8, &device), train, None, Some(summary))
}

#[test]
fn the_callers_close_after_a_failed_fit_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let result = fit_poisoned(&mut summary);
    assert!(
        matches!(result, Err(TrainError::Step { step: 2, .. })),
        "{result:?}"
    );
    summary.close().unwrap();
}

#[test]
fn a_failed_run_records_failure_with_the_metrics_known_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    assert!(fit_poisoned(&mut summary).is_err());
    drop(summary);

    let events = events(dir.path());
    assert_eq!(session_ends(&events), [(1, hparams::Status::Failure)]);
    let tags = tag_steps(&events);
    assert_eq!(tags["train/loss"], [1]);
    assert_eq!(tags["final/train_loss"], [1]);
}

/// Training on 2 workers over 64 rows in batches of 8, 4 steps an epoch, 2 epochs, recording
/// into `summary`; after the first epoch the epoch hook records a value under an empty tag,
/// which `add_scalar` refuses: one summary error.
fn fit_with_a_bad_value(summary: &mut SummaryRecord) -> Result<(Mlp, TrainReport), TrainError> {
    let device = Device::flex().autodiff();
    trainer(2)
        .on_epoch(|_model: &Mlp, report, step, summary| match summary {
            Some(summary) if report.epoch == 1 => summary.add_scalar("", 1.0, step),
            _ => Ok(()),
        })
        .fit(
            Mlp::new(8, &device),
            regression_loader(1, 64, 8, &device),
            None,
            Some(summary),
        )
}

#[test]
fn a_summary_error_under_the_default_policy_does_not_stop_training() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    assert_eq!(summary.error_policy(), ErrorPolicy::Log);
    let (_model, report) = fit_with_a_bad_value(&mut summary).unwrap();
    summary.close().unwrap();
    assert_eq!(report.steps, 8);
    assert_eq!(report.epochs.len(), 2);
    assert_eq!(report.summary_errors, 1);

    let events = events(dir.path());
    assert_eq!(tag_steps(&events)["train/loss"], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(session_ends(&events), [(8, hparams::Status::Success)]);
}

#[test]
fn a_summary_error_under_raise_stops_training_and_records_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(dir.path())
        .error_policy(ErrorPolicy::Raise)
        .build()
        .unwrap();
    let result = fit_with_a_bad_value(&mut summary);
    assert!(
        matches!(result, Err(TrainError::Summary(SummaryError::Tag(_)))),
        "{result:?}"
    );
    summary.close().unwrap();
    let events = events(dir.path());
    assert_eq!(tag_steps(&events)["train/loss"], [1, 2, 3, 4]);
    assert_eq!(session_ends(&events), [(4, hparams::Status::Failure)]);
}

#[test]
fn a_stopped_run_stops_after_the_step_the_flag_was_set_in() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    let initial = Mlp::new(8, &device);
    let start = parameters(&initial);
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let (model, report) = trainer(2)
        .stop_when(stop)
        .on_step(move |step| {
            if step.step == 3 {
                flag.store(true, Ordering::Release);
            }
        })
        .fit(
            initial,
            regression_loader(1, 64, 8, &device),
            None,
            Some(&mut summary),
        )
        .unwrap();
    summary.close().unwrap();

    assert!(report.interrupted);
    assert_eq!(report.steps, 3);
    assert_eq!(report.optimizer_steps, 3);
    assert!(report.epochs.is_empty());
    assert_ne!(parameters(&model), start);

    let events = events(dir.path());
    let tags = tag_steps(&events);
    assert_eq!(tags["train/loss"], [1, 2, 3]);
    assert_eq!(tags["run/interrupted"], [3]);
    assert_eq!(tags["final/train_loss"], [3]);
    assert_eq!(session_ends(&events), [(3, hparams::Status::Failure)]);
}

/// A tmpfs of `bytes` mounted on a fresh temporary directory, unmounted on drop. `None`, after
/// one line saying why, where none can be mounted (not root, no mount permission); under
/// `CI=true` that is a failure instead.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(SmallDisk { dir }),
            other => {
                let why = match other {
                    Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "cannot mount a small tmpfs under CI: {why}"
                );
                eprintln!("skipped: cannot mount a small tmpfs ({why})");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_full_log_disk_does_not_stop_training_and_the_counts_match_the_files() {
    // Before: the default Raise policy plus `?` stopped a 160-step run at step 141 when the disk
    // filled, and `records_written` counted bytes put in a buffer, not records in the file.
    let Some(disk) = SmallDisk::mount(64 * 1024) else {
        return;
    };
    let log = disk.path().join("run");
    let mut summary = SummaryRecord::builder(&log)
        // The guard would refuse before the disk is full; here the disk itself says no.
        .writer_options(|o| o.disk_guard_factor = 0)
        .build()
        .unwrap();
    let device = Device::flex().autodiff();
    let (_model, report) = trainer(40)
        .fit(
            Mlp::new(8, &device),
            regression_loader(1, 64, 8, &device),
            None,
            Some(&mut summary),
        )
        .unwrap();
    assert_eq!(report.steps, 160, "training ran to its end");
    assert_eq!(report.epochs.len(), 40);

    let closed = summary.close();
    let Err(SummaryError::Close(errors)) = closed else {
        panic!("expected the full disk to be reported, got {closed:?}");
    };
    assert!(
        errors.errors.iter().any(|e| matches!(
            e,
            ember::WriteError::WriterFailed {
                source: ember::FileError::Io { source, .. },
                ..
            } if source.kind() == std::io::ErrorKind::StorageFull
        )),
        "{errors}"
    );
    let stats = summary.stats().unwrap();
    assert!(stats.records_failed > 0);
    assert_eq!(stats.records_pending(), 0);
    assert_eq!(
        stats.records_submitted,
        stats.records_written + stats.records_failed + stats.records_dropped
    );
    // Every event the writer counts as written is in the file, whole, and nothing else is.
    let mut events_in_files = 0u64;
    let files = std::fs::read_dir(&log)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file());
    for path in files {
        let scan = Scan::file(&path).unwrap();
        assert!(
            scan.problems.is_empty(),
            "{}: {:?}",
            path.display(),
            scan.problems
        );
        events_in_files += scan.records.len() as u64 - 1; // the file_version header
    }
    let summary_writer = stats.writer(ember::pack::FileKind::Summary).unwrap();
    assert_eq!(summary_writer.records_written, events_in_files);
    assert!(summary_writer.failed);
}

/// [`Mlp`], whose train step on device 1's worker takes 40 ms longer: a straggler.
#[derive(burn::module::Module, Debug)]
struct SlowOnDeviceOne {
    inner: Mlp,
}

impl burn::train::TrainStep for SlowOnDeviceOne {
    type Input = ember_tests::XyBatch;
    type Output = burn::train::RegressionOutput;

    fn step(&self, batch: Self::Input) -> burn::train::TrainOutput<Self::Output> {
        // The pool names each worker thread (and its compute pool's) after its device.
        let thread = std::thread::current();
        if thread
            .name()
            .is_some_and(|name| name.starts_with("ember-device-1"))
        {
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
        burn::train::TrainStep::step(&self.inner, batch)
    }
}

impl burn::train::InferenceStep for SlowOnDeviceOne {
    type Input = ember_tests::XyBatch;
    type Output = burn::train::RegressionOutput;

    fn step(&self, batch: Self::Input) -> Self::Output {
        burn::train::InferenceStep::step(&self.inner, batch)
    }
}

/// Trains [`SlowOnDeviceOne`] on 2 flex workers, 64 rows in batches of 8 (4 steps an epoch),
/// recording into `dir`; returns the step times the `on_step` reports gave.
fn train_with_a_slow_device(dir: &Path, config: TrainerConfig) -> ember::StepTimes {
    let device = Device::flex().autodiff();
    let mut summary = SummaryRecord::new(dir).unwrap();
    let reported = Arc::new(std::sync::Mutex::new(ember::StepTimes::new()));
    let seen = reported.clone();
    Trainer::new(
        vec![device.clone(), device.clone()],
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            histogram_every: None,
            ..config
        },
    )
    .on_step(move |step| seen.lock().unwrap().add_report(step))
    .fit(
        SlowOnDeviceOne {
            inner: Mlp::new(4, &device),
        },
        regression_loader(1, 64, 8, &device),
        None,
        Some(&mut summary),
    )
    .unwrap();
    summary.close().unwrap();
    reported.lock().unwrap().clone()
}

#[test]
fn a_slowed_device_is_named_the_straggler_in_the_reports_the_log_and_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let reported = train_with_a_slow_device(
        dir.path(),
        TrainerConfig {
            epochs: 1,
            ..TrainerConfig::default()
        },
    );

    // 4 steps, device 1 the last to answer in each.
    assert_eq!(reported.steps(), 4);
    assert_eq!(reported.straggler(), Some((1, 4)));
    let recorded = ember::StepTimes::from_scalars(&ember::read::scalars(dir.path()).unwrap())
        .expect("the run recorded its step times");
    assert_eq!(recorded.straggler(), Some((1, 4)));
    let table = recorded.to_string();
    assert!(
        table.contains("device 1: own step") && table.contains("slowest in 4 of 4 steps"),
        "{table}"
    );
    assert!(table.contains("device 0: own step"), "{table}");
    assert!(table.contains("slowest in 0 of 4 steps"), "{table}");
    // Device 0 waited for device 1 about as long as device 1 was slowed.
    let waits = ember::read::scalars(dir.path()).unwrap()["device/0/wait_seconds"].clone();
    assert_eq!(waits.len(), 4);
    assert!(waits.iter().all(|p| p.value >= 0.03), "{waits:?}");
}

#[test]
fn system_scalars_are_sampled_off_the_training_thread_and_recorded_with_a_step() {
    let dir = tempfile::tempdir().unwrap();
    // 40 ms a step on device 1: 8 steps last long enough for several samples.
    train_with_a_slow_device(
        dir.path(),
        TrainerConfig {
            epochs: 2,
            system_every: Some(std::time::Duration::from_millis(20)),
            ..TrainerConfig::default()
        },
    );

    let scalars = ember::read::scalars(dir.path()).unwrap();
    let resident = &scalars["system/resident_bytes"];
    let cpu = &scalars["system/cpu_percent"];
    assert!(resident.len() >= 2, "{resident:?}");
    assert_eq!(resident.len(), cpu.len());
    // Recorded with a training step, at most once a step.
    let steps: BTreeSet<i64> = resident.iter().map(|p| p.step).collect();
    assert_eq!(steps.len(), resident.len());
    assert!(steps.iter().all(|step| (1..=8).contains(step)), "{steps:?}");
    assert!(resident.iter().all(|p| p.value > 1e6), "{resident:?}");
    assert!(
        cpu.iter().all(|p| p.value.is_finite() && p.value >= 0.0),
        "{cpu:?}"
    );
    // The machine's, under MLflow's names: in the same samples, within their ranges (the
    // memory in use against /proc/meminfo's total).
    let total_mb = meminfo_kb("MemTotal") * 1024.0 / 1e6;
    for (tag, most) in [
        ("system/cpu_utilization_percentage", 100.0),
        ("system/system_memory_usage_percentage", 100.0),
        ("system/system_memory_usage_megabytes", total_mb),
    ] {
        let series = &scalars[tag];
        assert_eq!(series.len(), resident.len(), "{tag}");
        assert!(
            series.iter().all(|p| p.value >= 0.0 && p.value <= most),
            "{tag}: {series:?} (at most {most})"
        );
    }
    // flex keeps no count of its memory: no device series.
    assert!(!scalars.keys().any(|tag| tag.starts_with("system/device/")));
}

/// `SummaryRecord::flush` under the default `Log` policy: once the writer has died on a full
/// disk (a 256 KiB tmpfs), `flush` still returns `Ok`, as its doc says, and `stats()` and
/// `take_errors()` are where the loss shows: nothing pending, the failed records counted, the
/// writer marked failed, the disk's error kept.
#[test]
fn after_a_writer_died_on_a_full_disk_flush_under_log_is_ok_and_stats_tell_the_loss() {
    let Some(disk) = SmallDisk::mount(256 * 1024) else {
        return;
    };
    let mut summary = SummaryRecord::builder(disk.path().join("run"))
        .writer_options(|o| o.disk_guard_factor = 0)
        .build()
        .unwrap();
    let values: Vec<f32> = (0..2_000).map(|i| (i as f32).cos()).collect();
    // About 570 bytes a histogram record: 2,000 of them overflow the disk.
    for step in 0..2_000 {
        summary
            .add_histogram("w", values.as_slice(), step)
            .expect("under Log an add never fails for the disk");
    }
    summary
        .flush()
        .expect("under Log a flush is not the disk's error");
    let stats = summary.stats().unwrap();
    assert_eq!(stats.records_pending(), 0, "{stats:?}");
    assert!(stats.records_failed > 0, "{stats:?}");
    assert!(stats.writer(ember::pack::FileKind::Summary).unwrap().failed);
    let errors = summary.take_errors();
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("No space left")),
        "{errors:?}"
    );
}

/// A field of /proc/meminfo, in kB.
fn meminfo_kb(field: &str) -> f64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap();
    line.trim().trim_end_matches("kB").trim().parse().unwrap()
}
