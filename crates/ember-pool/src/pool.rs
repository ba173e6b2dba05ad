//! The pool: dispatching one step to every worker and collecting every answer.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use ember_step::{
    AggregateProgress, BatchSource, DeviceFailure, DeviceFailures, DeviceOutput, FailureKind,
    SourceError, Step, StepError, StepModel, StepOutputs,
};

use crate::worker::{Answer, Job, Outcome, WorkerHandle};

/// How a [`DevicePool`] behaves.
#[derive(Debug, Clone, Default)]
pub struct PoolOptions {
    /// How long a step waits for its workers. A worker that has not answered by then is reported
    /// as [`FailureKind::TimedOut`], let go, and replaced by a fresh worker on the same device.
    /// `None` (the default) waits as long as the step takes.
    pub step_timeout: Option<Duration>,
}

impl PoolOptions {
    /// Sets the step timeout.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = Some(timeout);
        self
    }
}

/// The pool could not start a worker thread.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the worker thread of device {device}: {source}")]
pub struct SpawnError {
    /// The device whose worker did not start.
    pub device: usize,
    /// The operating system's reason.
    pub source: std::io::Error,
}

/// One long-lived worker thread per device, each running one step at a time.
///
/// Dropping the pool closes every worker's inbox and joins the threads; a worker given up on
/// after a timeout is not waited for.
pub struct DevicePool<M: StepModel> {
    devices: Vec<M::Device>,
    workers: Vec<WorkerHandle<M>>,
    answers: Receiver<Answer<M::Output>>,
    answer_sender: Sender<Answer<M::Output>>,
    options: PoolOptions,
    steps: u64,
    shut_down: bool,
}

impl<M: StepModel> std::fmt::Debug for DevicePool<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePool")
            .field("devices", &self.devices.len())
            .field("options", &self.options)
            .field("steps", &self.steps)
            .field("shut_down", &self.shut_down)
            .finish()
    }
}

impl<M: StepModel> DevicePool<M> {
    /// Starts one worker per device. Device `i` of this list is "device `i`" in every output
    /// and error.
    pub fn new(devices: Vec<M::Device>, options: PoolOptions) -> Result<Self, SpawnError> {
        let (answer_sender, answers) = crossbeam_channel::unbounded();
        let mut workers = Vec::with_capacity(devices.len());
        for (index, device) in devices.iter().enumerate() {
            let worker = WorkerHandle::spawn(index, device.clone(), 0, answer_sender.clone())
                .map_err(|source| SpawnError {
                    device: index,
                    source,
                })?;
            workers.push(worker);
        }
        Ok(Self {
            devices,
            workers,
            answers,
            answer_sender,
            options,
            steps: 0,
            shut_down: false,
        })
    }

    /// The devices, in the order the pool numbers them.
    pub fn devices(&self) -> &[M::Device] {
        &self.devices
    }

    /// How many steps have been asked for so far, failed ones included.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Runs one step: the next batch of source `i` goes to device `i` with a clone of `model`.
    ///
    /// Exhausted sources send nothing and still count in the progress; when every source is
    /// exhausted no worker runs and the result is [`Step::EpochOver`]. When a source fails,
    /// sources after it are not pulled this step (their batches are not lost), the workers
    /// already sent a batch are still waited for, and the error names the device.
    pub fn step<S, E>(&mut self, sources: &mut [S], model: &M) -> Result<Step<M::Output>, StepError>
    where
        S: BatchSource<M::Input, E>,
        E: Into<SourceError>,
    {
        if self.shut_down {
            return Err(StepError::ShutDown);
        }
        if sources.len() != self.workers.len() {
            return Err(StepError::SourceCount {
                expected: self.workers.len(),
                got: sources.len(),
            });
        }
        self.steps += 1;
        let step = self.steps;
        let started = Instant::now();

        let device_count = self.workers.len();
        let mut exhausted = vec![false; device_count];
        let mut waiting = vec![false; device_count];
        let mut failures = Vec::new();
        for (device, source) in sources.iter_mut().enumerate() {
            let input = match source.next() {
                None => {
                    exhausted[device] = true;
                    continue;
                }
                Some(Err(error)) => {
                    failures.push(DeviceFailure {
                        device,
                        kind: FailureKind::Source(error.into()),
                    });
                    break;
                }
                Some(Ok(input)) => input,
            };
            let job = Job {
                step,
                model: model.clone(),
                input,
            };
            if self.workers[device].send(job).is_ok() {
                waiting[device] = true;
            } else {
                failures.push(DeviceFailure {
                    device,
                    kind: FailureKind::WorkerGone,
                });
                self.replace_worker(device, false);
            }
        }

        let dispatched = waiting.iter().filter(|&&w| w).count();
        let outputs = self.collect(step, started, &mut waiting, &mut failures);

        if let Some(failures) = DeviceFailures::new(failures) {
            return Err(StepError::Devices(failures));
        }
        let progress = AggregateProgress::aggregate(
            sources
                .iter()
                .zip(&exhausted)
                .map(|(source, &exhausted)| (source.progress(), exhausted)),
        );
        if dispatched == 0 {
            return Ok(Step::EpochOver(progress));
        }
        Ok(Step::Ran(StepOutputs { outputs, progress }))
    }

    /// Waits for every worker marked in `waiting`, consuming each of their answers.
    fn collect(
        &mut self,
        step: u64,
        started: Instant,
        waiting: &mut [bool],
        failures: &mut Vec<DeviceFailure>,
    ) -> Vec<DeviceOutput<M::Output>> {
        let mut slots: Vec<Option<DeviceOutput<M::Output>>> =
            (0..waiting.len()).map(|_| None).collect();
        let mut remaining = waiting.iter().filter(|&&w| w).count();
        let deadline = self.options.step_timeout.map(|timeout| started + timeout);
        while remaining > 0 {
            let received = match deadline {
                Some(deadline) => self.answers.recv_deadline(deadline),
                None => self
                    .answers
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            let answer = match received {
                Ok(answer) => answer,
                Err(error) => {
                    // Timed out: the workers still awaited are let go and replaced. Disconnected
                    // cannot happen while the pool holds a sender; were it to, they are gone.
                    let timed_out = matches!(error, RecvTimeoutError::Timeout);
                    let limit = self.options.step_timeout.unwrap_or_default();
                    let unanswered: Vec<usize> =
                        (0..waiting.len()).filter(|&d| waiting[d]).collect();
                    for device in unanswered {
                        waiting[device] = false;
                        let kind = if timed_out {
                            FailureKind::TimedOut(limit)
                        } else {
                            FailureKind::WorkerGone
                        };
                        failures.push(DeviceFailure { device, kind });
                        if timed_out {
                            self.replace_worker(device, true);
                        }
                    }
                    break;
                }
            };
            let device = answer.device;
            let current = answer.step == step
                && device < waiting.len()
                && waiting[device]
                && answer.generation == self.workers[device].generation;
            if !current {
                // A late answer of a worker given up on, or of an earlier step: never this step's.
                continue;
            }
            waiting[device] = false;
            remaining -= 1;
            match answer.outcome {
                Outcome::Output { output, elapsed } => {
                    slots[device] = Some(DeviceOutput {
                        device,
                        output,
                        elapsed,
                    });
                }
                Outcome::Panicked(message) => failures.push(DeviceFailure {
                    device,
                    kind: FailureKind::Panicked(message),
                }),
                Outcome::Exited => {
                    failures.push(DeviceFailure {
                        device,
                        kind: FailureKind::WorkerGone,
                    });
                    self.replace_worker(device, false);
                }
            }
        }
        slots.into_iter().flatten().collect()
    }

    /// Starts a fresh worker for `device`. A hung worker is let go rather than joined.
    fn replace_worker(&mut self, device: usize, hung: bool) {
        let generation = self.workers[device].generation + 1;
        let fresh = WorkerHandle::spawn(
            device,
            self.devices[device].clone(),
            generation,
            self.answer_sender.clone(),
        )
        .unwrap_or_else(|_| WorkerHandle::missing(generation));
        let old = std::mem::replace(&mut self.workers[device], fresh);
        if hung {
            old.abandon();
        } else {
            old.join();
        }
    }

    /// Stops and joins every worker; later steps return [`StepError::ShutDown`].
    pub fn shutdown(&mut self) {
        self.shut_down = true;
        for worker in self.workers.drain(..) {
            worker.join();
        }
    }
}

impl<M: StepModel> Drop for DevicePool<M> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
