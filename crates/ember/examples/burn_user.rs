//! A Burn user's run, start to finish: Burn's own `Learner` with a learning-rate scheduler,
//! ember's `PoolStrategy` running the steps on two workers and `SummaryLogger` writing every
//! metric to TensorBoard files, then ember's typed reader checking what was written against
//! what burn-train itself reports (its `LearnerSummary`, read from its own metric logs).
//!
//! `cargo run -p ember --example burn_user [-- <log dir>]` (default `runs/burn-user-example`)

#![allow(clippy::print_stdout)] // an example reports to its user

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::tensor::Device;
use burn::train::logger::FileMetricLogger;
use burn::train::metric::{LearningRateMetric, LossMetric};
use burn::train::{Learner, LearnerSummary, SupervisedTraining, TrainingStrategy};
use common::{Curve, loader};
use ember::burn_train::{PoolStrategy, SummaryLogger};
use ember::{Reduction, SummaryRecord};

mod common;

const EPOCHS: usize = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let log_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "runs/burn-user-example".into()),
    );
    run(&log_dir)
}

/// Trains, logs under `log_dir`, and checks what ember wrote against burn-train's own figures.
#[expect(
    clippy::too_many_lines,
    reason = "the example users read as one program, top to bottom"
)]
fn run(log_dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let burn_dir = log_dir.join("burn");
    let tensorboard_dir = log_dir.join("tensorboard");
    let device = Device::flex().autodiff();

    // 1024 rows in batches of 32 on 2 workers: 16 optimizer steps an epoch. The scheduler
    // decays the rate linearly from 1e-2 to 1e-3 over the whole run, as Burn's Learner takes it.
    let steps_per_epoch = 1024 / 32 / 2;
    let scheduler = LinearLrSchedulerConfig::new(1e-2, 1e-3, EPOCHS * steps_per_epoch).init()?;
    let strategy = Arc::new(PoolStrategy::new(
        vec![device.clone(), device.clone()],
        Reduction::Mean,
    ));
    let logger = SummaryLogger::new(SummaryRecord::new(&tensorboard_dir)?);
    let logger_errors = logger.errors();

    let result = SupervisedTraining::new(
        &burn_dir,
        loader(1024, 0.0, &device),
        loader(256, 0.5, &device),
    )
    .num_epochs(EPOCHS)
    .metrics((LossMetric::new(),))
    .metric_train_numeric(LearningRateMetric::new())
    .with_application_logger(None)
    // burn's file logger first: its summary (and checkpoints, early stopping) read it back.
    .with_metric_logger(FileMetricLogger::new(&burn_dir))
    .with_metric_logger(logger)
    .with_training_strategy(TrainingStrategy::Custom(strategy))
    .launch(Learner::new(
        Curve::new(&device),
        AdamConfig::new().init(),
        scheduler,
    ));
    if let Some(error) = result.error {
        return Err(format!("training failed: {error}").into());
    }
    if logger_errors.count() > 0 {
        return Err(format!("the summary logger failed: {:?}", logger_errors.last()).into());
    }

    // What burn-train reports: each epoch's mean of its batch values, per split.
    let burn_summary = LearnerSummary::new(&burn_dir, &["Loss", "Learning Rate"])?;
    let burn_epochs = |split: &[burn::train::MetricSummary], name: &str| -> Vec<f64> {
        split
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.entries.iter().map(|e| e.value).collect())
            .unwrap_or_default()
    };
    // What ember wrote, read back with its typed reader.
    let scalars = ember::read::scalars(&tensorboard_dir)?;
    let ember_values = |tag: &str| -> Vec<f64> {
        scalars
            .get(tag)
            .map(|series| series.iter().map(|p| p.value).collect())
            .unwrap_or_default()
    };
    let checks = [
        (
            "valid/loss",
            burn_epochs(&burn_summary.metrics.valid, "Loss"),
        ),
        (
            "train/loss/epoch",
            burn_epochs(&burn_summary.metrics.train, "Loss"),
        ),
        (
            "train/learning_rate/epoch",
            burn_epochs(&burn_summary.metrics.train, "Learning Rate"),
        ),
    ];
    for (tag, burn) in &checks {
        let ember = ember_values(tag);
        if ember.len() != EPOCHS || burn.len() != EPOCHS {
            return Err(format!("{tag}: ember has {ember:?}, burn-train {burn:?}").into());
        }
        for (e, b) in ember.iter().zip(burn) {
            // Both formats store scalars as f32.
            if (e - f64::from(*b as f32)).abs() > 1e-6 * b.abs().max(1.0) {
                return Err(format!("{tag}: ember {e} != burn-train {b}").into());
            }
        }
        println!("{tag}: {ember:?} (equal to burn-train's)");
    }
    // The x-axis is burn's global iteration: validation lands where training had reached.
    let steps: Vec<i64> = scalars["valid/loss"].iter().map(|p| p.step).collect();
    let expected: Vec<i64> = (1..=EPOCHS as i64)
        .map(|e| e * steps_per_epoch as i64 * 2)
        .collect();
    if steps != expected {
        return Err(format!("valid/loss at steps {steps:?}, expected {expected:?}").into());
    }
    let rates = ember_values("train/learning_rate");
    if rates.windows(2).any(|w| w[1] > w[0]) || rates.first() <= rates.last() {
        return Err(format!("the learning rate did not decay: {rates:?}").into());
    }
    println!(
        "wrote summaries under {}; view them with: tensorboard --logdir {}",
        tensorboard_dir.display(),
        tensorboard_dir.display()
    );
    Ok(())
}

// `cargo test -p ember` runs the example (`test = true` in Cargo.toml), so what it shows stays
// true.
#[test]
fn ember_s_values_equal_burn_train_s() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path()).unwrap();
}
