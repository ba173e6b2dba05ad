//! [`SummaryRecordBuilder`]: a record's options, carried as ember-write's `WriterOptions`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ember_write::pack::{Format, Packer};
use ember_write::{
    Durability, ErrorPolicy, FullQueuePolicy, SizePolicy, WriterOptions, WriterPool,
};

use super::plugin::{Mode, RankLayout};
use super::record::SummaryRecord;
use super::tap::SummaryTap;
use crate::SummaryError;
use crate::bucket::Mirror;

impl SummaryRecord {
    /// A builder for a record writing under `log_dir`.
    pub fn builder(log_dir: impl Into<PathBuf>) -> SummaryRecordBuilder {
        SummaryRecordBuilder::new(log_dir.into())
    }

    /// A record with every default: TensorBoard files under `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Result<Self, SummaryError> {
        Self::builder(log_dir).build()
    }
}

/// Builds a [`SummaryRecord`]; see each method for its default.
///
/// It carries ember-write's [`WriterOptions`]: the methods here set the common ones, and
/// [`writer_options`](Self::writer_options) reaches every other (queue bytes, batching,
/// packing threads, disk guard, histogram rule, ...).
#[derive(Debug, Clone)]
pub struct SummaryRecordBuilder {
    options: WriterOptions,
    export_tensors: bool,
    rank: Option<(u32, u32)>,
    rank_layout: RankLayout,
    rank_zero_only: bool,
    /// A bucket log's backlog budget, and its records' wait for the store; defaults if `None`.
    remote_budget: Option<u64>,
    remote_wait: Option<(Duration, Option<Arc<AtomicBool>>)>,
    /// The id of the run the record logs, named in a bucket run's lease.
    run_id: Option<String>,
    /// The MLflow tracking server the record also sends to, and the run's tags there.
    mlflow: Option<Tracking>,
    /// Whether closing uploads the event files to the MLflow run as artifacts.
    mlflow_event_files: bool,
}

/// What [`SummaryRecordBuilder::mlflow`] asked for.
#[derive(Debug, Clone)]
struct Tracking {
    config: ember_track::MlflowConfig,
    continuing: ember_track::Continue,
    tags: Vec<(String, String)>,
}

impl Tracking {
    /// The sink of the record writing `log_dir` (a bucket's staging when `in_bucket`).
    fn start(
        self,
        log_dir: &std::path::Path,
        in_bucket: bool,
    ) -> Result<ember_track::MlflowSink, SummaryError> {
        if in_bucket {
            return Err(SummaryError::TrackerInBucket);
        }
        std::fs::create_dir_all(log_dir).map_err(|source| ember_track::TrackError::Spool {
            path: log_dir.to_path_buf(),
            source,
        })?;
        let tags: Vec<(&str, &str)> = self
            .tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Ok(ember_track::MlflowSink::start(
            &self.config,
            log_dir,
            self.continuing,
            &tags,
        )?)
    }
}

impl SummaryRecordBuilder {
    pub(super) fn new(log_dir: PathBuf) -> Self {
        Self {
            options: WriterOptions::new(log_dir),
            export_tensors: false,
            rank: None,
            rank_layout: RankLayout::FileName,
            rank_zero_only: false,
            remote_budget: None,
            remote_wait: None,
            run_id: None,
            mlflow: None,
            mlflow_event_files: false,
        }
    }

    /// [`mlflow`](Self::mlflow) as MLflow's own clients are configured: where
    /// `MLFLOW_TRACKING_URI` is set, the record also sends to that server, into
    /// `MLFLOW_EXPERIMENT_NAME` or `MLFLOW_EXPERIMENT_ID` (`Default` without either), as a new
    /// MLflow run tagged with ember's version; without it, nothing changes. A URI that is not
    /// a tracking server's is an error here, one that does not answer at `build`.
    pub fn mlflow_from_env(self) -> Result<Self, SummaryError> {
        Ok(match ember_track::MlflowConfig::from_env(None)? {
            Some(config) => self.mlflow(
                config,
                ember_track::Continue::No,
                &[("ember.version", env!("CARGO_PKG_VERSION"))],
            ),
            None => self,
        })
    }

    /// Also sends the record's scalars (as metrics) and hyper-parameters (as params) to an
    /// MLflow tracking server ([`ember_track`]), off the training thread through a spool in
    /// the log directory, the run's `tags` with them; rank 0's record alone sends. `continuing`
    /// says whether this start goes on with the MLflow run an earlier start of the same log
    /// directory began (a resume), each step then sent once. `build` fails with a typed error
    /// where the server does not answer or has no such experiment.
    pub fn mlflow(
        mut self,
        config: ember_track::MlflowConfig,
        continuing: ember_track::Continue,
        tags: &[(&str, &str)],
    ) -> Self {
        let tags = tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.mlflow = Some(Tracking {
            config,
            continuing,
            tags,
        });
        self
    }

    /// With [`mlflow`](Self::mlflow): [`close`](SummaryRecord::close) also uploads the log
    /// directory's event files (its sub-runs' too) to the MLflow run, as the artifacts
    /// `events/<path under the log directory>`, after every value sent, each closed and
    /// whole; a resumed run's close uploads them all again, its earlier starts' included.
    /// TensorBoard and MindInsight open them as downloaded.
    pub fn mlflow_event_files(mut self) -> Self {
        self.mlflow_event_files = true;
        self
    }

    /// When the log directory is an object-store URL: how many bytes written may wait for the
    /// store (while it is slow or down) before the queue's [`FullQueuePolicy`] decides about
    /// the next record, as for a full queue (256 MiB by default). They wait on the local disk,
    /// in the staging directory, not in memory.
    pub fn remote_backlog_budget(mut self, bytes: u64) -> Self {
        self.remote_budget = Some(bytes);
        self
    }

    /// When the log directory is an object-store URL and the queue policy is
    /// [`FullQueuePolicy::Block`]: how long a record waits at most for the store to take a
    /// backlog over the budget (5 minutes by default), and a flag that ends the wait at once
    /// when set (the handler of Ctrl-C, say). Past either, the record is refused with
    /// `RemoteError::Waited`, counted, and training goes on or stops as the error policy says.
    pub fn remote_block_wait(mut self, deadline: Duration, stop: Option<Arc<AtomicBool>>) -> Self {
        self.remote_wait = Some((deadline, stop));
        self
    }

    /// The id of the run this record logs (with the `burn` feature, `ember::run::Run::id`): a
    /// run in a bucket names it in its lease, beside the process that holds it.
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.run_id = Some(id.into());
        self
    }

    /// Changes any of the writer pool's options in place. The log directory, rank and rank
    /// naming are set by `build` from the builder's own settings.
    pub fn writer_options(mut self, change: impl FnOnce(&mut WriterOptions)) -> Self {
        change(&mut self.options);
        self
    }

    /// How long the writer thread gathers records after the first of a batch before it packs
    /// and writes them (20 ms by default): a record reaches the operating system at most about
    /// this long after it was recorded, so a killed process loses at most that much.
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.options.max_delay = delay;
        self
    }

    /// TensorBoard (the default) or MindInsight.
    pub fn format(mut self, format: Format) -> Self {
        self.options.pack.format = format;
        self
    }

    /// The file name prefix (MindInsight's default `events`), checked as MindSpore does:
    /// `^\w+[0-9a-zA-Z_.]*$` in ASCII.
    pub fn file_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.file_prefix = prefix.into();
        self
    }

    /// The file name suffix (MindInsight's default `_MS`), checked like the prefix.
    pub fn file_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.options.file_suffix = Some(suffix.into());
        self
    }

    /// Caps each file at `bytes`, framing included; `policy` says what happens at the cap.
    /// Unlimited by default.
    pub fn max_file_size(mut self, bytes: u64, policy: SizePolicy) -> Self {
        self.options.max_file_size = Some(bytes);
        self.options.size_policy = policy;
        self
    }

    /// Whether write errors are logged, counted and kept for [`take_errors`](SummaryRecord::take_errors)
    /// ([`ErrorPolicy::Log`], the default, as MindSpore's `raise_exception=False` and
    /// tensorboardX, which never raise) or come back from the next call ([`ErrorPolicy::Raise`]).
    /// The `Trainer` and the burn-train logger stop training on a summary error
    /// only under `Raise`.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.options.error_policy = policy;
        self
    }

    /// Also exports every tensor value as `.npy` (MindSpore's `export_options={'tensor_format':
    /// 'npy'}`). Off by default.
    pub fn export_tensors(mut self, on: bool) -> Self {
        self.export_tensors = on;
        self
    }

    /// The writer queue's capacity in records and what a full queue does (blocking by default).
    pub fn queue(mut self, capacity: usize, policy: FullQueuePolicy) -> Self {
        self.options.queue_capacity = capacity;
        self.options.full_queue = policy;
        self
    }

    /// How often written data is fsynced without being asked (every 10 s by default); `None`
    /// fsyncs only on `close` (and on `flush` with [`Durability::Sync`]).
    pub fn flush_interval(mut self, interval: Option<Duration>) -> Self {
        self.options.flush_interval = interval;
        self
    }

    /// Whether `flush` and `close` also fsync ([`Durability::Sync`]); OS buffers by default.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.options.durability = durability;
        self
    }

    /// This process's rank and the world size. By default they come from the `RANK` and
    /// `WORLD_SIZE` environment variables when set, else rank 0 of 1.
    pub fn rank(mut self, rank: u32, world_size: u32) -> Self {
        self.rank = Some((rank, world_size));
        self
    }

    /// Where a rank's files go when the world has more than one rank.
    pub fn rank_layout(mut self, layout: RankLayout) -> Self {
        self.rank_layout = layout;
        self
    }

    /// Records only on rank 0: other ranks accept every call and write nothing.
    pub fn rank_zero_only(mut self, on: bool) -> Self {
        self.rank_zero_only = on;
        self
    }

    /// Creates the log directory (mode 0700) if missing, locks it for this rank and starts the
    /// writer pool. Files are created on their first record. The lock (`.ember-locks/rank<r>.lock`,
    /// see [`ember_write::lock`]) is held until the record is closed or dropped, and released
    /// by the operating system if the process dies: a second record on the directory, in this
    /// process or another, fails with [`SummaryError::Locked`] naming the holder's pid, before
    /// it writes anything.
    pub fn build(self) -> Result<SummaryRecord, SummaryError> {
        if self.options.log_dir.as_os_str().is_empty() {
            return Err(SummaryError::EmptyLogDir);
        }
        let (rank, world_size) = self.rank_and_world_size()?;
        let mut options = self.options;
        if world_size > 1 && self.rank_layout == RankLayout::Directory {
            options.log_dir.push(format!("rank_{rank}"));
        }
        let log_dir = options.log_dir.clone();
        let url = log_dir
            .to_str()
            .filter(|text| ember_write::is_remote(text))
            .map(str::to_owned);
        let remote = match url {
            Some(url) => {
                let queue = (self.remote_budget, options.full_queue);
                let at = (url.as_str(), self.run_id.as_deref());
                let mirror = Mirror::start(at, rank, queue, self.remote_wait)?;
                // The writers write into the mirror's staging directory.
                options.log_dir = mirror.staging().to_path_buf();
                Some(mirror)
            }
            None => None,
        };
        if log_dir.exists() && !log_dir.is_dir() {
            return Err(SummaryError::LogDirNotADirectory(log_dir));
        }
        options.rank = rank;
        options.rank_in_tensorboard_names =
            world_size > 1 && self.rank_layout == RankLayout::FileName;
        let error_policy = options.error_policy;
        // A sub-run is a run of its own: no rank in its names, its own directory.
        let child_options = WriterOptions {
            rank_in_tensorboard_names: false,
            ..options.clone()
        };
        let packer = Arc::new(Packer::new(options.pack.clone()));
        let active = !(self.rank_zero_only && rank != 0);
        let own_directory = world_size <= 1 || self.rank_layout == RankLayout::Directory;
        let mlflow = match self.mlflow {
            Some(tracking) if active && rank == 0 => {
                Some(tracking.start(&log_dir, remote.is_some())?)
            }
            _ => None,
        };
        let (lock, journal, pool) = match active {
            true => start_writers(options, &log_dir, rank, own_directory)?,
            false => (None, None, None),
        };
        Ok(SummaryRecord {
            pool,
            lock,
            log_dir,
            pending: Vec::new(),
            tap: SummaryTap::new(Arc::clone(&packer)),
            packer,
            mode: Mode::Train,
            export_tensors: self.export_tensors,
            closed: false,
            final_stats: None,
            error_policy,
            rank,
            world_size,
            own_directory,
            wall_time: None,
            journal,
            children: std::collections::BTreeMap::new(),
            child_options,
            session_start: None,
            remote,
            mlflow,
            mlflow_event_files: self.mlflow_event_files,
            untracked: false,
        })
    }

    /// This record's rank and the world size: as given, or read from the environment.
    fn rank_and_world_size(&self) -> Result<(u32, u32), SummaryError> {
        let (rank, world_size) = match self.rank {
            Some(rank) => rank,
            None => rank_from_env()?,
        };
        if rank >= world_size {
            return Err(SummaryError::Rank(format!(
                "rank {rank} is not below the world size {world_size}"
            )));
        }
        Ok((rank, world_size))
    }
}

/// An active record's lock, journal and writer pool.
type Writers = (
    Option<ember_write::DirLock>,
    Option<ember_write::Journal>,
    Option<WriterPool>,
);

/// What an active record writes with: its lock on the directory (one writer per directory
/// and rank: taken before anything is written, held until the record closes), the journal
/// its writers list what they make in, and the writer pool. A bucket's staging directory is
/// the record's alone, and shipped away: neither locked nor journaled.
fn start_writers(
    options: WriterOptions,
    log_dir: &std::path::Path,
    rank: u32,
    own_directory: bool,
) -> Result<Writers, SummaryError> {
    let local = !is_staging(&options, log_dir);
    let lock = match local {
        true => Some(ember_write::DirLock::acquire(&options.log_dir, rank)?),
        false => None,
    };
    // Named after the rank a rollback goes by (see `SummaryRecord::ownership`).
    let journal =
        local.then(|| ember_write::Journal::new(log_dir, if own_directory { 0 } else { rank }));
    let pool = WriterPool::with_journal(options, journal.clone())?;
    Ok((lock, journal, Some(pool)))
}

fn rank_from_env() -> Result<(u32, u32), SummaryError> {
    let read = |name: &str| -> Result<Option<u32>, SummaryError> {
        match std::env::var(name) {
            Ok(text) => text.trim().parse().map(Some).map_err(|_| {
                SummaryError::Rank(format!("{name}={text:?} is not a non-negative integer"))
            }),
            Err(_) => Ok(None),
        }
    };
    let rank = read("RANK")?.unwrap_or(0);
    let world_size = read("WORLD_SIZE")?.unwrap_or(rank + 1).max(1);
    Ok((rank, world_size))
}

/// Whether the writers' directory is a remote record's private staging directory (no other
/// writer can find it: nothing to lock).
fn is_staging(options: &WriterOptions, log_dir: &std::path::Path) -> bool {
    options.log_dir != log_dir
}
