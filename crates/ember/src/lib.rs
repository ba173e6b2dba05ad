//! ember: observable, robust multi-device training with Burn.
//!
//! This facade (layer L2) joins ember's two halves, the device worker pool (`ember-pool`) and
//! the summary writers (`ember-write`), and reaches the layer below them through their
//! re-exports: `step` (the step protocol, with the `burn` feature) and [`pack`] (the summary
//! data model). [`read`] reads what was written back as typed series.
//!
//! There are three ways in; the second and third need the default `burn` feature.
//!
//! ```toml
//! # Logging only: SummaryRecord, the reader and the value types, without Burn or the pool.
//! ember = { version = "0.0.0", default-features = false }
//! # With Burn: the Trainer, burn-train integration and conversions from Burn tensors too.
//! ember = "0.0.0"
//! ```
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
#![cfg_attr(feature = "burn", doc = include_str!("with_burn.md"))]
#![cfg_attr(
    not(feature = "burn"),
    doc = "**2. Train on several devices** and **3. plug into burn-train** need the `burn` \
           feature, which this build lacks (it is on by default).\n"
)]
//! **Architecture invariant:** the facade adds policy (what to record, when), never a second
//! way to pack, write or step: those stay in the layers below.

#![deny(missing_docs)]

// The object stores' door: `bucket.rs` with the `object-store` feature, else what stands in.
#[cfg(feature = "object-store")]
mod bucket;
#[cfg(not(feature = "object-store"))]
#[path = "no_bucket.rs"]
mod bucket;
#[cfg(feature = "burn")]
pub mod burn_train;
#[cfg(feature = "burn")]
pub mod checkpoint;
mod convert;
#[cfg(feature = "burn")]
pub mod devices;
#[cfg(feature = "burn")]
mod driver;
mod error;
#[cfg(feature = "burn")]
mod faults;
#[cfg(feature = "burn")]
mod model_info;
#[cfg(feature = "burn")]
mod module_summary;
pub mod read;
#[cfg(feature = "burn")]
pub mod run;
mod step_times;
mod summary;
#[cfg(feature = "burn")]
mod trainer;

pub use convert::{ToScalar, ToTensorValue};
#[cfg(feature = "burn")]
pub use driver::ValidationError;
pub use error::SummaryError;
pub use step_times::StepTimes;
pub use summary::{Mode, Plugin, RankLayout, SummaryRecord, SummaryRecordBuilder, SummaryTap};
#[cfg(feature = "burn")]
pub use trainer::{
    CheckpointConfig, EpochReport, LOG_GAP_TAG, LogGap, Recovery, StepReport, TrainError,
    TrainReport, Trainable, Trainer, TrainerConfig, TrainingItem,
};

/// What an object store did wrong (with the `object-store` feature; nothing without).
pub use bucket::RemoteError;
/// What only a build with the `object-store` feature offers: an object-store prefix read and
/// written as a directory of whole files (`Bucket`), a record's claim on its run in one
/// (`Claim`) and what its mirror shipped (`MirrorStats`), and what killed writers left in their
/// staging directories, shipped to their store (`ship_orphans`, `ember push`).
#[allow(
    unused_imports,
    unreachable_pub,
    reason = "empty without the `object-store` feature"
)]
pub use bucket::exported::*;
/// Training across processes and hosts (ember-collective, layer L1): communicators and the
/// rounds of hierarchical data parallelism; `MpiComm` with the `mpi` feature.
#[cfg(feature = "burn")]
pub use ember_collective as collective;
#[cfg(feature = "mpi")]
#[doc(inline)]
pub use ember_collective::MpiComm;
#[cfg(feature = "burn")]
#[doc(inline)]
pub use ember_collective::{CollectiveError, Communicator, LocalGroup, Ranks};
/// The step protocol (ember-step, layer L0), re-exported by the device pool.
#[cfg(feature = "burn")]
pub use ember_pool::step;
#[cfg(feature = "burn")]
#[doc(inline)]
pub use ember_pool::step::burn::{BurnStep, Reduction};
#[cfg(feature = "burn")]
#[doc(inline)]
pub use ember_pool::step::{BatchSource, DeviceFailures, FailureKind, IterSource, Progress};
#[cfg(feature = "burn")]
#[doc(inline)]
pub use ember_pool::{DevicePool, PoolOptions, SpawnError, StepError};
/// Experiment trackers: an MLflow tracking server beside the event files
/// ([`SummaryRecordBuilder::mlflow`]).
pub use ember_track as track;
/// Replacing a file atomically and durably (ember-write's helper, for the files a caller
/// rewrites whole beside a run: a command line, a model).
pub use ember_write::durable;
/// The summary data model and packing (ember-pack, layer L0), re-exported by ember-write.
pub use ember_write::pack;
#[doc(inline)]
pub use ember_write::pack::{
    Format, HParams, HistogramRule, ImageLayout, Record, Tag, TensorValue, Value,
};
#[doc(inline)]
pub use ember_write::{
    DirLock, Durability, ErrorPolicy, FileError, FreeSpace, FreeSpaceSource, FullQueuePolicy,
    Journal, LockError, SizePolicy, WriteError, WriteErrors, WriterOptions, WriterPoolStats,
    is_remote,
};
