//! The state the callers' [`WriterPool`](crate::WriterPool) handle shares with the pool thread:
//! counters, kept errors and the queue's byte budget.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::Thread;
use std::time::Duration;

use ember_pack::FileKind;

use crate::batch_context::Fate;
use crate::error::{MAX_KEPT_ERRORS, WriteError};
use crate::options::{ErrorPolicy, WriterOptions};
use crate::stats::WriterStats;

/// How long a caller blocked on the byte budget sleeps between looks, in
/// case the pool thread's notification came just before it started waiting.
const BUDGET_RECHECK: Duration = Duration::from_millis(10);

/// State shared by the callers and the pool thread.
#[derive(Debug)]
pub(crate) struct PoolState {
    pub(crate) policy: ErrorPolicy,
    /// Errors not yet returned to the caller, oldest first.
    pub(crate) pending: Mutex<VecDeque<WriteError>>,
    /// Length of `pending` as seen by the raise policy's fast path.
    pub(crate) raise_pending: AtomicUsize,
    /// Kinds of error already logged at error level.
    pub(crate) logged: Mutex<HashSet<(&'static str, Option<FileKind>)>>,
    pub(crate) submitted: AtomicU64,
    pub(crate) written: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) values_rejected: AtomicU64,
    /// The smallest step of a record the log lost (dropped or lost to a failed writer), or
    /// `i64::MAX`: where the log stops being whole.
    pub(crate) first_lost_step: AtomicI64,
    pub(crate) errors: AtomicU64,
    pub(crate) parallel_batches: AtomicU64,
    pub(crate) fsyncs: AtomicU64,
    /// Errors logged but not kept, the pending queue being full.
    pub(crate) not_kept: AtomicU64,
    pub(crate) writers: Mutex<Vec<WriterStats>>,
    /// Payload bytes of queued and in-flight records.
    pub(crate) queued_bytes: AtomicUsize,
    pub(crate) max_queued_bytes: usize,
    pub(crate) budget_lock: Mutex<()>,
    pub(crate) budget_freed: Condvar,
    pub(crate) budget_waiters: AtomicUsize,
}

impl PoolState {
    pub(crate) fn new(options: &WriterOptions) -> Self {
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
            first_lost_step: AtomicI64::new(i64::MAX),
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
    pub(crate) fn take_raised(&self) -> Option<WriteError> {
        if self.raise_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let error = pending.pop_front();
        self.raise_pending.store(pending.len(), Ordering::Release);
        error
    }

    pub(crate) fn take_all(&self) -> Vec<WriteError> {
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

    /// A record of `step` did not reach the log.
    pub(crate) fn lost(&self, step: i64) {
        self.first_lost_step.fetch_min(step, Ordering::SeqCst);
    }

    /// Counts the fates of a written batch, whose records are of `steps`.
    pub(crate) fn settle(&self, steps: impl Iterator<Item = i64>, fates: &[Fate]) {
        let mut counts = [0u64; 4];
        for (step, &fate) in steps.zip(fates) {
            counts[fate as usize] += 1;
            if matches!(fate, Fate::Dropped | Fate::Failed) {
                self.lost(step);
            }
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
    pub(crate) fn reserve(&self, weight: usize, wait: bool, wake: &Thread) -> bool {
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
