//! Pool options and their builder.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ember_pack::PackOptions;

use crate::durable;
use crate::error::WriteError;
use crate::free_space::FreeSpaceSource;
use crate::naming::{self, Naming};

/// What a file writer does when the next record would pass the size cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SizePolicy {
    /// MindSpore's behaviour: the file stops growing; later records of its
    /// kind are dropped and counted, and one warning is logged.
    #[default]
    Stop,
    /// Close the file and continue in a new one whose name sorts after it.
    Rotate,
}

/// What [`WriterPool::write`](crate::WriterPool::write) does when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FullQueuePolicy {
    /// Wait for room (the default).
    #[default]
    Block,
    /// Drop the record being written and count it.
    DropNewest,
    /// Return [`WriteError::QueueFull`].
    Error,
}

/// How errors of the writer thread reach the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// The caller's next `write` or `flush` returns the error; `close`
    /// returns any not yet returned.
    Raise,
    /// The default, as MindSpore's `raise_exception=False`: errors are
    /// counted, kept for [`WriterPool::take_errors`](crate::WriterPool::take_errors) and logged (the first of
    /// each kind as an error, later ones at debug level); `write` and `flush`
    /// do not fail for them, and `close` returns those not yet taken.
    #[default]
    Log,
}

/// What [`WriterPool::flush`](crate::WriterPool::flush) guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Flushed records have reached the operating system (`write(2)`): they
    /// survive the process being killed, not a power loss. The timed flush
    /// fsyncs them later.
    #[default]
    Os,
    /// Flushed records are also on the disk (`fsync`).
    Sync,
}

/// Every setting of a [`WriterPool`](crate::WriterPool); built with
/// [`WriterPoolBuilder`](crate::WriterPoolBuilder).
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Directory for all files; created (mode 0700) when missing.
    pub log_dir: PathBuf,
    /// Packing options, the output [`Format`](ember_pack::Format) among them.
    pub pack: PackOptions,
    /// Leading part of event file names (default `events`).
    pub file_prefix: String,
    /// Trailing part of summary file names; `None` for the format's default
    /// (nothing for TensorBoard, `_MS` for MindInsight).
    pub file_suffix: Option<String>,
    /// Rank (device id) in MindInsight file names (default 0).
    pub rank: u32,
    /// Whether TensorBoard file names carry `.rank<rank>` (default false).
    pub rank_in_tensorboard_names: bool,
    /// Largest size of one event file in bytes, framing and header included
    /// (default unlimited). Export files have no cap.
    pub max_file_size: Option<u64>,
    /// What happens at the cap.
    pub size_policy: SizePolicy,
    /// A record is refused when free disk space is below this many times its
    /// size (default 32, MindSpore's rule); 0 turns the guard off.
    pub disk_guard_factor: u64,
    /// Where free-space figures come from (default: the operating system).
    pub free_space: FreeSpaceSource,
    /// How errors reach the caller.
    pub error_policy: ErrorPolicy,
    /// Records the queue holds (default 1024).
    pub queue_capacity: usize,
    /// Bytes the queued and in-flight records may hold together, by their
    /// values' payload sizes (default [`DEFAULT_MAX_QUEUED_BYTES`]). A record
    /// larger than this is accepted only when nothing else is queued, so it
    /// cannot wait forever.
    pub max_queued_bytes: usize,
    /// What `write` does when the queue is full.
    pub full_queue: FullQueuePolicy,
    /// Most records packed and written as one batch (default 1024).
    pub max_batch: usize,
    /// How long the pool thread waits, after the first record of a batch,
    /// for more to come before it packs and writes them (default 20 ms). A
    /// record reaches the operating system at most this long (plus packing
    /// and writing time) after `write` returns; waiting lets one wake-up of
    /// the pool thread serve many records instead of one.
    pub max_delay: Duration,
    /// Threads of the pool's own packing thread pool, used for batches with
    /// large values (default: the available parallelism, at most 4). The
    /// global rayon pool, which Burn's CPU backends use, is left alone.
    pub pack_threads: usize,
    /// Interval of the timed flush, which fsyncs what was written since the
    /// last one; `None` for none (default 10 s).
    pub flush_interval: Option<Duration>,
    /// What a flush guarantees.
    pub durability: Durability,
    /// Whether closed files are made read-only (0400), as MindSpore does
    /// (default true).
    pub read_only_on_close: bool,
}

impl WriterOptions {
    /// The defaults for `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        Self {
            log_dir: log_dir.into(),
            pack: PackOptions::default(),
            file_prefix: "events".into(),
            file_suffix: None,
            rank: 0,
            rank_in_tensorboard_names: false,
            max_file_size: None,
            size_policy: SizePolicy::Stop,
            disk_guard_factor: 32,
            free_space: FreeSpaceSource::default(),
            error_policy: ErrorPolicy::Log,
            queue_capacity: 1024,
            max_queued_bytes: DEFAULT_MAX_QUEUED_BYTES,
            full_queue: FullQueuePolicy::Block,
            max_batch: 1024,
            max_delay: Duration::from_millis(20),
            pack_threads: default_pack_threads(),
            flush_interval: Some(Duration::from_secs(10)),
            durability: Durability::Os,
            read_only_on_close: true,
        }
    }

    /// Checks the options.
    pub fn validate(&self) -> Result<(), WriteError> {
        if self.log_dir.as_os_str().is_empty() {
            return Err(WriteError::InvalidOptions(
                "the log directory must not be empty".into(),
            ));
        }
        naming::check_affix(&self.file_prefix, true).map_err(WriteError::InvalidOptions)?;
        if let Some(suffix) = &self.file_suffix {
            naming::check_affix(suffix, false).map_err(WriteError::InvalidOptions)?;
        }
        if self.queue_capacity == 0 {
            return Err(WriteError::InvalidOptions(
                "queue capacity must be at least 1".into(),
            ));
        }
        if self.max_queued_bytes == 0 {
            return Err(WriteError::InvalidOptions(
                "max queued bytes must be at least 1".into(),
            ));
        }
        if self.pack_threads == 0 {
            return Err(WriteError::InvalidOptions(
                "pack threads must be at least 1".into(),
            ));
        }
        if self.max_batch == 0 {
            return Err(WriteError::InvalidOptions(
                "max batch must be at least 1".into(),
            ));
        }
        if self.flush_interval == Some(Duration::ZERO) {
            return Err(WriteError::InvalidOptions(
                "flush interval must be positive".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn naming(&self) -> Naming {
        Naming {
            prefix: self.file_prefix.clone(),
            suffix: self.file_suffix.clone(),
            rank: self.rank,
            rank_in_tensorboard_names: self.rank_in_tensorboard_names,
            ..Naming::new(self.pack.format)
        }
    }
}

/// The default byte bound of the queue: 32 MiB, enough for a thousand
/// 100k-element `f32` histograms or tensors in flight, small beside a
/// training process.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 32 << 20;

fn default_pack_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// Creates `dir` and missing parents, new ones with mode 0700, each made one's entry in its
/// parent fsynced (as [`durable::create_dir`] does): a run directory whose entry a crash could
/// take back would take every durable file in it along.
pub(crate) fn create_dir_private(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    durable::create_dir_with(dir, |dir| builder.create(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process the test below runs under `strace`: the directory to make.
    const CHILD: &str = "EMBER_TEST_CREATE_DIR_PRIVATE";

    /// The system calls a process made, as `strace -f -o` wrote them: `<pid> <call>(…) = <r>`.
    fn calls_of(log: &str) -> Vec<&str> {
        log.lines()
            .filter_map(|line| line.split_once(char::is_whitespace))
            .map(|(_, call)| call.trim_start())
            .collect()
    }

    /// Whether `calls` open `dir` and fsync what they opened, after making `made`.
    fn fsyncs_after(calls: &[&str], made: &Path, dir: &Path) -> bool {
        let Some(at) = calls
            .iter()
            .position(|c| c.starts_with("mkdir") && c.contains(&format!("\"{}\"", made.display())))
        else {
            return false;
        };
        let opened = format!("openat(AT_FDCWD, \"{}\", ", dir.display());
        let fds: Vec<&str> = calls[at..]
            .iter()
            .filter(|c| c.starts_with(&opened))
            .filter_map(|c| c.rsplit_once(" = ").map(|(_, fd)| fd.trim()))
            .collect();
        calls[at..]
            .iter()
            .any(|c| fds.iter().any(|fd| c.starts_with(&format!("fsync({fd})"))))
    }

    /// Makes the directories under `strace` in a child process (this test binary again) and
    /// reads back which system calls it made: a crash after `mkdir` but before the parent's
    /// fsync can lose the new directory's entry, and every durable file in it with it.
    #[cfg(target_os = "linux")]
    #[test]
    fn each_directory_made_has_its_entry_fsynced() {
        if let Some(dir) = std::env::var_os(CHILD) {
            create_dir_private(Path::new(&dir)).unwrap();
            return;
        }
        let strace = std::process::Command::new("strace").arg("-V").output();
        if !strace.is_ok_and(|out| out.status.success()) {
            eprintln!(
                "strace is not installed: the fsync of a new directory's parent is unchecked"
            );
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let (run, locks) = (
            root.path().join("run"),
            root.path().join("run/.ember-locks"),
        );
        let log = root.path().join("strace.log");
        let traced = std::process::Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=mkdir,mkdirat,openat,fsync", "-o"])
            .arg(&log)
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "options::tests::each_directory_made_has_its_entry_fsynced",
            ])
            .args(["--test-threads", "1"])
            .env(CHILD, &locks)
            .output()
            .unwrap();
        assert!(traced.status.success(), "{traced:?}");
        assert!(locks.is_dir());
        let log = std::fs::read_to_string(&log).unwrap();
        let calls = calls_of(&log);
        assert!(fsyncs_after(&calls, &run, root.path()), "{log}");
        assert!(fsyncs_after(&calls, &locks, &run), "{log}");
    }
}
