//! The one data-parallel driver under the Trainer and burn-train's PoolStrategy: validation
//! that fails loudly, and the two callers training alike.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use burn::optim::SgdConfig;
use burn::tensor::Device;
use burn::train::logger::FileMetricLogger;
use burn::train::metric::LossMetric;
use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
use ember::burn_train::PoolStrategy;
use ember::{Reduction, TrainError, Trainer, TrainerConfig, ValidationError};
use ember_tests::{
    Mlp, PoisonedLoader, max_difference, parameters, regression_loader, regression_rows,
    rows_loader,
};

const LR: f64 = 0.05;

fn device() -> Device {
    Device::flex().autodiff()
}

fn trainer(devices: usize, epochs: usize) -> Trainer<Mlp> {
    Trainer::new(
        vec![device(); devices],
        SgdConfig::new().init(),
        LR,
        TrainerConfig {
            epochs,
            histogram_every: None,
            ..TrainerConfig::default()
        },
    )
}

/// Runs `f` on its own thread; a hang fails the test after a minute instead of hanging CI.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("did not return within a minute")
}

#[test]
fn a_validation_loader_error_ends_fit_with_a_typed_error_at_that_batch() {
    // Before: the Trainer iterated `valid.iter().flatten()`; burn's iterator gives the same Err
    // again and again, so fit() never returned (a busy loop), and errors were ignored anyway.
    let result = within_a_minute(|| {
        let device = device();
        let valid = PoisonedLoader::failing(regression_loader(2, 32, 8, &device), 10, "disk gone");
        trainer(2, 2)
            .fit(
                Mlp::new(8, &device),
                regression_loader(1, 64, 8, &device),
                Some(valid),
                None,
            )
            .map(|(_, report)| report)
    });
    match result {
        Err(TrainError::Validation {
            epoch: 1,
            source:
                ValidationError::Source {
                    device: 0,
                    batch: 2,
                    message,
                },
        }) => assert!(message.contains("disk gone"), "{message}"),
        other => panic!("expected validation batch 2 to fail, got {other:?}"),
    }
}

#[test]
fn a_panicking_validation_step_names_the_device_and_the_batch() {
    // Before: the panic escaped fit() on the caller's thread, naming no device.
    let device = device();
    let valid = PoisonedLoader::wrap(regression_loader(2, 32, 8, &device), 20, "bad weights");
    let result = trainer(2, 1).fit(
        Mlp::new(8, &device),
        regression_loader(1, 64, 8, &device),
        Some(valid),
        None,
    );
    match result {
        Err(TrainError::Validation {
            epoch: 1,
            source:
                ValidationError::Panicked {
                    device: 0,
                    batch: 3,
                    message,
                },
        }) => assert_eq!(message, "bad weights"),
        other => panic!(
            "expected validation batch 3 to panic, got {:?}",
            other.map(|_| ())
        ),
    }
}

#[test]
fn the_pool_strategy_reports_a_validation_failure_too() {
    let (error, failure) = within_a_minute(|| {
        let device = device();
        let dir = tempfile::tempdir().unwrap();
        let strategy = Arc::new(PoolStrategy::new(vec![device.clone(); 2], Reduction::Mean));
        let result = SupervisedTraining::new(
            dir.path(),
            regression_loader(1, 64, 8, &device),
            PoisonedLoader::failing(regression_loader(2, 32, 8, &device), 10, "disk gone"),
        )
        .num_epochs(2)
        .metrics((LossMetric::new(),))
        .with_application_logger(None)
        .with_metric_logger(FileMetricLogger::new(dir.path()))
        .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
        .launch(Learner::new(
            Mlp::new(8, &device),
            SgdConfig::new().init(),
            LR,
        ));
        (
            result.error.map(|e| e.to_string()),
            strategy.take_error().map(|e| e.to_string()),
        )
    });
    let error = error.expect("training should fail");
    assert!(error.contains("validation batch 2 on device 0"), "{error}");
    let failure = failure.expect("the strategy keeps its typed error");
    assert!(
        failure.starts_with("validation of epoch 1 failed"),
        "{failure}"
    );
}

#[test]
fn the_trainer_and_the_pool_strategy_train_to_identical_parameters() {
    // Both run the same driver: same split, same device-ordered mean, same optimizer steps.
    let device = device();
    let model = Mlp::new(8, &device);
    let (trained, _) = trainer(2, 2)
        .fit(
            model.clone(),
            regression_loader(1, 64, 8, &device),
            None,
            None,
        )
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let strategy = Arc::new(PoolStrategy::new(vec![device.clone(); 2], Reduction::Mean));
    let result = SupervisedTraining::new(
        dir.path(),
        regression_loader(1, 64, 8, &device),
        regression_loader(2, 16, 8, &device),
    )
    .num_epochs(2)
    .metrics((LossMetric::new(),))
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(dir.path()))
    .with_training_strategy(TrainingStrategy::Custom(strategy))
    .launch(Learner::new(model.clone(), SgdConfig::new().init(), LR));
    assert!(
        result.error.is_none(),
        "{:?}",
        result.error.map(|e| e.to_string())
    );
    assert_ne!(
        parameters(&trained),
        parameters(&model),
        "training changed the model"
    );
    assert_eq!(parameters(&trained), parameters(&result.model));
}

#[test]
fn n_workers_with_mean_reduction_train_like_one_device_on_the_concatenated_batch() {
    let device = device();
    let model = Mlp::new(8, &device);
    const ROWS: usize = 64;
    const BATCH: usize = 8;
    let rows = regression_rows(5, ROWS);
    for workers in [1usize, 2, 4] {
        let (parallel, _) = trainer(workers, 2)
            .fit(
                model.clone(),
                rows_loader(rows.clone(), BATCH, &device),
                None,
                None,
            )
            .unwrap();
        // Device i trains on rows [i·R/N, (i+1)·R/N); step k takes the k-th batch of each. One
        // device sees the same rows step by step, concatenated in device order.
        let slice = ROWS / workers;
        let mut concatenated = Vec::with_capacity(ROWS);
        for step in 0..slice / BATCH {
            for worker in 0..workers {
                let start = worker * slice + step * BATCH;
                concatenated.extend_from_slice(&rows[start..start + BATCH]);
            }
        }
        let (single, _) = trainer(1, 2)
            .fit(
                model.clone(),
                rows_loader(concatenated, BATCH * workers, &device),
                None,
                None,
            )
            .unwrap();
        let difference = max_difference(&parameters(&parallel), &parameters(&single));
        assert!(difference < 1e-5, "{workers} workers: {difference}");
    }
}
