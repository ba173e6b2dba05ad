//! One device's worker thread and the messages it exchanges with the pool.

use std::any::Any;
use std::cell::Cell;
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ember_step::StepModel;

/// A batch and the model to run it with, for one step.
pub(crate) struct Job<M: StepModel> {
    pub(crate) step: u64,
    pub(crate) model: M,
    pub(crate) input: M::Input,
}

/// A worker's answer to one job. `generation` tells a replaced worker's late answers apart.
pub(crate) struct Answer<O> {
    pub(crate) device: usize,
    pub(crate) generation: u64,
    pub(crate) step: u64,
    pub(crate) outcome: Outcome<O>,
}

pub(crate) enum Outcome<O> {
    Output {
        output: O,
        elapsed: Duration,
    },
    Panicked(String),
    /// The thread is ending by a panic that escaped the step's guard.
    Exited,
}

/// The pool's handle on one worker.
pub(crate) struct WorkerHandle<M: StepModel> {
    pub(crate) generation: u64,
    /// `None` when the worker could not be started; the next step reports it as gone.
    jobs: Option<Sender<Job<M>>>,
    thread: Option<JoinHandle<()>>,
}

impl<M: StepModel> WorkerHandle<M> {
    pub(crate) fn spawn(
        device_index: usize,
        device: M::Device,
        generation: u64,
        threads: Option<NonZeroUsize>,
        answers: Sender<Answer<M::Output>>,
    ) -> std::io::Result<Self> {
        let compute = match threads {
            Some(threads) => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads.get())
                    .thread_name(move |thread| {
                        format!("ember-device-{device_index}-compute-{thread}")
                    })
                    .build()
                    .map_err(std::io::Error::other)?,
            ),
            None => None,
        };
        // One job at a time is the pool's invariant (a worker is sent a job only once its last
        // answer is in, or after it was replaced), so one slot is all the inbox needs.
        let (jobs, inbox) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name(format!("ember-device-{device_index}"))
            .spawn(move || run(device_index, device, generation, compute, inbox, answers))?;
        Ok(Self {
            generation,
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// A handle for a worker that could not be started.
    pub(crate) fn missing(generation: u64) -> Self {
        Self {
            generation,
            jobs: None,
            thread: None,
        }
    }

    /// Sends a job without ever blocking; gives it back if the worker is gone or, against the
    /// one-job-at-a-time invariant, still has a job waiting.
    pub(crate) fn send(&self, job: Job<M>) -> Result<(), Job<M>> {
        match &self.jobs {
            Some(jobs) => jobs.try_send(job).map_err(|error| error.into_inner()),
            None => Err(job),
        }
    }

    /// Lets the worker go without waiting for it: it ends after its current job, if ever.
    pub(crate) fn abandon(mut self) {
        self.jobs = None;
        self.thread = None;
    }

    /// Closes the worker's inbox and waits for the thread to end.
    pub(crate) fn join(mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            // A worker that died by a panic has already been reported; its payload is dropped
            // inside a guard so that a payload which panics on drop cannot reach the caller.
            let _ = catch_unwind(AssertUnwindSafe(|| drop(thread.join())));
        }
    }
}

fn run<M: StepModel>(
    device_index: usize,
    device: M::Device,
    generation: u64,
    compute: Option<rayon::ThreadPool>,
    inbox: Receiver<Job<M>>,
    answers: Sender<Answer<M::Output>>,
) {
    let guard = ExitGuard {
        device: device_index,
        generation,
        step: Cell::new(0),
        answers: answers.clone(),
    };
    while let Ok(job) = inbox.recv() {
        guard.step.set(job.step);
        let started = Instant::now();
        let Job { step, model, input } = job;
        // rayon's `install` runs the step on the compute pool's thread (with a clone of the
        // device, which need not be `Sync`) and resumes its panic here, inside the guard.
        let result = catch_unwind(AssertUnwindSafe(|| match &compute {
            Some(compute) => {
                let device = device.clone();
                compute.install(move || model.fork(&device).step(input))
            }
            None => model.fork(&device).step(input),
        }));
        let outcome = match result {
            Ok(output) => Outcome::Output {
                output,
                elapsed: started.elapsed(),
            },
            Err(payload) => Outcome::Panicked(panic_message(payload)),
        };
        let answer = Answer {
            device: device_index,
            generation,
            step,
            outcome,
        };
        if answers.send(answer).is_err() {
            break;
        }
    }
}

/// Tells the pool when a worker thread unwinds outside the step's `catch_unwind`, so the
/// step that was waiting for it reports the worker as gone instead of waiting forever.
struct ExitGuard<O> {
    device: usize,
    generation: u64,
    step: Cell<u64>,
    answers: Sender<Answer<O>>,
}

impl<O> Drop for ExitGuard<O> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.answers.send(Answer {
                device: self.device,
                generation: self.generation,
                step: self.step.get(),
                outcome: Outcome::Exited,
            });
        }
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_string()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks its step until the test drops the other end of `release`.
    #[derive(Clone)]
    struct Blocking {
        release: Receiver<()>,
    }

    impl StepModel for Blocking {
        type Device = ();
        type Input = ();
        type Output = ();
        fn fork(self, _device: &()) -> Self {
            self
        }
        fn step(&self, _input: ()) {
            let _ = self.release.recv();
        }
    }

    #[test]
    fn a_busy_worker_holds_one_job_and_refuses_more_without_blocking() {
        let (answers, answered) = crossbeam_channel::unbounded();
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        let worker = WorkerHandle::<Blocking>::spawn(0, (), 0, None, answers).unwrap();
        let job = |step| Job {
            step,
            model: Blocking {
                release: released.clone(),
            },
            input: (),
        };
        assert!(worker.send(job(1)).is_ok());
        // The first job fills the slot until the worker takes it; the second waits in the slot
        // while the worker is busy; a third is refused at once instead of queued.
        while worker.send(job(2)).is_err() {
            std::thread::yield_now();
        }
        assert!(matches!(worker.send(job(3)), Err(Job { step: 3, .. })));
        drop(release);
        let steps: Vec<u64> = answered.iter().take(2).map(|answer| answer.step).collect();
        assert_eq!(steps, [1, 2]);
        worker.join();
    }
}
