//! A job of 2 ranks (threads, `LocalGroup`) with checkpoints: rank 1 fails in the third epoch,
//! which ends the job; started again with `resume_from`, every rank goes on from the same
//! checkpoint (rank 0's, with every rank's part), and the job ends with the parameters and the
//! log (both ranks' files) of a job that never failed. Under `mpirun` with SIGKILL: `cargo xtask
//! mpi`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

/// How a job trains: `rows` training rows in batches of 4 on `devices` workers a rank (2
/// unless said), 3 epochs; a
/// checkpoint every `every` optimizer steps (and at epoch ends and stops); `fail_in` poisons
/// row 40 (rank 1's shard) in that epoch; `stop_at` raises the stop flag of one rank after one
/// of its steps (rank, global step); `resume` goes on from the checkpoints. `fail_row`, when
/// set, is the row poisoned instead of 40.
#[derive(Clone, Copy)]
struct Plan {
    rows: usize,
    accumulation: usize,
    every: Option<usize>,
    fail_in: Option<usize>,
    stop_at: Option<(usize, i64)>,
    resume: bool,
    fail_row: Option<usize>,
    devices: usize,
}

impl Plan {
    const PLAIN: Plan = Plan {
        rows: 64,
        accumulation: 1,
        every: Some(1),
        fail_in: None,
        stop_at: None,
        resume: false,
        fail_row: None,
        devices: 2,
    };
}

/// What a rank ends with: its parameters, its report, and the first step it trained.
type RankResult = Result<(Vec<f32>, TrainReport, Option<i64>), TrainError>;

/// One rank's part of the job in `dir`.
fn rank(
    comm: ember::collective::LocalComm,
    dir: &Path,
    layout: RankLayout,
    plan: Plan,
) -> RankResult {
    let device = Device::flex().autodiff();
    let rank = comm.rank();
    let world = comm.size();
    let checkpoints = dir.join("checkpoints");
    let mut summary = SummaryRecord::builder(dir.join("log"))
        .rank(rank as u32, world as u32)
        .rank_layout(layout)
        .build()
        .unwrap();
    let rows = regression_loader(1, plan.rows, 4, &device);
    // Rows 32..64 are rank 1's shard.
    let train = match plan.fail_in {
        Some(epoch) => {
            let row = plan.fail_row.unwrap_or(40);
            PoisonedLoader::in_epoch(rows, row, epoch, "the node went down")
        }
        None => rows,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let first_step = Arc::new(Mutex::new(None));
    let (raise, first) = (stop.clone(), first_step.clone());
    let stop_at = plan
        .stop_at
        .filter(|(at, _)| *at == rank)
        .map(|(_, step)| step);
    let mut trainer = Trainer::new(
        vec![device.clone(); plan.devices],
        AdamConfig::new().init(),
        0.02,
        TrainerConfig {
            epochs: 3,
            histogram_every: None,
            grad_accumulation: plan.accumulation,
            checkpoints: Some(CheckpointConfig {
                every: plan.every,
                ..CheckpointConfig::new(&checkpoints, 1)
            }),
            ..TrainerConfig::default()
        },
    )
    .communicator(comm)
    .stop_when(stop)
    .on_step(move |step| {
        first.lock().unwrap().get_or_insert(step.step);
        if Some(step.step) == stop_at {
            raise.store(true, Ordering::Release);
        }
    });
    if plan.resume {
        trainer = trainer.resume_from(&checkpoints);
    }
    let result = trainer.fit(
        seeded_mlp(4, 1, &device),
        train,
        Some(regression_loader(2, 16, 4, &device)),
        Some(&mut summary),
    );
    summary.close().unwrap();
    let first = *first_step.lock().unwrap();
    result.map(|(model, report)| (parameters(&model), report, first))
}

fn job(dir: PathBuf, layout: RankLayout, plan: Plan) -> Vec<RankResult> {
    job_of(2, dir, layout, plan)
}

/// [`job`] of `ranks` ranks.
fn job_of(ranks: usize, dir: PathBuf, layout: RankLayout, plan: Plan) -> Vec<RankResult> {
    let handles: Vec<_> = LocalGroup::ranks(ranks, Duration::from_secs(60))
        .into_iter()
        .map(|comm| {
            let dir = dir.clone();
            thread::spawn(move || rank(comm, &dir, layout, plan))
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
    let results = job(whole.clone(), layout, Plan::PLAIN);
    let (expected, report, _) = results[0].as_ref().unwrap().clone();
    assert_eq!(results[1].as_ref().unwrap().0, expected);
    // Across ranks too, a checkpoint after every optimizer step but each epoch's last (4
    // steps an epoch), and at each epoch's end: rank 0's and rank 1's part.
    assert_eq!(report.checkpoints_written, 3 * 3 + 3, "{report:?}");
    let expected_series = series(&whole);

    let failed = root.path().join("failed");
    let failing = Plan {
        fail_in: Some(3),
        ..Plan::PLAIN
    };
    let results = job(failed.clone(), layout, failing);
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
    let resume = Plan {
        resume: true,
        ..Plan::PLAIN
    };
    for result in job_of(3, failed.clone(), layout, resume) {
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

    let results = job(failed.clone(), layout, resume);
    for (rank, result) in results.iter().enumerate() {
        let (params, report, first_step) = result.as_ref().unwrap();
        assert!(
            params
                .iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rank {rank}'s parameters differ"
        );
        assert!(report.resumed_from.is_some(), "rank {rank} did not resume");
        // Row 40 failed epoch 3's third step (the 11th); every rank went on from the
        // checkpoint of the step before, in the middle of the epoch.
        assert_eq!(*first_step, Some(11), "rank {rank} resumed elsewhere");
    }
    assert!(expected_series.contains_key("rank/1/device/1/step_seconds"));
    assert_eq!(series(&failed), expected_series);
}

/// A stop raised on one rank (as SIGTERM does to `ember train`) ends the job on every rank at
/// one optimizer step, where every rank checkpoints mid-epoch; resumed, the job ends with the
/// parameters and the log of one never stopped. 65 rows: rank 1 has 5 steps an epoch, rank 0
/// 4, and with windows of 2 steps rank 0 joins rank 1's last round with nothing.
#[test]
fn a_job_stopped_on_one_rank_checkpoints_every_rank_mid_epoch_and_resumes_as_never_stopped() {
    let plan = Plan {
        rows: 65,
        accumulation: 2,
        every: None,
        ..Plan::PLAIN
    };
    let root = tempfile::tempdir().unwrap();
    let whole = root.path().join("whole");
    let results = job(whole.clone(), RankLayout::FileName, plan);
    let (expected, _, _) = results[0].as_ref().unwrap().clone();
    let expected_series = series(&whole);
    // (stopping rank, its global step at which the flag goes up, the job's first step after
    // the stop on rank 0 and on rank 1). Rank 1 in the middle of epoch 2's second window:
    // the window ends at step 4 of the epoch on both. Rank 0 at its shard's last step: the
    // stop rides on the round of rank 1's last window, which ends the epoch as well.
    // Rank 1 at its epoch's last step, after the round that ended the epoch: the next epoch's
    // first round carries the stop.
    for (stopper, at, resumed_at) in [
        (1, 7, [9, 10]),
        (0, 8, [9, 11]),
        (1, 1, [3, 3]),
        (1, 5, [7, 8]),
    ] {
        let dir = root.path().join(format!("stopped-{stopper}-{at}"));
        let stopping = Plan {
            stop_at: Some((stopper, at)),
            ..plan
        };
        for (rank, result) in job(dir.clone(), RankLayout::FileName, stopping)
            .iter()
            .enumerate()
        {
            let (_, report, _) = result.as_ref().unwrap();
            assert!(report.interrupted, "rank {rank} was not stopped");
        }
        let resumed = job(
            dir.clone(),
            RankLayout::FileName,
            Plan {
                resume: true,
                ..plan
            },
        );
        for (rank, result) in resumed.iter().enumerate() {
            let (params, _, first_step) = result.as_ref().unwrap();
            assert!(
                params
                    .iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "stopped by rank {stopper} at {at}: rank {rank}'s parameters differ"
            );
            let resumed_at = Some(resumed_at[rank]);
            assert_eq!(
                *first_step, resumed_at,
                "stopped by rank {stopper} at {at}: rank {rank}"
            );
        }
        assert_eq!(
            series(&dir),
            expected_series,
            "stopped by rank {stopper} at {at}"
        );
    }
}

/// A job of 2 ranks goes on with 1 after a crash, then with 2 again: the one rank runs both
/// ranks' shards of the data (4 slices on its 2 devices), with the optimizer state each rank
/// held for its own parameters regrouped into its shards, and sums each rank's slices in a
/// window of their own, the two windows added as the ranks' all-reduce added them; the 2 ranks
/// then split them again. Rank 1's log snapshot rides in the one rank's checkpoints, so that
/// rank 1, back, rolls its files back past the steps of the first crash. The job ends with the
/// parameters of the one that never crashed, bit for bit (under `mpirun`, within float
/// rounding: `cargo xtask mpi`).
#[test]
fn a_job_goes_on_with_fewer_ranks_then_with_all_again_as_if_never_stopped() {
    let root = tempfile::tempdir().unwrap();
    let whole = root.path().join("whole");
    let every_2 = Plan {
        every: Some(2),
        ..Plan::PLAIN
    };
    let results = job(whole.clone(), RankLayout::FileName, every_2);
    let (expected, _, _) = results[0].as_ref().unwrap().clone();
    let expected_series = series(&whole);

    let dir = root.path().join("resharded");
    // Row 44 is the fourth step of rank 1's epoch (4 steps an epoch): epoch 2 fails at step 8,
    // after the checkpoint of step 6 and the records of step 7; then the one rank's epoch 3 at
    // step 12, after the checkpoint of step 10 and its records of step 11.
    let crash = |epoch| Plan {
        fail_in: Some(epoch),
        fail_row: Some(44),
        ..every_2
    };
    let results = job_of(2, dir.clone(), RankLayout::FileName, crash(2));
    assert!(
        results.iter().all(Result::is_err),
        "the 2-rank job must fail"
    );
    let one = job_of(
        1,
        dir.clone(),
        RankLayout::FileName,
        Plan {
            resume: true,
            ..crash(3)
        },
    );
    let error = one[0].as_ref().unwrap_err().to_string();
    assert!(error.contains("the node went down"), "{error}");

    let results = job(
        dir.clone(),
        RankLayout::FileName,
        Plan {
            resume: true,
            ..every_2
        },
    );
    resumed_at_as_never_stopped(&results, 11, &expected);
    // Each step once in every series; the job's own (rank 0's run-level series and both
    // ranks' device times) at the steps of the job that never crashed, but rank 1's, which
    // the one-rank part of the job (steps 7 to 10) has not.
    let got = series(&dir);
    for (tag, points) in &expected_series {
        let steps: Vec<i64> = got.get(tag).map_or(Vec::new(), |points| {
            points.iter().map(|(step, _)| *step).collect()
        });
        let expected_steps: Vec<i64> = points
            .iter()
            .map(|(step, _)| *step)
            .filter(|step| !tag.starts_with("rank/1/") || !(7..=10).contains(step))
            .collect();
        assert_eq!(steps, expected_steps, "{tag}");
    }
}

/// Every rank of the job that ended with `results` went on from a checkpoint, its first step
/// `first`, and ended with the `expected` parameters, bit for bit.
fn resumed_at_as_never_stopped(results: &[RankResult], first: i64, expected: &[f32]) {
    for (rank, result) in results.iter().enumerate() {
        let (params, report, first_step) = result.as_ref().unwrap();
        assert!(report.resumed_from.is_some(), "rank {rank} did not resume");
        assert_eq!(*first_step, Some(first), "rank {rank} resumed elsewhere");
        assert!(
            params
                .iter()
                .zip(expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rank {rank}'s parameters differ from the uninterrupted job's"
        );
    }
}

/// A job of 2 ranks on 1 device each, accumulating 2 steps, goes on after a crash on 2 devices
/// a rank: each rank's devices take its window's two steps at once, their gradients added in
/// step order, then the ranks' as the all-reduce added them. The job ends with the parameters
/// of the one that never crashed, bit for bit, and each step once in every series.
#[test]
fn a_job_of_ranks_goes_on_on_more_devices_each_taking_a_window_s_step() {
    let root = tempfile::tempdir().unwrap();
    let one_device = Plan {
        accumulation: 2,
        every: Some(2),
        devices: 1,
        ..Plan::PLAIN
    };
    let whole = root.path().join("whole");
    let results = job(whole.clone(), RankLayout::FileName, one_device);
    let (expected, _, _) = results[0].as_ref().unwrap().clone();
    let expected_series = series(&whole);

    // 8 steps an epoch a rank; a checkpoint every 4 (2 optimizer steps of 2). Row 52 is the
    // sixth step of rank 1's epoch 2 (the 14th): the job goes on from step 12.
    let dir = root.path().join("spread");
    let crashed = Plan {
        fail_in: Some(2),
        fail_row: Some(52),
        ..one_device
    };
    let results = job(dir.clone(), RankLayout::FileName, crashed);
    assert!(results.iter().all(Result::is_err), "the job must fail");
    let two_devices = Plan {
        devices: 2,
        resume: true,
        ..one_device
    };
    let results = job(dir.clone(), RankLayout::FileName, two_devices);
    resumed_at_as_never_stopped(&results, 13, &expected);
    // Each device's times name the device that took the step: on 2 devices a rank's steps
    // alternate between them. Each step once a rank, over its devices; every other series as
    // the uninterrupted job's.
    let (got, expected_series) = (series(&dir), expected_series);
    let of_devices = |tag: &str| tag.contains("/device/");
    for rank in 0..2 {
        let second = format!("rank/{rank}/device/1/step_seconds");
        assert!(got.contains_key(&second), "rank {rank} went on on 1 device");
    }
    for rank in 0..2 {
        for times in ["step_seconds", "wait_seconds"] {
            let mut steps: Vec<i64> = got
                .iter()
                .filter(|(tag, _)| {
                    tag.starts_with(&format!("rank/{rank}/device/")) && tag.ends_with(times)
                })
                .flat_map(|(_, points)| points.iter().map(|(step, _)| *step))
                .collect();
            steps.sort_unstable();
            assert_eq!(
                steps,
                (1..=24).collect::<Vec<i64>>(),
                "rank {rank}'s {times}"
            );
        }
    }
    let job_series = |series: &BTreeMap<String, Vec<(i64, f64)>>| {
        series
            .iter()
            .filter(|(tag, _)| !of_devices(tag))
            .map(|(tag, points)| (tag.clone(), points.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(job_series(&got), job_series(&expected_series));
    assert!(job_series(&got).contains_key("train/loss"));
}
