//! The small Burn model and data the examples share: a regression of `y = sin(3x)`.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::{InferenceStep, RegressionOutput, TrainOutput, TrainStep};

/// Learns `y = sin(3x)` on `[-1, 1]`.
#[derive(Module, Debug)]
pub(crate) struct Curve {
    hidden: Linear,
    act: Relu,
    out: Linear,
}

impl Curve {
    pub(crate) fn new(device: &Device) -> Self {
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
pub(crate) struct Points {
    x: Tensor<2>,
    y: Tensor<2>,
}

#[derive(Clone)]
pub(crate) struct PointBatcher;

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

pub(crate) fn loader(points: usize, offset: f32, device: &Device) -> Arc<dyn DataLoader<Points>> {
    let xs: Vec<f32> = (0..points)
        .map(|i| ((i as f32 * 0.618_034 + offset).fract()) * 2.0 - 1.0)
        .collect();
    DataLoaderBuilder::new(PointBatcher)
        .batch_size(32)
        .set_device(device.clone())
        .build(InMemDataset::new(xs))
}
