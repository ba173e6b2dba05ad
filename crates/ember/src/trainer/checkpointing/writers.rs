//! The checkpoint threads: up to [`IN_FLIGHT`](super::IN_FLIGHT) long-lived threads that build
//! and write the checkpoints handed to them, oldest first, each answering on the checkpoint's
//! own channel. They start with the run's first checkpoints and end with the [`Checkpointer`](super::Checkpointer).
//!
//! One thread a checkpoint would do the same work, but each would map a stack and unmap it
//! again, and an unmap makes every core running the process flush its address translations:
//! with a checkpoint after every step, the workers would be interrupted at every step for the
//! checkpoint's sake.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::checkpoint::CheckpointError;

/// What a checkpoint thread does for one checkpoint.
type Job = Box<dyn FnOnce() + Send>;

/// The outcome of one checkpoint's writing.
pub(super) type Written = Result<PathBuf, CheckpointError>;

/// The checkpoint threads and the queue they take checkpoints from.
#[derive(Default)]
pub(super) struct Writers {
    jobs: Option<(Sender<Job>, Receiver<Job>)>,
    threads: usize,
}

/// A checkpoint handed to the threads.
pub(super) struct Pending(Receiver<Written>);

impl Writers {
    /// Hands `work` to the threads, starting one more while fewer than `threads` run: it runs
    /// once the checkpoints handed over before it have been taken up.
    pub(super) fn start(
        &mut self,
        threads: usize,
        work: impl FnOnce() -> Written + Send + 'static,
    ) -> std::io::Result<Pending> {
        let (jobs, queue) = self
            .jobs
            .get_or_insert_with(crossbeam_channel::unbounded)
            .clone();
        if self.threads < threads {
            std::thread::Builder::new()
                .name("ember-checkpoint".into())
                .spawn(move || {
                    while let Ok(job) = queue.recv() {
                        job();
                    }
                })?;
            self.threads += 1;
        }
        let (answer, pending) = crossbeam_channel::bounded(1);
        let job: Job = Box::new(move || {
            let written = catch_unwind(AssertUnwindSafe(work))
                .unwrap_or(Err(CheckpointError::WriterPanicked));
            // The run may have ended without waiting for it; nothing to tell then.
            let _ = answer.send(written);
        });
        jobs.send(job)
            .map_err(|_| std::io::Error::other("the checkpoint threads have stopped"))?;
        Ok(Pending(pending))
    }
}

impl Pending {
    /// The outcome, where the checkpoint is written (or failed) already.
    pub(super) fn done(&self) -> Option<Written> {
        match self.0.try_recv() {
            Ok(written) => Some(written),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(CheckpointError::WriterPanicked)),
        }
    }

    /// Waits for the outcome.
    pub(super) fn wait(self) -> Written {
        self.0
            .recv()
            .unwrap_or(Err(CheckpointError::WriterPanicked))
    }
}
