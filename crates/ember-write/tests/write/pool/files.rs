//! Which files a pool makes: MindInsight's names, exports kept inside the log directory,
//! the lineage file.

use super::*;

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
