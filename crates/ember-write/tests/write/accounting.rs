//! The accounting contract under every fault at once, in one pool:
//! `records_submitted == records_written + records_dropped_queue_full +
//! records_dropped + records_rejected + records_failed + records_pending()`,
//! pending 0 after `flush` and `close`, each fate counter exactly the number
//! of records the test sent to that fate, and `records_written` exactly the
//! records a reader finds in the summary file.
//!
//! The faults: a full queue under `DropNewest` (the pool thread held inside a
//! batch by a free-space seam that blocks on a channel), values the packer
//! rejects, records all of whose values it rejects, a failed export writer
//! (a file planted at `export_<secs>`), and the size cap with
//! `SizePolicy::Stop`.
#![cfg(unix)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use ember_pack::{DType, FileKind, Format, Record, Tag, TensorValue, Value};
use ember_write::{
    ErrorPolicy, FileError, FullQueuePolicy, Scan, SizePolicy, WriteError, WriterPool,
    WriterPoolStats,
};
use prost::Message;

use crate::common;

/// Only turns a hang into a failure; never reached when things work.
const DEADLINE: Duration = Duration::from_secs(60);

/// The records the test sent to each fate so far, and the values rejected.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Books {
    submitted: u64,
    written: u64,
    dropped_queue_full: u64,
    dropped: u64,
    rejected: u64,
    failed: u64,
    values_rejected: u64,
}

/// Checks every counter against `books`, and the equation with `pending`
/// records not settled yet.
fn assert_books(stats: &WriterPoolStats, books: &Books, pending: u64, when: &str) {
    let got = Books {
        submitted: stats.records_submitted,
        written: stats.records_written,
        dropped_queue_full: stats.records_dropped_queue_full,
        dropped: stats.records_dropped,
        rejected: stats.records_rejected,
        failed: stats.records_failed,
        values_rejected: stats.values_rejected,
    };
    assert_eq!(&got, books, "{when}: {stats:?}");
    assert_eq!(stats.records_pending(), pending, "{when}: {stats:?}");
    assert_eq!(
        stats.records_submitted,
        stats.records_written
            + stats.records_dropped_queue_full
            + stats.records_dropped
            + stats.records_rejected
            + stats.records_failed
            + stats.records_pending(),
        "{when}: the equation does not hold: {stats:?}"
    );
}

/// A free-space seam that, when armed, holds the pool thread in its next
/// disk-guard query until released.
struct Gate {
    armed: AtomicBool,
    entered: Sender<()>,
    release: Receiver<()>,
}

fn scalar(step: i64) -> Record {
    let mut r = Record::new(step, 1.7e9 + step as f64);
    r.add(Tag::new("loss").unwrap(), step as f64);
    r
}

/// 10 `f32`s need 40 bytes; 3 given: the packer rejects it.
fn bad_tensor() -> Value {
    Value::Tensor(TensorValue::new(DType::F32, vec![10], vec![0; 3]))
}

/// A scalar the packer takes and a tensor it rejects.
fn half_rejected(step: i64) -> Record {
    let mut r = scalar(step);
    r.add(Tag::new("bad").unwrap(), bad_tensor());
    r
}

/// Two values, both rejected.
fn all_rejected(step: i64) -> Record {
    let mut r = Record::new(step, 1.0);
    r.add(Tag::new("bad").unwrap(), bad_tensor());
    r.add(Tag::new("bad2").unwrap(), bad_tensor());
    r
}

/// Only an exported tensor: nothing for the summary file.
fn export_only(step: i64) -> Record {
    let mut r = Record::new(step, 1.0);
    r.add(
        Tag::new("w").unwrap(),
        Value::export(TensorValue::from_slice(&[1.0f32, 2.0], vec![2])),
    );
    r
}

/// Steps of the summary events of the one summary file in `log`, which
/// must have no problem and start with its header.
fn summary_steps(log: &Path, format: Format) -> Vec<i64> {
    let needle = match format {
        Format::TensorBoard => "tfevents",
        Format::MindInsight => "_MS",
    };
    let files = common::files_with(log, needle);
    assert_eq!(files.len(), 1, "{files:?}");
    let scan = Scan::file(&files[0]).unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    let (header, events) = scan.records.split_first().unwrap();
    match format {
        Format::TensorBoard => {
            use ember_pack::proto::tensorboard::Event;
            assert!(common::is_header(
                &Event::decode(header.data.as_slice()).unwrap()
            ));
            events
                .iter()
                .map(|r| Event::decode(r.data.as_slice()).unwrap().step)
                .collect()
        }
        Format::MindInsight => {
            use ember_pack::proto::mindspore::{Event, event::What};
            let h = Event::decode(header.data.as_slice()).unwrap();
            assert_eq!(h.what, Some(What::Version("MindSpore.Event:1".into())));
            events
                .iter()
                .map(|r| Event::decode(r.data.as_slice()).unwrap().step.unwrap())
                .collect()
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one run through a full queue, then every record's fate counted"
)]
fn every_record_has_exactly_one_fate(format: Format) {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    std::fs::create_dir(&log).unwrap();
    // A file where the export directory goes fails the export writer.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for secs in now - 2..=now + 5 {
        std::fs::write(log.join(format!("export_{secs}")), b"").unwrap();
    }

    let (entered_tx, entered_rx) = crossbeam_channel::bounded(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded(1);
    let gate = Arc::new(Gate {
        armed: AtomicBool::new(false),
        entered: entered_tx,
        release: release_rx,
    });
    let seam = Arc::clone(&gate);
    let queue = 4u64;
    let pool = WriterPool::builder(&log)
        .format(format)
        .error_policy(ErrorPolicy::Log)
        .flush_interval(None)
        .max_file_size(64 << 10, SizePolicy::Stop)
        .queue(queue as usize, FullQueuePolicy::DropNewest)
        .max_batch(1)
        .free_space(move |_: &Path| {
            if seam.armed.swap(false, Ordering::SeqCst) {
                let _ = seam.entered.send(());
                // Bounded only so that a broken test cannot hang forever.
                let _ = seam.release.recv_timeout(DEADLINE);
            }
            Ok(u64::MAX)
        })
        .build()
        .unwrap();
    let mut books = Books::default();
    let mut errors: Vec<WriteError> = Vec::new();
    let mut in_file: Vec<i64> = Vec::new();
    let mut step = 0i64;
    let send = |pool: &WriterPool, books: &mut Books, r: Record| {
        books.submitted += 1;
        // Under the log policy `write` never fails, a dropped record included.
        pool.write(r).unwrap();
    };
    // After the full-queue phase: each record flushed at once, so that the
    // small queue never drops one by chance.
    let send_flushed = |pool: &WriterPool, books: &mut Books, r: Record| {
        send(pool, books, r);
        pool.flush().unwrap();
    };

    // 1. A full queue. The pool thread takes the first record and blocks in
    //    the disk guard's query; the queue then takes `queue` records and
    //    drops the next ones.
    gate.armed.store(true, Ordering::SeqCst);
    send(&pool, &mut books, scalar(step));
    in_file.push(step);
    step += 1;
    entered_rx
        .recv_timeout(DEADLINE)
        .expect("the pool thread never queried free space");
    for _ in 0..queue {
        send(&pool, &mut books, scalar(step));
        in_file.push(step);
        step += 1;
    }
    let full = 3;
    for _ in 0..full {
        send(&pool, &mut books, scalar(step));
        step += 1;
    }
    books.dropped_queue_full += full;
    let held = pool.stats();
    assert_eq!(held.queue_depth as u64, queue, "{held:?}");
    assert_books(&held, &books, 1 + queue, "pool thread held");
    release_tx.send(()).unwrap();
    pool.flush().unwrap();
    books.written += 1 + queue;
    assert_books(&pool.stats(), &books, 0, "after the full queue");
    errors.extend(pool.take_errors());
    assert!(
        errors.is_empty(),
        "a full queue is counted, not an error: {errors:?}"
    );

    // 2. Rejected values: a record with one good value is written; one with
    //    none is rejected.
    for _ in 0..3 {
        send_flushed(&pool, &mut books, half_rejected(step));
        in_file.push(step);
        step += 1;
        books.written += 1;
        books.values_rejected += 1;
    }
    for _ in 0..2 {
        send_flushed(&pool, &mut books, all_rejected(step));
        step += 1;
        books.rejected += 1;
        books.values_rejected += 2;
    }
    pool.flush().unwrap();
    assert_books(&pool.stats(), &books, 0, "after rejections");

    // 3. A writer failure: the export writer fails on its first tensor; every
    //    export record is lost to it.
    for _ in 0..3 {
        send_flushed(&pool, &mut books, export_only(step));
        step += 1;
        books.failed += 1;
    }
    pool.flush().unwrap();
    assert_books(&pool.stats(), &books, 0, "after the export writer failed");

    // 4. The size cap: a record larger than the whole cap stops the summary
    //    file; every later summary record is dropped.
    let big = 100_000;
    let mut r = scalar(step);
    r.add(
        Tag::new("big").unwrap(),
        Value::Tensor(TensorValue::from_slice(&vec![0.5f32; big], vec![big])),
    );
    send_flushed(&pool, &mut books, r);
    step += 1;
    books.dropped += 1;
    for _ in 0..4 {
        send_flushed(&pool, &mut books, scalar(step));
        step += 1;
        books.dropped += 1;
    }
    // After the stop, the worst part decides: a dropped good value beats a
    // rejected one, rejection of every value is still a rejection, and an
    // export still meets the failed writer.
    send_flushed(&pool, &mut books, half_rejected(step));
    step += 1;
    books.dropped += 1;
    books.values_rejected += 1;
    send_flushed(&pool, &mut books, all_rejected(step));
    step += 1;
    books.rejected += 1;
    books.values_rejected += 2;
    send_flushed(&pool, &mut books, export_only(step));
    books.failed += 1;
    pool.flush().unwrap();
    assert_books(&pool.stats(), &books, 0, "after the size cap");

    errors.extend(pool.take_errors());
    let (closed, stats) = pool.close_with_stats();
    if let Err(e) = closed {
        assert_eq!(e.not_kept, 0);
        errors.extend(e.errors);
    }
    assert_books(&stats, &books, 0, "after close");
    assert_eq!(
        books,
        Books {
            submitted: 24,
            written: 8,
            dropped_queue_full: 3,
            dropped: 6,
            rejected: 3,
            failed: 4,
            values_rejected: 10,
        },
        "the test's own arithmetic"
    );

    // Errors: every rejected value, and the export writer's failure once.
    let rejected = errors
        .iter()
        .filter(|e| matches!(e, WriteError::Rejected { .. }))
        .count() as u64;
    assert_eq!(rejected, books.values_rejected, "{errors:?}");
    let failures: Vec<&WriteError> = errors
        .iter()
        .filter(|e| !matches!(e, WriteError::Rejected { .. }))
        .collect();
    assert!(
        matches!(
            failures.as_slice(),
            [WriteError::WriterFailed {
                kind: FileKind::Export,
                source: FileError::NotADirectory { .. }
            }]
        ),
        "{failures:?}"
    );
    assert_eq!(stats.errors, errors.len() as u64, "{stats:?}");

    // Per writer: the summary writer stopped (not failed), the export one failed.
    let summary = stats.writer(FileKind::Summary).unwrap();
    assert!(!summary.failed, "{summary:?}");
    assert_eq!(summary.records_written, books.written, "{summary:?}");
    assert_eq!(summary.records_dropped, books.dropped, "{summary:?}");
    assert_eq!(summary.records_failed, 0, "{summary:?}");
    let export = stats.writer(FileKind::Export).unwrap();
    assert!(export.failed, "{export:?}");
    assert_eq!(export.records_failed, books.failed, "{export:?}");

    // The reader finds exactly the written records, in order.
    assert_eq!(summary_steps(&log, format), in_file);
    assert_eq!(in_file.len() as u64, stats.records_written);
}

#[test]
fn every_record_has_exactly_one_fate_tensorboard() {
    every_record_has_exactly_one_fate(Format::TensorBoard);
}

#[test]
fn every_record_has_exactly_one_fate_mindinsight() {
    every_record_has_exactly_one_fate(Format::MindInsight);
}
