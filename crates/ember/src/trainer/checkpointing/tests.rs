use super::meta::{Fields, decode_meta};
use super::*;
use crate::EpochReport;

#[test]
fn the_meta_section_reads_back_exactly() {
    let mut state = RunState {
        latest_train_loss: Some(0.1 + 0.2),
        learning_rate: Some(f64::NAN),
        batch_size: Some(8),
        train_examples: None,
        valid_examples: Some(3),
        ..RunState::default()
    };
    state.report.summary_errors = 4;
    state.report.epochs.push(EpochReport {
        epoch: 1,
        train_loss: 1.0 / 3.0,
        train_accuracy: None,
        valid_loss: Some(f64::INFINITY),
        valid_accuracy: Some(0.5),
        examples_per_second: 1e9,
    });
    let position = Position {
        epoch: 2,
        epoch_done: false,
        step_in_epoch: 3,
        totals: EpochTotals {
            loss_sum: 2.5e-300,
            loss_count: 6,
            examples: 48,
            correct: 7,
            judged: 9,
        },
    };
    let identity = one_rank_on_two_devices();
    state.report.log_gaps = vec![crate::LogGap { from: 3, to: 7 }];
    let text = with_lost_records(
        encode_meta(&position, 11, 5, &state, &identity),
        Some(9),
        11,
    );
    let fields = Fields::parse(&text);
    assert_eq!(identity.mismatch(&fields), None);
    let (p, steps, updates, s) = decode_meta(&fields).unwrap();
    assert_eq!((p, steps, updates), (position.clone(), 11, 5));
    // The gap this run had is noted in its log already; the one it has now, from step 9 to
    // the checkpoint's, is for the resume to note.
    let lost = crate::LogGap { from: 9, to: 11 };
    assert_eq!(s.report.log_gaps, [crate::LogGap { from: 3, to: 7 }, lost]);
    assert_eq!(s.unnoted_log_gaps, [lost]);
    assert_eq!(s.latest_train_loss, Some(0.1 + 0.2));
    assert!(s.learning_rate.unwrap().is_nan());
    assert_eq!(
        (s.batch_size, s.train_examples, s.valid_examples),
        (Some(8), None, Some(3))
    );
    assert_eq!(s.report.epochs, state.report.epochs);
    assert_eq!(s.report.summary_errors, 4);
}

/// A run of one rank on 2 devices, accumulating 2 steps, of a model of two parameters.
fn one_rank_on_two_devices() -> Identity {
    Identity {
        devices: 2,
        ranks: 1,
        data_ranks: 1,
        grad_accumulation: 2,
        reduction: "mean",
        model: "a.weight:6,a.bias:2".into(),
        run: None,
        settings: crate::run::Settings::new(),
        format: None,
    }
}

/// A job goes on with fewer ranks that divide the ones it began with, on devices that divide
/// the slices each then runs; not with more ranks.
#[test]
fn a_job_goes_on_with_fewer_ranks_that_divide_the_ones_it_began_with() {
    let position = Position::within(2, 3, EpochTotals::default());
    let state = RunState::default();
    let identity = one_rank_on_two_devices();
    let text = encode_meta(&position, 11, 5, &state, &identity);
    let fields = Fields::parse(&text);
    let more_ranks = Identity {
        ranks: 2,
        ..identity.clone()
    };
    let refused = more_ranks.mismatch(&fields).unwrap();
    assert!(
        refused.contains("a job of 1 rank(s), this one has 2") && refused.contains("not with more"),
        "{refused}"
    );
    // A job of 4 ranks on 2 devices each goes on with 2 ranks (each runs 2 ranks' data, 4
    // shards, on its 2 or 1 devices) or 1, not 3; and on 3 devices nowhere.
    let of_four = Identity {
        ranks: 4,
        data_ranks: 4,
        ..identity.clone()
    };
    let fields_of_four = encode_meta(&position, 11, 5, &state, &of_four);
    let fields_of_four = Fields::parse(&fields_of_four);
    for (ranks, devices, goes_on) in [
        (2, 2, true),
        (2, 1, true),
        (1, 2, true),
        (3, 2, false),
        (2, 3, false),
    ] {
        let resumed = Identity {
            ranks,
            devices,
            ..identity.clone()
        };
        assert_eq!(
            resumed.mismatch(&fields_of_four).is_none(),
            goes_on,
            "{ranks} rank(s) of {devices} device(s): {:?}",
            resumed.mismatch(&fields_of_four)
        );
    }
}

/// What a checkpoint takes on the training thread is the step's state, shared with Burn:
/// the steps after it (Adam's, which the backend may do in place where it can) leave what
/// the checkpoint thread reads later as it was.
#[test]
fn a_snapshot_is_unchanged_by_the_steps_after_it() {
    use burn::optim::{AdamConfig, GradientsParams};
    use burn::tensor::{Device, Tensor};

    let device = Device::flex().autodiff();
    let mut model = ember_tests::seeded_mlp(32, 7, &device);
    let mut optimizer = AdamConfig::new().init();
    let x = Tensor::<2>::ones([4, 2], &device);
    let step = |model: ember_tests::Mlp, optimizer: &mut ModuleOptimizer| {
        let grads = GradientsParams::from_grads(model.forward(x.clone()).sum().backward(), &model);
        optimizer.step(1e-2, model, grads)
    };
    model = step(model, &mut optimizer);
    let bytes = |model: ember_tests::Mlp, optimizer: &ModuleOptimizer| {
        let model = model.into_record().into_bytes().unwrap();
        let optimizer = optimizer.to_record().into_bytes().unwrap();
        (model.to_vec(), optimizer.to_vec())
    };
    let at_the_step = bytes(model.clone(), &optimizer);
    let (shared_model, shared_optimizer) = (model.clone(), optimizer.clone());
    for _ in 0..3 {
        model = step(model, &mut optimizer);
    }
    assert_ne!(
        bytes(model, &optimizer),
        at_the_step,
        "the steps changed nothing"
    );
    assert_eq!(bytes(shared_model, &shared_optimizer), at_the_step);
}

/// A checkpoint taken while one is still being written goes out beside it; the next waits
/// only for the oldest, then training goes on with one in flight; every one is written.
#[test]
fn a_second_checkpoint_is_written_beside_the_first_and_a_third_waits_for_the_oldest() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let config = CheckpointConfig::new(dir.path().join("checkpoints"), 1);
    let mut checkpointer =
        Checkpointer::new(&config, Checkpoints::new(&config.dir, config.keep), &[]).unwrap();
    // Each checkpoint's thread waits for its own release.
    let mut releases = Vec::new();
    let mut taken = |checkpointer: &mut Checkpointer| {
        checkpointer.make_room().unwrap();
        releases.push(held_checkpoint(checkpointer));
    };
    taken(&mut checkpointer);
    taken(&mut checkpointer);
    assert_eq!(checkpointer.in_flight.len(), 2, "the second did not wait");

    let first_done = Arc::new(AtomicBool::new(false));
    let release_first = releases[0].clone();
    let done = Arc::clone(&first_done);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        done.store(true, Ordering::SeqCst);
        release_first.send(()).unwrap();
    });
    checkpointer.make_room().unwrap();
    assert!(
        first_done.load(Ordering::SeqCst),
        "a third went out before the oldest was written"
    );
    assert_eq!((checkpointer.in_flight.len(), checkpointer.written), (1, 1));
    releaser.join().unwrap();

    releases[1].send(()).unwrap();
    checkpointer.wait().unwrap();
    assert_eq!(checkpointer.written, 2);
    let names: Vec<String> = std::fs::read_dir(dir.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".ember"))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// A run that fails with a checkpoint still being written finishes it before the run's lock
/// is released (the checkpointer's drop waits for it): a resume right after, in the same
/// process, must not meet that checkpoint landing under the number it took for its own.
#[test]
fn a_run_that_ends_early_finishes_the_checkpoint_it_was_writing() {
    let dir = tempfile::tempdir().unwrap();
    let config = CheckpointConfig::new(dir.path().join("checkpoints"), 1);
    let mut checkpointer =
        Checkpointer::new(&config, Checkpoints::new(&config.dir, config.keep), &[]).unwrap();
    let release = held_checkpoint(&mut checkpointer);
    // The run fails: its checkpointer is dropped with the checkpoint in flight.
    let ended = std::thread::spawn(move || drop(checkpointer));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        !ended.is_finished(),
        "the run ended before its checkpoint was written"
    );
    release.send(()).unwrap();
    ended.join().unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with(".ember-lock"))
        .collect();
    assert_eq!(names, ["ckpt-000000000001.ember"]);
}

/// Hands `checkpointer` a checkpoint whose thread waits until the sender returned releases it.
fn held_checkpoint(checkpointer: &mut Checkpointer) -> std::sync::mpsc::Sender<()> {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    checkpointer
        .write_in_background(move || {
            released.lock().unwrap().recv().unwrap();
            Ok(Checkpoint::new().with("meta", b"m".to_vec()))
        })
        .unwrap();
    release
}
