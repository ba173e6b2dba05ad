//! The Trainer's hooks, stop flag and reports on a small seeded model.

use std::sync::{Arc, Mutex};

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember_tests::{Mlp, parameters, regression_loader};

use super::*;

#[test]
fn hooks_see_every_step_and_every_epoch_with_the_trained_model() {
    let device = Device::flex().autodiff();
    let steps = Arc::new(Mutex::new(Vec::new()));
    let epochs = Arc::new(Mutex::new(Vec::new()));
    let (seen_steps, seen_epochs) = (steps.clone(), epochs.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let (model, report) = Trainer::new(
        vec![device.clone(), device.clone()],
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs: 2,
            histogram_every: None,
            ..TrainerConfig::default()
        },
    )
    .on_step(move |step| {
        seen_steps
            .lock()
            .unwrap()
            .push((step.epoch, step.step_in_epoch, step.step, step.examples));
        assert!(step.loss.is_finite() && step.examples_per_second > 0.0);
    })
    .on_epoch(move |model: &Mlp, epoch, step, summary| {
        assert!(summary.is_some());
        seen_epochs
            .lock()
            .unwrap()
            .push((epoch.epoch, step, parameters(model)));
        Ok(())
    })
    .fit(
        Mlp::new(4, &device),
        regression_loader(1, 64, 8, &device),
        None,
        Some(&mut summary),
    )
    .unwrap();
    summary.close().unwrap();

    // 64 rows in batches of 8 over 2 workers: 4 steps per epoch, 16 examples a step.
    let steps = steps.lock().unwrap().clone();
    let expected: Vec<_> = (1..=8usize)
        .map(|s| {
            (
                (s - 1) / 4 + 1,
                (s - 1) % 4 + 1,
                s as i64,
                16 * ((s - 1) % 4 + 1),
            )
        })
        .collect();
    assert_eq!(steps, expected);
    let epochs = epochs.lock().unwrap();
    assert_eq!(
        epochs.iter().map(|(e, s, _)| (*e, *s)).collect::<Vec<_>>(),
        [(1, 4), (2, 8)]
    );
    assert_eq!(report.steps, 8);
    // The last epoch's hook saw the model fit returned; the first saw an earlier one.
    assert_eq!(epochs[1].2, parameters(&model));
    assert_ne!(epochs[0].2, parameters(&model));
}

#[test]
fn an_epoch_hook_error_stops_training() {
    let device = Device::flex().autodiff();
    let result = Trainer::new(
        vec![device.clone()],
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs: 3,
            ..TrainerConfig::default()
        },
    )
    .on_epoch(|_: &Mlp, _, _, _| Err(SummaryError::Closed))
    .fit(
        Mlp::new(4, &device),
        regression_loader(1, 16, 8, &device),
        None,
        None,
    );
    assert!(matches!(
        result,
        Err(TrainError::Summary(SummaryError::Closed))
    ));
}

#[test]
fn the_optimizer_is_split_over_the_cpu_workers() {
    let device = Device::flex().autodiff();
    for workers in [1, 2, 3] {
        let trainer = Trainer::<Mlp>::new(
            vec![device.clone(); workers],
            SgdConfig::new().init(),
            0.05,
            TrainerConfig::default(),
        );
        assert_eq!(trainer.optimizer.len(), workers);
    }
}

/// `resume_if_any`, the one call a requeued job makes: a fresh start where the directory holds
/// nothing, the crashed run gone on with, its finished run handed back untrained, another
/// model's run refused.
#[test]
fn resume_if_any_starts_goes_on_hands_back_a_finished_run_and_refuses_another_model() {
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use burn::optim::AdamConfig;
    use ember_tests::{seeded_mlp, shuffled_loader};

    let device = Device::flex().autodiff();
    let root = tempfile::tempdir().unwrap();
    let fit = |run: &str, crash_at: Option<i64>, hidden: usize| {
        let checkpoints = root.path().join(run).join("checkpoints");
        let mut trainer = Trainer::new(
            vec![device.clone(), device.clone()],
            AdamConfig::new().init(),
            0.05,
            TrainerConfig {
                epochs: 2,
                histogram_every: None,
                checkpoints: Some(CheckpointConfig::new(&checkpoints, 2)),
                ..TrainerConfig::default()
            },
        )
        .resume_if_any(&checkpoints);
        if let Some(step) = crash_at {
            trainer = trainer.on_step(move |report| {
                assert!(report.step != step, "simulated crash at step {step}");
            });
        }
        let mut summary = SummaryRecord::new(root.path().join(run)).unwrap();
        let result = trainer.fit(
            seeded_mlp(hidden, 7, &device),
            shuffled_loader(96, true, &device),
            None,
            Some(&mut summary),
        );
        summary.close().unwrap();
        result.map(|(model, report)| (parameters(&model), report))
    };
    let (expected, report) = fit("whole", None, 4).unwrap();
    assert!(report.resumed_from.is_none(), "{report:?}");

    let crashed = catch_unwind(AssertUnwindSafe(|| fit("run", Some(5), 4)));
    assert!(crashed.is_err());
    let (resumed, report) = fit("run", None, 4).unwrap();
    assert!(report.resumed_from.is_some(), "{report:?}");
    assert_eq!(resumed, expected);

    let (again, finished) = fit("run", None, 4).unwrap();
    assert_eq!(again, expected);
    assert_eq!(finished.steps, report.steps);

    match fit("run", None, 8) {
        Err(TrainError::Checkpoint(crate::checkpoint::CheckpointError::Mismatch {
            reason,
            ..
        })) if reason.contains("the model changed") => {}
        other => panic!("another model was let in: {:?}", other.map(|(_, r)| r)),
    }
}
