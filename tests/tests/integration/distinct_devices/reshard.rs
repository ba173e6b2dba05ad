//! A run on two distinct devices goes on on one of them (issue 42's "2 wgpu devices → 1"):
//! the one device runs both data shards' batches of a step one after the other and sums their
//! gradients, where the two devices summed them across devices; the optimizer's state, kept by
//! device, is regrouped onto the one.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use burn::optim::AdamConfig;
use burn::tensor::Device;
use ember::{CheckpointConfig, SummaryRecord, TrainError, TrainReport, Trainer, TrainerConfig};
use ember_tests::{Mlp, max_difference, parameters, regression_loader, seeded_mlp};

use super::{GPU_TOLERANCE, assert_all_on, two_devices};

/// Trains `devices` (the first the main device) in `run`: 3 epochs of 6 pool steps,
/// accumulation over 2, Adam, a checkpoint every 2 optimizer steps; panicking after pool step
/// `crash_at`, resuming from the run's checkpoints when `resume`.
fn fit_on(
    devices: &[Device],
    run: &Path,
    crash_at: Option<usize>,
    resume: bool,
) -> Result<(Mlp, TrainReport), TrainError> {
    let main = devices[0].clone();
    let checkpoints = run.join("checkpoints");
    let mut trainer = Trainer::new(
        devices.to_vec(),
        AdamConfig::new().init(),
        0.02,
        TrainerConfig {
            epochs: 3,
            grad_accumulation: 2,
            histogram_every: None,
            checkpoints: Some(CheckpointConfig {
                dir: checkpoints.clone(),
                every: Some(2),
                keep: 2,
            }),
            ..TrainerConfig::default()
        },
    );
    if let Some(step) = crash_at {
        trainer = trainer.on_step(move |report| {
            if report.step == step as i64 {
                panic!("simulated crash at step {step}");
            }
        });
    }
    if resume {
        trainer = trainer.resume_from(&checkpoints);
    }
    let mut summary = SummaryRecord::new(run).unwrap();
    // A resumed run's model is drawn from another seed: only the checkpoint gives it its
    // parameters.
    let seed = if resume { 2 } else { 1 };
    let result = trainer.fit(
        seeded_mlp(8, seed, &main),
        regression_loader(11, 96, 8, &main),
        Some(regression_loader(12, 24, 8, &main)),
        Some(&mut summary),
    );
    summary.close().unwrap();
    result
}

#[test]
fn a_run_on_two_distinct_devices_goes_on_on_one_within_the_gpu_tolerance() {
    let devices = two_devices();
    let dir = tempfile::tempdir().unwrap();
    let (whole, _) = fit_on(&devices, &dir.path().join("whole"), None, false).unwrap();
    let expected = parameters(&whole);

    let run = dir.path().join("run");
    // Checkpoints at pool steps 4, 6 (the epoch's end), 8, …: the crash at 9 goes on from 8,
    // mid-epoch, on the first device alone.
    let crashed = catch_unwind(AssertUnwindSafe(|| fit_on(&devices, &run, Some(9), false)));
    assert!(crashed.is_err(), "the run on 2 devices did not crash");
    let (model, report) = fit_on(&devices[..1], &run, None, true).unwrap();
    let from = report.resumed_from.expect("resumed");
    assert!(from.ends_with("ckpt-000000000003.ember"), "{from:?}");
    assert_all_on(&model, &devices[0], "the model trained on on one device");
    let difference = max_difference(&parameters(&model), &expected);
    let moved = max_difference(&expected, &parameters(&fit_untrained(&devices[0])));
    eprintln!(
        "2 distinct devices, crashed and gone on on 1, against 2 all through: max |Δparam| = \
         {difference:e} (training moved parameters by up to {moved:e})"
    );
    assert!(
        moved > 1e-2,
        "training did not move the parameters: {moved}"
    );
    assert!(
        difference < GPU_TOLERANCE,
        "going on on 1 device differs from 2 all through by {difference}"
    );
}

/// A run begun on the first device alone cannot go on on both: its batches are drawn on the
/// first, where the second device cannot read them (on CPU devices, one memory, it can). The
/// resume is refused before anything changes.
#[test]
fn a_run_on_one_device_is_refused_a_second_distinct_device_and_left_as_it_was() {
    let devices = two_devices();
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // 12 pool steps an epoch on one device; checkpoints at 4, 8: the crash at 9 leaves 8.
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        fit_on(&devices[..1], &run, Some(9), false)
    }));
    assert!(crashed.is_err(), "the run on 1 device did not crash");
    let files = ember_tests::files_under(&run, false);
    let error = fit_on(&devices, &run, None, true).unwrap_err().to_string();
    assert!(
        error.contains("devices 0 and 1 would run") && error.contains("one memory"),
        "{error}"
    );
    assert_eq!(
        ember_tests::files_under(&run, false),
        files,
        "a refused resume changed the run's files"
    );
}

/// The model the runs start from, untrained.
fn fit_untrained(main: &Device) -> Mlp {
    seeded_mlp(8, 1, main)
}
