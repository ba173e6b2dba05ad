//! Failures and the error policies: the disk guard, I/O errors, rejected values, refused
//! options, and the errors kept for the caller.

use super::*;

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
