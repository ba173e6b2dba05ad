//! The writer pool on real files in temp dirs: order, flush, size policies,
//! tag metadata per file, disk guard, error policies, queue policies, drop.
//!
//! Past 600 lines on purpose: one file for the writer pool's options and policies; each test
//! makes its own pool in its own temporary directory and stands alone.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{files_with, is_header, read_events, scalars, steps, tb_files, values};
use ember_pack::{FileKind, Format, Record, Tag, TensorValue, Value};
use ember_write::{ErrorPolicy, FileError, FullQueuePolicy, SizePolicy, WriteError, WriterPool};

fn pool(dir: &Path) -> ember_write::WriterPoolBuilder {
    WriterPool::builder(dir).flush_interval(None)
}

#[test]
fn records_keep_submission_order_under_parallel_packing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .queue(4096, FullQueuePolicy::Block)
        .max_batch(4096)
        .build()
        .unwrap();
    let n = 5_000;
    let t = Tag::new("t").unwrap();
    for s in 0..n {
        // A 4 KiB tensor makes each record heavy enough to be packed on rayon.
        let mut r = scalars(s, &["a", "b"], s as f64);
        let v = vec![s as f32; 1024];
        r.add(
            t.clone(),
            Value::Tensor(TensorValue::from_slice(&v, vec![1024])),
        );
        pool.write(r).unwrap();
    }
    pool.close().unwrap();
    let files = tb_files(dir.path());
    assert_eq!(files.len(), 1);
    let events = read_events(&files[0]);
    assert!(is_header(&events[0]));
    assert_eq!(steps(&events), (0..n).collect::<Vec<_>>());
    for e in &events[1..] {
        let v = values(e);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].2, Some(e.step as f32));
        assert_eq!(v[1].2, Some(e.step as f32));
        assert_eq!(v[2].0, "t");
    }
    assert_metadata_once_per_tag_per_file(&files);
}

/// Large events, written from the packers' buffers, past the bytes after which the writer
/// starts the disk's writeback (every 4 MiB) several times, small ones between them, and a
/// flush part way: every event reads back whole, in order, with its tensor's bytes.
#[test]
fn large_events_past_many_writeback_starts_read_back_whole() {
    use ember_pack::proto::tensorboard::{event::What, summary::value::Value as Proto};
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path()).build().unwrap();
    let n = 48;
    for s in 0..n {
        let mut r = scalars(s, &["loss"], s as f64);
        if s % 3 != 2 {
            let v: Vec<f32> = (0..100_000).map(|i| (s * 100_000 + i) as f32).collect();
            r.add(
                Tag::new("w").unwrap(),
                Value::Tensor(TensorValue::from_slice(&v, vec![100_000])),
            );
        }
        pool.write(r).unwrap();
        if s == n / 2 {
            pool.flush().unwrap();
        }
    }
    pool.close().unwrap();
    let files = tb_files(dir.path());
    assert_eq!(files.len(), 1);
    let size = std::fs::metadata(&files[0]).unwrap().len();
    assert!(size > 3 * 4 * 1024 * 1024, "{size}");
    let events = read_events(&files[0]);
    assert_eq!(steps(&events), (0..n).collect::<Vec<_>>());
    for e in events.iter().filter(|e| !is_header(e)) {
        let Some(What::Summary(summary)) = &e.what else {
            panic!("not a summary: {e:?}")
        };
        let tensors: Vec<&[u8]> = summary
            .value
            .iter()
            .filter_map(|v| match &v.value {
                Some(Proto::Tensor(t)) => Some(t.tensor_content.as_slice()),
                _ => None,
            })
            .collect();
        if e.step % 3 == 2 {
            assert!(tensors.is_empty(), "step {}", e.step);
            continue;
        }
        let want: Vec<u8> = (0..100_000)
            .flat_map(|i| ((e.step * 100_000 + i) as f32).to_le_bytes())
            .collect();
        assert_eq!(tensors, [want.as_slice()], "step {}", e.step);
    }
}

#[test]
fn flush_hands_every_earlier_record_to_the_os() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path()).build().unwrap();
    assert!(
        tb_files(dir.path()).is_empty(),
        "no file before the first record"
    );
    for round in 0..3 {
        for s in 0..100 {
            pool.write(scalars(round * 100 + s, &["loss"], 1.0))
                .unwrap();
        }
        pool.flush().unwrap();
        let files = tb_files(dir.path());
        assert_eq!(files.len(), 1);
        // read_events fails on any problem, a truncated tail included.
        let events = read_events(&files[0]);
        assert_eq!(steps(&events).len() as i64, (round + 1) * 100);
    }
    let stats = pool.stats();
    assert_eq!(stats.records_submitted, 300);
    assert_eq!(
        stats.writer(FileKind::Summary).unwrap().records_written,
        300
    );
    pool.close().unwrap();
}

#[cfg(unix)]
#[test]
fn files_are_private_while_open_and_read_only_after_close() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path()).build().unwrap();
    pool.write(scalars(0, &["x"], 1.0)).unwrap();
    pool.flush().unwrap();
    let file = tb_files(dir.path()).remove(0);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    pool.close().unwrap();
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o400);
}

#[test]
fn timed_flush_makes_records_visible_without_flush() {
    let dir = tempfile::tempdir().unwrap();
    let pool = WriterPool::builder(dir.path())
        .flush_interval(Some(Duration::from_millis(50)))
        .build()
        .unwrap();
    for s in 0..10 {
        pool.write(scalars(s, &["loss"], 1.0)).unwrap();
    }
    let mut seen = 0;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(f) = tb_files(dir.path()).first() {
            seen = steps(&read_events(f)).len();
            if seen == 10 {
                break;
            }
        }
    }
    assert_eq!(seen, 10);
    pool.close().unwrap();
}

/// Checks TensorBoard's rule in every file: the first value of each tag
/// carries metadata, later ones do not.
fn assert_metadata_once_per_tag_per_file(files: &[std::path::PathBuf]) {
    for f in files {
        let mut seen = HashSet::new();
        for e in read_events(f) {
            for (tag, has_meta, _) in values(&e) {
                let first = seen.insert(tag.clone());
                assert_eq!(has_meta, first, "{} step {} tag {tag}", f.display(), e.step);
            }
        }
    }
}

#[test]
fn size_policy_stop_drops_later_records_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 4_000;
    let pool = pool(dir.path())
        .max_file_size(cap, SizePolicy::Stop)
        .build()
        .unwrap();
    let n = 1_000;
    for s in 0..n {
        pool.write(scalars(s, &["loss"], 0.5)).unwrap();
    }
    pool.flush().unwrap();
    let stats = pool.stats();
    pool.close().unwrap();
    let files = tb_files(dir.path());
    assert_eq!(files.len(), 1, "stop never opens another file");
    let size = std::fs::metadata(&files[0]).unwrap().len();
    assert!(size <= cap, "{size} > {cap}");
    let written = steps(&read_events(&files[0]));
    assert_eq!(written, (0..written.len() as i64).collect::<Vec<_>>());
    let w = stats.writer(FileKind::Summary).unwrap();
    assert_eq!(w.records_written, written.len() as u64);
    assert_eq!(w.records_written + w.records_dropped, n as u64);
    assert!(w.records_dropped > 0);
    // The cap was nearly used: the next record would not have fit.
    assert!(size + 60 > cap, "{size}");
}

#[test]
fn size_policy_rotate_opens_files_that_sort_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 2_000;
    let pool = pool(dir.path())
        .max_file_size(cap, SizePolicy::Rotate)
        .max_batch(64)
        .build()
        .unwrap();
    let n = 500;
    for s in 0..n {
        let tags: &[&str] = if s % 7 == 0 {
            &["loss", "acc"]
        } else {
            &["loss"]
        };
        pool.write(scalars(s, tags, 0.25)).unwrap();
    }
    pool.close().unwrap();
    let files = tb_files(dir.path());
    assert!(files.len() > 5, "{} files", files.len());
    let mut all_steps = Vec::new();
    for f in &files {
        assert!(std::fs::metadata(f).unwrap().len() <= cap);
        let events = read_events(f);
        assert!(is_header(&events[0]), "every file starts with its header");
        all_steps.extend(steps(&events));
    }
    // Name order is write order, and nothing was lost.
    assert_eq!(all_steps, (0..n).collect::<Vec<_>>());
    assert_metadata_once_per_tag_per_file(&files);
}

#[test]
fn metadata_rule_holds_across_batches_and_rotation_mid_batch() {
    let dir = tempfile::tempdir().unwrap();
    // Large batches so that rotations happen in the middle of a batch.
    let pool = pool(dir.path())
        .max_file_size(5_000, SizePolicy::Rotate)
        .max_batch(1024)
        .queue(4096, FullQueuePolicy::Block)
        .build()
        .unwrap();
    for s in 0..3_000i64 {
        let tags: Vec<String> = (0..(1 + s % 4)).map(|k| format!("t{k}")).collect();
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        pool.write(scalars(s, &tags, 1.0)).unwrap();
    }
    pool.close().unwrap();
    let files = tb_files(dir.path());
    assert!(files.len() > 10);
    assert_metadata_once_per_tag_per_file(&files);
    let total: usize = files.iter().map(|f| steps(&read_events(f)).len()).sum();
    assert_eq!(total, 3_000);
}

#[test]
fn disk_guard_fails_the_writer_through_the_seam() {
    let dir = tempfile::tempdir().unwrap();
    let free = Arc::new(AtomicU64::new(u64::MAX));
    let seam = Arc::clone(&free);
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Raise)
        .free_space(move |_: &Path| Ok(seam.load(Ordering::SeqCst)))
        .build()
        .unwrap();
    pool.write(scalars(0, &["loss"], 1.0)).unwrap();
    pool.flush().unwrap();
    // 43-byte records need 32 × 43 = 1376 bytes free.
    free.store(1_000, Ordering::SeqCst);
    pool.write(scalars(1, &["loss"], 1.0)).unwrap();
    let err = pool.flush().unwrap_err();
    match err {
        WriteError::WriterFailed {
            kind: FileKind::Summary,
            source:
                FileError::DiskSpace {
                    free: 1_000,
                    factor: 32,
                    ..
                },
        } => {}
        other => panic!("unexpected {other:?}"),
    }
    // The writer is gone: the refused record and later ones are counted as
    // lost to it.
    pool.write(scalars(2, &["loss"], 1.0)).unwrap();
    pool.flush().unwrap();
    let stats = pool.stats();
    let w = stats.writer(FileKind::Summary).unwrap();
    assert!(w.failed);
    assert_eq!(w.records_written, 1);
    assert_eq!(w.records_failed, 2);
    assert_eq!(w.records_dropped, 0);
    assert_eq!(
        (
            stats.records_submitted,
            stats.records_written,
            stats.records_failed
        ),
        (3, 1, 2)
    );
    assert_eq!(stats.errors, 1);
    pool.close().unwrap();
    let events = read_events(&tb_files(dir.path())[0]);
    assert_eq!(steps(&events), vec![0]);
}

#[test]
fn disk_guard_factor_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .free_space(|_: &Path| Ok(1_000))
        .disk_guard_factor(2)
        .build()
        .unwrap();
    pool.write(scalars(0, &["loss"], 1.0)).unwrap();
    pool.flush().unwrap();
    pool.close().unwrap();
}

#[test]
fn log_policy_logs_and_counts_and_close_returns_the_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Log)
        .free_space(|_: &Path| Ok(10))
        .build()
        .unwrap();
    for s in 0..5 {
        pool.write(scalars(s, &["loss"], 1.0)).unwrap();
    }
    pool.flush().unwrap();
    pool.write(scalars(5, &["loss"], 1.0)).unwrap();
    let stats = pool.stats();
    assert_eq!(stats.errors, 1);
    assert!(stats.writer(FileKind::Summary).unwrap().failed);
    let errors = pool.close().unwrap_err();
    assert_eq!(errors.errors.len(), 1);
    assert!(matches!(
        errors.errors[0],
        WriteError::WriterFailed {
            source: FileError::DiskSpace { .. },
            ..
        }
    ));
}

#[test]
fn raise_policy_returns_the_error_on_the_next_write_then_close_has_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Raise)
        .free_space(|_: &Path| Ok(10))
        .build()
        .unwrap();
    pool.write(scalars(0, &["loss"], 1.0)).unwrap();
    // Let the pool thread meet the error, without a flush returning it.
    let mut raised = None;
    for s in 1..2_000 {
        std::thread::sleep(Duration::from_millis(5));
        if let Err(e) = pool.write(scalars(s, &["loss"], 1.0)) {
            raised = Some(e);
            break;
        }
    }
    assert!(matches!(
        raised,
        Some(WriteError::WriterFailed {
            source: FileError::DiskSpace { .. },
            ..
        })
    ));
    // Already returned: close has nothing more to say.
    pool.close().unwrap();
}

#[test]
fn rejected_values_are_errors_and_the_rest_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Raise)
        .build()
        .unwrap();
    let mut r = Record::new(3, 1.0);
    r.add(Tag::new("ok").unwrap(), 2.0);
    // 10 f32 need 40 bytes; 3 given.
    r.add(
        Tag::new("bad").unwrap(),
        Value::Tensor(TensorValue::new(
            ember_pack::DType::F32,
            vec![10],
            vec![0; 3],
        )),
    );
    pool.write(r).unwrap();
    let err = pool.flush().unwrap_err();
    match err {
        WriteError::Rejected { step: 3, source } => assert_eq!(source.tag.as_str(), "bad"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(pool.stats().values_rejected, 1);
    // A later valid value of the rejected tag is the first one in the file,
    // so it carries metadata.
    pool.write(scalars(4, &["bad"], 1.0)).unwrap();
    pool.close().unwrap();
    let files = tb_files(dir.path());
    let events = read_events(&files[0]);
    let vals: Vec<_> = events.iter().flat_map(values).collect();
    assert_eq!(
        vals.iter().map(|v| v.0.as_str()).collect::<Vec<_>>(),
        vec!["ok", "bad"]
    );
    assert_metadata_once_per_tag_per_file(&files);
}

/// A free-space seam that sleeps holds the pool thread in its next batch,
/// so the queue fills deterministically.
fn slow_pool(dir: &Path, policy: FullQueuePolicy) -> WriterPool {
    pool(dir)
        .queue(2, policy)
        .max_batch(1)
        .free_space(|_: &Path| {
            std::thread::sleep(Duration::from_millis(30));
            Ok(u64::MAX)
        })
        .build()
        .unwrap()
}

#[test]
fn full_queue_drop_newest_counts_drops() {
    let dir = tempfile::tempdir().unwrap();
    let pool = slow_pool(dir.path(), FullQueuePolicy::DropNewest);
    for s in 0..20 {
        pool.write(scalars(s, &["loss"], 1.0)).unwrap();
    }
    pool.flush().unwrap();
    let stats = pool.stats();
    assert!(stats.records_dropped_queue_full > 0);
    let written = stats.writer(FileKind::Summary).unwrap().records_written;
    assert_eq!(written + stats.records_dropped_queue_full, 20);
    assert_eq!(stats.records_written, written);
    assert_eq!(stats.records_submitted, 20);
    assert_eq!(stats.records_pending(), 0);
    pool.close().unwrap();
}

#[test]
fn full_queue_error_policy_returns_queue_full() {
    let dir = tempfile::tempdir().unwrap();
    let pool = slow_pool(dir.path(), FullQueuePolicy::Error);
    let results: Vec<_> = (0..20)
        .map(|s| pool.write(scalars(s, &["loss"], 1.0)))
        .collect();
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(WriteError::QueueFull)))
    );
    pool.close().unwrap();
}

#[test]
fn full_queue_block_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .queue(1, FullQueuePolicy::Block)
        .build()
        .unwrap();
    for s in 0..2_000 {
        pool.write(scalars(s, &["loss"], 1.0)).unwrap();
    }
    pool.close().unwrap();
    let events = read_events(&tb_files(dir.path())[0]);
    assert_eq!(steps(&events), (0..2_000).collect::<Vec<_>>());
}

#[test]
fn drop_without_close_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let pool = pool(dir.path())
            .queue(100_000, FullQueuePolicy::Block)
            .build()
            .unwrap();
        for s in 0..50_000 {
            pool.write(scalars(s, &["loss"], 1.0)).unwrap();
        }
        // Dropped here with records still queued.
    }
    let events = read_events(&tb_files(dir.path())[0]);
    assert_eq!(steps(&events), (0..50_000).collect::<Vec<_>>());
}

#[test]
fn pool_is_shareable_between_threads() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(pool(dir.path()).build().unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for s in 0..1_000 {
                    pool.write(scalars(t * 1_000 + s, &[&format!("t{t}")], 1.0))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let pool = Arc::into_inner(pool).unwrap();
    pool.close().unwrap();
    let events = read_events(&tb_files(dir.path())[0]);
    let mut got = steps(&events);
    // Each thread's records stay in its own order.
    for t in 0..4i64 {
        let mine: Vec<_> = got.iter().copied().filter(|s| s / 1_000 == t).collect();
        assert_eq!(mine, (t * 1_000..(t + 1) * 1_000).collect::<Vec<_>>());
    }
    got.sort_unstable();
    assert_eq!(got, (0..4_000).collect::<Vec<_>>());
}

#[test]
fn no_records_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path()).build().unwrap();
    pool.flush().unwrap();
    pool.close().unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn mindinsight_names_and_header() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .format(Format::MindInsight)
        .rank(3)
        .build()
        .unwrap();
    pool.write(scalars(1, &["loss"], 1.0)).unwrap();
    pool.close().unwrap();
    let files = files_with(dir.path(), ".out.events.summary.");
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("events.out.events.summary."), "{name}");
    assert!(name.ends_with("_MS"), "{name}");
    let secs = name.split('.').nth(4).unwrap();
    assert!(secs.parse::<u64>().is_ok(), "{name}");
    assert_eq!(name.split('.').nth(5), Some("3"), "{name}");
    let scan = ember_write::Scan::file(&files[0]).unwrap();
    assert!(scan.problems.is_empty());
    assert_eq!(scan.records.len(), 2, "header + one summary event");
}

#[test]
fn exported_tensors_stay_inside_the_log_dir() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logs");
    let pool = pool(&log).build().unwrap();
    for (step, tag) in [(1, "w"), (2, "../../escape"), (3, "a/b")] {
        let mut r = Record::new(step, 1.0);
        r.add(
            Tag::new(tag).unwrap(),
            Value::export(TensorValue::from_slice(&[1.0f32, 2.0, 3.0], vec![3])),
        );
        pool.write(r).unwrap();
    }
    pool.close().unwrap();
    let export_dirs = files_with_dirs(&log);
    assert_eq!(export_dirs.len(), 1);
    let tensor_dir = export_dirs[0].join("tensor");
    let mut names: Vec<String> = std::fs::read_dir(&tensor_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["..%2F..%2Fescape_2.npy", "a%2Fb_3.npy", "w_1.npy"]
    );
    let npy = std::fs::read(tensor_dir.join("w_1.npy")).unwrap();
    assert!(npy.starts_with(b"\x93NUMPY"));
    // Nothing was written outside the log directory.
    let outside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(outside.len(), 1);
}

fn files_with_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("export_")
        })
        .collect()
}

#[test]
fn a_duplicate_export_is_refused_without_killing_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Raise)
        .build()
        .unwrap();
    for step in [1, 1, 2] {
        let mut r = Record::new(step, 1.0);
        r.add(
            Tag::new("w").unwrap(),
            Value::export(TensorValue::from_slice(&[1.0f32], vec![1])),
        );
        pool.write(r).unwrap();
    }
    let err = pool.flush().unwrap_err();
    assert!(matches!(err, WriteError::ExportRefused { .. }), "{err:?}");
    let stats = pool.stats();
    let w = stats.writer(FileKind::Export).unwrap();
    assert!(!w.failed);
    assert_eq!(w.records_written, 2);
    assert_eq!(w.records_dropped, 1);
    pool.close().unwrap();
}

#[test]
fn invalid_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        pool(dir.path()).file_prefix("../x").build(),
        Err(WriteError::InvalidOptions(_))
    ));
    assert!(matches!(
        pool(dir.path()).queue(0, FullQueuePolicy::Block).build(),
        Err(WriteError::InvalidOptions(_))
    ));
}

#[test]
fn write_after_writer_failure_keeps_other_writers() {
    // The seam reports a full disk to the first query only (the summary
    // writer's); the export writer, asked later, goes on.
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&calls);
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Log)
        .free_space(move |_: &Path| {
            // First query (summary writer, first batch): too little.
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                Ok(0)
            } else {
                Ok(u64::MAX)
            }
        })
        .build()
        .unwrap();
    pool.write(scalars(0, &["loss"], 1.0)).unwrap();
    pool.flush().unwrap();
    let mut r = Record::new(1, 1.0);
    r.add(
        Tag::new("w").unwrap(),
        Value::export(TensorValue::from_slice(&[1.0f32], vec![1])),
    );
    pool.write(r).unwrap();
    pool.flush().unwrap();
    let stats = pool.stats();
    assert!(stats.writer(FileKind::Summary).unwrap().failed);
    let export = stats.writer(FileKind::Export).unwrap();
    assert!(!export.failed);
    assert_eq!(export.records_written, 1);
    let errors = pool.close().unwrap_err();
    assert_eq!(errors.errors.len(), 1);
}

#[test]
fn lineage_goes_to_its_own_file_without_a_header() {
    use ember_pack::proto::mindspore::{EvaluationLineage, LineageEvent, lineage_event};
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    let mut r = scalars(7, &["loss"], 0.5);
    let eval = EvaluationLineage {
        metric: Some("{\"acc\": 0.9}".into()),
        ..Default::default()
    };
    r.add(
        Tag::new("eval").unwrap(),
        Value::Lineage(ember_pack::Lineage::Eval(Box::new(eval))),
    );
    pool.write(r).unwrap();
    pool.close().unwrap();
    let lineage = files_with(dir.path(), "_lineage");
    assert_eq!(lineage.len(), 1);
    let scan = ember_write::Scan::file(&lineage[0]).unwrap();
    assert!(scan.problems.is_empty());
    assert_eq!(scan.records.len(), 1, "lineage files have no header");
    let event = LineageEvent::decode(scan.records[0].data.as_slice()).unwrap();
    match event.what {
        Some(lineage_event::What::EvaluationLineage(e)) => {
            assert_eq!(e.metric.as_deref(), Some("{\"acc\": 0.9}"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let summary = files_with(dir.path(), "_MS");
    assert_eq!(summary.len(), 1);
    let scan = ember_write::Scan::file(&summary[0]).unwrap();
    assert_eq!(scan.records.len(), 2, "header + the scalar's event");
}

#[test]
fn sync_durability_flushes_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .durability(ember_write::Durability::Sync)
        .build()
        .unwrap();
    for s in 0..10 {
        pool.write(scalars(s, &["loss"], 1.0)).unwrap();
    }
    pool.flush().unwrap();
    assert_eq!(steps(&read_events(&tb_files(dir.path())[0])).len(), 10);
    pool.close().unwrap();
}

#[test]
fn an_io_error_fails_the_writer_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run");
    let pool = pool(&log).error_policy(ErrorPolicy::Raise).build().unwrap();
    // The directory vanishes before the first record creates its file.
    std::fs::remove_dir(&log).unwrap();
    pool.write(scalars(0, &["loss"], 1.0)).unwrap();
    match pool.flush().unwrap_err() {
        WriteError::WriterFailed {
            kind: FileKind::Summary,
            source: FileError::Io {
                op: "create", path, ..
            },
        } => assert!(path.starts_with(&log)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(pool.stats().writer(FileKind::Summary).unwrap().failed);
    pool.close().unwrap();
}

#[test]
fn two_mindinsight_pools_in_one_second_never_share_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = pool(dir.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    let b = pool(dir.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    a.write(scalars(1, &["x"], 1.0)).unwrap();
    a.flush().unwrap();
    b.write(scalars(2, &["x"], 2.0)).unwrap();
    b.flush().unwrap();
    a.close().unwrap();
    b.close().unwrap();
    let files = files_with(dir.path(), "_MS");
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        let scan = ember_write::Scan::file(f).unwrap();
        assert!(scan.problems.is_empty());
        assert_eq!(scan.records.len(), 2);
    }
}

#[test]
fn a_refused_first_record_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Raise)
        .free_space(|_: &Path| Ok(100))
        .build()
        .unwrap();
    pool.write(scalars(0, &["loss"], 1.0)).unwrap();
    assert!(pool.flush().is_err());
    pool.close().unwrap();
    assert!(tb_files(dir.path()).is_empty());
}

#[test]
fn errors_kept_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .error_policy(ErrorPolicy::Log)
        .build()
        .unwrap();
    let n = ember_write::MAX_KEPT_ERRORS as i64 + 50;
    for s in 0..n {
        let mut r = Record::new(s, 1.0);
        r.add(
            Tag::new("bad").unwrap(),
            Value::Tensor(TensorValue::new(
                ember_pack::DType::F32,
                vec![2],
                vec![0; 1],
            )),
        );
        pool.write(r).unwrap();
    }
    pool.flush().unwrap();
    assert_eq!(pool.stats().values_rejected, n as u64);
    assert_eq!(pool.stats().errors, n as u64);
    let errors = pool.close().unwrap_err();
    assert_eq!(errors.errors.len(), ember_write::MAX_KEPT_ERRORS);
    assert_eq!(errors.not_kept, 50);
    assert!(
        errors
            .to_string()
            .contains(&format!("and {} more errors", n - 1))
    );
}
