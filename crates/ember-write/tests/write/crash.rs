//! Crash safety, both formats: a child process writing continuously is
//! killed with SIGKILL at a pseudo-random moment; every event file then holds
//! its header, then only whole, CRC-valid records of consecutive steps, plus
//! at most one truncated tail, and every record a `flush` acknowledged before
//! the kill is there.
//!
//! The child is this test binary itself, run with `--ignored --exact` on
//! [`crash_child_writes_forever`] and its settings in env vars. After each
//! `flush()` returns it appends the last flushed step to a side file with one
//! unbuffered `write(2)`, so the parent knows what must have survived. After
//! its first flush it prints a marker on stdout; the parent waits for that
//! marker (a blocking read, not a sleep), then kills it at a seeded
//! pseudo-random moment: in even rounds after a delay, in odd rounds as soon
//! as the file has grown past a byte count. A file grows page by page while
//! a large `write(2)` is under way, so the byte kills are the ones that can
//! land inside a write and tear its last record.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ember_pack::{Format, Record, Tag, TensorValue, Value};
use ember_write::{Scan, WriterPool};
use prost::Message;

use crate::common;

const DIR_ENV: &str = "EMBER_WRITE_CRASH_CHILD_DIR";
const FORMAT_ENV: &str = "EMBER_WRITE_CRASH_CHILD_FORMAT";
const SEED_ENV: &str = "EMBER_WRITE_CRASH_CHILD_SEED";
const FLUSHED_ENV: &str = "EMBER_WRITE_CRASH_CHILD_FLUSHED";
/// Printed on the child's stdout once its first flush returned.
const FIRST_FLUSH_MARKER: &str = "ember-crash-child: first flush done";

/// Kills per format.
const ROUNDS: u64 = 20;
/// The longest the child runs after its first flush before it is killed.
const MAX_KILL_DELAY_MS: u64 = 150;
/// The largest file size at which the child is killed.
const MAX_KILL_BYTES: u64 = 12 << 20;
/// Only turns a hung child into a failure; never reached when things work.
const DEADLINE: Duration = Duration::from_secs(60);

/// SplitMix64: a deterministic, well-mixed sequence from a seed.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_4765_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::TensorBoard => "tensorboard",
        Format::MindInsight => "mindinsight",
    }
}

/// Elements of the tensor of `step`: mostly small, one in eight larger than
/// the writers' 256 KiB buffer (70k..120k `f32`s), so that kills land
/// anywhere inside a record and some writes hand a single huge record to
/// the operating system.
fn tensor_len(seed: u64, step: i64) -> usize {
    let h = mix(seed ^ (step as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    if h.is_multiple_of(8) {
        70_000 + (h >> 8) as usize % 50_000
    } else {
        1 + (h >> 8) as usize % 3_000
    }
}

/// Records between two flushes of the child, 1 to 6.
fn flush_every(seed: u64) -> i64 {
    1 + (mix(seed ^ 0xF1) % 6) as i64
}

#[test]
#[ignore = "the child process of sigkill_at_random_moments_*"]
fn crash_child_writes_forever() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let format = match std::env::var(FORMAT_ENV).as_deref() {
        Ok("mindinsight") => Format::MindInsight,
        _ => Format::TensorBoard,
    };
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let mut flushed = OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::var(FLUSHED_ENV).unwrap())
        .unwrap();
    // No timed flush: only `flush()` and full buffers put bytes on disk.
    let pool = WriterPool::builder(dir)
        .format(format)
        .flush_interval(None)
        .build()
        .unwrap();
    let loss = Tag::new("loss").unwrap();
    let t = Tag::new("t").unwrap();
    let every = flush_every(seed);
    let mut announced = false;
    for step in 0i64.. {
        let mut r = Record::new(step, 1.7e9 + step as f64);
        r.add(loss.clone(), step as f64);
        let n = tensor_len(seed, step);
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        r.add(
            t.clone(),
            Value::Tensor(TensorValue::from_slice(&v, vec![n])),
        );
        pool.write(r).unwrap();
        if (step + 1) % every == 0 {
            pool.flush().unwrap();
            // One unbuffered write(2) of a whole line: the parent takes the
            // last complete line.
            flushed.write_all(format!("{step}\n").as_bytes()).unwrap();
            if !announced {
                announced = true;
                let mut out = std::io::stdout().lock();
                writeln!(out, "{FIRST_FLUSH_MARKER}").unwrap();
                out.flush().unwrap();
            }
        }
    }
}

/// The last step the child recorded as flushed: its last complete line.
fn last_flushed(path: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(path).ok()?;
    let complete = &text[..text.rfind('\n')? + 1];
    complete.lines().last()?.parse().ok()
}

/// What one event file holds: its header (checked) and the steps of its
/// summary events, in file order.
struct FileSteps {
    steps: Vec<i64>,
    truncated_tail: bool,
}

fn check_file(path: &Path, format: Format) -> Result<FileSteps, String> {
    let scan = Scan::file(path).map_err(|e| format!("cannot read: {e}"))?;
    if scan.problems.len() > 1 {
        return Err(format!("more than one problem: {:?}", scan.problems));
    }
    let truncated_tail = match scan.problems.first() {
        Some(p) if p.is_truncated_tail() => true,
        Some(p) => return Err(format!("corruption, not a truncated tail: {p}")),
        None => false,
    };
    let Some((first, rest)) = scan.records.split_first() else {
        return Err("no whole record, not even the header".into());
    };
    let mut steps = Vec::with_capacity(rest.len());
    match format {
        Format::TensorBoard => {
            use ember_pack::proto::tensorboard::{Event, event::What};
            let header = Event::decode(first.data.as_slice()).map_err(|e| e.to_string())?;
            match &header.what {
                Some(What::FileVersion(v)) if v == "brain.Event:2" => {}
                other => return Err(format!("first record is not the header: {other:?}")),
            }
            for r in rest {
                let e = Event::decode(r.data.as_slice())
                    .map_err(|e| format!("record at byte {}: {e}", r.offset))?;
                if !matches!(e.what, Some(What::Summary(_))) {
                    return Err(format!("record at byte {} is not a summary", r.offset));
                }
                steps.push(e.step);
            }
        }
        Format::MindInsight => {
            use ember_pack::proto::mindspore::{Event, event::What};
            let header = Event::decode(first.data.as_slice()).map_err(|e| e.to_string())?;
            match &header.what {
                Some(What::Version(v)) if v == "MindSpore.Event:1" => {}
                other => return Err(format!("first record is not the header: {other:?}")),
            }
            for r in rest {
                let e = Event::decode(r.data.as_slice())
                    .map_err(|e| format!("record at byte {}: {e}", r.offset))?;
                if !matches!(e.what, Some(What::Summary(_))) {
                    return Err(format!("record at byte {} is not a summary", r.offset));
                }
                steps.push(e.step.ok_or("a summary event without a step")?);
            }
        }
    }
    Ok(FileSteps {
        steps,
        truncated_tail,
    })
}

/// When the parent kills the child.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// This long after its first flush.
    Delay(Duration),
    /// As soon as its summary file holds at least this many bytes.
    Bytes(u64),
}

impl KillAt {
    fn for_round(round: u64, seed: u64) -> Self {
        let r = mix(seed ^ 0xDE1A);
        if round.is_multiple_of(2) {
            KillAt::Delay(Duration::from_millis(r % (MAX_KILL_DELAY_MS + 1)))
        } else {
            KillAt::Bytes(r % MAX_KILL_BYTES)
        }
    }
}

/// Runs one child until its kill moment, kills it, and returns the last
/// step it recorded as flushed.
fn run_and_kill(
    exe: &Path,
    root: &Path,
    log: &Path,
    format: Format,
    seed: u64,
    kill_at: KillAt,
) -> i64 {
    let flushed = root.join("flushed");
    let stderr = std::fs::File::create(root.join("child.stderr")).unwrap();
    let mut child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            &child_test_name(),
            "--test-threads=1",
        ])
        .env(DIR_ENV, log)
        .env(FORMAT_ENV, format_name(format))
        .env(SEED_ENV, seed.to_string())
        .env(FLUSHED_ENV, &flushed)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                // libtest has printed `test <name> ... ` on the same line.
                Ok(l) if l.ends_with(FIRST_FLUSH_MARKER) => {
                    let _ = tx.send(());
                    return;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
        // End of output without the marker: dropping tx says so.
    });
    let started = rx.recv_timeout(DEADLINE);
    if started.is_err() {
        let _ = child.kill();
        let status = child.wait().unwrap();
        let err = std::fs::read_to_string(root.join("child.stderr")).unwrap_or_default();
        panic!("seed {seed}: the child never flushed ({status}); its stderr:\n{err}");
    }
    match kill_at {
        KillAt::Delay(delay) => std::thread::sleep(delay),
        KillAt::Bytes(target) => {
            let start = Instant::now();
            while summary_files(log, format)
                .first()
                .and_then(|f| std::fs::metadata(f).ok())
                .map_or(0, |m| m.len())
                < target
            {
                // Watching the file grow, not ordering anything: the child
                // does not wait for the parent.
                assert!(
                    start.elapsed() < DEADLINE,
                    "seed {seed}: the file stopped growing"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    if let Some(status) = child.try_wait().unwrap() {
        let err = std::fs::read_to_string(root.join("child.stderr")).unwrap_or_default();
        panic!("seed {seed}: the child exited by itself ({status}); its stderr:\n{err}");
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    last_flushed(&flushed).expect("the child recorded its first flush before the marker")
}

fn summary_files(log: &Path, format: Format) -> Vec<PathBuf> {
    let needle = match format {
        Format::TensorBoard => "tfevents",
        Format::MindInsight => "_MS",
    };
    common::files_with(log, needle)
}

/// The child test's name as libtest knows it: its module path in this binary (the crate's name
/// left out), so that `--exact` finds it wherever the module sits.
fn child_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, path)| path);
    format!("{module}::crash_child_writes_forever")
}

/// This test binary. On Linux `/proc/self/exe`, the very image running now:
/// test binaries of every worktree sharing a target directory have the same
/// path, and another build may replace the file while this test runs.
fn this_executable() -> PathBuf {
    let proc_exe = Path::new("/proc/self/exe");
    if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe().unwrap()
    }
}

fn sigkill_at_random_moments(format: Format) {
    let exe = this_executable();
    let start = Instant::now();
    let mut torn = 0;
    let mut records = 0;
    for round in 0..ROUNDS {
        let seed = mix(round ^ ((format as u64) << 32));
        let kill_at = KillAt::for_round(round, seed);
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        let flushed = run_and_kill(&exe, root.path(), &log, format, seed, kill_at);
        let ctx = format!(
            "{} round {round} (seed {seed}, killed at {kill_at:?}, last flushed step {flushed})",
            format_name(format),
        );

        // The child only ever writes summary records, to one file.
        let files = summary_files(&log, format);
        let all = std::fs::read_dir(&log).unwrap().count();
        assert_eq!(files.len(), 1, "{ctx}: {files:?}");
        assert_eq!(all, files.len(), "{ctx}: files other than the summary file");

        let mut next = 0i64;
        for f in &files {
            let got =
                check_file(f, format).unwrap_or_else(|e| panic!("{ctx}: {}: {e}", f.display()));
            for (i, &s) in got.steps.iter().enumerate() {
                assert_eq!(s, next, "{ctx}: {}: record {i} out of order", f.display());
                next += 1;
            }
            torn += usize::from(got.truncated_tail);
        }
        // Every step up to the last acknowledged flush survived the kill.
        assert!(
            next > flushed,
            "{ctx}: steps 0..{next} in the files, but step {flushed} was flushed"
        );
        records += next;
    }
    // Not required, but say how often a kill tore a record.
    eprintln!(
        "{}: {ROUNDS} kills, {records} records checked, {torn} truncated tails, {:.1} s",
        format_name(format),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn sigkill_at_random_moments_tensorboard() {
    sigkill_at_random_moments(Format::TensorBoard);
}

#[test]
fn sigkill_at_random_moments_mindinsight() {
    sigkill_at_random_moments(Format::MindInsight);
}
