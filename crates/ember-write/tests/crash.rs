//! Crash safety: a child process writing continuously is killed with SIGKILL;
//! the file then holds only whole, CRC-valid records plus at most one
//! truncated tail.
//!
//! The child is this test binary itself, run with `--ignored --exact` on
//! [`crash_child_writes_forever`] and the log directory in an env var.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ember_pack::proto::tensorboard::Event;
use ember_pack::{Record, Tag, TensorValue, Value};
use ember_write::{Scan, WriterPool};
use prost::Message;

const CHILD_ENV: &str = "EMBER_WRITE_CRASH_CHILD_DIR";

#[test]
#[ignore = "the child process of sigkill_leaves_only_whole_records"]
fn crash_child_writes_forever() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let pool = WriterPool::builder(dir)
        .flush_interval(Some(Duration::from_millis(1)))
        .build()
        .unwrap();
    let loss = Tag::new("loss").unwrap();
    let t = Tag::new("t").unwrap();
    for step in 0i64.. {
        let mut r = Record::new(step, 1.7e9 + step as f64);
        r.add(loss.clone(), 1.0 / (step as f64 + 1.0));
        // Records of varying size, so that kills land anywhere in a record;
        // every tenth is larger than the write buffer, which leaves the file
        // without its last bytes between two writes.
        let n = if step % 10 == 9 {
            100_000
        } else {
            (step % 97) as usize + 1
        };
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        r.add(
            t.clone(),
            Value::Tensor(TensorValue::from_slice(&v, vec![n])),
        );
        pool.write(r).unwrap();
    }
}

fn file_size(dir: &std::path::Path) -> u64 {
    common::tb_files(dir)
        .first()
        .and_then(|f| std::fs::metadata(f).ok())
        .map_or(0, |m| m.len())
}

#[test]
fn sigkill_leaves_only_whole_records() {
    let exe = std::env::current_exe().unwrap();
    let mut truncated_tails = 0;
    for round in 0..8u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "crash_child_writes_forever",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill at a different size each round.
        let target = 3_000_000 + round * 1_700_003;
        let start = Instant::now();
        while file_size(dir.path()) < target {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "child wrote too little"
            );
            if let Some(status) = child.try_wait().unwrap() {
                panic!("child exited early: {status}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();

        let files = common::tb_files(dir.path());
        assert_eq!(files.len(), 1);
        let scan = Scan::file(&files[0]).unwrap();
        assert!(
            scan.problems.len() <= 1,
            "round {round}: {:?}",
            scan.problems
        );
        if let Some(p) = scan.problems.first() {
            assert!(p.is_truncated_tail(), "round {round}: {p}");
            truncated_tails += 1;
        }
        let events: Vec<Event> = scan
            .records
            .iter()
            .map(|r| Event::decode(r.data.as_slice()).unwrap())
            .collect();
        assert!(common::is_header(&events[0]));
        let steps = common::steps(&events);
        assert!(steps.len() > 20, "round {round}: {} records", steps.len());
        assert_eq!(steps, (0..steps.len() as i64).collect::<Vec<_>>());
    }
    // Not required, but say how often a kill tore a record.
    eprintln!("{truncated_tails} of 8 kills left a truncated tail");
}
