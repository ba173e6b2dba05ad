//! The asynchronous writer pool: a dedicated thread that owns the writers.
//!
//! Callers send [`Record`]s over a bounded crossbeam channel. The thread
//! blocks on that channel (with a timeout only for the timed flush), takes
//! up to `max_batch` queued records at once, packs them in parallel on rayon
//! (`par_iter().map().collect()` keeps their order), then writes the packed
//! items serially in submission order. A flush request is a message in the
//! same channel, so it is handled after every record sent before it.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};
use ember_pack::{
    FileKind, Histogram, MetadataFor, PackedItem, PackedRecord, Packer, Record, Tag, Value,
};
use rayon::prelude::*;

use crate::error::{FileError, MAX_KEPT_ERRORS, WriteError, WriteErrors};
use crate::files::{self, EventFileWriter, ExportOutcome, ExportWriter, FileSettings, HeaderFn};
use crate::framing;
use crate::options::{
    Durability, ErrorPolicy, FullQueuePolicy, WriterOptions, WriterPoolBuilder, create_dir_private,
};
use crate::stats::{PoolStats, WriterStats};

/// A value at least this large is worth a rayon task of its own.
const HEAVY_VALUE_BYTES: usize = 4096;

/// Batches with fewer heavy values than this are packed on the pool thread.
///
/// Light records (scalars) are packed serially: the caller's thread keeps
/// the other cores busy producing them, and on a small machine rayon's
/// workers would only compete with it (measured: 1.4M vs 0.9M scalar
/// records/s on 2 cores). Heavy records leave the caller waiting on a full
/// queue, so their packing gets the cores.
const PARALLEL_MIN_HEAVY: usize = 2;

enum Msg {
    Record(Record),
    Flush(Sender<()>),
}

/// State shared by the callers and the pool thread.
#[derive(Debug)]
struct Shared {
    policy: ErrorPolicy,
    /// Errors not yet returned to the caller, oldest first.
    pending: Mutex<VecDeque<WriteError>>,
    /// Length of `pending` as seen by the raise policy's fast path.
    raise_pending: AtomicUsize,
    submitted: AtomicU64,
    dropped_full: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
    /// Errors logged but not kept, the pending queue being full.
    not_kept: AtomicU64,
    writers: Mutex<Vec<WriterStats>>,
}

impl Shared {
    fn report(&self, error: WriteError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        match self.policy {
            ErrorPolicy::Raise => log::debug!("ember-write: {error}"),
            ErrorPolicy::Log => log::error!("ember-write: {error}"),
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
    shared: Arc<Shared>,
    full_queue: FullQueuePolicy,
    log_dir: PathBuf,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Record(r) => write!(f, "Record(step {})", r.step()),
            Msg::Flush(_) => f.write_str("Flush"),
        }
    }
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
        let shared = Arc::new(Shared {
            policy: options.error_policy,
            pending: Mutex::new(VecDeque::new()),
            raise_pending: AtomicUsize::new(0),
            submitted: AtomicU64::new(0),
            dropped_full: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            not_kept: AtomicU64::new(0),
            writers: Mutex::new(Vec::new()),
        });
        let full_queue = options.full_queue;
        let log_dir = options.log_dir.clone();
        let worker = Worker::new(options, rx, Arc::clone(&shared));
        worker.publish_stats();
        let thread = std::thread::Builder::new()
            .name("ember-write".into())
            .spawn(move || worker.run())
            .map_err(WriteError::Spawn)?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
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
    /// Under the raise policy an error the pool met since the last call is
    /// returned, after this record is queued: an earlier failure never costs a
    /// record that was handed over. A full queue blocks, drops the record
    /// (counted) or fails, as the full-queue policy says.
    pub fn write(&self, record: Record) -> Result<(), WriteError> {
        let queued = self.queue(record);
        match self.shared.take_raised() {
            Some(error) => Err(error),
            None => queued,
        }
    }

    fn queue(&self, record: Record) -> Result<(), WriteError> {
        let tx = self.tx.as_ref().ok_or(WriteError::Closed)?;
        let sent = match self.full_queue {
            FullQueuePolicy::Block => tx.send(Msg::Record(record)).map_err(|_| WriteError::Closed),
            FullQueuePolicy::DropNewest | FullQueuePolicy::Error => {
                match tx.try_send(Msg::Record(record)) {
                    Ok(()) => Ok(()),
                    Err(TrySendError::Full(_)) => {
                        if self.full_queue == FullQueuePolicy::Error {
                            return Err(WriteError::QueueFull);
                        }
                        self.shared.dropped_full.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    Err(TrySendError::Disconnected(_)) => Err(WriteError::Closed),
                }
            }
        };
        if sent.is_ok() {
            self.shared.submitted.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Returns once every record sent before it has reached the operating
    /// system (with [`Durability::Sync`], the disk). Under the raise policy it
    /// then returns the oldest error not yet returned.
    pub fn flush(&self) -> Result<(), WriteError> {
        let tx = self.tx.as_ref().ok_or(WriteError::Closed)?;
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        tx.send(Msg::Flush(ack_tx))
            .map_err(|_| WriteError::Closed)?;
        ack_rx.recv().map_err(|_| WriteError::ThreadPanicked)?;
        match self.shared.take_raised() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Writes every queued record, flushes, fsyncs and closes every file, and
    /// returns every error not yet returned (under the log policy: all), up
    /// to [`MAX_KEPT_ERRORS`] of them; the rest are counted.
    pub fn close(mut self) -> Result<(), WriteErrors> {
        let errors = self.shutdown();
        let not_kept = self.shared.not_kept.swap(0, Ordering::Relaxed);
        if errors.is_empty() && not_kept == 0 {
            Ok(())
        } else {
            Err(WriteErrors { errors, not_kept })
        }
    }

    /// Takes the errors kept for the caller so far, oldest first: under the log policy every
    /// error, under the raise policy those not yet returned.
    pub fn take_errors(&self) -> Vec<WriteError> {
        self.shared.take_all()
    }

    /// A snapshot of the counters. Per-writer figures are as of the last
    /// batch the pool thread finished.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            records_submitted: self.shared.submitted.load(Ordering::Relaxed),
            records_dropped_queue_full: self.shared.dropped_full.load(Ordering::Relaxed),
            queue_depth: self.tx.as_ref().map_or(0, Sender::len),
            values_rejected: self.shared.rejected.load(Ordering::Relaxed),
            errors: self.shared.errors.load(Ordering::Relaxed),
            writers: self
                .shared
                .writers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    fn shutdown(&mut self) -> Vec<WriteError> {
        // Disconnecting the channel tells the thread to drain and finish.
        drop(self.tx.take());
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

/// One writer slot per file kind.
#[derive(Debug)]
enum Slot {
    Event(Box<EventFileWriter>),
    Export(Box<ExportWriter>),
    Failed(WriterStats),
}

impl Slot {
    fn stats(&self) -> &WriterStats {
        match self {
            Slot::Event(w) => &w.stats,
            Slot::Export(w) => &w.stats,
            Slot::Failed(s) => s,
        }
    }

    fn stats_mut(&mut self) -> &mut WriterStats {
        match self {
            Slot::Event(w) => &mut w.stats,
            Slot::Export(w) => &mut w.stats,
            Slot::Failed(s) => s,
        }
    }
}

const KINDS: [FileKind; 4] = [
    FileKind::Summary,
    FileKind::Lineage,
    FileKind::Explain,
    FileKind::Export,
];

fn slot_index(kind: FileKind) -> usize {
    match kind {
        FileKind::Summary => 0,
        FileKind::Lineage => 1,
        FileKind::Explain => 2,
        FileKind::Export => 3,
    }
}

/// Whether packing `value` takes long enough to be worth a rayon task.
fn is_heavy(value: &Value) -> bool {
    let bytes = match value {
        Value::Tensor(t) | Value::Export(t) => t.bytes().len(),
        Value::Histogram(Histogram::Raw(t)) => t.bytes().len(),
        Value::Image(image) => image.data.bytes().len(),
        _ => 0,
    };
    bytes >= HEAVY_VALUE_BYTES
}

fn metadata_for<'a>(tags: &'a Option<HashSet<Tag>>, empty: &'a HashSet<Tag>) -> MetadataFor<'a> {
    MetadataFor::Only(tags.as_ref().unwrap_or(empty))
}

/// The record's tags the summary file has not seen; `None` for none.
fn unseen_tags(seen: &HashSet<Tag>, record: &Record) -> Option<HashSet<Tag>> {
    let mut out: Option<HashSet<Tag>> = None;
    for (tag, _) in record.values() {
        if !seen.contains(tag) {
            out.get_or_insert_with(HashSet::new).insert(tag.clone());
        }
    }
    out
}

/// The pool thread's state.
#[derive(Debug)]
struct Worker {
    rx: Receiver<Msg>,
    shared: Arc<Shared>,
    packer: Arc<Packer>,
    slots: Vec<Slot>,
    max_batch: usize,
    flush_interval: Option<std::time::Duration>,
    sync_on_flush: bool,
    empty: HashSet<Tag>,
    /// True while the summary file's tag set is exactly what the batch's
    /// metadata plan assumed: no rotation, no record dropped or rejected
    /// since the plan. Then records are written as packed, unchecked.
    plan_holds: bool,
}

impl Worker {
    fn new(options: WriterOptions, rx: Receiver<Msg>, shared: Arc<Shared>) -> Self {
        let packer = Arc::new(Packer::new(options.pack.clone()));
        let settings = FileSettings {
            log_dir: options.log_dir.clone(),
            naming: options.naming(),
            start_secs: files::unix_secs(),
            max_file_size: options.max_file_size,
            size_policy: options.size_policy,
            disk_guard_factor: options.disk_guard_factor,
            free_space: options.free_space.clone(),
            durability: options.durability,
            read_only_on_close: options.read_only_on_close,
        };
        let slots = KINDS
            .iter()
            .map(|&kind| match kind {
                FileKind::Export => Slot::Export(Box::new(ExportWriter::new(settings.clone()))),
                kind => {
                    let p = Arc::clone(&packer);
                    let header = HeaderFn(Box::new(move |t| p.file_header(kind, t)));
                    Slot::Event(Box::new(EventFileWriter::new(
                        kind,
                        settings.clone(),
                        header,
                    )))
                }
            })
            .collect();
        Self {
            rx,
            shared,
            packer,
            slots,
            max_batch: options.max_batch,
            flush_interval: options.flush_interval,
            sync_on_flush: options.durability == Durability::Sync,
            empty: HashSet::new(),
            plan_holds: true,
        }
    }

    fn run(mut self) {
        let mut next_flush = self.flush_interval.map(|i| Instant::now() + i);
        let mut batch = Vec::with_capacity(self.max_batch);
        loop {
            let first = match next_flush {
                Some(deadline) => match self
                    .rx
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match self.rx.recv() {
                    Ok(msg) => Some(msg),
                    Err(_) => break,
                },
            };
            let mut ack = None;
            match first {
                Some(Msg::Record(r)) => batch.push(r),
                Some(Msg::Flush(a)) => ack = Some(a),
                None => {}
            }
            while ack.is_none() && !batch.is_empty() && batch.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(Msg::Record(r)) => batch.push(r),
                    Ok(Msg::Flush(a)) => ack = Some(a),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if !batch.is_empty() {
                self.write_batch(&mut batch);
            }
            let timed = next_flush.is_some_and(|d| Instant::now() >= d);
            if ack.is_some() || timed {
                self.flush_all(self.sync_on_flush);
                if let Some(interval) = self.flush_interval {
                    next_flush = Some(Instant::now() + interval);
                }
            }
            self.publish_stats();
            if let Some(ack) = ack {
                // The caller may have given up waiting; nothing to do then.
                let _ = ack.send(());
            }
        }
        self.close_all();
        self.publish_stats();
    }

    fn publish_stats(&self) {
        let stats: Vec<WriterStats> = self.slots.iter().map(|s| s.stats().clone()).collect();
        *self
            .shared
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = stats;
    }

    /// Closes and removes the writer of slot `idx`, keeping the error.
    fn fail(&mut self, idx: usize, error: FileError) {
        let slot = &mut self.slots[idx];
        let mut stats = slot.stats().clone();
        if let Slot::Event(w) = slot {
            // Best effort: a writer that failed on I/O may fail again here.
            let _ = w.close_file();
        }
        stats.failed = true;
        let kind = stats.kind;
        *slot = Slot::Failed(stats);
        self.shared.report(WriteError::WriterFailed {
            kind,
            source: error,
        });
    }

    fn write_batch(&mut self, batch: &mut Vec<Record>) {
        for slot in &mut self.slots {
            match slot {
                Slot::Event(w) => w.begin_batch(),
                Slot::Export(w) => w.begin_batch(),
                Slot::Failed(_) => {}
            }
        }
        // Which tags are new to the summary file, decided serially in
        // submission order before packing in parallel.
        let plan: Vec<Option<HashSet<Tag>>> = match &self.slots[0] {
            Slot::Event(w) => {
                let mut batch_new: HashSet<Tag> = HashSet::new();
                batch
                    .iter()
                    .map(|r| {
                        let mut new: Option<HashSet<Tag>> = None;
                        for (tag, _) in r.values() {
                            if !w.seen_tags.contains(tag) && batch_new.insert(tag.clone()) {
                                new.get_or_insert_with(HashSet::new).insert(tag.clone());
                            }
                        }
                        new
                    })
                    .collect()
            }
            _ => vec![None; batch.len()],
        };
        self.plan_holds = true;
        let packer = &self.packer;
        let empty = &self.empty;
        let heavy = batch
            .iter()
            .flat_map(|r| r.values())
            .filter(|(_, v)| is_heavy(v))
            .take(PARALLEL_MIN_HEAVY)
            .count();
        let packed: Vec<PackedRecord> = if batch.len() > 1 && heavy >= PARALLEL_MIN_HEAVY {
            batch
                .par_iter()
                .zip(plan.par_iter())
                .map(|(r, tags)| packer.pack(r, metadata_for(tags, empty)))
                .collect()
        } else {
            batch
                .iter()
                .zip(&plan)
                .map(|(r, tags)| packer.pack(r, metadata_for(tags, empty)))
                .collect()
        };
        for ((record, assumed), packed) in batch.iter().zip(&plan).zip(packed) {
            self.write_record(record, assumed, packed);
        }
        batch.clear();
    }

    fn write_record(
        &mut self,
        record: &Record,
        assumed: &Option<HashSet<Tag>>,
        packed: PackedRecord,
    ) {
        let PackedRecord { items, rejected } = packed;
        let mut rejected_tags: Vec<Tag> = Vec::new();
        if !rejected.is_empty() {
            // A rejected value's tag is still new to the file.
            self.plan_holds = false;
        }
        for error in rejected {
            self.shared.rejected.fetch_add(1, Ordering::Relaxed);
            rejected_tags.push(error.tag.clone());
            self.shared.report(WriteError::Rejected {
                step: record.step(),
                source: error,
            });
        }
        let mut summary: Vec<Vec<u8>> = Vec::new();
        for item in items {
            let PackedItem {
                kind,
                bytes,
                export,
            } = item;
            match kind {
                FileKind::Summary => summary.push(bytes),
                FileKind::Export => {
                    let (tag, step) = match &export {
                        Some(key) => (key.tag.as_str().to_owned(), key.step),
                        None => (String::from("tensor"), record.step()),
                    };
                    self.write_export(&tag, step, &bytes);
                }
                kind => self.write_plain(kind, &[bytes]),
            }
        }
        if !summary.is_empty() {
            self.write_summary(record, assumed, summary, &rejected_tags);
        } else if assumed.is_some() {
            // Tags planned as new reached no summary event in this record.
            self.plan_holds = false;
        }
    }

    /// Writes the items of one record to the `kind` writer (no tag metadata).
    fn write_plain(&mut self, kind: FileKind, items: &[Vec<u8>]) {
        let idx = slot_index(kind);
        let Slot::Event(w) = &mut self.slots[idx] else {
            self.slots[idx].stats_mut().records_dropped += 1;
            return;
        };
        let total = items.iter().map(|b| framing::framed_len(b.len())).sum();
        let result = match w.prepare(total) {
            Ok(files::Prepared::Drop) => {
                w.stats.records_dropped += 1;
                Ok(())
            }
            Ok(files::Prepared::Ready { .. }) => items
                .iter()
                .try_for_each(|b| w.append(b))
                .map(|()| w.record_written()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            self.fail(idx, e);
        }
    }

    /// Writes one record's summary items, keeping TensorBoard's rule that
    /// the first value of each tag in a file carries its metadata: the record
    /// is packed again when the file's tag set differs from the plan (after a
    /// rotation, or when an earlier record was dropped).
    fn write_summary(
        &mut self,
        record: &Record,
        assumed: &Option<HashSet<Tag>>,
        mut items: Vec<Vec<u8>>,
        rejected_tags: &[Tag],
    ) {
        let idx = slot_index(FileKind::Summary);
        let Slot::Event(w) = &mut self.slots[idx] else {
            self.slots[idx].stats_mut().records_dropped += 1;
            return;
        };
        if self.plan_holds {
            let total = items.iter().map(|b| framing::framed_len(b.len())).sum();
            match w.prepare(total) {
                Ok(files::Prepared::Ready { rotated: false }) => {
                    if let Err(e) = items.iter().try_for_each(|b| w.append(b)) {
                        self.fail(idx, e);
                        return;
                    }
                    w.record_written();
                    if let Some(new) = assumed {
                        w.seen_tags.extend(new.iter().cloned());
                    }
                    return;
                }
                Ok(files::Prepared::Ready { rotated: true }) => {
                    // The new file has seen no tag: take the checked path.
                    self.plan_holds = false;
                }
                Ok(files::Prepared::Drop) => {
                    self.plan_holds = false;
                    w.stats.records_dropped += 1;
                    return;
                }
                Err(e) => {
                    self.fail(idx, e);
                    return;
                }
            }
        }
        let mut repacked: Option<Option<HashSet<Tag>>> = None;
        let mut ready = false;
        for _ in 0..3 {
            let needed = unseen_tags(&w.seen_tags, record);
            let current = repacked.as_ref().unwrap_or(assumed);
            if needed != *current {
                let pr = self.packer.pack(record, metadata_for(&needed, &self.empty));
                items = pr
                    .items
                    .into_iter()
                    .filter(|i| i.kind == FileKind::Summary)
                    .map(|i| i.bytes)
                    .collect();
                repacked = Some(needed);
            }
            let total = items.iter().map(|b| framing::framed_len(b.len())).sum();
            match w.prepare(total) {
                Err(e) => {
                    self.fail(idx, e);
                    return;
                }
                Ok(files::Prepared::Drop) => {
                    w.stats.records_dropped += 1;
                    return;
                }
                Ok(files::Prepared::Ready { rotated: false }) => {
                    ready = true;
                    break;
                }
                Ok(files::Prepared::Ready { rotated: true }) => {}
            }
        }
        if !ready {
            w.stats.records_dropped += 1;
            return;
        }
        if let Err(e) = items.iter().try_for_each(|b| w.append(b)) {
            self.fail(idx, e);
            return;
        }
        w.record_written();
        for (tag, _) in record.values() {
            if !w.seen_tags.contains(tag) && !rejected_tags.contains(tag) {
                w.seen_tags.insert(tag.clone());
            }
        }
    }

    fn write_export(&mut self, tag: &str, step: i64, bytes: &[u8]) {
        let idx = slot_index(FileKind::Export);
        let Slot::Export(w) = &mut self.slots[idx] else {
            self.slots[idx].stats_mut().records_dropped += 1;
            return;
        };
        match w.write(tag, step, bytes) {
            Ok(ExportOutcome::Written) => {}
            Ok(ExportOutcome::Refused(path, source)) => {
                w.stats.records_dropped += 1;
                self.shared
                    .report(WriteError::ExportRefused { path, source });
            }
            Err(e) => self.fail(idx, e),
        }
    }

    fn flush_all(&mut self, sync: bool) {
        for idx in 0..self.slots.len() {
            let result = match &mut self.slots[idx] {
                Slot::Event(w) => w.flush(sync || w.sync_on_flush()),
                Slot::Export(w) if sync => w.sync(),
                _ => Ok(()),
            };
            if let Err(e) = result {
                self.fail(idx, e);
            }
        }
    }

    fn close_all(&mut self) {
        for idx in 0..self.slots.len() {
            let result = match &mut self.slots[idx] {
                Slot::Event(w) => w.close_file(),
                Slot::Export(w) => w.sync(),
                Slot::Failed(_) => Ok(()),
            };
            if let Err(e) = result {
                self.fail(idx, e);
            }
        }
    }
}
