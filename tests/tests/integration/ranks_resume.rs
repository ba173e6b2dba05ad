//! A job of 2 ranks (threads, `LocalGroup`) with checkpoints: rank 1 fails in the third epoch,
//! which ends the job; started again with `resume_from`, every rank goes on from the same
//! checkpoint (rank 0's, with every rank's part), and the job ends with the parameters and the
//! log (both ranks' files) of a job that never failed. Under `mpirun` with SIGKILL: `cargo xtask
//! mpi`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use burn::optim::AdamConfig;
use burn::tensor::Device;
use ember::collective::{Communicator, LocalGroup};
use ember::read::Summaries;
use ember::{
    CheckpointConfig, RankLayout, SummaryRecord, TrainError, TrainReport, Trainer, TrainerConfig,
};
use ember_tests::{PoisonedLoader, files_under, parameters, regression_loader, seeded_mlp};

/// One rank's part of the job in `dir`: 3 epochs on 2 workers; `fail_in` poisons a batch of
/// rank 1's shard in that epoch; `resume` goes on from the checkpoints.
fn rank(
    comm: ember::collective::LocalComm,
    dir: &Path,
    layout: RankLayout,
    fail_in: Option<usize>,
    resume: bool,
) -> Result<(Vec<f32>, TrainReport), TrainError> {
    let device = Device::flex().autodiff();
    let rank = comm.rank();
    let world = comm.size();
    let checkpoints = dir.join("checkpoints");
    let mut summary = SummaryRecord::builder(dir.join("log"))
        .rank(rank as u32, world as u32)
        .rank_layout(layout)
        .build()
        .unwrap();
    let rows = regression_loader(1, 64, 4, &device);
    // Rows 32..64 are rank 1's shard.
    let train = match fail_in {
        Some(epoch) => PoisonedLoader::in_epoch(rows, 40, epoch, "the node went down"),
        None => rows,
    };
    let mut trainer = Trainer::new(
        vec![device.clone(), device.clone()],
        AdamConfig::new().init(),
        0.02,
        TrainerConfig {
            epochs: 3,
            histogram_every: None,
            checkpoints: Some(CheckpointConfig::new(&checkpoints, 1)),
            ..TrainerConfig::default()
        },
    )
    .communicator(comm);
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

fn job(
    dir: PathBuf,
    layout: RankLayout,
    fail_in: Option<usize>,
    resume: bool,
) -> Vec<Result<(Vec<f32>, TrainReport), TrainError>> {
    job_of(2, dir, layout, fail_in, resume)
}

/// [`job`] of `ranks` ranks.
fn job_of(
    ranks: usize,
    dir: PathBuf,
    layout: RankLayout,
    fail_in: Option<usize>,
    resume: bool,
) -> Vec<Result<(Vec<f32>, TrainReport), TrainError>> {
    let handles: Vec<_> = LocalGroup::ranks(ranks, Duration::from_secs(60))
        .into_iter()
        .map(|comm| {
            let dir = dir.clone();
            thread::spawn(move || rank(comm, &dir, layout, fail_in, resume))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Every scalar series of both ranks' files; of the wall-time-derived ones (each rank's
/// device step times, the speed), the steps alone.
fn series(dir: &Path) -> BTreeMap<String, Vec<(i64, f64)>> {
    let log = dir.join("log");
    let mut dirs = vec![log.clone()];
    for rank in 0..2 {
        let own = log.join(format!("rank_{rank}"));
        if own.is_dir() {
            dirs.push(own);
        }
    }
    dirs.iter()
        .flat_map(|dir| Summaries::read_dir(dir).unwrap().scalars)
        .map(|(tag, points)| {
            let timed = tag.ends_with("_seconds")
                || tag.ends_with("examples_per_second")
                || tag.starts_with("system/");
            let points = points
                .iter()
                .map(|p| (p.step, if timed { 0.0 } else { p.value }))
                .collect();
            (tag, points)
        })
        .collect()
}

#[test]
fn a_job_resumed_after_a_rank_failed_ends_as_one_that_never_failed() {
    resumed_after_a_rank_failed(RankLayout::FileName);
}

/// Before: with a directory a rank, rank 1 owned nothing in its own and was never rolled back,
/// so its series repeated after a resume.
#[test]
fn a_job_with_a_directory_a_rank_is_rolled_back_on_every_rank() {
    resumed_after_a_rank_failed(RankLayout::Directory);
}

fn resumed_after_a_rank_failed(layout: RankLayout) {
    let root = tempfile::tempdir().unwrap();
    let whole = root.path().join("whole");
    let results = job(whole.clone(), layout, None, false);
    let (expected, report) = results[0].as_ref().unwrap().clone();
    assert_eq!(results[1].as_ref().unwrap().0, expected);
    // Across ranks, a checkpoint at each epoch's end: rank 0's and rank 1's part.
    assert_eq!(report.checkpoints_written, 3, "{report:?}");
    let expected_series = series(&whole);

    let failed = root.path().join("failed");
    let results = job(failed.clone(), layout, Some(3), false);
    assert!(results.iter().all(Result::is_err), "the job must fail");
    assert!(
        results[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("the node went down")
    );
    let parts: Vec<String> = std::fs::read_dir(failed.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        parts.iter().any(|n| n.ends_with(".rank1.ember")),
        "{parts:?}"
    );

    // Resumed by a job of more ranks: refused on every rank, before anything is changed.
    let files = files_under(&failed, false);
    for result in job_of(3, failed.clone(), layout, None, true) {
        let error = result.unwrap_err().to_string();
        assert!(
            error.contains("taken by a job of 2 rank(s), this one has 3"),
            "{error}"
        );
    }
    assert_eq!(
        files_under(&failed, false),
        files,
        "a refused resume changed the job's files"
    );

    let results = job(failed.clone(), layout, None, true);
    for (rank, result) in results.iter().enumerate() {
        let (params, report) = result.as_ref().unwrap();
        assert!(
            params
                .iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rank {rank}'s parameters differ"
        );
        let from = report.resumed_from.as_ref().expect("resumed");
        assert!(
            from.to_string_lossy().ends_with("ckpt-000000000002.ember"),
            "rank {rank} resumed from {from:?}"
        );
    }
    assert!(expected_series.contains_key("rank/1/device/1/step_seconds"));
    assert_eq!(series(&failed), expected_series);
}
