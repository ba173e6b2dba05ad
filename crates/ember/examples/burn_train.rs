//! burn-train's `SupervisedTraining` on ember's device pool, with every metric written to
//! TensorBoard files: `PoolStrategy` runs the steps on two workers of the flex device and
//! `SummaryLogger` records loss and learning rate per batch and per epoch.
//!
//! `cargo run -p ember --example burn_train [-- <log dir>]` (default `runs/burn-train-example`)

#![allow(clippy::print_stdout)] // an example reports to its user

use std::path::PathBuf;
use std::sync::Arc;

use burn::optim::AdamConfig;
use burn::tensor::Device;
use burn::train::logger::FileMetricLogger;
use burn::train::metric::{LearningRateMetric, LossMetric};
use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
use common::{Curve, loader};
use ember::SummaryRecord;
use ember::burn_train::{PoolStrategy, SummaryLogger};
use ember::step::burn::Reduction;

mod common;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let log_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "runs/burn-train-example".into()),
    );
    let burn_dir = log_dir.join("burn");
    let tensorboard_dir = log_dir.join("tensorboard");
    let device = Device::flex().autodiff();

    // Keep a handle on the strategy and the logger's errors: burn takes both.
    let strategy = Arc::new(PoolStrategy::new(
        vec![device.clone(), device.clone()],
        Reduction::Mean,
    ));
    // With MLFLOW_TRACKING_URI set, every metric goes to MLflow as well.
    let record = SummaryRecord::builder(&tensorboard_dir)
        .mlflow_from_env()?
        .build()?;
    let logger = SummaryLogger::new(record);
    let logger_errors = logger.errors();

    let result = SupervisedTraining::new(
        &burn_dir,
        loader(1024, 0.0, &device),
        loader(256, 0.5, &device),
    )
    .num_epochs(3)
    .metrics((LossMetric::new(),))
    .metric_train_numeric(LearningRateMetric::new())
    .with_application_logger(None)
    // burn's file logger first: checkpoints and early stopping read metrics back through it.
    .with_metric_logger(FileMetricLogger::new(&burn_dir))
    .with_metric_logger(logger)
    .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
    .launch(Learner::new(
        Curve::new(&device),
        AdamConfig::new().init(),
        1e-2,
    ));

    if let Some(error) = result.error {
        return Err(format!("training failed: {error}").into());
    }
    if logger_errors.count() > 0 {
        return Err(format!(
            "{} summary writes failed, the last: {}",
            logger_errors.count(),
            logger_errors.last().unwrap_or_default()
        )
        .into());
    }
    println!(
        "TensorBoard summaries under {}; view them with: tensorboard --logdir {}",
        tensorboard_dir.display(),
        tensorboard_dir.display()
    );
    println!("burn's metric logs under {}", burn_dir.display());
    Ok(())
}
