//! (With the `object-store` feature.) A job of 2 ranks (threads, `LocalGroup`) whose log is in an object store (a `file://` one,
//! each rank in its own directory) and whose store stops taking rank 1's log for an epoch: that
//! epoch's checkpoint is passed over on every rank, and the next one is whole again, so a
//! resume after a later failure goes on from parts of one step and ends as a job that never
//! failed. Before, rank 0 wrote the checkpoint rank 1 had passed over, under the number rank 1
//! then gave its next epoch's part, and a resume restored rank 1's optimizer from the wrong
//! epoch.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use burn::optim::AdamConfig;
use burn::tensor::Device;
use ember_collective::{Communicator, LocalComm, LocalGroup};
use ember_tests::{PoisonedLoader, parameters, regression_loader, seeded_mlp};

use crate::read::Summaries;
use crate::{
    CheckpointConfig, RankLayout, SummaryRecord, TrainError, TrainReport, Trainer, TrainerConfig,
};

const EPOCHS: usize = 4;

/// What a job meets: rank 1's store down through `outage`'s epoch, rank 1 failing in
/// `fail_in`'s, rank 1 asked to stop after `stop_after`'s step (epoch, step in it), as SIGTERM
/// asks `ember train`.
#[derive(Clone, Copy, Default)]
struct Trouble {
    outage: Option<usize>,
    fail_in: Option<usize>,
    stop_after: Option<(usize, usize)>,
}

/// The job's log: `file://<root>/<run>`, rank 1's files under `rank_1/`.
fn url(root: &Path) -> String {
    format!("file://{}/log", root.display())
}

/// Rank 1's directory in the store moved aside for a file (every upload of rank 1 fails), or
/// moved back.
fn rank_one_store(root: &Path, up: bool) {
    let own = root.join("log/rank_1");
    let aside = root.join("rank_1.aside");
    if up {
        fs::remove_file(&own).unwrap();
        fs::rename(&aside, &own).unwrap();
    } else {
        fs::rename(&own, &aside).unwrap();
        fs::write(&own, b"").unwrap();
    }
}

fn rank(
    comm: LocalComm,
    root: &Path,
    trouble: Trouble,
    resume: bool,
) -> Result<(Vec<f32>, TrainReport), TrainError> {
    let device = Device::flex().autodiff();
    let (rank, world) = (comm.rank(), comm.size());
    let checkpoints = root.join("checkpoints");
    let mut summary = SummaryRecord::builder(url(root))
        .rank(rank as u32, world as u32)
        .rank_layout(RankLayout::Directory)
        .build()
        .unwrap();
    let rows = regression_loader(1, 64, 4, &device);
    // Rows 32..64 are rank 1's shard.
    let train = match trouble.fail_in {
        Some(epoch) => PoisonedLoader::in_epoch(rows, 40, epoch, "the node went down"),
        None => rows,
    };
    let mut trainer = Trainer::new(
        vec![device.clone(), device.clone()],
        AdamConfig::new().init(),
        0.02,
        TrainerConfig {
            epochs: EPOCHS,
            histogram_every: None,
            // Across ranks, a checkpoint at each epoch's end; every one kept.
            checkpoints: Some(CheckpointConfig {
                dir: checkpoints.clone(),
                every: None,
                keep: EPOCHS,
            }),
            ..TrainerConfig::default()
        },
    )
    .communicator(comm);
    let stop = Arc::new(AtomicBool::new(false));
    trainer = trainer.stop_when(stop.clone());
    if rank == 1 {
        let root = root.to_path_buf();
        trainer = trainer.on_step(move |report| {
            let at = (report.epoch, report.step_in_epoch);
            if let Some(outage) = trouble.outage {
                if at == (outage, 1) {
                    rank_one_store(&root, false);
                } else if at == (outage + 1, 1) {
                    rank_one_store(&root, true);
                }
            }
            if trouble.stop_after == Some(at) {
                stop.store(true, Ordering::Release);
            }
        });
    }
    if resume {
        trainer = trainer.resume_from(&checkpoints);
    }
    let result = trainer.fit(
        seeded_mlp(4, 1, &device),
        train,
        Some(regression_loader(2, 16, 4, &device)),
        Some(&mut summary),
    );
    summary.close().unwrap();
    result.map(|(model, report)| (parameters(&model), report))
}

/// A job of `ranks` ranks, each a thread, training into the bucket under `root`.
fn job_of(
    ranks: usize,
    root: PathBuf,
    trouble: Trouble,
    resume: bool,
) -> Vec<Result<(Vec<f32>, TrainReport), TrainError>> {
    let handles: Vec<_> = LocalGroup::ranks(ranks, Duration::from_secs(60))
        .into_iter()
        .map(|comm| {
            let root = root.clone();
            thread::spawn(move || rank(comm, &root, trouble, resume))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Both ranks' scalar series, as the store holds them; of the wall-time-derived ones, the
/// steps alone.
fn series(root: &Path) -> BTreeMap<String, Vec<(i64, f64)>> {
    [url(root), format!("{}/rank_1", url(root))]
        .iter()
        .flat_map(|dir| Summaries::read_dir(dir).unwrap().scalars)
        .map(|(tag, points)| {
            let timed = ember_tests::is_clock_tag(&tag);
            let points = points
                .iter()
                .map(|p| (p.step, if timed { 0.0 } else { p.value }))
                .collect();
            (tag, points)
        })
        .collect()
}

#[test]
fn a_checkpoint_one_rank_s_store_did_not_take_is_passed_over_on_every_rank() {
    let root = tempfile::tempdir().unwrap();
    let whole = root.path().join("whole");
    fs::create_dir_all(whole.join("log")).unwrap();
    let results = job_of(2, whole.clone(), Trouble::default(), false);
    let (expected, report) = results[0].as_ref().unwrap().clone();
    assert_eq!(report.checkpoints_written, EPOCHS, "{report:?}");
    let expected_series = series(&whole);

    // Rank 1's store is down through epoch 2's end, and rank 1 fails in epoch 4.
    let failed = root.path().join("failed");
    fs::create_dir_all(failed.join("log")).unwrap();
    let trouble = Trouble {
        outage: Some(2),
        fail_in: Some(4),
        ..Trouble::default()
    };
    let results = job_of(2, failed.clone(), trouble, false);
    assert!(results.iter().all(Result::is_err), "the job must fail");
    let mut names: Vec<String> = fs::read_dir(failed.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.') && name != crate::run::RECORD_FILE)
        .collect();
    names.sort();
    // Epoch 1's and epoch 3's, each with rank 1's part; epoch 2's number spent on neither.
    assert_eq!(
        names,
        [
            "ckpt-000000000001.ember",
            "ckpt-000000000001.rank1.ember",
            "ckpt-000000000003.ember",
            "ckpt-000000000003.rank1.ember",
        ],
    );

    resumes_as_never_stopped(
        &failed,
        "ckpt-000000000003.ember",
        &expected,
        &expected_series,
    );
}

/// Resumes the job of `root` and asserts that every rank went on from `checkpoint` and ended
/// with the `expected` parameters, bit for bit, and the store with the `expected_series`.
fn resumes_as_never_stopped(
    root: &Path,
    checkpoint: &str,
    expected: &[f32],
    expected_series: &BTreeMap<String, Vec<(i64, f64)>>,
) {
    let results = job_of(2, root.to_path_buf(), Trouble::default(), true);
    for (rank, result) in results.iter().enumerate() {
        let (params, report) = result.as_ref().unwrap();
        let from = report.resumed_from.as_ref().expect("resumed");
        assert!(
            from.to_string_lossy().ends_with(checkpoint),
            "rank {rank} resumed from {from:?}"
        );
        assert!(
            params
                .iter()
                .zip(expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rank {rank}'s parameters differ"
        );
    }
    assert_eq!(&series(root), expected_series);
}

/// A stop on rank 1 in the middle of epoch 2 (SIGTERM to `ember train`): every rank stops
/// after the same step, each writes its part and rank 0 the checkpoint, once the store holds
/// each rank's log up to there; resumed from that checkpoint, the job ends as one never
/// stopped, each step once in the store.
#[test]
fn a_job_stopped_mid_epoch_in_a_bucket_resumes_from_the_stop_as_never_stopped() {
    let root = tempfile::tempdir().unwrap();
    let whole = root.path().join("whole");
    fs::create_dir_all(whole.join("log")).unwrap();
    let results = job_of(2, whole.clone(), Trouble::default(), false);
    let (expected, _) = results[0].as_ref().unwrap().clone();
    let expected_series = series(&whole);

    let stopped = root.path().join("stopped");
    fs::create_dir_all(stopped.join("log")).unwrap();
    let trouble = Trouble {
        stop_after: Some((2, 2)),
        ..Trouble::default()
    };
    for (rank, result) in job_of(2, stopped.clone(), trouble, false)
        .iter()
        .enumerate()
    {
        let (_, report) = result.as_ref().unwrap();
        assert!(report.interrupted, "rank {rank} went on");
        // 4 steps an epoch: stopped after the round of epoch 2's third step.
        assert_eq!(report.steps, 4 + 3, "rank {rank}");
    }
    // A job of 1 rank is refused here, before anything changes: the bucket's rollback tells
    // the ranks' objects by name among as many ranks as wrote them.
    let files = ember_tests::files_under(&stopped, false);
    let refused = job_of(1, stopped.clone(), Trouble::default(), true);
    let error = refused[0].as_ref().unwrap_err().to_string();
    assert!(
        error.contains("goes on only with as many ranks as wrote it"),
        "{error}"
    );
    assert_eq!(ember_tests::files_under(&stopped, false), files);
    // Epoch 1's end, then the stop's.
    resumes_as_never_stopped(
        &stopped,
        "ckpt-000000000002.ember",
        &expected,
        &expected_series,
    );
}
