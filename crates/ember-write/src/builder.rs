//! How a pool is configured and started: [`WriterPool::builder`] and the [`WriterPoolBuilder`]
//! it returns, over [`WriterOptions`]; at the top of the crate, as `build` starts the pool.

use std::path::PathBuf;
use std::time::Duration;

use ember_pack::{Format, PackOptions};

use crate::error::WriteError;
use crate::free_space::{FreeSpace, FreeSpaceSource};
use crate::options::{Durability, ErrorPolicy, FullQueuePolicy, SizePolicy, WriterOptions};
use crate::pool::WriterPool;

impl WriterPool {
    /// A builder with the defaults for `log_dir`.
    pub fn builder(log_dir: impl Into<PathBuf>) -> WriterPoolBuilder {
        WriterPoolBuilder::new(log_dir)
    }
}

/// Builds a [`WriterPool`]: `WriterPool::builder(dir).format(..)...build()`.
#[derive(Debug, Clone)]
pub struct WriterPoolBuilder {
    options: WriterOptions,
}

impl WriterPoolBuilder {
    /// A builder with the defaults for `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        Self {
            options: WriterOptions::new(log_dir),
        }
    }

    /// The output format (sets `pack.format`).
    pub fn format(mut self, format: Format) -> Self {
        self.options.pack.format = format;
        self
    }

    /// All packing options, the format among them.
    pub fn pack_options(mut self, pack: PackOptions) -> Self {
        self.options.pack = pack;
        self
    }

    /// The leading part of event file names.
    pub fn file_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.file_prefix = prefix.into();
        self
    }

    /// The trailing part of summary file names.
    pub fn file_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.options.file_suffix = Some(suffix.into());
        self
    }

    /// The rank in MindInsight names.
    pub fn rank(mut self, rank: u32) -> Self {
        self.options.rank = rank;
        self
    }

    /// Whether TensorBoard names carry `.rank<rank>`.
    pub fn rank_in_tensorboard_names(mut self, on: bool) -> Self {
        self.options.rank_in_tensorboard_names = on;
        self
    }

    /// A size cap per event file and what to do at it.
    pub fn max_file_size(mut self, bytes: u64, policy: SizePolicy) -> Self {
        self.options.max_file_size = Some(bytes);
        self.options.size_policy = policy;
        self
    }

    /// The free-disk guard's factor (0 turns it off).
    pub fn disk_guard_factor(mut self, factor: u64) -> Self {
        self.options.disk_guard_factor = factor;
        self
    }

    /// Where free-space figures come from (a test seam).
    pub fn free_space(mut self, source: impl FreeSpace + 'static) -> Self {
        self.options.free_space = FreeSpaceSource::new(source);
        self
    }

    /// How errors reach the caller.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.options.error_policy = policy;
        self
    }

    /// Queue capacity in records, and what `write` does when it is full.
    pub fn queue(mut self, capacity: usize, policy: FullQueuePolicy) -> Self {
        self.options.queue_capacity = capacity;
        self.options.full_queue = policy;
        self
    }

    /// Most records packed and written as one batch.
    pub fn max_batch(mut self, records: usize) -> Self {
        self.options.max_batch = records;
        self
    }

    /// The byte bound of queued and in-flight records.
    pub fn max_queued_bytes(mut self, bytes: usize) -> Self {
        self.options.max_queued_bytes = bytes;
        self
    }

    /// How long the pool thread gathers a batch after its first record.
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.options.max_delay = delay;
        self
    }

    /// Threads of the pool's own packing thread pool.
    pub fn pack_threads(mut self, threads: usize) -> Self {
        self.options.pack_threads = threads;
        self
    }

    /// The timed flush interval; `None` for none.
    pub fn flush_interval(mut self, interval: Option<Duration>) -> Self {
        self.options.flush_interval = interval;
        self
    }

    /// What a flush guarantees.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.options.durability = durability;
        self
    }

    /// Whether closed files are made read-only.
    pub fn read_only_on_close(mut self, on: bool) -> Self {
        self.options.read_only_on_close = on;
        self
    }

    /// The options as set so far.
    pub fn options(&self) -> &WriterOptions {
        &self.options
    }

    /// The options as set so far, to change any of them in place.
    pub fn options_mut(&mut self) -> &mut WriterOptions {
        &mut self.options
    }

    /// A builder starting from `options`.
    pub fn from_options(options: WriterOptions) -> Self {
        Self { options }
    }

    /// Validates the options, creates the log directory and starts the pool.
    pub fn build(self) -> Result<WriterPool, WriteError> {
        WriterPool::new(self.options)
    }
}
