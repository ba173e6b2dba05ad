//! How a step runs this process's slices on its devices: `devices` slices at a time, one
//! batch each, as one step of the job; or, in a run resumed on more devices than its job began
//! with, each slice's next batches one to each of its devices, so that they run as many
//! consecutive steps of the job at once, within one accumulation window.

use burn::module::Module;
use burn::train::{TrainOutput, TrainStep};
use ember_pool::step::burn::BurnStep;
use ember_pool::step::{DeviceOutput, IterSource, Step};

use super::{Epoch, StepDone, StepFailure, StepFailureSource};

/// What the devices ran in one step: each output with its shard and the job step (of those
/// the step ran at once) it belongs to, and how many job steps that was.
pub(super) type Ran<M> = (
    Vec<(
        usize,
        usize,
        DeviceOutput<TrainOutput<<M as TrainStep>::Output>>,
    )>,
    usize,
);

impl<O> StepDone<O> {
    /// The job steps this step ran, each with its devices' outputs; the learning rate goes with
    /// the last, which closed the window. They ran at once, so each carries the step's timing.
    pub(crate) fn into_job_steps(self) -> Vec<StepDone<O>> {
        if self.steps <= 1 {
            return vec![self];
        }
        let first = self.step + 1 - self.steps;
        let mut parts: Vec<StepDone<O>> = (0..self.steps)
            .map(|substep| StepDone {
                step: first + substep,
                steps: 1,
                items: Vec::new(),
                learning_rate: None,
                timing: self.timing,
            })
            .collect();
        for item in self.items {
            parts[item.substep.min(self.steps - 1)].items.push(item);
        }
        parts.retain(|part| !part.items.is_empty());
        if let Some(last) = parts.last_mut() {
            last.learning_rate = self.learning_rate;
        }
        parts
    }
}

impl<M> Epoch<'_, M>
where
    M: TrainStep + Module + 'static,
    M::Input: Send + 'static,
    TrainOutput<M::Output>: Send,
{
    /// Runs this step's batch of every shard that has one, `devices` shards at a time, and
    /// returns the outputs in shard order, each with its shard, as one job step; `None` when
    /// every shard is done.
    pub(super) fn run_devices(&mut self, model: &M) -> Result<Option<Ran<M>>, StepFailure> {
        let resharded = self.sources.len() > self.devices;
        let mut outputs = Vec::new();
        let mut ran = false;
        for (chunk, shards) in self.sources.chunks_mut(self.devices).enumerate() {
            // The pool counts sources by device: each group of shards starts afresh (a shard
            // that ran dry keeps saying so).
            if resharded {
                self.pool.new_epoch();
            }
            match self.pool.step(shards, &BurnStep(model.clone())) {
                Ok(Step::Ran(step)) => {
                    ran = true;
                    let first = chunk * self.devices;
                    outputs.extend(step.outputs.into_iter().map(|o| (first + o.device, 0, o)));
                }
                Ok(Step::EpochOver(_)) => {}
                Err(source) => {
                    return Err(StepFailure {
                        step: self.step,
                        source: StepFailureSource::Devices(source),
                    });
                }
            }
        }
        Ok(ran.then_some((outputs, 1)))
    }

    /// Draws the next `spread` batches of every slice (fewer where it runs dry) and runs them
    /// at once, slice `s`'s `j`-th on device `s·spread + j`. Returns every output with its
    /// slice and `j`, and the job steps run: the most batches any slice gave. `None` when
    /// every slice is done.
    pub(super) fn run_spread(&mut self, model: &M) -> Result<Option<Ran<M>>, StepFailure> {
        let spread = self.spread;
        let mut parts = Vec::with_capacity(self.sources.len() * spread);
        for source in &mut self.sources {
            for _ in 0..spread {
                parts.push(IterSource::new(source.next().into_iter()));
            }
        }
        // The parts are new each step: none is exhausted yet.
        self.pool.new_epoch();
        match self.pool.step(&mut parts, &BurnStep(model.clone())) {
            Ok(Step::Ran(step)) => {
                let outputs: Vec<_> = step
                    .outputs
                    .into_iter()
                    .map(|output| (output.device / spread, output.device % spread, output))
                    .collect();
                let steps = outputs.iter().map(|(_, j, _)| j + 1).max().unwrap_or(1);
                Ok(Some((outputs, steps)))
            }
            Ok(Step::EpochOver(_)) => Ok(None),
            Err(source) => Err(StepFailure {
                step: self.step,
                source: StepFailureSource::Devices(source),
            }),
        }
    }
}
