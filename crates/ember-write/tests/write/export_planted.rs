//! A planted `export_<secs>`: another user of a shared machine may create
//! it before the run gets there, as a symbolic link to a directory of their
//! choosing, or as a file. The export writer must fail with
//! [`FileError::NotADirectory`], write nothing outside the log directory,
//! count the export records as failed, and leave the summary file alone.
//!
//! The pool's start second (which names the directory) is not known in
//! advance, so every second from 2 s before to 5 s after building the pool
//! is planted.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{read_events, tb_files, values};
use ember_pack::{FileKind, Record, Tag, TensorValue, Value};
use ember_write::{FileError, WriteError, WriterPool, naming};

/// What is planted at each `export_<secs>`.
#[derive(Debug, Clone, Copy)]
enum Plant {
    /// A symbolic link to a directory outside the log directory.
    SymlinkToDir,
    /// A symbolic link to a path outside that does not exist (yet).
    DanglingSymlink,
    /// An empty regular file.
    RegularFile,
    /// A real directory whose `tensor` is a symbolic link outside.
    TensorSymlink,
}

/// A summary event's step and its (tag, simple value) pairs.
type StepValues = (i64, Vec<(String, Option<f32>)>);

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Every path under `dir`, recursively, links not followed.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        out.push(path.clone());
        if meta.is_dir() {
            out.extend(walk(&path));
        }
    }
    out
}

#[expect(
    clippy::too_many_lines,
    reason = "one planted directory, then each writer call and what is left checked"
)]
fn a_planted_export_dir_fails_the_export_writer(plant: Plant) {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let outside = root.path().join("outside");
    std::fs::create_dir(&log).unwrap();
    std::fs::create_dir(&outside).unwrap();

    let now = unix_secs();
    let planted: Vec<u64> = (now - 2..=now + 5).collect();
    for &secs in &planted {
        let name = log.join(format!("export_{secs}"));
        match plant {
            Plant::SymlinkToDir => std::os::unix::fs::symlink(&outside, &name).unwrap(),
            Plant::DanglingSymlink => {
                std::os::unix::fs::symlink(outside.join(format!("missing_{secs}")), &name).unwrap()
            }
            Plant::RegularFile => std::fs::write(&name, b"").unwrap(),
            Plant::TensorSymlink => {
                std::fs::create_dir(&name).unwrap();
                std::os::unix::fs::symlink(&outside, name.join("tensor")).unwrap();
            }
        }
    }

    let pool = WriterPool::builder(&log)
        .flush_interval(None)
        .build()
        .unwrap();
    let n = 5i64;
    for step in 0..n {
        let mut r = Record::new(step, 1.7e9 + step as f64);
        r.add(Tag::new("loss").unwrap(), step as f64);
        r.add(
            Tag::new("w").unwrap(),
            Value::export(TensorValue::from_slice(&[step as f32; 4], vec![2, 2])),
        );
        pool.write(r).unwrap();
    }
    pool.flush().unwrap();
    let mut errors = pool.take_errors();
    let (closed, stats) = pool.close_with_stats();
    if let Err(e) = closed {
        errors.extend(e.errors);
    }

    // Nothing outside the log directory.
    assert_eq!(walk(&outside), Vec::<PathBuf>::new(), "{plant:?}");

    // The export writer failed once, with the typed error naming the planted path.
    assert_eq!(errors.len(), 1, "{plant:?}: {errors:?}");
    let path = match &errors[0] {
        WriteError::WriterFailed {
            kind: FileKind::Export,
            source: FileError::NotADirectory { path },
        } => path.clone(),
        other => panic!("{plant:?}: expected NotADirectory from the export writer, got {other:?}"),
    };
    let expected: Vec<PathBuf> = planted
        .iter()
        .map(|&secs| match plant {
            Plant::TensorSymlink => log.join(naming::export_dir(secs)),
            _ => log.join(format!("export_{secs}")),
        })
        .collect();
    assert!(expected.contains(&path), "{plant:?}: {}", path.display());

    // What was planted is untouched.
    for &secs in &planted {
        let name = log.join(format!("export_{secs}"));
        let meta = std::fs::symlink_metadata(&name).unwrap();
        match plant {
            Plant::SymlinkToDir | Plant::DanglingSymlink => {
                assert!(meta.file_type().is_symlink(), "{}", name.display())
            }
            Plant::RegularFile => {
                assert!(meta.is_file() && meta.len() == 0, "{}", name.display())
            }
            Plant::TensorSymlink => {
                let tensor = std::fs::symlink_metadata(name.join("tensor")).unwrap();
                assert!(tensor.file_type().is_symlink(), "{}", name.display());
            }
        }
    }
    // And nothing else appeared beside it but the summary file.
    let summary = tb_files(&log);
    assert_eq!(summary.len(), 1);
    assert_eq!(
        std::fs::read_dir(&log).unwrap().count(),
        planted.len() + 1,
        "{plant:?}: {:?}",
        walk(&log)
    );

    // Every record lost its export, so every record failed; no tensor was written.
    assert_eq!(stats.records_submitted, n as u64, "{stats:?}");
    assert_eq!(stats.records_failed, n as u64, "{stats:?}");
    assert_eq!(stats.records_written, 0, "{stats:?}");
    assert_eq!(stats.records_dropped, 0, "{stats:?}");
    assert_eq!(stats.records_pending(), 0, "{stats:?}");
    let export = stats.writer(FileKind::Export).unwrap();
    assert!(export.failed, "{export:?}");
    assert_eq!(export.records_failed, n as u64, "{export:?}");
    assert_eq!(export.records_written, 0, "{export:?}");
    assert_eq!(export.files_created, 0, "{export:?}");

    // The summary file still holds each record's other value.
    let summary_stats = stats.writer(FileKind::Summary).unwrap();
    assert!(!summary_stats.failed);
    assert_eq!(summary_stats.records_written, n as u64);
    let events = read_events(&summary[0]);
    let got: Vec<StepValues> = events[1..]
        .iter()
        .map(|e| {
            (
                e.step,
                values(e).into_iter().map(|(tag, _, v)| (tag, v)).collect(),
            )
        })
        .collect();
    let want: Vec<StepValues> = (0..n)
        .map(|s| (s, vec![("loss".to_string(), Some(s as f32))]))
        .collect();
    assert_eq!(got, want, "{plant:?}");
}

#[test]
fn a_symlink_to_a_directory_outside_is_not_followed() {
    a_planted_export_dir_fails_the_export_writer(Plant::SymlinkToDir);
}

#[test]
fn a_dangling_symlink_is_not_followed() {
    a_planted_export_dir_fails_the_export_writer(Plant::DanglingSymlink);
}

#[test]
fn a_regular_file_is_not_a_directory() {
    a_planted_export_dir_fails_the_export_writer(Plant::RegularFile);
}

#[test]
fn a_symlinked_tensor_subdirectory_is_not_followed() {
    a_planted_export_dir_fails_the_export_writer(Plant::TensorSymlink);
}
