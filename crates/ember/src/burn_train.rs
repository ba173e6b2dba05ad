//! burn-train integration: a metric logger writing through [`SummaryRecord`](crate::SummaryRecord), and a training
//! strategy running `SupervisedTraining` on ember's device pool.
//!
//! - [`SummaryLogger`] is a burn-train `MetricLogger`: register it with
//!   `SupervisedTraining::with_metric_logger` and every numeric metric lands in TensorBoard (or
//!   MindInsight) files, under `<split>/<metric name>` per batch and `<split>/<metric name>/epoch`
//!   per epoch.
//! - [`PoolStrategy`] is a burn-train `SupervisedLearningStrategy`: pass it as
//!   `TrainingStrategy::Custom(Arc::new(PoolStrategy::new(devices, Reduction::Mean)))` and the
//!   training steps run on an [`ember_pool::DevicePool`], with device-ordered gradient reduction
//!   (mean or sum) and failures that name every failed device.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use burn::optim::SgdConfig;
//! use burn::tensor::Device;
//! use burn::train::logger::FileMetricLogger;
//! use burn::train::metric::LossMetric;
//! use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
//! use ember::SummaryRecord;
//! use ember::burn_train::{PoolStrategy, SummaryLogger};
//! use ember::step::burn::Reduction;
//! # use ember_tests::{Mlp, regression_loader};
//!
//! let device = Device::flex().autodiff();
//! let strategy = Arc::new(PoolStrategy::new(vec![device.clone(); 2], Reduction::Mean));
//! let result = SupervisedTraining::new(
//!     "runs/demo",
//!     regression_loader(1, 64, 8, &device),
//!     regression_loader(2, 16, 8, &device),
//! )
//! .num_epochs(2)
//! .metrics((LossMetric::new(),))
//! .with_metric_logger(FileMetricLogger::new("runs/demo"))
//! .with_metric_logger(SummaryLogger::new(SummaryRecord::new("runs/demo/tensorboard")?))
//! .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
//! .launch(Learner::new(Mlp::new(8, &device), SgdConfig::new().init(), 0.05));
//! if let Some(error) = result.error {
//!     eprintln!("training failed: {error}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Resuming.** With burn's checkpoints (`with_default_checkpointers`), a logger made
//! [`checkpointed`](SummaryLogger::checkpointed) keeps the log's position after every epoch,
//! and one made with [`resume_from`](SummaryLogger::resume_from) the epoch given to burn's
//! `checkpoint(n)` rolls the log back to it, so a resumed run leaves one curve.
//!
//! `logger.rs` holds the logger (its checkpoints are `checkpoint/burn_train.rs`'s),
//! `strategy.rs` the strategy; they share only `failure.rs`'s `EmberFailure`, the way an ember
//! error reaches burn's `TrainingError`.

mod checkpoints;
mod failure;
mod logger;
mod strategy;

pub(crate) use logger::split_prefix;
pub use logger::{LoggerErrors, SummaryLogger, XAxis};
pub use strategy::{PoolStrategy, PoolStrategyError};
