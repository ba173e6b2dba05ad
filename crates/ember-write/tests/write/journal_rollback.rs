//! A run owns exactly what its writers made (issue 41): every event file, sub-run, export and
//! embedding a pool with a [`Journal`] creates is listed by name before it is made, and a
//! rollback to a [`LogSnapshot`] touches only those. Another tool's event file in a
//! subdirectory, a copy of the run's own file, an empty directory stay byte for byte; what the
//! run wrote after the snapshot goes; files are read back with the crate's reader.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ember_pack::{Embedding, Record, Tag, TensorValue, Value};
use ember_write::{Journal, LogSnapshot, Ownership, RecordReader, WriterOptions, WriterPool};

fn scalar(step: i64) -> Record {
    let mut record = Record::new(step, 1.7e9);
    record.add(Tag::new("loss").unwrap(), Value::Scalar(step as f64));
    record
}

fn with_export_and_embedding(step: i64) -> Record {
    let mut record = scalar(step);
    record.add(
        Tag::new("weights").unwrap(),
        Value::export(TensorValue::from_slice(&[step as f32; 4], vec![2, 2])),
    );
    let matrix: Vec<f32> = (0..12).map(|i| i as f32 + step as f32).collect();
    record.add(
        Tag::new("points").unwrap(),
        Value::from(Embedding::new(TensorValue::from_slice(&matrix, vec![4, 3]))),
    );
    record
}

/// A pool writing `log_dir` (or a sub-run below it) for the journal of `root`.
fn pool(root: &Path, log_dir: &Path) -> WriterPool {
    let mut options = WriterOptions::new(log_dir);
    options.flush_interval = None;
    options.read_only_on_close = false;
    WriterPool::with_journal(options, Some(Journal::new(root, 0))).unwrap()
}

/// Every file under `dir` and its bytes, the journal's own aside.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with(ember_write::journal::RUN_DIR) {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().to_path_buf();
                found.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    found
}

fn steps_of(path: &Path) -> usize {
    RecordReader::open(path)
        .unwrap()
        .filter_map(Result::ok)
        .count()
}

#[test]
fn a_rollback_touches_only_what_the_pools_listed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ev");
    let main = pool(&root, &root);
    let sub = pool(&root, &root.join("loss_train"));
    for step in 0..3 {
        main.write(scalar(step)).unwrap();
        sub.write(scalar(step)).unwrap();
    }
    main.flush().unwrap();
    sub.flush().unwrap();
    let snapshot = LogSnapshot::take(&root, &[], Ownership::ALONE).unwrap();
    let snapshot = LogSnapshot::decode(&snapshot.encode()).unwrap();
    let at_snapshot = tree(&root);
    assert_eq!(snapshot.files().count(), 2, "{snapshot:?}");

    // The run goes on: more records, a new sub-run, an export and an embedding; then it dies.
    for step in 3..6 {
        main.write(with_export_and_embedding(step)).unwrap();
        sub.write(scalar(step)).unwrap();
    }
    let later = pool(&root, &root.join("acc_valid/deeper"));
    later.write(scalar(5)).unwrap();
    for pool in [main, sub, later] {
        pool.close().unwrap();
    }
    // Meanwhile, what the run did not write.
    let evaluator = root.join("eval/events.out.tfevents.1700000000.h.1.0");
    std::fs::create_dir_all(evaluator.parent().unwrap()).unwrap();
    std::fs::write(&evaluator, vec![9u8; 6000]).unwrap();
    let main_file = at_snapshot
        .keys()
        .find(|p| p.parent() == Some(Path::new("")))
        .unwrap()
        .clone();
    let copy = root.join("backup").join(&main_file);
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(root.join(&main_file), &copy).unwrap();
    let copied = std::fs::read(&copy).unwrap();
    std::fs::create_dir(root.join("emptydir")).unwrap();
    assert!(root.join("projector_config.pbtxt").exists());

    snapshot.restore(&root, &[], &[], Ownership::ALONE).unwrap();

    let mut expected = at_snapshot.clone();
    expected.insert(
        evaluator.strip_prefix(&root).unwrap().to_path_buf(),
        vec![9u8; 6000],
    );
    expected.insert(copy.strip_prefix(&root).unwrap().to_path_buf(), copied);
    assert_eq!(tree(&root), expected);
    assert!(root.join("emptydir").is_dir());
    assert!(!root.join("acc_valid").exists() && !root.join("embeddings").exists());
    // File version record, then the three steps of the snapshot.
    assert_eq!(steps_of(&root.join(&main_file)), 4);

    // Starting over: every file the pools made goes, and only those.
    LogSnapshot::default()
        .restore(&root, &[], &[], Ownership::ALONE)
        .unwrap();
    let left: Vec<PathBuf> = tree(&root).into_keys().collect();
    assert_eq!(
        left,
        vec![
            PathBuf::from("backup").join(&main_file),
            PathBuf::from("eval/events.out.tfevents.1700000000.h.1.0"),
        ]
    );
    assert!(root.join("emptydir").is_dir() && !root.join("loss_train").exists());
}

/// Ranks sharing a directory each roll back their own files: rank 0's rollback leaves rank 1's
/// event file alone and does not report it as a stranger's (it used to warn of it at every
/// resume of a job), while an event file neither rank wrote is reported.
#[test]
fn a_rank_s_rollback_reports_strangers_files_not_the_other_rank_s() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("job");
    std::fs::create_dir_all(&root).unwrap();
    let rank = |rank: u32| Ownership {
        rank,
        world_size: 2,
    };
    let snapshot = LogSnapshot::take(&root, &[], rank(0)).unwrap();
    let other_rank = root.join("events.out.tfevents.1700000000.h.7.0.rank1");
    let stranger = root.join("events.out.tfevents.1700000001.other.8.0");
    std::fs::write(&other_rank, b"rank 1's").unwrap();
    std::fs::write(&stranger, b"a stranger's").unwrap();
    let restored = snapshot.restore(&root, &[], &[], rank(0)).unwrap();
    assert_eq!(
        restored.left,
        [PathBuf::from("events.out.tfevents.1700000001.other.8.0")]
    );
    assert_eq!(std::fs::read(&other_rank).unwrap(), b"rank 1's");
}
