//! The size policies, and TensorBoard's metadata rule in every file they make.

use super::*;

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
