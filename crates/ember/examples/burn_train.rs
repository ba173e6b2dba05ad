//! burn-train's `SupervisedTraining` on ember's device pool, with every metric written to
//! TensorBoard files: `PoolStrategy` runs the steps on two workers of the flex device and
//! `SummaryLogger` records loss and learning rate per batch and per epoch.
//!
//! `cargo run -p ember --example burn_train [-- <log dir>]` (default `runs/burn-train-example`)

#![allow(clippy::print_stdout)] // an example reports to its user

use std::path::PathBuf;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction as LossReduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::logger::FileMetricLogger;
use burn::train::metric::{LearningRateMetric, LossMetric};
use burn::train::{
    InferenceStep, Learner, RegressionOutput, SupervisedTraining, TrainOutput, TrainStep,
    TrainingStrategy,
};
use ember::SummaryRecord;
use ember::burn_train::{PoolStrategy, SummaryLogger};
use ember::step::burn::Reduction;

/// Learns `y = sin(3x)` on `[-1, 1]`.
#[derive(Module, Debug)]
struct Curve {
    hidden: Linear,
    act: Relu,
    out: Linear,
}

impl Curve {
    fn new(device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(1, 32).init(device),
            act: Relu::new(),
            out: LinearConfig::new(32, 1).init(device),
        }
    }

    fn regression(&self, batch: Points) -> RegressionOutput {
        let output = self
            .out
            .forward(self.act.forward(self.hidden.forward(batch.x)));
        let loss = MseLoss::new().forward(output.clone(), batch.y.clone(), LossReduction::Mean);
        RegressionOutput::new(loss, output, batch.y)
    }
}

impl TrainStep for Curve {
    type Input = Points;
    type Output = RegressionOutput;

    fn step(&self, batch: Points) -> TrainOutput<RegressionOutput> {
        let output = self.regression(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for Curve {
    type Input = Points;
    type Output = RegressionOutput;

    fn step(&self, batch: Points) -> RegressionOutput {
        self.regression(batch)
    }
}

#[derive(Debug, Clone)]
struct Points {
    x: Tensor<2>,
    y: Tensor<2>,
}

#[derive(Clone)]
struct PointBatcher;

impl Batcher<f32, Points> for PointBatcher {
    fn batch(&self, xs: Vec<f32>, device: &Device) -> Points {
        let n = xs.len();
        let ys: Vec<f32> = xs.iter().map(|x| (3.0 * x).sin()).collect();
        Points {
            x: Tensor::from_data(TensorData::new(xs, [n, 1]), device),
            y: Tensor::from_data(TensorData::new(ys, [n, 1]), device),
        }
    }
}

fn loader(points: usize, offset: f32, device: &Device) -> Arc<dyn DataLoader<Points>> {
    let xs: Vec<f32> = (0..points)
        .map(|i| ((i as f32 * 0.618_034 + offset).fract()) * 2.0 - 1.0)
        .collect();
    DataLoaderBuilder::new(PointBatcher)
        .batch_size(32)
        .set_device(device.clone())
        .build(InMemDataset::new(xs))
}

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
    let logger = SummaryLogger::new(SummaryRecord::new(&tensorboard_dir)?);
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
