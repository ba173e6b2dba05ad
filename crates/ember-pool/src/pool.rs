//! The pool: dispatching one step to every worker and collecting every answer.

use std::num::NonZeroUsize;
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
    /// How long a step waits for each worker, counted from when that worker was sent its batch
    /// (so time spent pulling other devices' batches never counts against it). A worker that has
    /// not answered by then is reported as [`FailureKind::TimedOut`], abandoned, and replaced by a
    /// fresh worker on the same device, up to [`DevicePool::max_abandoned_workers`].
    /// `None` (the default) waits as long as the step takes.
    pub step_timeout: Option<Duration>,
    /// Threads of each worker's own compute pool (rayon), or `None` (the default) to let every
    /// worker's step use the process's global rayon pool, as one device alone would.
    ///
    /// A CPU backend (Burn's flex) runs its large matrix products on the current rayon pool:
    /// with the global pool, every worker's products spread over every core and the workers
    /// fight for them. One thread per worker gives each worker a core of its own, the CPU
    /// stand-in for one device each. GPU backends do their work on the device and ignore it.
    pub worker_threads: Option<NonZeroUsize>,
}

impl PoolOptions {
    /// Sets the step timeout.
    pub fn step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = Some(timeout);
        self
    }

    /// Gives each worker a compute pool of its own with `threads` threads.
    pub fn worker_threads(mut self, threads: NonZeroUsize) -> Self {
        self.worker_threads = Some(threads);
        self
    }
}

/// How many hung workers a pool abandons and replaces before it gives up, unless
/// [`DevicePool::with_max_abandoned_workers`] says otherwise.
pub const DEFAULT_MAX_ABANDONED_WORKERS: usize = 8;

/// What a [`DevicePool`] has had to do about its workers so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Workers let go after a step timeout, over the pool's life. Rust cannot stop a thread, so
    /// each may still be running, holding its model clone, its batch and whatever device memory
    /// its step took, until its step returns (if ever).
    pub abandoned_workers: usize,
    /// Workers replaced because their step (or fork) panicked.
    pub replaced_after_panic: usize,
    /// Workers replaced because their thread was gone (it died, or could not be started).
    pub replaced_gone: usize,
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
    max_abandoned_workers: Option<usize>,
    stats: PoolStats,
    /// Which sources have returned `None` this epoch: they are not polled again until the next.
    exhausted: Vec<bool>,
    steps: u64,
    shut_down: bool,
    /// The limit, once more workers were abandoned than it allows: the pool runs no more steps.
    gave_up: Option<usize>,
}

/// Why a worker is being replaced.
enum Loss {
    /// It timed out: it may never return, so it is let go rather than joined.
    Hung,
    /// Its step panicked: it is idle again, but whatever state the panic left on its thread
    /// (a backend's thread-local stream or graph, a half-written device copy) must not serve
    /// another step.
    Panicked,
    /// Its thread died outside a step's guard: it is ending and is joined.
    Died,
    /// It could not take a job (never started, ended, or busy against the invariant): it is let
    /// go, as it may be busy.
    Refused,
}

impl<M: StepModel> std::fmt::Debug for DevicePool<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePool")
            .field("devices", &self.devices.len())
            .field("options", &self.options)
            .field("max_abandoned_workers", &self.max_abandoned_workers)
            .field("stats", &self.stats)
            .field("steps", &self.steps)
            .field("shut_down", &self.shut_down)
            .field("gave_up", &self.gave_up)
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
            let worker = WorkerHandle::spawn(
                index,
                device.clone(),
                0,
                options.worker_threads,
                answer_sender.clone(),
            )
            .map_err(|source| SpawnError {
                device: index,
                source,
            })?;
            workers.push(worker);
        }
        let exhausted = vec![false; devices.len()];
        Ok(Self {
            devices,
            workers,
            answers,
            answer_sender,
            options,
            max_abandoned_workers: Some(DEFAULT_MAX_ABANDONED_WORKERS),
            stats: PoolStats::default(),
            exhausted,
            steps: 0,
            shut_down: false,
            gave_up: None,
        })
    }

    /// Sets how many hung workers the pool abandons and replaces before it gives up
    /// ([`DEFAULT_MAX_ABANDONED_WORKERS`] unless set; `None` for no limit).
    ///
    /// An abandoned worker cannot be stopped: it keeps its thread, its model clone and the device
    /// memory of its step until the step returns, so each replacement adds to what the process
    /// holds. With `Some(limit)`, the timeout that would abandon worker number `limit + 1` still
    /// lets it go but starts no replacement: that step and every later one fail with
    /// [`StepError::TooManyAbandonedWorkers`].
    pub fn with_max_abandoned_workers(mut self, limit: Option<usize>) -> Self {
        self.max_abandoned_workers = limit;
        self
    }

    /// How many hung workers the pool abandons and replaces before it gives up; `None` is no
    /// limit.
    pub fn max_abandoned_workers(&self) -> Option<usize> {
        self.max_abandoned_workers
    }

    /// What the pool has had to do about its workers so far.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Forgets which sources ran out, for a caller that leaves an epoch before
    /// [`Step::EpochOver`] and passes new sources: the pool otherwise never polls a source
    /// again once it returned `None`, until the epoch is over.
    pub fn new_epoch(&mut self) {
        self.exhausted.fill(false);
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
    /// A source that returned `None` is exhausted: it is not polled again until the epoch is
    /// over (this call returned [`Step::EpochOver`]) or [`new_epoch`](Self::new_epoch) is called,
    /// so sources need not be fused. Exhausted sources send nothing and still count in the
    /// progress; when every source is exhausted no worker runs and the result is
    /// [`Step::EpochOver`]. When a source fails, sources after it are not pulled this step
    /// (their batches are not lost), the workers already sent a batch are still waited for, and
    /// the error names the device.
    ///
    /// With a step timeout, each worker's deadline starts when its own batch is sent, so a slow
    /// source never makes a healthy worker time out.
    pub fn step<S, E>(&mut self, sources: &mut [S], model: &M) -> Result<Step<M::Output>, StepError>
    where
        S: BatchSource<M::Input, E>,
        E: Into<SourceError>,
    {
        if self.shut_down {
            return Err(StepError::ShutDown);
        }
        if let Some(limit) = self.gave_up {
            return Err(self.too_many_abandoned(limit));
        }
        if sources.len() != self.workers.len() {
            return Err(StepError::SourceCount {
                expected: self.workers.len(),
                got: sources.len(),
            });
        }
        self.steps += 1;
        let step = self.steps;

        // When each worker was sent its batch; `None` for a worker this step does not wait for.
        let mut sent_at: Vec<Option<Instant>> = vec![None; self.workers.len()];
        let mut failures = Vec::new();
        for (device, source) in sources.iter_mut().enumerate() {
            if self.exhausted[device] {
                continue;
            }
            let input = match source.next() {
                None => {
                    self.exhausted[device] = true;
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
                sent_at[device] = Some(Instant::now());
            } else {
                failures.push(DeviceFailure {
                    device,
                    kind: FailureKind::WorkerGone,
                });
                self.replace_worker(device, Loss::Refused);
            }
        }

        let dispatched = sent_at.iter().flatten().count();
        let outputs = self.collect(step, &mut sent_at, &mut failures);

        if let Some(limit) = self.gave_up {
            return Err(self.too_many_abandoned(limit));
        }
        if let Some(failures) = DeviceFailures::new(failures) {
            return Err(StepError::Devices(failures));
        }
        let progress = AggregateProgress::aggregate(
            sources
                .iter()
                .zip(&self.exhausted)
                .map(|(source, &exhausted)| (source.progress(), exhausted)),
        );
        if dispatched == 0 {
            // The next call brings the next epoch's sources.
            self.new_epoch();
            return Ok(Step::EpochOver(progress));
        }
        Ok(Step::Ran(StepOutputs { outputs, progress }))
    }

    fn too_many_abandoned(&self, limit: usize) -> StepError {
        StepError::TooManyAbandonedWorkers {
            abandoned: self.stats.abandoned_workers,
            limit,
        }
    }

    /// Waits for every worker with a send time in `sent_at`, consuming each of their answers;
    /// a worker still silent `step_timeout` after its own send time is timed out.
    fn collect(
        &mut self,
        step: u64,
        sent_at: &mut [Option<Instant>],
        failures: &mut Vec<DeviceFailure>,
    ) -> Vec<DeviceOutput<M::Output>> {
        let mut slots: Vec<Option<DeviceOutput<M::Output>>> =
            (0..sent_at.len()).map(|_| None).collect();
        let timeout = self.options.step_timeout;
        let due = |sent: Instant| due(timeout, sent);
        while sent_at.iter().any(Option::is_some) {
            let deadline = sent_at.iter().flatten().filter_map(|&sent| due(sent)).min();
            // `recv_deadline` takes an answer already queued before it looks at the clock, so a
            // worker that answered while the caller was still pulling batches is never late.
            let received = match deadline {
                Some(deadline) => self.answers.recv_deadline(deadline),
                None => self
                    .answers
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            let answer = match received {
                Ok(answer) => answer,
                Err(RecvTimeoutError::Timeout) => {
                    self.time_out_late_workers(sent_at, failures);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Cannot happen while the pool holds a sender; were it to, they are gone.
                    for (device, sent) in sent_at.iter_mut().enumerate() {
                        if sent.take().is_some() {
                            failures.push(DeviceFailure {
                                device,
                                kind: FailureKind::WorkerGone,
                            });
                        }
                    }
                    break;
                }
            };
            self.take_answer(answer, step, sent_at, &mut slots, failures);
        }
        slots.into_iter().flatten().collect()
    }

    /// Gives up on every worker still silent `step_timeout` after its own send time, and
    /// replaces it.
    fn time_out_late_workers(
        &mut self,
        sent_at: &mut [Option<Instant>],
        failures: &mut Vec<DeviceFailure>,
    ) {
        let timeout = self.options.step_timeout;
        let (now, limit) = (Instant::now(), timeout.unwrap_or_default());
        for (device, sent) in sent_at.iter_mut().enumerate() {
            if sent
                .and_then(|sent| due(timeout, sent))
                .is_some_and(|due| now >= due)
            {
                *sent = None;
                failures.push(DeviceFailure {
                    device,
                    kind: FailureKind::TimedOut(limit),
                });
                self.replace_worker(device, Loss::Hung);
            }
        }
    }

    /// Files one answer of `step`: its output in `slots`, or its failure (and a fresh worker);
    /// an answer that is not this step's is dropped.
    fn take_answer(
        &mut self,
        answer: Answer<M::Output>,
        step: u64,
        sent_at: &mut [Option<Instant>],
        slots: &mut [Option<DeviceOutput<M::Output>>],
        failures: &mut Vec<DeviceFailure>,
    ) {
        let device = answer.device;
        let current = answer.step == step
            && device < sent_at.len()
            && sent_at[device].is_some()
            && answer.generation == self.workers[device].generation;
        if !current {
            // A late answer of a worker given up on, or of an earlier step: never this step's.
            return;
        }
        sent_at[device] = None;
        match answer.outcome {
            Outcome::Output { output, elapsed } => {
                slots[device] = Some(DeviceOutput {
                    device,
                    output,
                    elapsed,
                });
            }
            Outcome::Panicked(message) => {
                failures.push(DeviceFailure {
                    device,
                    kind: FailureKind::Panicked(message),
                });
                self.replace_worker(device, Loss::Panicked);
            }
            Outcome::Exited => {
                failures.push(DeviceFailure {
                    device,
                    kind: FailureKind::WorkerGone,
                });
                self.replace_worker(device, Loss::Died);
            }
        }
    }

    /// Starts a fresh worker for `device`, which forks the model anew on its first job.
    ///
    /// Never blocks on the old worker unless it is known to be idle or ending: a hung worker, or
    /// one that could not take a job, is let go rather than joined. Past the abandoned-worker
    /// limit, a hung worker gets no replacement and the pool gives up.
    fn replace_worker(&mut self, device: usize, loss: Loss) {
        let generation = self.workers[device].generation + 1;
        match loss {
            Loss::Hung => {
                self.stats.abandoned_workers += 1;
                if let Some(limit) = self.max_abandoned_workers
                    && self.stats.abandoned_workers > limit
                {
                    self.gave_up = Some(limit);
                }
            }
            Loss::Panicked => self.stats.replaced_after_panic += 1,
            Loss::Died | Loss::Refused => self.stats.replaced_gone += 1,
        }
        let fresh = if self.gave_up.is_some() {
            WorkerHandle::missing(generation)
        } else {
            WorkerHandle::spawn(
                device,
                self.devices[device].clone(),
                generation,
                self.options.worker_threads,
                self.answer_sender.clone(),
            )
            .unwrap_or_else(|_| WorkerHandle::missing(generation))
        };
        let old = std::mem::replace(&mut self.workers[device], fresh);
        match loss {
            // It answered (or is unwinding) and waits on nothing but its inbox, which closes now.
            Loss::Panicked | Loss::Died => old.join(),
            Loss::Hung | Loss::Refused => old.abandon(),
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

/// When a worker sent a job at `sent` is late; a timeout too long to add to the clock
/// (`Duration::MAX`) is no deadline at all.
fn due(timeout: Option<Duration>, sent: Instant) -> Option<Instant> {
    timeout.and_then(|timeout| sent.checked_add(timeout))
}
