//! The full-queue policies, on a pool held up by a slow free-space seam.

use super::*;

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
