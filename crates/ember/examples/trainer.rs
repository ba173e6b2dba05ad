//! The Trainer: data-parallel training of a small Burn model on two workers of the flex device,
//! with summaries recorded as it goes.
//!
//! `cargo run -p ember --example trainer [-- <log dir>]`

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::{InferenceStep, RegressionOutput, TrainOutput, TrainStep};
use ember::{SummaryRecord, Trainer, TrainerConfig};

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
        let loss = MseLoss::new().forward(output.clone(), batch.y.clone(), Reduction::Mean);
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
    let log_dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "runs/trainer-example".into());
    let device = Device::flex().autodiff();
    let mut summary = SummaryRecord::new(&log_dir)?;
    let trainer = Trainer::new(
        vec![device.clone(), device.clone()],
        AdamConfig::new().init(),
        1e-2,
        TrainerConfig {
            epochs: 5,
            histogram_every: Some(20),
            ..TrainerConfig::default()
        },
    );
    let (_model, report) = trainer.fit(
        Curve::new(&device),
        loader(2048, 0.0, &device),
        Some(loader(256, 0.5, &device)),
        Some(&mut summary),
    )?;
    summary.close()?;
    for epoch in &report.epochs {
        println!(
            "epoch {}: train loss {:.4}, valid loss {:.4}, {:.0} examples/s",
            epoch.epoch,
            epoch.train_loss,
            epoch.valid_loss.unwrap_or(f64::NAN),
            epoch.examples_per_second
        );
    }
    println!("summaries under {log_dir}; view them with: tensorboard --logdir {log_dir}");
    Ok(())
}
