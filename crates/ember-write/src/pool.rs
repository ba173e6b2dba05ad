//! The handle callers hold: [`WriterPool`]. The state it shares with the pool thread
//! (counters, kept errors, the queue's byte budget) is `pool_state.rs`.
//!
//! `write` sends a record over a bounded crossbeam channel after reserving
//! its payload bytes; the pool thread (see `worker.rs`) releases them once the
//! record's batch is written, so queue and in-flight batch together stay
//! within `max_queued_bytes`. A flush is a message in the same channel, so it
//! is handled after every record sent before it.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::thread::{JoinHandle, Thread};

use crossbeam_channel::{Sender, TrySendError};
use ember_pack::Record;

use crate::batch::{Msg, record_weight};
use crate::error::{WriteError, WriteErrors};
use crate::journal::Journal;
use crate::options::{FullQueuePolicy, WriterOptions, create_dir_private};
use crate::pool_state::PoolState;
use crate::stats::WriterPoolStats;
use crate::worker::Worker;

/// Writes records to event files from a dedicated thread; see the crate docs.
///
/// `write` and `flush` take `&self`, so one pool can be shared between
/// threads (for example in an `Arc`). Dropping the pool closes it like
/// [`WriterPool::close`], logging the errors it cannot return.
#[derive(Debug)]
pub struct WriterPool {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    /// The pool thread, to wake it before its gathering delay is over.
    waker: Thread,
    /// Queue length at which a caller wakes the pool thread.
    wake_at: usize,
    shared: Arc<PoolState>,
    full_queue: FullQueuePolicy,
    log_dir: PathBuf,
}

impl WriterPool {
    /// Validates `options`, creates the log directory (mode 0700 when new)
    /// and starts the pool thread. No file is created before its first record.
    pub fn new(options: WriterOptions) -> Result<Self, WriteError> {
        Self::with_journal(options, None)
    }

    /// As [`new`](Self::new), with every file and directory the pool makes listed in
    /// `journal` before it is made (see [`Journal`]): what a rollback may later touch. The
    /// log directory may lie below the journal's (a sub-run's): the directories made down to
    /// it are listed too.
    pub fn with_journal(
        options: WriterOptions,
        journal: Option<Journal>,
    ) -> Result<Self, WriteError> {
        options.validate()?;
        let made = match &journal {
            Some(journal) if options.log_dir != journal.root() => {
                create_dir_private(journal.root())
                    .and_then(|()| journal.make_dirs(&options.log_dir))
            }
            _ => create_dir_private(&options.log_dir),
        };
        made.map_err(|source| WriteError::LogDir {
            path: options.log_dir.clone(),
            source,
        })?;
        let (tx, rx) = crossbeam_channel::bounded(options.queue_capacity);
        let shared = Arc::new(PoolState::new(&options));
        let full_queue = options.full_queue;
        let log_dir = options.log_dir.clone();
        let wake_at = options.max_batch.min(options.queue_capacity).max(1);
        let worker = Worker::new(options, journal, rx, Arc::clone(&shared));
        let thread = std::thread::Builder::new()
            .name("ember-write".into())
            .spawn(move || worker.run())
            .map_err(WriteError::Spawn)?;
        Ok(Self {
            tx: Some(tx),
            waker: thread.thread().clone(),
            thread: Some(thread),
            wake_at,
            shared,
            full_queue,
            log_dir,
        })
    }

    /// The log directory.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Queues `record` for writing.
    ///
    /// `Err` with [`WriteError::refused_record`] true ([`WriteError::QueueFull`]
    /// under [`FullQueuePolicy::Error`], [`WriteError::Closed`]) means this
    /// record was not queued. Under the raise policy any other error is one the
    /// pool met earlier, returned after this record was queued: an earlier
    /// failure never costs a record that was handed over. A full queue (in
    /// records, or in bytes) blocks, drops the record (counted) or fails, as
    /// the full-queue policy says.
    pub fn write(&self, record: Record) -> Result<(), WriteError> {
        self.queue(record)?;
        match self.shared.take_raised() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn queue(&self, record: Record) -> Result<(), WriteError> {
        let tx = self.tx.as_ref().ok_or(WriteError::Closed)?;
        let weight = record_weight(&record);
        let block = self.full_queue == FullQueuePolicy::Block;
        // Counted before it can be settled, so no snapshot shows a fate
        // without its submission.
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        let step = record.step();
        if !self.shared.reserve(weight, block, &self.waker) {
            return self.full(step);
        }
        let sent = if block {
            tx.send(Msg::Record(record, weight))
                .map_err(|_| TrySendError::Disconnected(()))
        } else {
            tx.try_send(Msg::Record(record, weight))
                .map_err(|e| match e {
                    TrySendError::Full(_) => TrySendError::Full(()),
                    TrySendError::Disconnected(_) => TrySendError::Disconnected(()),
                })
        };
        match sent {
            Ok(()) => {
                if tx.len() >= self.wake_at {
                    self.waker.unpark();
                }
                Ok(())
            }
            Err(TrySendError::Full(())) => {
                self.shared.release(weight);
                self.full(step)
            }
            Err(TrySendError::Disconnected(())) => {
                self.shared.release(weight);
                self.shared.submitted.fetch_sub(1, Ordering::SeqCst);
                Err(WriteError::Closed)
            }
        }
    }

    /// Counts a record the full queue did not take, and says so under the
    /// error policy.
    fn full(&self, step: i64) -> Result<(), WriteError> {
        self.shared.dropped_full.fetch_add(1, Ordering::SeqCst);
        self.shared.lost(step);
        // The pool thread may be gathering: have it write now.
        self.waker.unpark();
        if self.full_queue == FullQueuePolicy::Error {
            Err(WriteError::QueueFull)
        } else {
            Ok(())
        }
    }

    /// Returns once every record sent before it has reached the operating
    /// system (with [`Durability::Sync`](crate::Durability::Sync), the disk).
    /// Under the raise policy it then returns the oldest error not yet returned.
    pub fn flush(&self) -> Result<(), WriteError> {
        let tx = self.tx.as_ref().ok_or(WriteError::Closed)?;
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        tx.send(Msg::Flush(ack_tx))
            .map_err(|_| WriteError::Closed)?;
        self.waker.unpark();
        ack_rx.recv().map_err(|_| WriteError::ThreadPanicked)?;
        match self.shared.take_raised() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Runs `then` on the pool thread once every record sent before this call has reached the
    /// operating system (with [`Durability::Sync`](crate::Durability::Sync), the disk), without
    /// waiting for it: what must be taken at exactly that point of the record order (the
    /// files' lengths, for a checkpoint) is taken there, while the caller goes on. `then` is
    /// given the first step a record was lost at so far, if any (as
    /// [`first_lost_step`](Self::first_lost_step) would say then). It runs before the pool
    /// closes, or never where the pool thread died: make it answer over a channel whose
    /// sender it owns, so that a waiter learns either way.
    pub fn after_written(
        &self,
        then: impl FnOnce(Option<i64>) + Send + 'static,
    ) -> Result<(), WriteError> {
        let tx = self.tx.as_ref().ok_or(WriteError::Closed)?;
        tx.send(Msg::After(Box::new(then)))
            .map_err(|_| WriteError::Closed)?;
        self.waker.unpark();
        Ok(())
    }

    /// Writes every queued record, flushes, fsyncs and closes every file, and
    /// returns every error not yet returned or taken, up to
    /// [`MAX_KEPT_ERRORS`](crate::MAX_KEPT_ERRORS) of them; the rest are counted.
    pub fn close(self) -> Result<(), WriteErrors> {
        self.close_with_stats().0
    }

    /// [`close`](Self::close), also returning the final counters: every
    /// record's fate is settled by then.
    pub fn close_with_stats(mut self) -> (Result<(), WriteErrors>, WriterPoolStats) {
        let errors = self.shutdown();
        let not_kept = self.shared.not_kept.swap(0, Ordering::Relaxed);
        let result = if errors.is_empty() && not_kept == 0 {
            Ok(())
        } else {
            Err(WriteErrors { errors, not_kept })
        };
        (result, self.stats())
    }

    /// Takes the errors kept for the caller so far, oldest first: under the log policy every
    /// error, under the raise policy those not yet returned.
    pub fn take_errors(&self) -> Vec<WriteError> {
        self.shared.take_all()
    }

    /// The smallest step of a record the log lost (a full queue dropped it, a writer dropped
    /// it, or it was lost to a failed writer), as of the last batch the pool thread finished:
    /// from there on the log is not whole. `None` while nothing was lost.
    pub fn first_lost_step(&self) -> Option<i64> {
        Some(self.shared.first_lost_step.load(Ordering::SeqCst)).filter(|&step| step != i64::MAX)
    }

    /// A snapshot of the counters. Per-writer figures are as of the last
    /// batch the pool thread finished.
    pub fn stats(&self) -> WriterPoolStats {
        let s = &self.shared;
        // Fates first: a record is submitted before it is settled, so the
        // submissions read afterwards are never fewer than the fates.
        let records_written = s.written.load(Ordering::SeqCst);
        let records_dropped = s.dropped.load(Ordering::SeqCst);
        let records_rejected = s.rejected.load(Ordering::SeqCst);
        let records_failed = s.failed.load(Ordering::SeqCst);
        let records_dropped_queue_full = s.dropped_full.load(Ordering::SeqCst);
        WriterPoolStats {
            records_submitted: s.submitted.load(Ordering::SeqCst),
            records_written,
            records_dropped_queue_full,
            records_dropped,
            records_rejected,
            records_failed,
            values_rejected: s.values_rejected.load(Ordering::Relaxed),
            queue_depth: self.tx.as_ref().map_or(0, Sender::len),
            queued_bytes: s.queued_bytes.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            fsyncs: s.fsyncs.load(Ordering::Relaxed),
            parallel_batches: s.parallel_batches.load(Ordering::Relaxed),
            writers: s
                .writers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    fn shutdown(&mut self) -> Vec<WriteError> {
        // Disconnecting the channel tells the thread to drain and finish.
        drop(self.tx.take());
        self.waker.unpark();
        let mut errors = Vec::new();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            errors.push(WriteError::ThreadPanicked);
        }
        let mut all = self.shared.take_all();
        all.extend(errors);
        all
    }
}

impl Drop for WriterPool {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        for error in self.shutdown() {
            log::error!("ember-write: error while closing on drop: {error}");
        }
    }
}
