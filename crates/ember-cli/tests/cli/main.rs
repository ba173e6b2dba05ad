//! The `ember` binary end to end: train writes logs both formats' readers decode, inspect finds
//! truncated tails and corruption at their byte offsets with the documented exit codes, bench
//! write prints one valid JSON line per workload, failures are one line without a panic, and
//! Ctrl-C stops train with whole logs and exit code 130. This file holds the helpers that spawn
//! the binary; each other file of `tests/cli/` one command (`inspect_kinds` inspect's detailed
//! kinds, `resume` train's `--resume` and `--restart` as a user types them, `resume_if_any`
//! the one command a requeued batch script runs). One test binary
//! for the crate: each links ember and Burn.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ember::SummaryRecord;
use ember::pack::proto::tensorboard::hparams;
use ember::pack::proto::{mindspore, tensorboard};
use ember::pack::{Format, hparams_tags};
use ember::read::Scan;
use prost::Message;

mod admission;
mod bench;
mod ctrl_c;
mod foreign_files;
mod full_disk;
mod inspect;
mod inspect_kinds;
mod locks;
mod printing;
mod resume;
mod resume_if_any;
mod signals;
mod train;

fn ember(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(args)
        .output()
        .expect("the ember binary runs")
}

/// `ember ARGS` run in `dir`.
fn ember_in(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the ember binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Files of `dir` whose name contains `pattern`, sorted.
fn files(dir: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.to_string_lossy().contains(pattern))
        .collect();
    files.sort();
    files
}

/// Asserts a failure is one `error:` line on stderr, with no panic or backtrace.
fn assert_one_error_line(output: &Output) {
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A spawned `ember` that is killed if the test ends before it does, so a failing test never
/// leaves a long training behind.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for the process to exit; a hang past `limit` fails the test instead of hanging it.
fn exit_within(child: &mut Spawned, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "ember still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A training `ember` that has finished its first epoch: the process (killed if the test ends
/// first), the stderr lines still to come, and those printed so far.
struct Training {
    child: Spawned,
    lines: mpsc::Receiver<String>,
    printed: String,
}

impl Training {
    /// Starts `ember train ARGS` in `dir` and waits for its first epoch to end.
    fn past_first_epoch(dir: &Path, args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_ember"))
            .arg("train")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the ember binary runs");
        let mut child = Spawned(child);
        let stderr = BufReader::new(child.0.stderr.take().unwrap());
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut training = Self {
            child,
            lines,
            printed: String::new(),
        };
        loop {
            let line = (training.lines)
                .recv_timeout(Duration::from_secs(120))
                .expect("ember train finishes an epoch");
            training.printed.push_str(&line);
            training.printed.push('\n');
            if line.starts_with("epoch 1/") {
                return training;
            }
        }
    }

    /// Waits for a line that contains `text` (everything up to it kept in `printed`).
    fn wait_for(&mut self, text: &str) {
        loop {
            let line = (self.lines)
                .recv_timeout(Duration::from_secs(300))
                .unwrap_or_else(|_| panic!("no line with `{text}`:\n{}", self.printed));
            self.printed.push_str(&line);
            self.printed.push('\n');
            if line.contains(text) {
                return;
            }
        }
    }

    /// Sends the process `signal` (`kill`'s spelling: `-TERM`).
    fn signal(&self, signal: &str) {
        let pid = self.child.0.id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success());
    }

    /// What the process printed, once it has ended and its last lines have come.
    fn printed(mut self) -> String {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.printed.push_str(&line);
            self.printed.push('\n');
        }
        self.printed
    }
}
