//! The pool thread: gathers records into batches, packs them, hands them to
//! the file writers and settles each record's fate.
//!
//! The thread blocks on the queue until a record arrives (or the next timed
//! fsync is due), then gathers more for at most `max_delay`, sleeping rather
//! than waking for each record: a caller wakes it early when the queue holds
//! a batch's worth, or for a flush or close. The batch is packed (on the
//! pool's own rayon threads when it has large values; `collect` keeps the
//! order), written in submission order, and every writer's buffer is handed
//! to the operating system before the next batch starts. Only then is each
//! record counted, by its worst part: written, dropped, rejected or failed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use ember_pack::{FileKind, PackedItem, PackedRecord, Packer, Record, Tag, Value};
use rayon::prelude::*;

use crate::batch::{Msg, PARALLEL_MIN_HEAVY, Packed, Then, is_heavy, splits};
use crate::batch_context::{BatchContext, Fate, RecordFates, Spare};
use crate::error::{FileError, WriteError};
use crate::event_file::{self, Event, EventFileWriter, FileSettings, HeaderFn};
use crate::export::{ExportOutcome, ExportWriter};
use crate::guard::DiskGuard;
use crate::options::{Durability, WriterOptions};
use crate::pool_state::PoolState;
use crate::projector::{ProjectorOutcome, ProjectorWriter};
use crate::stats::WriterStats;
use crate::summary_file::{NewTags, Planned, SummaryFailure, SummaryFile, pack_caught};

/// One writer slot per file kind.
#[derive(Debug)]
enum Slot {
    Summary(Box<SummaryFile>),
    Event(Box<EventFileWriter>),
    Export(Box<ExportWriter>),
    Projector(Box<ProjectorWriter>),
    Failed(WriterStats),
}

impl Slot {
    fn stats(&self) -> &WriterStats {
        match self {
            Slot::Summary(w) => &w.writer.stats,
            Slot::Event(w) => &w.stats,
            Slot::Export(w) => &w.stats,
            Slot::Projector(w) => &w.stats,
            Slot::Failed(s) => s,
        }
    }
}

const KINDS: [FileKind; 5] = [
    FileKind::Summary,
    FileKind::Lineage,
    FileKind::Explain,
    FileKind::Export,
    FileKind::Projector,
];

fn slot_index(kind: FileKind) -> usize {
    match kind {
        FileKind::Summary => 0,
        FileKind::Lineage => 1,
        FileKind::Explain => 2,
        FileKind::Export => 3,
        FileKind::Projector => 4,
    }
}

/// The pool thread's state.
#[derive(Debug)]
pub(crate) struct Worker {
    rx: Receiver<Msg>,
    shared: Arc<PoolState>,
    packer: Arc<Packer>,
    slots: Vec<Slot>,
    ctx: BatchContext,
    max_batch: usize,
    max_delay: Duration,
    pack_threads: usize,
    /// Built on the first batch that needs it.
    pack_pool: Option<rayon::ThreadPool>,
    flush_interval: Option<Duration>,
    sync_on_flush: bool,
    /// When the timed fsync is due; set once bytes reach a file unsynced.
    next_sync: Option<Instant>,
    empty: std::collections::HashSet<Tag>,
}

impl Worker {
    pub(crate) fn new(
        options: WriterOptions,
        journal: Option<crate::journal::Journal>,
        rx: Receiver<Msg>,
        shared: Arc<PoolState>,
    ) -> Self {
        let packer = Arc::new(Packer::new(options.pack.clone()));
        let settings = FileSettings {
            log_dir: options.log_dir.clone(),
            naming: options.naming(),
            start_secs: crate::naming::unix_secs(),
            max_file_size: options.max_file_size,
            size_policy: options.size_policy,
            durability: options.durability,
            read_only_on_close: options.read_only_on_close,
            journal,
        };
        let metadata = options.pack.format == ember_pack::Format::TensorBoard;
        let slots = KINDS
            .iter()
            .map(|&kind| {
                let p = Arc::clone(&packer);
                let header = HeaderFn(Box::new(move |t| p.file_header(kind, t)));
                match kind {
                    FileKind::Export => Slot::Export(Box::new(ExportWriter::new(settings.clone()))),
                    FileKind::Projector => {
                        Slot::Projector(Box::new(ProjectorWriter::new(settings.clone())))
                    }
                    FileKind::Summary => Slot::Summary(Box::new(SummaryFile::new(
                        EventFileWriter::new(kind, settings.clone(), header),
                        metadata,
                    ))),
                    kind => Slot::Event(Box::new(EventFileWriter::new(
                        kind,
                        settings.clone(),
                        header,
                    ))),
                }
            })
            .collect();
        Self {
            rx,
            shared,
            packer,
            slots,
            ctx: BatchContext {
                guard: DiskGuard::new(options.disk_guard_factor, options.free_space.clone()),
                record_fates: RecordFates::default(),
                fsyncs: 0,
                spare: Spare::new(options.max_queued_bytes),
            },
            max_batch: options.max_batch,
            max_delay: options.max_delay,
            pack_threads: options.pack_threads,
            pack_pool: None,
            flush_interval: options.flush_interval,
            sync_on_flush: options.durability == Durability::Sync,
            next_sync: None,
            empty: std::collections::HashSet::new(),
        }
    }

    pub(crate) fn run(mut self) {
        let mut batch: Vec<Record> = Vec::with_capacity(self.max_batch.min(4096));
        let mut weight = 0usize;
        loop {
            let first = match self.next_sync {
                Some(due) => match self
                    .rx
                    .recv_timeout(due.saturating_duration_since(Instant::now()))
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
            let mut closing = false;
            match first {
                Some(Msg::Record(r, w)) => {
                    batch.push(r);
                    weight += w;
                    (ack, closing) = self.gather(&mut batch, &mut weight);
                }
                Some(msg) => ack = Then::of(msg),
                None => {}
            }
            if !batch.is_empty() {
                self.write_batch(&batch);
                batch.clear();
                self.shared.release(std::mem::take(&mut weight));
            }
            let now = Instant::now();
            if (ack.is_some() && self.sync_on_flush) || self.next_sync.is_some_and(|d| now >= d) {
                self.sync_all();
                self.next_sync = None;
            }
            if self.next_sync.is_none()
                && let Some(interval) = self.flush_interval
                && self.any_unsynced()
            {
                self.next_sync = Some(now + interval);
            }
            self.publish_stats();
            match ack {
                // The caller may have given up waiting; nothing to do then.
                Some(Then::Ack(ack)) => drop(ack.send(())),
                Some(Then::Run(then)) => {
                    let lost = self.shared.first_lost_step.load(Ordering::SeqCst);
                    then(Some(lost).filter(|&step| step != i64::MAX));
                }
                None => {}
            }
            if closing {
                break;
            }
        }
        self.close_all();
        self.publish_stats();
    }

    /// Adds queued records to `batch` until it is full, `max_delay` has
    /// passed since its first record, the byte budget is mostly taken, a
    /// flush arrives, or the pool closes.
    fn gather(&mut self, batch: &mut Vec<Record>, weight: &mut usize) -> (Option<Then>, bool) {
        let deadline = Instant::now() + self.max_delay;
        loop {
            while batch.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(Msg::Record(r, w)) => {
                        batch.push(r);
                        *weight += w;
                    }
                    Ok(msg @ (Msg::Flush(_) | Msg::After(_))) => return (Then::of(msg), false),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return (None, true),
                }
            }
            let now = Instant::now();
            // Waiting longer only gathers more when callers can still queue: not once the
            // byte budget is mostly taken, which heavy records reach long before max_batch.
            if batch.len() >= self.max_batch || now >= deadline || self.shared.budget_tight() {
                return (None, false);
            }
            // Callers unpark this thread when the queue fills up or they
            // flush or close; a spurious wake-up only drains early.
            std::thread::park_timeout(deadline - now);
        }
    }

    fn publish_stats(&self) {
        let stats: Vec<WriterStats> = self.slots.iter().map(|s| s.stats().clone()).collect();
        self.shared.publish(stats, self.ctx.fsyncs);
    }

    fn any_unsynced(&self) -> bool {
        self.slots.iter().any(|s| match s {
            Slot::Summary(w) => w.writer.unsynced(),
            Slot::Event(w) => w.unsynced(),
            _ => false,
        })
    }

    /// Closes and removes the writer of slot `idx`, keeping the error. What it
    /// had buffered is still handed to the operating system when possible.
    fn fail(&mut self, idx: usize, error: FileError) {
        let slot = &mut self.slots[idx];
        match slot {
            // Best effort: a writer that failed on I/O may fail again here,
            // and then counts what it loses itself.
            Slot::Summary(w) => {
                let _ = w.writer.close_file(&mut self.ctx);
            }
            Slot::Event(w) => {
                let _ = w.close_file(&mut self.ctx);
            }
            Slot::Export(_) | Slot::Projector(_) | Slot::Failed(_) => {}
        }
        let mut stats = slot.stats().clone();
        stats.failed = true;
        let kind = stats.kind;
        *slot = Slot::Failed(stats);
        self.shared.report(WriteError::WriterFailed {
            kind,
            source: error,
        });
    }

    /// Counts `events` events of record `idx` for a writer that failed before.
    fn lost_to_failed(&mut self, slot: usize, idx: usize, events: usize) {
        if let Slot::Failed(stats) = &mut self.slots[slot] {
            stats.records_failed += events as u64;
        }
        self.ctx.record_fates.mark(idx, Fate::Failed);
    }

    fn pack_batch(&mut self, batch: &[Record], plan: &[NewTags]) -> Vec<Result<Packed, String>> {
        let buffers = self.spare_buffers(batch);
        let parallel = packs_in_parallel(batch) && self.pack_threads > 1;
        if parallel {
            self.start_pack_pool();
        }
        let packer = &*self.packer;
        let empty = &self.empty;
        if parallel && let Some(pool) = &self.pack_pool {
            self.shared.parallel_batch();
            let mut buffers = buffers;
            buffers.resize_with(batch.len(), Vec::new);
            return pool.install(|| {
                batch
                    .par_iter()
                    .zip(plan.par_iter())
                    .zip(buffers.into_par_iter())
                    .map(|((r, tags), buffer)| {
                        pack_caught(packer, r, tags, empty, buffer).map(Packed::new)
                    })
                    .collect()
            });
        }
        batch
            .iter()
            .zip(plan)
            .zip(buffers.into_iter().chain(std::iter::repeat_with(Vec::new)))
            // On this thread the writer computes the CRCs as it frames.
            .map(|((r, tags), buffer)| {
                pack_caught(packer, r, tags, empty, buffer).map(|record| Packed {
                    record,
                    crcs: Vec::new(),
                })
            })
            .collect()
    }

    /// The buffers of large events written before, for the records whose summary event will be
    /// large (raw tensors; the other heavy values pack small). None kept, none to look for:
    /// scalars pass untouched. The buffers not handed out are dropped.
    fn spare_buffers(&mut self, batch: &[Record]) -> Vec<Vec<u8>> {
        let buffers: Vec<Vec<u8>> = if self.ctx.spare.is_empty() {
            Vec::new()
        } else {
            batch
                .iter()
                .map(|r| {
                    let raw: usize = r
                        .values()
                        .iter()
                        .map(|(_, v)| match v {
                            Value::Tensor(t) => t.bytes().len(),
                            _ => 0,
                        })
                        .sum();
                    if raw >= event_file::HOLD_MIN {
                        self.ctx.spare.take()
                    } else {
                        Vec::new()
                    }
                })
                .collect()
        };
        self.ctx.spare.clear();
        buffers
    }

    /// Starts the packing threads the first time a batch needs them; where they cannot start,
    /// packing goes on serially.
    fn start_pack_pool(&mut self) {
        if self.pack_pool.is_some() {
            return;
        }
        match rayon::ThreadPoolBuilder::new()
            .num_threads(self.pack_threads)
            .thread_name(|i| format!("ember-pack-{i}"))
            .build()
        {
            Ok(pool) => self.pack_pool = Some(pool),
            Err(e) => {
                log::warn!("ember-write: no packing threads ({e}); packing serially");
                self.pack_threads = 1;
            }
        }
    }

    fn write_batch(&mut self, batch: &[Record]) {
        self.ctx.guard.refresh();
        self.ctx.record_fates.begin(batch.len());
        let plan = match &mut self.slots[0] {
            Slot::Summary(w) => w.plan(batch),
            _ => vec![None; batch.len()],
        };
        let packed = self.pack_batch(batch, &plan);
        for (idx, ((record, assumed), packed)) in batch.iter().zip(&plan).zip(packed).enumerate() {
            self.write_record(idx, record, assumed, packed);
        }
        for idx in 0..self.slots.len() {
            let result = match &mut self.slots[idx] {
                Slot::Summary(w) => w.writer.write_out(&mut self.ctx),
                Slot::Event(w) => w.write_out(&mut self.ctx),
                _ => Ok(()),
            };
            if let Err(e) = result {
                self.fail(idx, e);
            }
        }
        self.shared.settle(
            batch.iter().map(Record::step),
            self.ctx.record_fates.fates(),
        );
    }

    fn break_plan(&mut self) {
        if let Slot::Summary(w) = &mut self.slots[0] {
            w.break_plan();
        }
    }

    fn write_record(
        &mut self,
        idx: usize,
        record: &Record,
        assumed: &NewTags,
        packed: Result<Packed, String>,
    ) {
        let Packed {
            record: PackedRecord { items, rejected },
            crcs,
        } = match packed {
            Ok(packed) => packed,
            Err(message) => {
                self.break_plan();
                self.ctx.record_fates.mark(idx, Fate::Rejected);
                self.shared.report(WriteError::PackPanicked {
                    step: record.step(),
                    message,
                });
                return;
            }
        };
        let mut rejected_tags: Vec<Tag> = Vec::new();
        if !rejected.is_empty() {
            // A rejected value's tag is still new to the file.
            self.break_plan();
            for error in rejected {
                self.shared.value_rejected();
                rejected_tags.push(error.tag.clone());
                self.shared.report(WriteError::Rejected {
                    step: record.step(),
                    source: error,
                });
            }
            if items.is_empty() {
                self.ctx.record_fates.mark(idx, Fate::Rejected);
                return;
            }
        }
        let mut summary: Vec<Event> = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let crc = crcs.get(i).copied().flatten();
            let PackedItem {
                kind,
                bytes,
                export,
                projector,
            } = item;
            match kind {
                FileKind::Summary => summary.push(Event { data: bytes, crc }),
                FileKind::Export => {
                    let (tag, step) = match &export {
                        Some(key) => (key.tag.as_str().to_owned(), key.step),
                        None => (String::from("tensor"), record.step()),
                    };
                    self.write_export(idx, &tag, step, &bytes);
                }
                FileKind::Projector => match projector {
                    Some(files) => self.write_projector(idx, &files),
                    // The packer always attaches the files; an item without them holds
                    // nothing to write.
                    None => self.lost_to_failed(slot_index(FileKind::Projector), idx, 1),
                },
                kind => self.write_plain(kind, idx, vec![Event::from(bytes)]),
            }
        }
        if !summary.is_empty() {
            self.write_summary(idx, record, assumed, summary, &rejected_tags);
        } else if assumed.is_some() {
            // Tags planned as new reached no summary event in this record.
            self.break_plan();
        }
    }

    /// Writes the events of record `idx` to the `kind` writer (no tag metadata).
    fn write_plain(&mut self, kind: FileKind, idx: usize, events: Vec<Event>) {
        let slot = slot_index(kind);
        let result = match &mut self.slots[slot] {
            Slot::Event(w) => w.write_events(idx, events, &mut self.ctx),
            _ => {
                self.lost_to_failed(slot, idx, events.len());
                return;
            }
        };
        if let Err(e) = result {
            self.fail(slot, e);
        }
    }

    fn write_summary(
        &mut self,
        idx: usize,
        record: &Record,
        assumed: &NewTags,
        events: Vec<Event>,
        rejected_tags: &[Tag],
    ) {
        let slot = slot_index(FileKind::Summary);
        let Slot::Summary(w) = &mut self.slots[slot] else {
            self.lost_to_failed(slot, idx, events.len());
            return;
        };
        let planned = Planned {
            idx,
            record,
            assumed,
            rejected: rejected_tags,
        };
        match w.write(planned, events, &self.packer, &mut self.ctx) {
            Ok(()) => {}
            Err(SummaryFailure::File(e)) => self.fail(slot, e),
            Err(SummaryFailure::Panicked(message)) => {
                self.shared.report(WriteError::PackPanicked {
                    step: record.step(),
                    message,
                })
            }
        }
    }

    fn write_export(&mut self, idx: usize, tag: &str, step: i64, bytes: &[u8]) {
        let slot = slot_index(FileKind::Export);
        let Slot::Export(w) = &mut self.slots[slot] else {
            self.lost_to_failed(slot, idx, 1);
            return;
        };
        match w.write(idx, tag, step, bytes, &mut self.ctx) {
            Ok(ExportOutcome::Written) => {}
            Ok(ExportOutcome::Refused(path, source)) => self
                .shared
                .report(WriteError::ExportRefused { path, source }),
            Err(e) => self.fail(slot, e),
        }
    }

    fn write_projector(&mut self, idx: usize, files: &ember_pack::ProjectorFiles) {
        let slot = slot_index(FileKind::Projector);
        let Slot::Projector(w) = &mut self.slots[slot] else {
            self.lost_to_failed(slot, idx, 1);
            return;
        };
        match w.write(idx, files, &mut self.ctx) {
            Ok(ProjectorOutcome::Written) => {}
            Ok(ProjectorOutcome::Refused(path, source)) => self
                .shared
                .report(WriteError::EmbeddingRefused { path, source }),
            Err(e) => self.fail(slot, e),
        }
    }

    /// Fsyncs every file written since its last fsync.
    fn sync_all(&mut self) {
        for idx in 0..self.slots.len() {
            let result = match &mut self.slots[idx] {
                Slot::Summary(w) => w.writer.flush(true, &mut self.ctx),
                Slot::Event(w) => w.flush(true, &mut self.ctx),
                Slot::Export(w) => w.sync(&mut self.ctx),
                Slot::Projector(w) => w.sync(&mut self.ctx),
                Slot::Failed(_) => Ok(()),
            };
            if let Err(e) = result {
                self.fail(idx, e);
            }
        }
    }

    fn close_all(&mut self) {
        for idx in 0..self.slots.len() {
            let result = match &mut self.slots[idx] {
                Slot::Summary(w) => w.writer.close_file(&mut self.ctx),
                Slot::Event(w) => w.close_file(&mut self.ctx),
                Slot::Export(w) => w.sync(&mut self.ctx),
                Slot::Projector(w) => w.sync(&mut self.ctx),
                Slot::Failed(_) => Ok(()),
            };
            if let Err(e) = result {
                self.fail(idx, e);
            }
        }
    }
}

/// Whether a batch is worth packing on threads: enough heavy values, or one that splits.
fn packs_in_parallel(batch: &[Record]) -> bool {
    let heavy = batch
        .iter()
        .flat_map(|r| r.values())
        .filter(|(_, v)| is_heavy(v))
        .take(PARALLEL_MIN_HEAVY)
        .count();
    (batch.len() > 1 && heavy >= PARALLEL_MIN_HEAVY)
        || batch
            .iter()
            .flat_map(|r| r.values())
            .any(|(_, v)| splits(v))
}
