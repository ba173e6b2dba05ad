//! The Trainer against what a user's own environment does to a run: its directory deleted and
//! made again, a crafted checkpoint, a caller still saving the model; and its first CPU sample.

use std::path::Path;
use std::time::{Duration, Instant};

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember_tests::{Mlp, files_under, regression_loader};
use ember_write::{DirLock, LockError};

use super::*;
use crate::checkpoint::{CheckpointError, Checkpoints, write_durably};

fn checkpointing(epochs: usize, dir: &Path) -> TrainerConfig {
    TrainerConfig {
        epochs,
        histogram_every: None,
        checkpoints: Some(CheckpointConfig {
            dir: dir.to_path_buf(),
            every: None,
            keep: 2,
        }),
        ..TrainerConfig::default()
    }
}

fn trainer(config: TrainerConfig, device: &Device) -> Trainer<Mlp> {
    Trainer::new(vec![device.clone()], SgdConfig::new().init(), 0.05, config)
}

#[test]
fn the_caller_holds_the_checkpoint_directory_until_it_lets_the_run_go() {
    let device = Device::flex().autodiff();
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("checkpoints");
    let (_, _, run) = trainer(checkpointing(1, &checkpoints), &device)
        .fit_holding_run(
            Mlp::new(4, &device),
            regression_loader(1, 32, 8, &device),
            None,
            None,
        )
        .unwrap();
    let mut run = run.expect("a run with a checkpoint directory comes back");
    run.check_claim().unwrap();
    let me = std::process::id();
    assert_eq!(DirLock::holder(&checkpoints, 0), Some(Some(me)));
    // While the caller saves its model, a resume of the run is refused.
    let refused = trainer(checkpointing(2, &checkpoints), &device)
        .resume_from(&checkpoints)
        .fit(
            Mlp::new(4, &device),
            regression_loader(1, 32, 8, &device),
            None,
            None,
        );
    match refused {
        Err(TrainError::Checkpoint(CheckpointError::Locked(LockError::Held {
            holder, ..
        }))) => {
            assert_eq!(holder, Some(me));
        }
        other => panic!(
            "a resume under the caller's lock got {:?}",
            other.map(|r| r.1)
        ),
    }
    drop(run);
    assert_eq!(DirLock::holder(&checkpoints, 0), None);
}

#[test]
fn a_checkpoint_directory_deleted_and_made_again_stops_the_run_before_it_writes_there() {
    let device = Device::flex().autodiff();
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("checkpoints");
    let taken = checkpoints.clone();
    // Mid-epoch, with no checkpoint being written: the next one is the epoch's end.
    let result = trainer(checkpointing(2, &checkpoints), &device)
        .on_step(move |step| {
            if step.step == 2 {
                std::fs::remove_dir_all(&taken).unwrap();
                std::fs::create_dir(&taken).unwrap();
            }
        })
        .fit(
            Mlp::new(4, &device),
            regression_loader(1, 32, 8, &device),
            None,
            None,
        );
    match result {
        Err(TrainError::Checkpoint(CheckpointError::Locked(error @ LockError::Lost { .. }))) => {
            assert!(
                error.to_string().contains("deleted, replaced or moved"),
                "{error}"
            );
        }
        other => panic!("the run went on with {:?}", other.map(|r| r.1)),
    }
    let left: Vec<_> = std::fs::read_dir(&checkpoints).unwrap().collect();
    assert!(left.is_empty(), "the new directory got {left:?}");
}

#[test]
fn a_checkpoint_past_the_data_is_refused_leaving_every_file_of_the_run_as_it_was() {
    let device = Device::flex().autodiff();
    let dir = tempfile::tempdir().unwrap();
    let (log, checkpoints) = (dir.path().join("log"), dir.path().join("checkpoints"));
    let mut summary = SummaryRecord::new(&log).unwrap();
    trainer(checkpointing(1, &checkpoints), &device)
        .fit(
            Mlp::new(4, &device),
            regression_loader(1, 32, 8, &device),
            None,
            Some(&mut summary),
        )
        .unwrap();
    summary.close().unwrap();
    // The newest checkpoint (at the epoch's end) crafted to lie a million steps into it.
    let newest = Checkpoints::new(&checkpoints, 1).latest().unwrap().unwrap();
    let meta = String::from_utf8(newest.checkpoint.section("meta").unwrap().to_vec()).unwrap();
    let crafted = meta
        .replace("epoch_done=true", "epoch_done=false")
        .replace("step_in_epoch=0", "step_in_epoch=1000000");
    assert_ne!(crafted, meta);
    let name = newest.path.file_name().unwrap().to_str().unwrap();
    let checkpoint = newest.checkpoint.clone().with("meta", crafted.into_bytes());
    write_durably(&checkpoints, name, &checkpoint).unwrap();

    let before = files_under(dir.path(), true);
    // The record opens its event file with its first record: none comes before the refusal.
    let mut summary = SummaryRecord::new(&log).unwrap();
    let refused = trainer(checkpointing(2, &checkpoints), &device)
        .resume_from(&checkpoints)
        .fit(
            Mlp::new(4, &device),
            regression_loader(1, 32, 8, &device),
            None,
            Some(&mut summary),
        );
    match refused {
        Err(TrainError::Checkpoint(CheckpointError::Mismatch { reason, .. })) => {
            assert!(reason.contains("step 1000000 of epoch 1"), "{reason}");
        }
        other => panic!("the crafted resume got {:?}", other.map(|r| r.1)),
    }
    assert_eq!(
        files_under(dir.path(), true),
        before,
        "the refused resume changed the run"
    );
}

#[test]
fn the_first_cpu_sample_of_a_busy_run_is_a_real_one() {
    let device = Device::flex().autodiff();
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    trainer(
        TrainerConfig {
            epochs: 1,
            histogram_every: None,
            // Shorter than sysinfo's minimum between two readings of the CPU's times.
            system_every: Some(Duration::from_millis(100)),
            ..TrainerConfig::default()
        },
        &device,
    )
    // Each step keeps the training thread busy for 100 ms.
    .on_step(|_| {
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_millis(100) {
            std::hint::black_box(busy.elapsed());
        }
    })
    .fit(
        Mlp::new(4, &device),
        regression_loader(1, 128, 8, &device),
        None,
        Some(&mut summary),
    )
    .unwrap();
    summary.close().unwrap();
    let scalars = crate::read::scalars(dir.path()).unwrap();
    // The training thread was busy throughout: about 100 (one core) on an idle machine, and
    // nowhere near 0 on a loaded one.
    let cpu = &scalars["system/cpu_percent"];
    assert!(cpu[0].value > 5.0, "the first sample: {cpu:?}");
}
