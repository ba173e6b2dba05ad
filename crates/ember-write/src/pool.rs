//! The handle callers hold: [`WriterPool`], and the state it shares with the
//! pool thread (counters, kept errors, the queue's byte budget).
//!
//! `write` sends a record over a bounded crossbeam channel after reserving
//! its payload bytes; the pool thread (see `worker.rs`) releases them once the
//! record's batch is written, so queue and in-flight batch together stay
//! within `max_queued_bytes`. A flush is a message in the same channel, so it
//! is handled after every record sent before it.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use crossbeam_channel::{Sender, TrySendError};
use ember_pack::{FileKind, Record};

use crate::error::{MAX_KEPT_ERRORS, WriteError, WriteErrors};
use crate::ledger::Fate;
use crate::options::{
    ErrorPolicy, FullQueuePolicy, WriterOptions, WriterPoolBuilder, create_dir_private,
};
use crate::stats::{PoolStats, WriterStats};
use crate::worker::{Msg, Worker, record_weight};

/// How long a caller blocked on the byte budget sleeps between looks, in
/// case the pool thread's notification came just before it started waiting.
const BUDGET_RECHECK: Duration = Duration::from_millis(10);

/// State shared by the callers and the pool thread.
#[derive(Debug)]
pub(crate) struct Shared {
    policy: ErrorPolicy,
    /// Errors not yet returned to the caller, oldest first.
    pending: Mutex<VecDeque<WriteError>>,
    /// Length of `pending` as seen by the raise policy's fast path.
    raise_pending: AtomicUsize,
    /// Kinds of error already logged at error level.
    logged: Mutex<HashSet<(&'static str, Option<FileKind>)>>,
    submitted: AtomicU64,
    written: AtomicU64,
    dropped_full: AtomicU64,
    dropped: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    values_rejected: AtomicU64,
    errors: AtomicU64,
    parallel_batches: AtomicU64,
    fsyncs: AtomicU64,
    /// Errors logged but not kept, the pending queue being full.
    not_kept: AtomicU64,
    writers: Mutex<Vec<WriterStats>>,
    /// Payload bytes of queued and in-flight records.
    queued_bytes: AtomicUsize,
    max_queued_bytes: usize,
    budget_lock: Mutex<()>,
    budget_freed: Condvar,
    budget_waiters: AtomicUsize,
}

impl Shared {
    fn new(options: &WriterOptions) -> Self {
        Self {
            policy: options.error_policy,
            pending: Mutex::new(VecDeque::new()),
            raise_pending: AtomicUsize::new(0),
            logged: Mutex::new(HashSet::new()),
            submitted: AtomicU64::new(0),
            written: AtomicU64::new(0),
            dropped_full: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            values_rejected: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            parallel_batches: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            not_kept: AtomicU64::new(0),
            writers: Mutex::new(Vec::new()),
            queued_bytes: AtomicUsize::new(0),
            max_queued_bytes: options.max_queued_bytes,
            budget_lock: Mutex::new(()),
            budget_freed: Condvar::new(),
            budget_waiters: AtomicUsize::new(0),
        }
    }

    pub(crate) fn report(&self, error: WriteError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let first_of_kind = self
            .logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(error.kind_key());
        match self.policy {
            ErrorPolicy::Log if first_of_kind => log::error!(
                "ember-write: {error} (later errors of this kind are logged at debug level)"
            ),
            _ => log::debug!("ember-write: {error}"),
        }
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.len() >= MAX_KEPT_ERRORS {
            if self.policy == ErrorPolicy::Raise {
                log::error!("ember-write: {error}");
            }
            self.not_kept.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.push_back(error);
        if self.policy == ErrorPolicy::Raise {
            self.raise_pending.store(pending.len(), Ordering::Release);
        }
    }

    /// The oldest error not yet returned, under the raise policy.
    fn take_raised(&self) -> Option<WriteError> {
        if self.raise_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let error = pending.pop_front();
        self.raise_pending.store(pending.len(), Ordering::Release);
        error
    }

    fn take_all(&self) -> Vec<WriteError> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        self.raise_pending.store(0, Ordering::Release);
        pending.drain(..).collect()
    }

    pub(crate) fn value_rejected(&self) {
        self.values_rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn parallel_batch(&self) {
        self.parallel_batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the fates of a written batch.
    pub(crate) fn settle(&self, fates: &[Fate]) {
        let mut counts = [0u64; 4];
        for &fate in fates {
            counts[fate as usize] += 1;
        }
        let [written, dropped, failed, rejected] = counts;
        self.written.fetch_add(written, Ordering::SeqCst);
        self.dropped.fetch_add(dropped, Ordering::SeqCst);
        self.failed.fetch_add(failed, Ordering::SeqCst);
        self.rejected.fetch_add(rejected, Ordering::SeqCst);
    }

    pub(crate) fn publish(&self, writers: Vec<WriterStats>, fsyncs: u64) {
        *self.writers.lock().unwrap_or_else(PoisonError::into_inner) = writers;
        self.fsyncs.store(fsyncs, Ordering::Relaxed);
    }

    /// Reserves `weight` bytes of the budget; false when they do not fit and
    /// the caller must not wait. A record heavier than the whole budget fits
    /// an empty queue.
    fn reserve(&self, weight: usize, wait: bool, wake: &Thread) -> bool {
        let mut current = self.queued_bytes.load(Ordering::Acquire);
        loop {
            if current == 0 || current.saturating_add(weight) <= self.max_queued_bytes {
                match self.queued_bytes.compare_exchange_weak(
                    current,
                    current + weight,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return true,
                    Err(now) => {
                        current = now;
                        continue;
                    }
                }
            }
            if !wait {
                return false;
            }
            // Write what is queued now rather than after its delay.
            wake.unpark();
            self.budget_waiters.fetch_add(1, Ordering::SeqCst);
            let guard = self
                .budget_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let _ = self
                .budget_freed
                .wait_timeout(guard, BUDGET_RECHECK)
                .unwrap_or_else(PoisonError::into_inner);
            self.budget_waiters.fetch_sub(1, Ordering::SeqCst);
            current = self.queued_bytes.load(Ordering::Acquire);
        }
    }

    /// Whether half the byte budget or more is taken, or a caller waits for it.
    pub(crate) fn budget_tight(&self) -> bool {
        self.budget_waiters.load(Ordering::SeqCst) > 0
            || self.queued_bytes.load(Ordering::Acquire) >= self.max_queued_bytes / 2
    }

    /// Gives `weight` bytes back to the budget.
    pub(crate) fn release(&self, weight: usize) {
        self.queued_bytes.fetch_sub(weight, Ordering::AcqRel);
        if self.budget_waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self
                .budget_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.budget_freed.notify_all();
        }
    }
}

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
    shared: Arc<Shared>,
    full_queue: FullQueuePolicy,
    log_dir: PathBuf,
}

impl WriterPool {
    /// A builder with the defaults for `log_dir`.
    pub fn builder(log_dir: impl Into<PathBuf>) -> WriterPoolBuilder {
        WriterPoolBuilder::new(log_dir)
    }

    /// Validates `options`, creates the log directory (mode 0700 when new)
    /// and starts the pool thread. No file is created before its first record.
    pub fn new(options: WriterOptions) -> Result<Self, WriteError> {
        options.validate()?;
        create_dir_private(&options.log_dir).map_err(|source| WriteError::LogDir {
            path: options.log_dir.clone(),
            source,
        })?;
        let (tx, rx) = crossbeam_channel::bounded(options.queue_capacity);
        let shared = Arc::new(Shared::new(&options));
        let full_queue = options.full_queue;
        let log_dir = options.log_dir.clone();
        let wake_at = options.max_batch.min(options.queue_capacity).max(1);
        let worker = Worker::new(options, rx, Arc::clone(&shared));
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
        if !self.shared.reserve(weight, block, &self.waker) {
            return self.full();
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
                self.full()
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
    fn full(&self) -> Result<(), WriteError> {
        self.shared.dropped_full.fetch_add(1, Ordering::SeqCst);
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

    /// Writes every queued record, flushes, fsyncs and closes every file, and
    /// returns every error not yet returned or taken, up to
    /// [`MAX_KEPT_ERRORS`] of them; the rest are counted.
    pub fn close(self) -> Result<(), WriteErrors> {
        self.close_with_stats().0
    }

    /// [`close`](Self::close), also returning the final counters: every
    /// record's fate is settled by then.
    pub fn close_with_stats(mut self) -> (Result<(), WriteErrors>, PoolStats) {
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

    /// A snapshot of the counters. Per-writer figures are as of the last
    /// batch the pool thread finished.
    pub fn stats(&self) -> PoolStats {
        let s = &self.shared;
        // Fates first: a record is submitted before it is settled, so the
        // submissions read afterwards are never fewer than the fates.
        let records_written = s.written.load(Ordering::SeqCst);
        let records_dropped = s.dropped.load(Ordering::SeqCst);
        let records_rejected = s.rejected.load(Ordering::SeqCst);
        let records_failed = s.failed.load(Ordering::SeqCst);
        let records_dropped_queue_full = s.dropped_full.load(Ordering::SeqCst);
        PoolStats {
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
