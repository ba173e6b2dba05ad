//! ember: observable, robust multi-device training with Burn.
//!
//! This facade (layer L2) joins ember's two halves, the device worker pool (`ember-pool`) and
//! the summary writers (`ember-write`), and reaches the layer below them through their
//! re-exports: [`step`] (the step protocol) and [`pack`] (the summary data model).
//!
//! There are three ways in.
//!
//! **1. Record summaries** with [`SummaryRecord`]: MindSpore's `add_value` / `record(step)` API
//! and tensorboardX's one-call methods, writing TensorBoard or MindInsight files.
//!
//! ```
//! use ember::SummaryRecord;
//!
//! let dir = tempfile::tempdir()?;
//! let mut summary = SummaryRecord::new(dir.path())?;
//! for step in 0..10 {
//!     summary.add_scalar("loss", 1.0 / (step as f64 + 1.0), step)?;
//! }
//! summary.add_histogram("weights", vec![0.1f32, -0.3, 0.7, 0.2], 10)?;
//! summary.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **2. Train on several devices** with [`Trainer`]: data-parallel epochs over a Burn model on
//! ember's pool, recording losses, learning rate, throughput, per-device step times, weight and
//! gradient histograms, hyper-parameters and the model graph as it goes.
//!
//! ```
//! # use std::sync::Arc;
//! # use burn::data::dataloader::{DataLoader, DataLoaderBuilder, batcher::Batcher};
//! # use burn::data::dataset::InMemDataset;
//! # use burn::module::Module;
//! # use burn::nn::{Linear, LinearConfig, loss::{MseLoss, Reduction}};
//! # use burn::tensor::{Device, Tensor, TensorData};
//! # use burn::train::{InferenceStep, RegressionOutput, TrainOutput, TrainStep};
//! # #[derive(Module, Debug)]
//! # struct Line { linear: Linear }
//! # #[derive(Debug, Clone)]
//! # struct Xy { x: Tensor<2>, y: Tensor<2> }
//! # impl Line {
//! #     fn out(&self, b: Xy) -> RegressionOutput {
//! #         let o = self.linear.forward(b.x);
//! #         RegressionOutput::new(MseLoss::new().forward(o.clone(), b.y.clone(), Reduction::Mean), o, b.y)
//! #     }
//! # }
//! # impl TrainStep for Line {
//! #     type Input = Xy; type Output = RegressionOutput;
//! #     fn step(&self, b: Xy) -> TrainOutput<RegressionOutput> { let o = self.out(b); TrainOutput::new(self, o.loss.backward(), o) }
//! # }
//! # impl InferenceStep for Line {
//! #     type Input = Xy; type Output = RegressionOutput;
//! #     fn step(&self, b: Xy) -> RegressionOutput { self.out(b) }
//! # }
//! # #[derive(Clone)] struct Rows;
//! # impl Batcher<f32, Xy> for Rows {
//! #     fn batch(&self, xs: Vec<f32>, d: &Device) -> Xy {
//! #         let n = xs.len(); let ys: Vec<f32> = xs.iter().map(|x| 2.0 * x + 1.0).collect();
//! #         Xy { x: Tensor::from_data(TensorData::new(xs, [n, 1]), d), y: Tensor::from_data(TensorData::new(ys, [n, 1]), d) }
//! #     }
//! # }
//! # let device = Device::flex().autodiff();
//! # let loader: Arc<dyn DataLoader<Xy>> = DataLoaderBuilder::new(Rows).batch_size(8)
//! #     .set_device(device.clone()).build(InMemDataset::new((0..64).map(|i| i as f32 / 64.0).collect()));
//! # let model = Line { linear: LinearConfig::new(1, 1).init(&device) };
//! use ember::{SummaryRecord, Trainer, TrainerConfig};
//! use burn::optim::SgdConfig;
//!
//! // `model` is any burn-train model (TrainStep + InferenceStep) whose output carries a loss;
//! // `loader` a burn data loader. Two workers on the same flex device:
//! let dir = tempfile::tempdir()?;
//! let mut summary = SummaryRecord::new(dir.path())?;
//! let trainer = Trainer::new(
//!     vec![device.clone(), device.clone()],
//!     SgdConfig::new().init(),
//!     0.1, // the learning rate, or any burn LrScheduler
//!     TrainerConfig { epochs: 3, ..TrainerConfig::default() },
//! );
//! let (model, report) = trainer.fit(model, loader, None, Some(&mut summary))?;
//! summary.close()?;
//! assert_eq!(report.epochs.len(), 3);
//! assert!(report.epochs[2].train_loss < report.epochs[0].train_loss);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **3. Plug into burn-train**: [`burn_train::SummaryLogger`] is a `MetricLogger` writing every
//! metric through a `SummaryRecord`, and [`burn_train::PoolStrategy`] runs
//! `SupervisedTraining` on ember's pool.
//!
//! **Architecture invariant:** the facade adds policy (what to record, when), never a second
//! way to pack, write or step: those stay in the layers below.

#![deny(missing_docs)]

pub mod burn_train;
mod convert;
mod error;
mod faults;
mod model_info;
mod summary;
mod trainer;

pub use convert::ToTensorValue;
pub use error::SummaryError;
pub use summary::{Mode, Plugin, RankLayout, SummaryRecord, SummaryRecordBuilder, SummaryTap};
pub use trainer::{
    EpochReport, StepReport, TrainError, TrainReport, Trainer, TrainerConfig, TrainingItem,
};

pub use ember_pool::step;
pub use ember_write::pack;
pub use ember_write::{
    Durability, ErrorPolicy, FileError, FreeSpace, FreeSpaceSource, FullQueuePolicy, PoolStats,
    SizePolicy, WriteError, WriteErrors, WriterOptions,
};
/// Reading event files back: framing and the checking record reader.
pub mod read {
    pub use ember_write::framing;
    pub use ember_write::reader::*;
}
