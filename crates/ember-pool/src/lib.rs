//! The device worker pool: one long-lived worker thread per device, driven one step at a time.
//!
//! ember-pool is layer L1, built on the step protocol of `ember-step` (re-exported here as
//! [`step`], so layers above reach the protocol through this crate). It is burn-train's
//! `MultiDevicesTrainStep` made robust:
//!
//! - each [`DevicePool::step`] sends every worker the next batch of its own source with a clone of
//!   the model; the worker forks the model onto its device and runs the step there;
//! - every answer a step waits for is consumed by that step, whatever fails, and answers carry
//!   the step's sequence number, so no late answer is ever taken for another step's;
//! - every failed device is reported ([`StepError::Devices`]), not just the first; panics, source
//!   errors, hung workers (with [`PoolOptions::step_timeout`], counted from when each worker was
//!   sent its batch) and dead worker threads each name their device, and the pool replaces lost
//!   workers so the next step runs: a worker whose step panicked is replaced too, so the next
//!   step forks the model afresh on a clean thread;
//! - a hung worker cannot be stopped, only abandoned with its model clone and device memory:
//!   [`DevicePool::stats`] counts them, and past [`DevicePool::max_abandoned_workers`]
//!   (default [`DEFAULT_MAX_ABANDONED_WORKERS`]) the pool fails with
//!   [`StepError::TooManyAbandonedWorkers`] instead of starting more threads;
//! - a source that returned `None` is not polled again in that epoch;
//! - outputs come back in device order, so a reduction over them gives the same bits every run.
//!
//! ```
//! use ember_pool::{DevicePool, PoolOptions};
//! use ember_pool::step::{IterSource, Step, StepModel};
//!
//! /// A "model" that scales its batch by a weight.
//! #[derive(Clone)]
//! struct Scale(f32);
//!
//! impl StepModel for Scale {
//!     type Device = ();
//!     type Input = Vec<f32>;
//!     type Output = f32;
//!     fn fork(self, _device: &()) -> Self { self }
//!     fn step(&self, batch: Vec<f32>) -> f32 { batch.iter().map(|x| x * self.0).sum() }
//! }
//!
//! let mut pool = DevicePool::<Scale>::new(vec![(), ()], PoolOptions::default())?;
//! let mut sources = vec![
//!     IterSource::new(vec![Ok::<_, std::io::Error>(vec![1.0, 2.0])].into_iter()),
//!     IterSource::new(vec![Ok::<_, std::io::Error>(vec![3.0])].into_iter()),
//! ];
//! let Step::Ran(outputs) = pool.step(&mut sources, &Scale(2.0))? else { unreachable!() };
//! let sums: Vec<f32> = outputs.outputs.iter().map(|o| o.output).collect();
//! assert_eq!(sums, [6.0, 6.0]);
//! assert!(matches!(pool.step(&mut sources, &Scale(2.0))?, Step::EpochOver(_)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Architecture invariant:** the caller's thread only pulls batches, clones the model and
//! waits; forking and stepping happen on the workers.
//! **Architecture invariant:** the pool never panics on a worker's behalf and never waits
//! without bound when a step timeout is set.

#![deny(missing_docs)]

mod pool;
mod worker;

pub use ember_step as step;
pub use ember_step::{StepError, StepModel};
pub use pool::{DEFAULT_MAX_ABANDONED_WORKERS, DevicePool, PoolOptions, PoolStats, SpawnError};
