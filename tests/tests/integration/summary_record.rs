//! SummaryRecord behaviour across crates: modes, the plugin filter, closed records, ranks, and a
//! worker failure in the middle of training.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::pack::proto::tensorboard::{Event, event};
use ember::read::Scan;
use ember::{
    Mode, Plugin, RankLayout, SummaryError, SummaryRecord, TrainError, Trainer, TrainerConfig,
};
use ember_tests::{Mlp, XyBatch, XyBatcher};
use prost::Message;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    paths.retain(|p| p.is_file());
    paths.sort();
    paths
}

/// Tag to the steps it was recorded at, over every clean event file in `dir`.
fn tag_steps(dir: &Path) -> BTreeMap<String, Vec<i64>> {
    let mut tags: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for path in files(dir) {
        let scan = Scan::file(&path).unwrap();
        assert!(scan.problems.is_empty(), "{path:?}: {:?}", scan.problems);
        for record in scan.records {
            let event = Event::decode(record.data.as_slice()).unwrap();
            if let Some(event::What::Summary(summary)) = event.what {
                for value in summary.value {
                    tags.entry(value.tag).or_default().push(event.step);
                }
            }
        }
    }
    tags
}

#[test]
fn eval_mode_drops_tapped_values_and_keeps_added_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let tap = summary.tap();

    tap.add("activation/mean", 0.5).unwrap();
    summary.add_value(Plugin::Scalar, "loss", 1.0).unwrap();
    summary.record(1).unwrap();

    summary.set_mode(Mode::Eval);
    tap.add("activation/mean", 0.7).unwrap();
    summary.add_value(Plugin::Scalar, "loss", 2.0).unwrap();
    summary.record(2).unwrap();

    summary.set_mode(Mode::Train);
    tap.add("activation/mean", 0.9).unwrap();
    summary.record(3).unwrap();
    summary.close().unwrap();

    let tags = tag_steps(dir.path());
    assert_eq!(tags["loss"], [1, 2]);
    assert_eq!(tags["activation/mean"], [1, 3]);
}

#[test]
fn the_plugin_filter_keeps_only_the_plugins_it_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    summary.add_value(Plugin::Scalar, "loss", 0.25).unwrap();
    summary
        .add_value(Plugin::Text, "note", "kept out by the filter")
        .unwrap();
    summary
        .add_value(
            Plugin::Histogram,
            "weights",
            ember::pack::Value::histogram(vec![1.0f32, 2.0, 3.0]),
        )
        .unwrap();
    summary
        .record_filtered(5, |plugin| plugin != Plugin::Text)
        .unwrap();
    summary.close().unwrap();

    let tags = tag_steps(dir.path());
    assert_eq!(tags.keys().collect::<Vec<_>>(), ["loss", "weights"]);
}

#[test]
fn a_value_of_another_plugin_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let error = summary
        .add_value(Plugin::Histogram, "loss", 1.0)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "plugin Histogram expects its own kind of value, got a scalar"
    );
    assert!(matches!(
        summary.add_value(Plugin::Scalar, "", 1.0),
        Err(SummaryError::Tag(_))
    ));
}

#[test]
fn a_closed_record_refuses_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    summary.add_scalar("loss", 1.0, 0).unwrap();
    summary.close().unwrap();

    assert!(matches!(
        summary.add_value(Plugin::Scalar, "loss", 1.0),
        Err(SummaryError::Closed)
    ));
    assert!(matches!(summary.record(1), Err(SummaryError::Closed)));
    assert!(matches!(
        summary.add_scalar("loss", 1.0, 1),
        Err(SummaryError::Closed)
    ));
    assert!(matches!(summary.flush(), Err(SummaryError::Closed)));
    assert!(matches!(summary.close(), Err(SummaryError::Closed)));
    assert_eq!(
        summary.close().unwrap_err().to_string(),
        "the summary record is closed"
    );
    // What was recorded before closing is on disk.
    assert_eq!(tag_steps(dir.path())["loss"], [0]);
}

#[test]
fn ranks_go_into_file_names_or_their_own_directories() {
    let dir = tempfile::tempdir().unwrap();
    let mut named = SummaryRecord::builder(dir.path())
        .rank(1, 2)
        .build()
        .unwrap();
    named.add_scalar("loss", 1.0, 0).unwrap();
    named.close().unwrap();
    let names: Vec<String> = files(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    assert_eq!(names.len(), 1);
    assert!(
        names[0].contains("tfevents") && names[0].contains(".rank1"),
        "{names:?}"
    );

    let per_rank = tempfile::tempdir().unwrap();
    let mut record = SummaryRecord::builder(per_rank.path())
        .rank(3, 4)
        .rank_layout(RankLayout::Directory)
        .build()
        .unwrap();
    assert_eq!(record.log_dir(), per_rank.path().join("rank_3"));
    record.add_scalar("loss", 1.0, 0).unwrap();
    record.close().unwrap();
    assert_eq!(tag_steps(&per_rank.path().join("rank_3"))["loss"], [0]);

    let silent = tempfile::tempdir().unwrap();
    let mut other_rank = SummaryRecord::builder(silent.path().join("logs"))
        .rank(1, 2)
        .rank_zero_only(true)
        .build()
        .unwrap();
    assert!(!other_rank.is_active());
    other_rank.add_scalar("loss", 1.0, 0).unwrap();
    other_rank.close().unwrap();
    assert!(files(&silent.path().join("logs")).is_empty());

    assert!(matches!(
        SummaryRecord::builder(silent.path()).rank(2, 2).build(),
        Err(SummaryError::Rank(_))
    ));
}

#[test]
fn several_records_live_in_one_process_each_with_its_own_files() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut first = SummaryRecord::new(a.path()).unwrap();
    let mut second = SummaryRecord::new(b.path()).unwrap();
    first.add_scalar("first", 1.0, 0).unwrap();
    second.add_scalar("second", 2.0, 0).unwrap();
    first.close().unwrap();
    second.close().unwrap();
    assert_eq!(tag_steps(a.path()).keys().collect::<Vec<_>>(), ["first"]);
    assert_eq!(tag_steps(b.path()).keys().collect::<Vec<_>>(), ["second"]);
}

/// Batches like [`XyBatcher`], poisoning any batch that holds the marker row.
#[derive(Clone)]
struct PoisonBatcher;

const MARKER: f32 = 999.0;

impl Batcher<[f32; 3], XyBatch> for PoisonBatcher {
    fn batch(&self, rows: Vec<[f32; 3]>, device: &Device) -> XyBatch {
        let poisoned = rows.iter().any(|r| r[0] == MARKER);
        let mut batch = XyBatcher.batch(rows, device);
        if poisoned {
            batch.poison = Some("gradient exploded");
        }
        batch
    }
}

#[test]
fn a_worker_failure_mid_training_names_the_device_and_leaves_complete_files() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    // 32 rows in batches of 4 over 2 devices: device 1 holds rows 16..32, and its third batch
    // (rows 24..28) is poisoned, so steps 1 and 2 succeed and step 3 fails on device 1.
    let mut rows: Vec<[f32; 3]> = (0..32).map(|i| [i as f32 / 32.0, 0.5, 1.0]).collect();
    rows[25][0] = MARKER;
    let train: Arc<dyn DataLoader<XyBatch>> = DataLoaderBuilder::new(PoisonBatcher)
        .batch_size(4)
        .set_device(device.clone())
        .build(InMemDataset::new(rows));
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let trainer = Trainer::<Mlp>::new(
        vec![device.clone(), device.clone()],
        SgdConfig::new().init(),
        0.01,
        TrainerConfig::default(),
    );
    let error = trainer
        .fit(Mlp::new(4, &device), train, None, Some(&mut summary))
        .unwrap_err();
    match &error {
        TrainError::Step {
            epoch,
            step,
            source,
        } => {
            assert_eq!((*epoch, *step), (1, 3));
            assert_eq!(
                source.to_string(),
                "device 1: step panicked: gradient exploded"
            );
        }
        other => panic!("expected a step failure, got {other}"),
    }
    // The trainer flushed the record and left it open: everything recorded before the failure
    // is already whole in the files, and closing is the caller's.
    let tags = tag_steps(dir.path());
    assert_eq!(tags["train/loss"], [1, 2]);
    assert!(tags.contains_key("_hparams_/experiment"));
    assert!(tags.contains_key("_hparams_/session_end_info"));
    summary.close().unwrap();
}

/// How many whole summary records the TensorBoard files in `dir` hold (headers excluded);
/// any problem in a file, a truncated tail included, fails the test.
fn whole_records(dir: &std::path::Path) -> usize {
    files(dir)
        .iter()
        .map(|f| {
            let scan = Scan::file(f).unwrap();
            assert!(scan.problems.is_empty(), "{:?}", scan.problems);
            scan.records.len().saturating_sub(1)
        })
        .sum()
}

#[test]
fn a_lone_record_reaches_the_file_without_a_flush() {
    // One value, then silence (a long validation, a hang): it must reach the file within the
    // writer's batching delay, not wait for the next record or the timed fsync (off here).
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(dir.path())
        .flush_interval(None)
        .max_delay(std::time::Duration::from_millis(20))
        .build()
        .unwrap();
    summary.add_scalar("loss", 0.5, 1).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while whole_records(dir.path()) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        whole_records(dir.path()),
        1,
        "the record never reached the file"
    );
    // The pool settles a record's fate just after its bytes reach the file: the count follows
    // the file, it does not lead it.
    let mut stats = summary.stats().unwrap();
    while stats.records_written == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
        stats = summary.stats().unwrap();
    }
    assert_eq!((stats.records_submitted, stats.records_written), (1, 1));
    summary.close().unwrap();
    assert_eq!(tag_steps(dir.path())["loss"], [1]);
}

#[test]
fn an_invalid_tapped_tag_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let tap = summary.tap();
    assert!(matches!(tap.add("", 1.0), Err(SummaryError::Tag(_))));
    assert!(matches!(tap.add("a\0b", 1.0), Err(SummaryError::Tag(_))));
    tap.add("activation/mean", 0.5).unwrap();
    summary.add_value(Plugin::Scalar, "loss", 1.0).unwrap();
    // Before, the bad tag surfaced here and the step's valid values were lost with it.
    summary.record(1).unwrap();
    summary.close().unwrap();
    let tags = tag_steps(dir.path());
    assert_eq!(tags["loss"], [1]);
    assert_eq!(tags["activation/mean"], [1]);
}

#[test]
fn an_empty_log_dir_is_refused() {
    assert!(matches!(
        SummaryRecord::new(""),
        Err(SummaryError::EmptyLogDir)
    ));
    assert!(matches!(
        SummaryRecord::builder("")
            .rank(1, 2)
            .rank_zero_only(true)
            .build(),
        Err(SummaryError::EmptyLogDir)
    ));
}

#[test]
fn add_image_refuses_a_bad_shape_itself() {
    use ember::pack::{ImageLayout, PackErrorKind, TensorValue};
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let rank2 = TensorValue::from_slice(&[0.5f32; 16], vec![4, 4]);
    match summary.add_image("img", rank2, ImageLayout::Chw, 0) {
        Err(SummaryError::Rejected(e)) => {
            assert!(matches!(e.kind, PackErrorKind::ImageRank { .. }), "{e}")
        }
        other => panic!("expected a rank error, got {other:?}"),
    }
    let two_channels = TensorValue::from_slice(&[0.5f32; 32], vec![2, 4, 4]);
    match summary.add_image("img", two_channels, ImageLayout::Chw, 0) {
        Err(SummaryError::Rejected(e)) => {
            assert!(matches!(e.kind, PackErrorKind::ImageChannels { .. }), "{e}")
        }
        other => panic!("expected a channel error, got {other:?}"),
    }
    // Nothing bad was queued, so the next, unrelated calls succeed.
    summary.add_scalar("loss", 1.0, 1).unwrap();
    summary.flush().unwrap();
    summary.close().unwrap();
    assert_eq!(summary.stats().unwrap().records_rejected, 0);
}

#[test]
fn a_full_queue_is_reported_and_counted_record_by_record() {
    // 640 histograms on a queue of 2 with the error policy: before, 515 records vanished with
    // neither an error nor a count.
    // The writer thread is held in its first batch by a free-space seam that blocks until the
    // burst is over, so the queue is full for the rest of it.
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let hold = std::sync::Mutex::new(hold);
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(dir.path())
        .queue(2, ember::FullQueuePolicy::Error)
        .max_delay(std::time::Duration::ZERO)
        .writer_options(move |o| {
            o.free_space = ember::FreeSpaceSource::new(move |_: &Path| {
                let _ = hold.lock().unwrap().recv();
                Ok(u64::MAX)
            });
        })
        .build()
        .unwrap();
    let values: Vec<f32> = (0..10_000).map(|i| (i as f32).sin()).collect();
    let mut refused = 0u64;
    for step in 0..640 {
        match summary.add_histogram("w", values.as_slice(), step) {
            Ok(()) => {}
            Err(SummaryError::Write(ember::WriteError::QueueFull)) => refused += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    drop(release);
    summary.close().unwrap();
    // Only the held batch (the first record and what was queued behind it) and the two queued
    // records got through.
    assert!(refused >= 640 - 5, "{refused} refused");
    let stats = summary.stats().unwrap();
    assert_eq!(stats.records_submitted, 640);
    assert_eq!(stats.records_dropped_queue_full, refused);
    assert_eq!(stats.records_written + refused, 640);
    assert_eq!(stats.records_pending(), 0);
    assert_eq!(whole_records(dir.path()) as u64, stats.records_written);
}

#[test]
fn pr_curves_audio_and_custom_scalars_reach_tensorboard_and_are_refused_for_mindinsight() {
    use ember::pack::{Category, CustomScalarLayout, Format, PackErrorKind, PrCurve};
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    summary
        .add_pr_curve("pr/0", &[true, false, true], &[0.9, 0.4, 0.2], 11, 4)
        .unwrap();
    let raw = PrCurve::from_counts(
        vec![2.0, 1.0],
        vec![1.0, 0.0],
        vec![0.0, 1.0],
        vec![0.0, 1.0],
        vec![2.0 / 3.0, 1.0],
        vec![1.0, 0.5],
    )
    .unwrap();
    summary.add_pr_curve_raw("pr/raw", raw, 4).unwrap();
    summary
        .add_audio("tone", &[0.0, 0.5, -0.5], 8000, 2)
        .unwrap();
    summary
        .add_custom_scalars(
            CustomScalarLayout::new()
                .category(Category::new("loss").multiline("loss", ["loss/.*"])),
        )
        .unwrap();
    // A prediction outside [0, 1] is refused where it is added, naming the tag.
    match summary.add_pr_curve("pr/bad", &[true], &[1.5], 11, 4) {
        Err(SummaryError::Rejected(e)) => {
            assert_eq!(e.tag.as_str(), "pr/bad");
            assert!(matches!(e.kind, PackErrorKind::InvalidPrCurve(_)));
        }
        other => panic!("{other:?}"),
    }
    summary.close().unwrap();
    let tags = tag_steps(dir.path());
    assert_eq!(tags["pr/0"], [4]);
    assert_eq!(tags["pr/raw"], [4]);
    assert_eq!(tags["tone"], [2]);
    assert_eq!(tags[ember::pack::CUSTOM_SCALARS_TAG], [0]);

    let mi = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(mi.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    let refused = [
        summary.add_pr_curve("pr", &[true], &[0.5], 11, 0),
        summary.add_audio("tone", &[0.0], 8000, 0),
        summary.add_custom_scalars(CustomScalarLayout::new()),
    ];
    for result in refused {
        match result {
            Err(SummaryError::Rejected(e)) => assert!(
                matches!(
                    e.kind,
                    PackErrorKind::Unsupported {
                        format: Format::MindInsight,
                        ..
                    }
                ),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
    }
    summary.close().unwrap();
}
