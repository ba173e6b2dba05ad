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
/// The write benchmarks' workloads (`ember bench write`, `cargo bench -p ember-write`).
pub use ember_write::workload;
pub use ember_write::{
    Durability, ErrorPolicy, FullQueuePolicy, PoolStats, SizePolicy, WriteError, WriteErrors,
};
/// Reading event files back: framing and the checking record reader.
pub mod read {
    pub use ember_write::framing;
    pub use ember_write::reader::*;
}
