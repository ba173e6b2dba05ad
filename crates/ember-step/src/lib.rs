//! The step protocol: the contract between a training loop, a model and ember's device pool.
//!
//! ember-step is layer L0. It defines *what* one data-parallel step is, with no threads, channels
//! or files in it, so that the pool (`ember-pool`) and everything above can be written and tested
//! against plain Rust types, and Burn plugs in through an adapter rather than through the pool.
//!
//! - [`StepModel`]: something that can be forked onto a device and run one train step on one batch.
//! - [`BatchSource`]: where one device's batches come from: an iterator of `Result<batch, error>`
//!   that also reports its [`Progress`].
//! - [`StepOutputs`]: what one step returns: every output tagged with the public index of the device
//!   that produced it, **in device order**, with that device's step wall time, plus the
//!   [`AggregateProgress`] of every source.
//! - [`StepError`]: what can go wrong, naming every failed device ([`DeviceFailures`]).
//!
//! With the `burn` feature (on by default), [`burn`] adapts burn-train's `LearnerModel` and
//! burn's data-loader iterators to these traits and reduces every device's gradients on the main
//! device by mean or sum.
//!
//! **Architecture invariant:** nothing here spawns a thread, blocks, or does I/O.
//! Ordering and failure rules are stated here and enforced by `ember-pool`.

#![deny(missing_docs)]

mod error;
mod model;
mod outputs;
mod progress;
mod source;

#[cfg(feature = "burn")]
pub mod burn;

pub use error::{DeviceFailure, DeviceFailures, FailureKind, SourceError, StepError};
pub use model::StepModel;
pub use outputs::{DeviceOutput, Step, StepOutputs};
pub use progress::{AggregateProgress, Progress};
pub use source::{BatchSource, IterSource};
