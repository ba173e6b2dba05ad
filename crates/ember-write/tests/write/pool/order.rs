//! Order, visibility and durability: records in submission order, flushes and timed
//! flushes, private files, sharing between threads, dropping without a close.

use super::*;

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

/// What `after_written` runs sees the files as the records sent before it left them, and none
/// of those sent after it, although the caller sent those at once without waiting (a
/// checkpoint's cut of the log, taken while training goes on recording).
#[test]
fn after_written_sees_every_record_before_it_and_none_after() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path())
        .queue(4096, FullQueuePolicy::Block)
        .build()
        .unwrap();
    let (before, after) = (300, 300);
    for s in 0..before {
        pool.write(scalars(s, &["a"], s as f64)).unwrap();
    }
    let (seen, lengths) = std::sync::mpsc::channel();
    let log_dir = dir.path().to_path_buf();
    pool.after_written(move |lost| {
        let files = tb_files(&log_dir);
        let lengths: Vec<u64> = files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .collect();
        seen.send((files, lengths, lost)).unwrap();
    })
    .unwrap();
    for s in before..before + after {
        pool.write(scalars(s, &["a"], s as f64)).unwrap();
    }
    pool.close().unwrap();
    let (files, lengths, lost) = lengths.recv().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(lost, None);
    let whole = std::fs::read(&files[0]).unwrap();
    let cut = dir.path().join("cut");
    std::fs::write(&cut, &whole[..lengths[0] as usize]).unwrap();
    assert_eq!(steps(&read_events(&cut)), (0..before).collect::<Vec<_>>());
    assert_eq!(
        steps(&read_events(&files[0])),
        (0..before + after).collect::<Vec<_>>()
    );
}
