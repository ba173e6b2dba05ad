//! `SummaryRecord`: MindSpore's summary API with tensorboardX's one-call convenience.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ember_write::pack::{Format, Graph, HParams, Image, ImageLayout, Record, Tag, Value};
use ember_write::{
    Durability, ErrorPolicy, FullQueuePolicy, PoolStats, SizePolicy, WriteError, WriterPool,
    WriterPoolBuilder,
};

use crate::{SummaryError, ToTensorValue};

/// Which kind of value an [`add_value`](SummaryRecord::add_value) call adds: MindSpore's plugin
/// names, plus TensorBoard's text and hparams. A value must be of its plugin's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plugin {
    /// A number.
    Scalar,
    /// A tensor (exported as `.npy` too when export is on).
    Tensor,
    /// A histogram.
    Histogram,
    /// One image or a batch.
    Image,
    /// Markdown text.
    Text,
    /// Hyper-parameters and the metrics that measure them.
    HParams,
    /// A model graph.
    Graph,
    /// MindSpore train lineage.
    TrainLineage,
    /// MindSpore evaluation lineage.
    EvalLineage,
    /// MindSpore dataset graph.
    DatasetGraph,
    /// MindSpore user-defined lineage information.
    CustomLineage,
    /// A MindSpore explain record.
    Explain,
    /// A tensor to export as `.npy` only.
    Export,
}

impl Plugin {
    /// The plugin a value belongs to.
    pub fn of(value: &Value) -> Plugin {
        use ember_write::pack::Lineage;
        match value {
            Value::Scalar(_) => Plugin::Scalar,
            Value::Tensor(_) => Plugin::Tensor,
            Value::Histogram(_) => Plugin::Histogram,
            Value::Image(_) => Plugin::Image,
            Value::Text(_) => Plugin::Text,
            Value::HParams(_) => Plugin::HParams,
            Value::Graph(_) => Plugin::Graph,
            Value::Lineage(Lineage::Train(_)) => Plugin::TrainLineage,
            Value::Lineage(Lineage::Eval(_)) => Plugin::EvalLineage,
            Value::Lineage(Lineage::DatasetGraph(_)) => Plugin::DatasetGraph,
            Value::Lineage(Lineage::UserDefined(_)) => Plugin::CustomLineage,
            Value::Explain(_) => Plugin::Explain,
            Value::Export(_) => Plugin::Export,
            _ => Plugin::Tensor,
        }
    }
}

/// MindSpore's modes. In [`Mode::Eval`], [`record`](SummaryRecord::record) drops the values that
/// model code sent through a [`SummaryTap`] (MindSpore's summary operators); values added with
/// `add_value` are still written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Training: tapped values are recorded.
    #[default]
    Train,
    /// Evaluation: tapped values are dropped.
    Eval,
}

/// Where a rank's files go when the world has more than one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankLayout {
    /// The rank goes into the file names (MindInsight's names always carry it).
    #[default]
    FileName,
    /// Each rank writes under `<log dir>/rank_<rank>/`.
    Directory,
}

/// A clonable handle for model code to record values from inside a step, as MindSpore's summary
/// operators do. What it collects is added to the next [`record`](SummaryRecord::record) in
/// [`Mode::Train`] and dropped in [`Mode::Eval`].
#[derive(Debug, Clone, Default)]
pub struct SummaryTap {
    values: Arc<Mutex<Vec<(String, Value)>>>,
}

impl SummaryTap {
    /// Adds a value for the next record.
    pub fn add(&self, tag: impl Into<String>, value: impl Into<Value>) {
        if let Ok(mut values) = self.values.lock() {
            values.push((tag.into(), value.into()));
        }
    }

    fn take(&self) -> Vec<(String, Value)> {
        self.values
            .lock()
            .map(|mut values| std::mem::take(&mut *values))
            .unwrap_or_default()
    }
}

/// Builds a [`SummaryRecord`]; see each method for its default.
#[derive(Debug, Clone)]
pub struct SummaryRecordBuilder {
    log_dir: PathBuf,
    format: Format,
    prefix: Option<String>,
    suffix: Option<String>,
    max_file_size: Option<(u64, SizePolicy)>,
    error_policy: ErrorPolicy,
    export_tensors: bool,
    queue: Option<(usize, FullQueuePolicy)>,
    flush_interval: Option<Option<Duration>>,
    durability: Durability,
    rank: Option<(u32, u32)>,
    rank_layout: RankLayout,
    rank_zero_only: bool,
    coalesce: (usize, Duration),
}

/// Records a `SummaryRecord` holds back before handing them to the writer pool together.
const COALESCE_RECORDS: usize = 64;
/// The longest a record is held back.
const COALESCE_DELAY: Duration = Duration::from_millis(20);

impl SummaryRecordBuilder {
    fn new(log_dir: PathBuf) -> Self {
        Self {
            log_dir,
            format: Format::TensorBoard,
            prefix: None,
            suffix: None,
            max_file_size: None,
            error_policy: ErrorPolicy::Log,
            export_tensors: false,
            queue: None,
            flush_interval: None,
            durability: Durability::Os,
            rank: None,
            rank_layout: RankLayout::FileName,
            rank_zero_only: false,
            coalesce: (COALESCE_RECORDS, COALESCE_DELAY),
        }
    }

    /// Hands records to the writer thread in bursts of up to `records`, holding none back longer
    /// than `max_delay` (64 records or 20 ms by default). Waking the writer thread once per burst
    /// instead of once per record keeps it from preempting a busy training loop; `flush`,
    /// `close` and drop send what is held. A process killed outright loses what is held:
    /// `coalesce(1, Duration::ZERO)` hands over every record at once.
    pub fn coalesce(mut self, records: usize, max_delay: Duration) -> Self {
        self.coalesce = (records.max(1), max_delay);
        self
    }

    /// TensorBoard (the default) or MindInsight.
    pub fn format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    /// The file name prefix (MindInsight's default `events`), checked as MindSpore does:
    /// `^\w+[0-9a-zA-Z_.]*$` in ASCII.
    pub fn file_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The file name suffix (MindInsight's default `_MS`), checked like the prefix.
    pub fn file_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = Some(suffix.into());
        self
    }

    /// Caps each file at `bytes`, framing included; `policy` says what happens at the cap.
    /// Unlimited by default.
    pub fn max_file_size(mut self, bytes: u64, policy: SizePolicy) -> Self {
        self.max_file_size = Some((bytes, policy));
        self
    }

    /// Whether write errors are logged, counted and kept for [`take_errors`](SummaryRecord::take_errors)
    /// ([`ErrorPolicy::Log`], the default, as MindSpore's `raise_exception=False` and
    /// tensorboardX, which never raise) or come back from the next call ([`ErrorPolicy::Raise`]).
    /// The [`Trainer`](crate::Trainer) and the burn-train logger stop training on a summary error
    /// only under `Raise`.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.error_policy = policy;
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
        self.queue = Some((capacity, policy));
        self
    }

    /// How often written data is flushed to the OS without being asked (every 10 s by default);
    /// `None` flushes only on `flush` and `close`.
    pub fn flush_interval(mut self, interval: Option<Duration>) -> Self {
        self.flush_interval = Some(interval);
        self
    }

    /// Whether `flush` and `close` also fsync ([`Durability::Sync`]); OS buffers by default.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
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

    /// Creates the log directory (mode 0700) if missing and starts the writer pool. Files are
    /// created on their first record.
    pub fn build(self) -> Result<SummaryRecord, SummaryError> {
        let (rank, world_size) = match self.rank {
            Some(rank) => rank,
            None => rank_from_env()?,
        };
        if rank >= world_size {
            return Err(SummaryError::Rank(format!(
                "rank {rank} is not below the world size {world_size}"
            )));
        }
        let mut log_dir = self.log_dir.clone();
        if world_size > 1 && self.rank_layout == RankLayout::Directory {
            log_dir.push(format!("rank_{rank}"));
        }
        if log_dir.exists() && !log_dir.is_dir() {
            return Err(SummaryError::LogDirNotADirectory(log_dir));
        }
        let active = !(self.rank_zero_only && rank != 0);
        let pool = if active {
            let mut builder = WriterPoolBuilder::new(&log_dir)
                .format(self.format)
                .rank(rank)
                .rank_in_tensorboard_names(
                    world_size > 1 && self.rank_layout == RankLayout::FileName,
                )
                .error_policy(self.error_policy)
                .durability(self.durability);
            if let Some(prefix) = self.prefix {
                builder = builder.file_prefix(prefix);
            }
            if let Some(suffix) = self.suffix {
                builder = builder.file_suffix(suffix);
            }
            if let Some((bytes, policy)) = self.max_file_size {
                builder = builder.max_file_size(bytes, policy);
            }
            if let Some((capacity, policy)) = self.queue {
                builder = builder.queue(capacity, policy);
            }
            if let Some(interval) = self.flush_interval {
                builder = builder.flush_interval(interval);
            }
            Some(builder.build()?)
        } else {
            None
        };
        Ok(SummaryRecord {
            pool,
            log_dir,
            pending: Vec::new(),
            tap: SummaryTap::default(),
            mode: Mode::Train,
            export_tensors: self.export_tensors,
            closed: false,
            error_policy: self.error_policy,
            rank,
            world_size,
            outbox: Vec::new(),
            outbox_since: None,
            coalesce: self.coalesce,
        })
    }
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

/// Records training summaries for TensorBoard or MindInsight.
///
/// Values added with [`add_value`](Self::add_value) wait until [`record`](Self::record) turns
/// them into one record at a step; the one-call methods (`add_scalar`, `add_histogram`, ...)
/// record their value at once, as tensorboardX does. Records are packed and written on the
/// writer pool's threads; the caller only queues them.
///
/// Unlike MindSpore, which allows one `SummaryRecord` per process, any number may live in one
/// process, each with its own files (give each its own log dir, or its own prefix).
/// Using a closed record is [`SummaryError::Closed`]. Dropping the record closes it; call
/// [`close`](Self::close) to learn of errors.
#[derive(Debug)]
pub struct SummaryRecord {
    pool: Option<WriterPool>,
    log_dir: PathBuf,
    pending: Vec<(String, Value)>,
    tap: SummaryTap,
    mode: Mode,
    export_tensors: bool,
    closed: bool,
    error_policy: ErrorPolicy,
    rank: u32,
    world_size: u32,
    outbox: Vec<Record>,
    outbox_since: Option<Instant>,
    coalesce: (usize, Duration),
}

impl SummaryRecord {
    /// A builder for a record writing under `log_dir`.
    pub fn builder(log_dir: impl Into<PathBuf>) -> SummaryRecordBuilder {
        SummaryRecordBuilder::new(log_dir.into())
    }

    /// A record with every default: TensorBoard files under `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Result<Self, SummaryError> {
        Self::builder(log_dir).build()
    }

    /// The directory this record's files go to (a per-rank directory where the layout says so).
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// This process's rank and the world size.
    pub fn rank(&self) -> (u32, u32) {
        (self.rank, self.world_size)
    }

    /// Whether this record writes files (false on ranks other than 0 with `rank_zero_only`).
    pub fn is_active(&self) -> bool {
        self.pool.is_some()
    }

    /// How write errors reach the caller.
    pub fn error_policy(&self) -> ErrorPolicy {
        self.error_policy
    }

    /// Takes the write errors kept so far (under [`ErrorPolicy::Log`], every error; under
    /// [`ErrorPolicy::Raise`], those not yet returned), oldest first, at most
    /// [`MAX_KEPT_ERRORS`](ember_write::MAX_KEPT_ERRORS) of them.
    pub fn take_errors(&self) -> Vec<WriteError> {
        self.pool
            .as_ref()
            .map(WriterPool::take_errors)
            .unwrap_or_default()
    }

    /// A handle for model code to record values from inside a step.
    pub fn tap(&self) -> SummaryTap {
        self.tap.clone()
    }

    /// Switches between [`Mode::Train`] and [`Mode::Eval`].
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn ensure_open(&self) -> Result<(), SummaryError> {
        if self.closed {
            Err(SummaryError::Closed)
        } else {
            Ok(())
        }
    }

    /// Adds a value for the next [`record`](Self::record). The value must be of `plugin`'s kind
    /// and the tag valid (non-empty UTF-8 without NUL, at most ember-pack's `MAX_TAG_LEN` bytes).
    pub fn add_value(
        &mut self,
        plugin: Plugin,
        tag: &str,
        value: impl Into<Value>,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let value = value.into();
        let actual = Plugin::of(&value);
        if actual != plugin {
            return Err(SummaryError::PluginMismatch {
                plugin,
                value: value.kind_name(),
            });
        }
        Tag::new(tag)?;
        self.pending.push((tag.to_string(), value));
        Ok(())
    }

    /// Turns the values added since the last record (and, in train mode, the tapped ones) into
    /// one record at `step` and queues it for writing. Nothing is written when there are none.
    pub fn record(&mut self, step: i64) -> Result<(), SummaryError> {
        self.record_filtered(step, |_| true)
    }

    /// Like [`record`](Self::record), keeping only the values whose plugin `keep` accepts
    /// (MindSpore's `plugin_filter`); the others are dropped.
    pub fn record_filtered(
        &mut self,
        step: i64,
        keep: impl Fn(Plugin) -> bool,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let mut values = std::mem::take(&mut self.pending);
        let tapped = self.tap.take();
        if self.mode == Mode::Train {
            values.extend(tapped);
        }
        values.retain(|(_, value)| keep(Plugin::of(value)));
        self.write(step, values)
    }

    fn write(&mut self, step: i64, values: Vec<(String, Value)>) -> Result<(), SummaryError> {
        if self.pool.is_none() || values.is_empty() {
            return Ok(());
        }
        let mut record = Record::new(step, wall_time());
        for (tag, value) in values {
            let tag = Tag::new(tag)?;
            if self.export_tensors
                && let Value::Tensor(tensor) = &value
            {
                record.add(tag.clone(), Value::Export(tensor.clone()));
            }
            record.add(tag, value);
        }
        self.submit(record)
    }

    /// Holds `record` back for the next burst, and sends the burst when it is full or due.
    fn submit(&mut self, record: Record) -> Result<(), SummaryError> {
        if self.pool.is_none() {
            return Ok(());
        }
        let since = *self.outbox_since.get_or_insert_with(Instant::now);
        self.outbox.push(record);
        let (records, max_delay) = self.coalesce;
        if self.outbox.len() >= records || since.elapsed() >= max_delay {
            self.send_outbox()
        } else {
            Ok(())
        }
    }

    /// Hands every held record to the writer pool, in order; returns the first error met after
    /// every record was handed over.
    fn send_outbox(&mut self) -> Result<(), SummaryError> {
        self.outbox_since = None;
        let Some(pool) = &self.pool else {
            self.outbox.clear();
            return Ok(());
        };
        let mut first_error = None;
        for record in self.outbox.drain(..) {
            if let Err(error) = pool.write(record) {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    fn write_now(&mut self, step: i64, tag: &str, value: Value) -> Result<(), SummaryError> {
        self.ensure_open()?;
        Tag::new(tag)?;
        self.write(step, vec![(tag.to_string(), value)])
    }

    /// Queues a record built elsewhere (with ember-pack's [`Record`]) as it is: no export
    /// copies, no taps, no filter. The cheapest way in for a hot loop.
    pub fn write_record(&mut self, record: Record) -> Result<(), SummaryError> {
        self.ensure_open()?;
        self.submit(record)
    }

    /// Records one scalar at `step`.
    pub fn add_scalar(&mut self, tag: &str, value: f64, step: i64) -> Result<(), SummaryError> {
        self.write_now(step, tag, Value::Scalar(value))
    }

    /// Records several scalars at `step` in one record, each under `<main_tag>/<name>`.
    pub fn add_scalars(
        &mut self,
        main_tag: &str,
        values: &[(&str, f64)],
        step: i64,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let values = values
            .iter()
            .map(|(name, value)| (format!("{main_tag}/{name}"), Value::Scalar(*value)))
            .collect::<Vec<_>>();
        for (tag, _) in &values {
            Tag::new(tag.as_str())?;
        }
        self.write(step, values)
    }

    /// Records a histogram of raw values at `step`.
    pub fn add_histogram(
        &mut self,
        tag: &str,
        values: impl ToTensorValue,
        step: i64,
    ) -> Result<(), SummaryError> {
        let values = values.to_tensor_value()?;
        self.write_now(step, tag, Value::histogram(values))
    }

    /// Records one image (`CHW` or `HWC`; u8, or floats in `[0, 1]`) at `step`.
    pub fn add_image(
        &mut self,
        tag: &str,
        image: impl ToTensorValue,
        layout: ImageLayout,
        step: i64,
    ) -> Result<(), SummaryError> {
        let data = image.to_tensor_value()?;
        self.write_now(step, tag, Value::Image(Image::new(data, layout)))
    }

    /// Records a batch of images (`NCHW` or `NHWC`), tiled into a grid, at `step`.
    pub fn add_images(
        &mut self,
        tag: &str,
        images: impl ToTensorValue,
        layout: ImageLayout,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.add_image(tag, images, layout, step)
    }

    /// Records markdown text at `step`.
    pub fn add_text(&mut self, tag: &str, text: &str, step: i64) -> Result<(), SummaryError> {
        self.write_now(step, tag, Value::Text(text.to_string()))
    }

    /// Records hyper-parameters and the final metrics that measure them at `step`: the hparams
    /// value (with each metric's tag, so TensorBoard's HParams dashboard shows it as a column),
    /// then each metric as a scalar.
    pub fn add_hparams(
        &mut self,
        hparams: HParams,
        metrics: &[(&str, f64)],
        step: i64,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let mut hparams = hparams;
        for (name, _) in metrics {
            if !hparams.metrics.iter().any(|m| m == name) {
                hparams.metrics.push(name.to_string());
            }
        }
        let mut values = vec![("hparams".to_string(), Value::HParams(hparams))];
        values.extend(
            metrics
                .iter()
                .map(|(name, value)| (name.to_string(), Value::Scalar(*value))),
        );
        self.write(step, values)
    }

    /// Records a model graph at `step`.
    pub fn add_graph(&mut self, graph: Graph, step: i64) -> Result<(), SummaryError> {
        let tag = if graph.name.is_empty() {
            "graph".to_string()
        } else {
            graph.name.clone()
        };
        self.write_now(step, &tag, Value::Graph(graph))
    }

    /// Records a tensor at `step` (and exports it as `.npy` when export is on).
    pub fn add_tensor(
        &mut self,
        tag: &str,
        tensor: impl ToTensorValue,
        step: i64,
    ) -> Result<(), SummaryError> {
        let tensor = tensor.to_tensor_value()?;
        self.write_now(step, tag, Value::Tensor(tensor))
    }

    /// Returns once every record queued before it has reached the operating system (and the
    /// disk with [`Durability::Sync`]).
    pub fn flush(&mut self) -> Result<(), SummaryError> {
        self.ensure_open()?;
        self.send_outbox()?;
        match &self.pool {
            Some(pool) => pool.flush().map_err(SummaryError::from),
            None => Ok(()),
        }
    }

    /// The writer pool's statistics, if this record writes files.
    pub fn stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(WriterPool::stats)
    }

    /// Writes everything queued, closes the files and returns every error that happened.
    /// Values added but not recorded are discarded, as MindSpore does. Closing twice is
    /// [`SummaryError::Closed`].
    pub fn close(&mut self) -> Result<(), SummaryError> {
        self.ensure_open()?;
        self.closed = true;
        self.pending.clear();
        let sent = self.send_outbox();
        let closed = match self.pool.take() {
            Some(pool) => pool.close().map_err(SummaryError::Close),
            None => Ok(()),
        };
        sent.and(closed)
    }
}

impl Drop for SummaryRecord {
    fn drop(&mut self) {
        if !self.closed
            && let Err(error) = self.close()
        {
            log::error!(
                "closing the summary record at {}: {error}",
                self.log_dir.display()
            );
        }
    }
}

fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs_f64())
        .unwrap_or(0.0)
}

impl From<WriteError> for SummaryError {
    fn from(error: WriteError) -> Self {
        SummaryError::Write(error)
    }
}
