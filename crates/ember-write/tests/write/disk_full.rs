//! A full disk, for real: the pool writes to a 512 KiB tmpfs.
//!
//! - With the free-disk guard off, `write(2)` meets `ENOSPC`: the summary
//!   writer fails with a typed I/O error, the pool goes on without a panic or
//!   a hang, the file is cut back to its last whole record, and the counters
//!   say exactly what the file holds.
//! - With the guard on (factor 32), it refuses before the disk is full.
//!
//! Mounting needs root. Without it, or when the mount fails, each test prints
//! one `skipped: ...` line and passes, except under `CI=true`, where a
//! failure to mount fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ember_pack::{FileKind, Format, Record, Tag, TensorValue, Value};
use ember_write::{
    FileError, FreeSpace, Scan, SystemFreeSpace, WriteError, WriterPool, WriterPoolStats,
};
use prost::Message;

use crate::common;

const TMPFS_SIZE: &str = "512k";
/// Only turns a hang into a failure; never reached when things work.
const DEADLINE: Duration = Duration::from_secs(120);

/// A tmpfs mounted on a fresh temporary directory, unmounted on drop (a
/// failing test included).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Result<Self, String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            // /proc/self belongs to this process's effective user.
            if let Ok(meta) = std::fs::metadata("/proc/self")
                && meta.uid() != 0
            {
                return Err(format!(
                    "not root (uid {}), cannot mount a tmpfs",
                    meta.uid()
                ));
            }
        }
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={TMPFS_SIZE},mode=0700"))
            .arg("tmpfs")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a test that failed with the pool open): detach it.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
        // The temporary directory itself is removed after this.
    }
}

/// A mounted tmpfs, or `None` after printing why the test is skipped.
fn tmpfs_or_skip() -> Option<Tmpfs> {
    match Tmpfs::mount() {
        Ok(fs) => Some(fs),
        Err(reason) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true and no tmpfs: {reason}")
        }
        Err(reason) => {
            eprintln!("skipped: {reason}");
            None
        }
    }
}

/// Runs `f` on a thread of its own and fails if it takes past the deadline.
fn within_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(v) => {
            handle.join().unwrap();
            v
        }
        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sent nothing and did not panic"),
        },
        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
            panic!("the pool hung: not done after {DEADLINE:?}")
        }
    }
}

fn summary_files(log: &Path, format: Format) -> Vec<PathBuf> {
    let needle = match format {
        Format::TensorBoard => "tfevents",
        Format::MindInsight => "_MS",
    };
    common::files_with(log, needle)
}

/// Reads the one summary file of `log`: it must have no problem at all (not
/// even a truncated tail), its header first; returns the steps of its summary
/// events, in order.
fn read_summary(log: &Path, format: Format) -> (PathBuf, Vec<i64>) {
    let files = summary_files(log, format);
    assert_eq!(files.len(), 1, "{files:?}");
    let all = std::fs::read_dir(log).unwrap().count();
    assert_eq!(
        all,
        1,
        "files other than the summary file in {}",
        log.display()
    );
    let path = files[0].clone();
    let scan = Scan::file(&path).unwrap();
    assert!(
        scan.problems.is_empty(),
        "{}: the file was not cut back to its last whole record: {:?}",
        path.display(),
        scan.problems
    );
    let (header, events) = scan.records.split_first().expect("a header at least");
    let steps = match format {
        Format::TensorBoard => {
            use ember_pack::proto::tensorboard::{Event, event::What};
            let h = Event::decode(header.data.as_slice()).unwrap();
            assert!(matches!(h.what, Some(What::FileVersion(_))), "{h:?}");
            events
                .iter()
                .map(|r| {
                    let e = Event::decode(r.data.as_slice()).unwrap();
                    assert!(matches!(e.what, Some(What::Summary(_))));
                    e.step
                })
                .collect()
        }
        Format::MindInsight => {
            use ember_pack::proto::mindspore::{Event, event::What};
            let h = Event::decode(header.data.as_slice()).unwrap();
            assert_eq!(h.what, Some(What::Version("MindSpore.Event:1".into())));
            events
                .iter()
                .map(|r| {
                    let e = Event::decode(r.data.as_slice()).unwrap();
                    assert!(matches!(e.what, Some(What::Summary(_))));
                    e.step.unwrap()
                })
                .collect()
        }
    };
    (path, steps)
}

/// Checks that the counters agree with the file: every record is written
/// or failed, the written ones are exactly the whole records in the file,
/// and they are steps `0..written` (the writer fails for good at the first
/// record it cannot write).
fn assert_stats_match_file(stats: &WriterPoolStats, log: &Path, format: Format, submitted: u64) {
    assert_eq!(stats.records_submitted, submitted, "{stats:?}");
    assert_eq!(stats.records_dropped_queue_full, 0, "{stats:?}");
    assert_eq!(stats.records_dropped, 0, "{stats:?}");
    assert_eq!(stats.records_rejected, 0, "{stats:?}");
    assert_eq!(stats.records_pending(), 0, "{stats:?}");
    assert_eq!(
        stats.records_submitted,
        stats.records_written + stats.records_failed,
        "{stats:?}"
    );
    assert!(stats.records_written > 0, "nothing fitted: {stats:?}");
    assert!(stats.records_failed > 0, "the disk never filled: {stats:?}");
    let summary = stats.writer(FileKind::Summary).unwrap();
    assert!(summary.failed, "{summary:?}");
    assert_eq!(
        summary.records_written, stats.records_written,
        "{summary:?}"
    );
    assert_eq!(summary.records_failed, stats.records_failed, "{summary:?}");

    let (path, steps) = read_summary(log, format);
    assert_eq!(
        steps.len() as u64,
        stats.records_written,
        "whole records in the file vs records_written"
    );
    assert_eq!(steps, (0..steps.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        summary.bytes_written,
        "file length vs bytes_written"
    );
}

/// Writes `n` records from `record(step)`, flushing after every
/// `flush_every` (never for 0); returns every error the pool reported (taken
/// after flushes and at close) and the final counters.
fn write_until_full(
    log: PathBuf,
    format: Format,
    guard_factor: Option<u64>,
    n: i64,
    flush_every: i64,
    record: fn(i64) -> Record,
) -> (Vec<WriteError>, WriterPoolStats) {
    within_deadline(move || {
        let mut builder = WriterPool::builder(&log)
            .format(format)
            .flush_interval(None);
        if let Some(factor) = guard_factor {
            builder = builder.disk_guard_factor(factor);
        }
        let pool = builder.build().unwrap();
        let mut errors = Vec::new();
        for step in 0..n {
            // The log policy: write and flush never fail for the pool's errors.
            pool.write(record(step)).unwrap();
            if flush_every > 0 && (step + 1) % flush_every == 0 {
                pool.flush().unwrap();
                errors.extend(pool.take_errors());
            }
        }
        let (closed, stats) = pool.close_with_stats();
        if let Err(e) = closed {
            assert_eq!(e.not_kept, 0);
            errors.extend(e.errors);
        }
        (errors, stats)
    })
}

/// A scalar, and at even steps a 4 KiB tensor.
fn mixed_record(step: i64) -> Record {
    let mut r = Record::new(step, 1.7e9 + step as f64);
    r.add(Tag::new("loss").unwrap(), step as f64);
    if step % 2 == 0 {
        let v = vec![step as f32; 1024];
        r.add(
            Tag::new("w").unwrap(),
            Value::Tensor(TensorValue::from_slice(&v, vec![1024])),
        );
    }
    r
}

/// A scalar, and every third step an 80 KB tensor: large enough that the
/// writer writes it from the packer's buffer, between small events framed in
/// its own, in one `writev(2)`.
fn large_record(step: i64) -> Record {
    let mut r = Record::new(step, 1.7e9 + step as f64);
    r.add(Tag::new("loss").unwrap(), step as f64);
    if step % 3 == 0 {
        let v = vec![step as f32; 20_000];
        r.add(
            Tag::new("w").unwrap(),
            Value::Tensor(TensorValue::from_slice(&v, vec![20_000])),
        );
    }
    r
}

/// A scalar and a 64-element tensor: a few hundred bytes framed.
fn small_record(step: i64) -> Record {
    let mut r = Record::new(step, 1.7e9 + step as f64);
    r.add(Tag::new("loss").unwrap(), step as f64);
    let v = vec![step as f32; 64];
    r.add(
        Tag::new("b").unwrap(),
        Value::Tensor(TensorValue::from_slice(&v, vec![64])),
    );
    r
}

/// Writes `n` records from `record`, of more bytes than the 512 KiB tmpfs
/// holds, flushing every `flush_every`.
fn enospc_fails_the_writer_and_the_counters_match_the_file(
    format: Format,
    n: i64,
    flush_every: i64,
    record: fn(i64) -> Record,
) {
    let Some(fs) = tmpfs_or_skip() else {
        return;
    };
    let log = fs.path().join("log");
    let (errors, stats) = write_until_full(log.clone(), format, Some(0), n, flush_every, record);

    assert_eq!(
        errors.len(),
        1,
        "one writer failure and nothing else: {errors:?}"
    );
    match &errors[0] {
        WriteError::WriterFailed {
            kind: FileKind::Summary,
            source: FileError::Io { op, path, source },
        } => {
            assert!(
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.raw_os_error() == Some(28),
                "not ENOSPC: {source:?}"
            );
            assert_eq!(*op, "write");
            assert!(path.starts_with(&log), "{}", path.display());
        }
        other => panic!("expected a summary writer failure on ENOSPC, got {other:?}"),
    }
    assert_eq!(stats.errors, 1, "{stats:?}");
    assert_stats_match_file(&stats, &log, format, n as u64);
    drop(fs);
}

fn the_guard_refuses_before_the_disk_is_full(format: Format) {
    let Some(fs) = tmpfs_or_skip() else {
        return;
    };
    let log = fs.path().join("log");
    // About 2 MB of records, for 512 KiB, and no flush at all.
    let n = 6_000;
    let (errors, stats) = write_until_full(log.clone(), format, None, n, 0, small_record);

    assert_eq!(
        errors.len(),
        1,
        "one writer failure and nothing else: {errors:?}"
    );
    match &errors[0] {
        WriteError::WriterFailed {
            kind: FileKind::Summary,
            source:
                FileError::DiskSpace {
                    path,
                    free,
                    record,
                    factor,
                },
        } => {
            assert_eq!(*factor, 32);
            assert!(free < &(record * factor), "{free} < {record} * {factor}");
            assert!(path.starts_with(&log), "{}", path.display());
        }
        other => panic!("expected the disk guard to refuse, got {other:?}"),
    }
    let free = SystemFreeSpace.free_bytes(fs.path()).unwrap();
    assert!(free > 0, "the guard let the disk fill up");
    assert_stats_match_file(&stats, &log, format, n as u64);
    drop(fs);
}

// About 1.3 MB of records, for 512 KiB.
#[test]
fn enospc_tensorboard() {
    enospc_fails_the_writer_and_the_counters_match_the_file(
        Format::TensorBoard,
        600,
        25,
        mixed_record,
    );
}

#[test]
fn enospc_mindinsight() {
    enospc_fails_the_writer_and_the_counters_match_the_file(
        Format::MindInsight,
        600,
        25,
        mixed_record,
    );
}

// About 1.1 MB of records, for 512 KiB, the large events written from where
// they lie.
#[test]
fn enospc_large_events_tensorboard() {
    enospc_fails_the_writer_and_the_counters_match_the_file(
        Format::TensorBoard,
        40,
        5,
        large_record,
    );
}

#[test]
fn enospc_large_events_mindinsight() {
    enospc_fails_the_writer_and_the_counters_match_the_file(
        Format::MindInsight,
        40,
        5,
        large_record,
    );
}

#[test]
fn disk_guard_tensorboard() {
    the_guard_refuses_before_the_disk_is_full(Format::TensorBoard);
}

#[test]
fn disk_guard_mindinsight() {
    the_guard_refuses_before_the_disk_is_full(Format::MindInsight);
}

/// An exported tensor that meets `ENOSPC` is counted failed; its `.npy` file
/// must not stay behind torn (a valid NPY header over a short body is a
/// file numpy cannot load), as an event file is cut back to its last whole
/// record. Every `.npy` left must be whole, one per tensor counted written.
#[test]
fn enospc_during_an_export_leaves_no_torn_npy() {
    let Some(fs) = tmpfs_or_skip() else {
        return;
    };
    let log = fs.path().join("log");
    let log2 = log.clone();
    // 10 tensors of 120 kB for 512 KiB.
    let n = 10i64;
    let len = 30_000;
    let (errors, stats) = within_deadline(move || {
        let pool = WriterPool::builder(&log2)
            .disk_guard_factor(0)
            .flush_interval(None)
            .build()
            .unwrap();
        for step in 0..n {
            let mut r = Record::new(step, 1.0);
            r.add(
                Tag::new("w").unwrap(),
                Value::export(TensorValue::from_slice(&vec![1.0f32; len], vec![len])),
            );
            pool.write(r).unwrap();
        }
        let (closed, stats) = pool.close_with_stats();
        (closed.err().map(|e| e.errors).unwrap_or_default(), stats)
    });
    match errors.as_slice() {
        [
            WriteError::WriterFailed {
                kind: FileKind::Export,
                source: FileError::Io { source, .. },
            },
        ] => assert_eq!(source.raw_os_error(), Some(28), "{source:?}"),
        other => panic!("expected one export writer failure on ENOSPC, got {other:?}"),
    }
    let export = stats.writer(FileKind::Export).unwrap();
    assert!(export.failed, "{export:?}");
    assert!(export.records_written > 0, "{export:?}");
    assert_eq!(stats.records_written, export.records_written, "{stats:?}");
    assert_eq!(
        stats.records_failed,
        n as u64 - export.records_written,
        "{stats:?}"
    );
    let whole = export.bytes_written / export.records_written;
    assert!(whole as usize > len * 4, "{export:?}");

    let tensor_dir = export.path.clone().unwrap();
    let mut npy: Vec<(String, u64)> = std::fs::read_dir(&tensor_dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    npy.sort();
    let torn: Vec<&(String, u64)> = npy.iter().filter(|(_, size)| *size != whole).collect();
    assert!(
        torn.is_empty(),
        "torn .npy files left after the export writer failed (a whole one has {whole} bytes): {torn:?}"
    );
    assert_eq!(npy.len() as u64, export.records_written, "{npy:?}");
    drop(fs);
}
