//! What one step returns.

use std::time::Duration;

use crate::AggregateProgress;

/// One device's output of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOutput<O> {
    /// The device's index in the list the pool was created with.
    pub device: usize,
    /// What the model's step returned.
    pub output: O,
    /// Wall time of the step on the worker, fork included.
    pub elapsed: Duration,
}

/// The outputs of one step, in device order, and the progress of every source after it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutputs<O> {
    /// One entry per device that had a batch, sorted by device index, so that a reduction over
    /// them sums in the same order on every run.
    pub outputs: Vec<DeviceOutput<O>>,
    /// Progress of all sources, exhausted ones included.
    pub progress: AggregateProgress,
}

/// The result of asking for one step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<O> {
    /// At least one device ran a batch.
    Ran(StepOutputs<O>),
    /// Every source is exhausted: the epoch is over and no worker ran.
    EpochOver(AggregateProgress),
}

impl<O> Step<O> {
    /// The outputs, or `None` at the end of the epoch.
    pub fn ran(self) -> Option<StepOutputs<O>> {
        match self {
            Step::Ran(outputs) => Some(outputs),
            Step::EpochOver(_) => None,
        }
    }

    /// The progress after this step.
    pub fn progress(&self) -> AggregateProgress {
        match self {
            Step::Ran(outputs) => outputs.progress,
            Step::EpochOver(progress) => *progress,
        }
    }
}
