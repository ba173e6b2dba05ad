//! The pool's invariants (numbered as in `docs/architecture.md`), each shown on a model without
//! Burn; invariant 8, the one-job inbox, is tested in `src/worker.rs`. This file holds the test
//! doubles every invariant uses; each other file of `tests/invariants/` one or two invariants.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ember_pool::step::{
    BatchSource, FailureKind, IterSource, Progress, SourceError, Step, StepError, StepModel,
    StepOutputs,
};
use ember_pool::{DEFAULT_MAX_ABANDONED_WORKERS, DevicePool, PoolOptions};

mod abandoned;
mod answers;
mod compute_pools;
mod epochs;
mod order_and_drop;
mod panics;
mod timeouts;

/// What a test asks one device to do with one batch.
#[derive(Debug, Clone)]
enum Action {
    Answer,
    Sleep(Duration),
    Panic(&'static str),
    /// Panics with a payload that panics again when dropped, which kills the worker thread.
    KillWorker,
}

#[derive(Debug, Clone)]
struct Batch {
    step: usize,
    value: f64,
    action: Action,
}

fn batch(step: usize, value: f64) -> Batch {
    Batch {
        step,
        value,
        action: Action::Answer,
    }
}

/// Returns the batch's step tag and value times the model's weight, after doing the action.
#[derive(Debug, Clone)]
struct Probe {
    weight: f64,
}

struct DropBomb;

impl Drop for DropBomb {
    fn drop(&mut self) {
        panic!("payload exploded while being dropped");
    }
}

impl StepModel for Probe {
    type Device = usize;
    type Input = Batch;
    type Output = (usize, f64);

    fn fork(self, _device: &usize) -> Self {
        self
    }

    fn step(&self, batch: Batch) -> (usize, f64) {
        match batch.action {
            Action::Answer => {}
            Action::Sleep(duration) => std::thread::sleep(duration),
            Action::Panic(message) => panic!("{message}"),
            Action::KillWorker => std::panic::panic_any(DropBomb),
        }
        (batch.step, batch.value * self.weight)
    }
}

type Source = IterSource<std::vec::IntoIter<Result<Batch, SourceError>>>;

fn source(batches: Vec<Result<Batch, SourceError>>) -> Source {
    IterSource::new(batches.into_iter())
}

/// `devices` sources of `steps` plain batches each, batch `s` of device `d` worth `10 d + s`.
fn sources(devices: usize, steps: usize) -> Vec<Source> {
    (0..devices)
        .map(|d| {
            source(
                (0..steps)
                    .map(|s| Ok(batch(s, (10 * d + s) as f64)))
                    .collect(),
            )
        })
        .collect()
}

fn pool(devices: usize) -> DevicePool<Probe> {
    DevicePool::new((0..devices).collect(), PoolOptions::default()).unwrap()
}

fn ran(step: Result<Step<(usize, f64)>, StepError>) -> StepOutputs<(usize, f64)> {
    match step {
        Ok(Step::Ran(outputs)) => outputs,
        other => panic!("expected a step that ran, got {other:?}"),
    }
}

fn devices_and_steps(outputs: &StepOutputs<(usize, f64)>) -> Vec<(usize, usize)> {
    outputs
        .outputs
        .iter()
        .map(|o| (o.device, o.output.0))
        .collect()
}

fn failed_devices(error: &StepError) -> Vec<usize> {
    error.failures().iter().map(|f| f.device).collect()
}

const MODEL: Probe = Probe { weight: 1.0 };
