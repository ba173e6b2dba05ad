//! [`SummaryRecord`] itself: values added per step, recorded into the writer pool's queue,
//! flushed and closed; how one is made is `builder.rs`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ember_write::Durability;
use ember_write::pack::{
    Audio, CustomScalarLayout, Embedding, Format, Graph, HParams, Histogram, HistogramRule, Image,
    ImageLayout, PackError, Packer, PrCurve, Record, Tag, Value,
};
use ember_write::{ErrorPolicy, WriteErrors, WriterOptions, WriterPool, WriterPoolStats};

use super::plugin::{Mode, Plugin};
use super::tap::{SummaryTap, checked};
use crate::{SummaryError, ToScalar, ToTensorValue};

/// The tag a session start is recorded under (TensorBoard's event has none; inspect lists it).
pub(super) const SESSION_TAG: &str = "session_log";

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
    pub(crate) pool: Option<WriterPool>,
    /// This record's hold on its directory: one writer per directory and rank.
    pub(super) lock: Option<ember_write::DirLock>,
    pub(super) log_dir: PathBuf,
    pub(super) pending: Vec<(Tag, Value)>,
    pub(super) tap: SummaryTap,
    /// Checks values where they are added, as the writer will pack them.
    pub(super) packer: Arc<Packer>,
    pub(super) mode: Mode,
    pub(super) export_tensors: bool,
    pub(super) closed: bool,
    /// The writer's counters as `close` left them.
    pub(super) final_stats: Option<WriterPoolStats>,
    pub(super) error_policy: ErrorPolicy,
    pub(super) rank: u32,
    pub(super) world_size: u32,
    /// Whether this rank's files are in a directory of its own
    /// ([`RankLayout::Directory`](crate::RankLayout::Directory)).
    /// Read only by checkpoints, which need Burn.
    #[cfg_attr(not(feature = "burn"), allow(dead_code))]
    pub(super) own_directory: bool,
    /// The wall time records carry instead of the clock's, when set.
    pub(super) wall_time: Option<f64>,
    /// Where this rank's writers list what they make in a local log directory, sub-runs
    /// included: what a rollback may touch (see [`ember_write::journal`]).
    pub(super) journal: Option<ember_write::Journal>,
    /// The runs of `add_scalars`, by directory name.
    pub(crate) children: std::collections::BTreeMap<String, WriterPool>,
    /// The options their writers start from.
    pub(super) child_options: WriterOptions,
    /// Where [`start_session`](Self::start_session) started the session, for `add_scalars` runs.
    pub(super) session_start: Option<i64>,
    /// The object store the log directory is in, when it is a URL.
    pub(crate) remote: Option<crate::bucket::Mirror>,
    /// The MLflow tracking server the record also sends to.
    pub(super) mlflow: Option<ember_track::MlflowSink>,
    /// Whether closing uploads the event files to the MLflow run.
    pub(super) mlflow_event_files: bool,
    /// Whether records go to the log alone, not to the tracker (see
    /// [`set_untracked`](Self::set_untracked)).
    pub(super) untracked: bool,
}

impl SummaryRecord {
    /// The directory this record's files go to (a per-rank directory where the layout says so).
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// This process's rank and the world size.
    pub fn rank(&self) -> (u32, u32) {
        (self.rank, self.world_size)
    }

    /// Which rank's files of the log directory are this record's to roll back: those its
    /// writers listed in their journal, rank 0's in a directory of its own (one rank, or
    /// [`RankLayout::Directory`](crate::RankLayout::Directory)), its rank's in one shared by
    /// ranks (in a bucket, which has no journal, told by their names).
    #[cfg(feature = "burn")]
    pub(crate) fn ownership(&self) -> ember_write::Ownership {
        if self.own_directory {
            ember_write::Ownership::ALONE
        } else {
            ember_write::Ownership {
                rank: self.rank,
                world_size: self.world_size,
            }
        }
    }

    /// The format this record writes.
    pub fn format(&self) -> Format {
        self.packer.format()
    }

    /// Whether this record writes files (false on ranks other than 0 with `rank_zero_only`).
    pub fn is_active(&self) -> bool {
        self.pool.is_some()
    }

    /// How write errors reach the caller.
    pub fn error_policy(&self) -> ErrorPolicy {
        self.error_policy
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

    pub(crate) fn ensure_open(&self) -> Result<(), SummaryError> {
        if self.closed {
            Err(SummaryError::Closed)
        } else {
            Ok(())
        }
    }

    /// Adds a value for the next [`record`](Self::record); its kind decides how it is written
    /// (see [`Plugin::of`]). The tag and the value are checked here, and a bad one is refused
    /// alone.
    pub fn add(&mut self, tag: &str, value: impl Into<Value>) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let (tag, value) = checked(&self.packer, tag, value.into())?;
        self.pending.push((tag, value));
        Ok(())
    }

    /// MindSpore's `add_value(plugin, tag, value)`: [`add`](Self::add), with the plugin said
    /// too. The value must be of `plugin`'s kind and the tag valid (non-empty UTF-8 without NUL, at most ember-pack's `MAX_TAG_LEN` bytes).
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
        let (tag, value) = checked(&self.packer, tag, value)?;
        self.pending.push((tag, value));
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

    fn write(&mut self, step: i64, values: Vec<(Tag, Value)>) -> Result<(), SummaryError> {
        if values.is_empty() {
            return Ok(());
        }
        let mut record = Record::new(step, self.wall_time.unwrap_or_else(wall_time));
        for (tag, value) in values {
            if self.export_tensors
                && let Value::Tensor(tensor) = &value
            {
                record.add(tag.clone(), Value::Export(tensor.clone()));
            }
            record.add(tag, value);
        }
        self.submit(record)
    }

    pub(super) fn submit(&mut self, record: Record) -> Result<(), SummaryError> {
        if let Some(remote) = &self.remote
            && !remote.admit()?
        {
            return Ok(());
        }
        if let Some(mlflow) = &self.mlflow
            && !self.untracked
        {
            mlflow.send(&record);
        }
        match &self.pool {
            Some(pool) => pool.write(record).map_err(SummaryError::from),
            None => Ok(()),
        }
    }

    /// Where the record sends to an MLflow tracking server: uploads the file at `path` as the
    /// run's artifact `name` (`model/model.bpk`, say), off the calling thread, after what was
    /// recorded before it; the file must stay until the record closes. Without a tracker,
    /// nothing.
    pub fn log_artifact(&self, path: &std::path::Path, name: &str) {
        if let Some(mlflow) = &self.mlflow {
            mlflow.log_artifact(path, name);
        }
    }

    /// Records from now on go to the log alone, not to the tracker (while `untracked`): an
    /// interrupted run's end (its `run/interrupted` and `final/…` scalars), which a resume
    /// rolls back from the log, must not reach a tracker that cannot drop a point.
    #[cfg_attr(
        not(feature = "burn"),
        expect(dead_code, reason = "the Trainer's alone")
    )]
    pub(crate) fn set_untracked(&mut self, untracked: bool) {
        self.untracked = untracked;
    }

    /// With an MLflow sink: its close waits for the server at most `wait` (a run stopped by a
    /// signal shares its grace with its stop checkpoint); what is not sent by then stays in
    /// the spool for the run's next start.
    pub fn limit_tracker_close_wait(&self, wait: std::time::Duration) {
        if let Some(mlflow) = &self.mlflow {
            mlflow.limit_close_wait(wait);
        }
    }

    /// MLflow's id of the run this record sends to, when it sends to a tracking server.
    pub fn mlflow_run_id(&self) -> Option<&str> {
        self.mlflow.as_ref().map(ember_track::MlflowSink::run_id)
    }

    fn write_now(&mut self, step: i64, tag: &str, value: Value) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let value = checked(&self.packer, tag, value)?;
        self.write(step, vec![value])
    }

    /// Queues a record built elsewhere (with ember-pack's [`Record`]) as it is: no export
    /// copies, no taps, no filter. The cheapest way in for a hot loop.
    pub fn write_record(&mut self, record: Record) -> Result<(), SummaryError> {
        self.ensure_open()?;
        self.submit(record)
    }

    /// Records one scalar at `step`: any Rust number, or with the `burn` feature a one-element
    /// Burn tensor (a loss) read back from its device.
    pub fn add_scalar(
        &mut self,
        tag: &str,
        value: impl ToScalar,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        self.write_now(step, tag, Value::Scalar(value.to_scalar()?))
    }

    /// Gives the records made from now on this wall time (seconds since the Unix epoch)
    /// instead of the clock's, as tensorboardX's `walltime` argument does (replaying old logs,
    /// say); `None` goes back to the clock.
    pub fn set_wall_time(&mut self, wall_time: Option<f64>) {
        self.wall_time = wall_time;
    }

    /// Records several scalars at `step` as lines of one chart, as tensorboardX does: each
    /// `name` gets a run of its own, the directory `<log dir>/<main_tag>_<name>` (with `/` in
    /// `main_tag` turned into `_`), where the value is recorded under the tag `main_tag`, so
    /// TensorBoard draws one chart `main_tag` with a line per name. A name must be usable as
    /// that directory's name (no `/`, `\`, NUL, not `.` or `..`).
    ///
    /// MindInsight shows each directory as a separate job, so with [`Format::MindInsight`]
    /// the values go into this record's own file under `<main_tag>/<name>` instead.
    pub fn add_scalars(
        &mut self,
        main_tag: &str,
        values: &[(&str, f64)],
        step: i64,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        if self.child_options.pack.format == Format::MindInsight {
            let values = values
                .iter()
                .map(|(name, value)| {
                    Ok((
                        Tag::new(format!("{main_tag}/{name}"))?,
                        Value::Scalar(*value),
                    ))
                })
                .collect::<Result<Vec<_>, SummaryError>>()?;
            return self.write(step, values);
        }
        let tag = Tag::new(main_tag)?;
        for (name, _) in values {
            if name.is_empty() || *name == "." || *name == ".." || name.contains(['/', '\\', '\0'])
            {
                return Err(SummaryError::SubRunName((*name).to_string()));
            }
        }
        if self.pool.is_none() {
            return Ok(());
        }
        let wall_time = self.wall_time.unwrap_or_else(wall_time);
        let session_start = self.session_start;
        let mut first_error = None;
        for (name, value) in values {
            let run = format!("{}_{name}", main_tag.replace('/', "_"));
            let pool = match self.children.entry(run) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let mut options = self.child_options.clone();
                    options.log_dir = self.log_dir.join(e.key());
                    let pool = WriterPool::with_journal(options, self.journal.clone())?;
                    if let Some(start) = session_start {
                        let tag = Tag::new(SESSION_TAG)?;
                        pool.write(Record::new(start, wall_time).with(tag, Value::SessionStart))?;
                    }
                    e.insert(pool)
                }
            };
            let record = Record::new(step, wall_time).with(tag.clone(), *value);
            if let Err(error) = pool.write(record) {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }

    /// Records a histogram of raw values at `step`, bucketed by the record's rule
    /// ([`WriterOptions::pack`]'s `histogram`, 30 equal-width buckets by default).
    pub fn add_histogram(
        &mut self,
        tag: &str,
        values: impl ToTensorValue,
        step: i64,
    ) -> Result<(), SummaryError> {
        let values = values.to_tensor_value()?;
        self.write_now(step, tag, Value::histogram(values))
    }

    /// Records a histogram of raw values at `step`, bucketed by `rule` (tensorboardX's `bins`).
    /// MindInsight files always use MindSpore's own rule.
    pub fn add_histogram_with(
        &mut self,
        tag: &str,
        values: impl ToTensorValue,
        rule: HistogramRule,
        step: i64,
    ) -> Result<(), SummaryError> {
        let values = values.to_tensor_value()?;
        self.write_now(
            step,
            tag,
            Value::Histogram(Histogram::RawWith(values, rule)),
        )
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
        let mut values = vec![checked(&self.packer, "hparams", Value::HParams(hparams))?];
        for (name, value) in metrics {
            values.push(checked(&self.packer, name, Value::Scalar(*value))?);
        }
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

    /// Records the precision-recall curve of a binary classifier at `step`, computed as
    /// TensorBoard's `pr_curve` summary computes it ([`PrCurve::from_predictions`]):
    /// `predictions[i]` in `[0, 1]` is the score of an example whose truth is `labels[i]`,
    /// evaluated at `num_thresholds` (at least 2; tensorboardX uses 127) evenly spaced
    /// thresholds. TensorBoard only: MindInsight has no such dashboard, and the value is
    /// refused with [`SummaryError::Rejected`] naming the format.
    pub fn add_pr_curve(
        &mut self,
        tag: &str,
        labels: &[bool],
        predictions: &[f32],
        num_thresholds: u32,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let checked_tag = Tag::new(tag)?;
        let curve =
            PrCurve::from_predictions(labels, predictions, num_thresholds).map_err(|kind| {
                PackError {
                    tag: checked_tag,
                    kind,
                }
            })?;
        self.write_now(step, tag, Value::from(curve))
    }

    /// Records a precision-recall curve whose counts were computed elsewhere (tensorboardX's
    /// `add_pr_curve_raw`); build it with [`PrCurve::from_counts`].
    pub fn add_pr_curve_raw(
        &mut self,
        tag: &str,
        curve: PrCurve,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.write_now(step, tag, Value::from(curve))
    }

    /// Records a mono sound clip at `step`: samples in `[-1, 1]` (clipped beyond), at
    /// `sample_rate` Hz, written as 16-bit PCM WAV in TensorBoard's audio plugin layout. For
    /// several channels, [`add`](Self::add) an [`Audio`] value and [`record`](Self::record).
    /// TensorBoard only.
    pub fn add_audio(
        &mut self,
        tag: &str,
        samples: &[f32],
        sample_rate: u32,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.write_now(
            step,
            tag,
            Value::Audio(Audio::mono(samples.to_vec(), sample_rate)),
        )
    }

    /// Records an embedding for TensorBoard's projector at `step`: the rows of `matrix` (an
    /// `[N, D]` `f32` tensor, N and D above 0) as points, with one label per point
    /// (`metadata.tsv`) and one thumbnail per point (CHW or HWC, `u8` or `f32` in `[0, 1]`, all
    /// of one size), tiled into the sprite the projector draws the points with. The files go
    /// to `embeddings/<percent-encoded tag>_<step>/` in the log directory, listed in its
    /// `projector_config.pbtxt` with every embedding recorded before (see `docs/formats.md`).
    ///
    /// Shapes that do not agree (labels or thumbnails not one per point, thumbnails of
    /// different sizes, an empty matrix) are [`SummaryError::Rejected`] here, before anything
    /// is queued. TensorBoard only: MindInsight has no projector, and the value is refused
    /// naming the format.
    pub fn add_embedding(
        &mut self,
        tag: &str,
        matrix: impl ToTensorValue,
        labels: Option<Vec<String>>,
        thumbnails: Option<Vec<Image>>,
        step: i64,
    ) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let embedding = Embedding {
            matrix: matrix.to_tensor_value()?,
            labels,
            thumbnails,
        };
        self.write_now(step, tag, Value::from(embedding))
    }

    /// Records the custom scalars dashboard's layout (charts gathering scalar tags by regular
    /// expression, margin charts), under the plugin's fixed tag. TensorBoard reads the first
    /// layout of a run: write it once, at the start. TensorBoard only.
    pub fn add_custom_scalars(&mut self, layout: CustomScalarLayout) -> Result<(), SummaryError> {
        self.write_now(
            0,
            ember_write::pack::CUSTOM_SCALARS_TAG,
            Value::CustomScalars(layout),
        )
    }

    /// Returns once every record queued before it has been written to the operating system
    /// (and the disk with [`Durability::Sync`]) or has failed. Every writer is flushed, the
    /// `add_scalars` runs' and the main one, before any error is returned.
    ///
    /// A record that failed is an error here only under [`ErrorPolicy::Raise`] (the oldest
    /// error not yet returned). Under the default [`ErrorPolicy::Log`] a writer that has died
    /// (a full disk) does not make `flush` fail: what it could not write is counted in
    /// [`stats`](Self::stats) (`records_failed`, its writer's `failed`) and kept for
    /// [`take_errors`](Self::take_errors), which is where a caller that must know looks.
    ///
    /// An MLflow sink is waited for only with [`Durability::Sync`] (its spool then synced):
    /// its thread spools what it is handed within a second on its own, a checkpoint syncs the
    /// spool, and a run resumed after a crash trains and sends again what came after that.
    pub fn flush(&mut self) -> Result<(), SummaryError> {
        let flushed = match self.child_options.durability {
            Durability::Sync => self.flush_writers(),
            Durability::Os => self.flush_to(false),
        };
        if let Some(remote) = &self.remote {
            let shipped = remote.ship();
            return flushed.and(shipped);
        }
        flushed
    }

    /// [`flush`](Self::flush) into the files (a URL's staging directory), without waiting
    /// for an object store to take them; the tracker's spool synced, as a checkpoint taken
    /// now covers what it holds and a resume does not train that again.
    pub(crate) fn flush_writers(&mut self) -> Result<(), SummaryError> {
        self.flush_to(true)
    }

    fn flush_to(&mut self, sync_spool: bool) -> Result<(), SummaryError> {
        self.ensure_open()?;
        let mut first_error = None;
        for child in self.children.values() {
            if let Err(error) = child.flush() {
                first_error.get_or_insert(SummaryError::from(error));
            }
        }
        if let Some(pool) = &self.pool
            && let Err(error) = pool.flush()
        {
            first_error.get_or_insert(SummaryError::from(error));
        }
        if let Some(mlflow) = &self.mlflow
            && sync_spool
            && let Err(error) = mlflow.sync()
        {
            first_error.get_or_insert(SummaryError::from(error));
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether the log directory is an object-store URL (written through a local staging
    /// directory, shipped as segment objects).
    pub fn is_remote(&self) -> bool {
        // A build without object stores makes no record of a URL.
        self.log_dir.to_str().is_some_and(ember_write::is_remote)
    }

    /// The writer pool's statistics, if this record writes files; after
    /// [`close`](Self::close), the final ones, every record's fate settled. The runs of
    /// [`add_scalars`](Self::add_scalars) have writers of their own, not counted here.
    pub fn stats(&self) -> Option<WriterPoolStats> {
        match &self.pool {
            Some(pool) => Some(pool.stats()),
            None => self.final_stats.clone(),
        }
    }

    /// Writes everything queued, closes the files and returns every error that happened.
    /// Values added but not recorded are discarded, as MindSpore does. Closing twice is
    /// [`SummaryError::Closed`].
    pub fn close(&mut self) -> Result<(), SummaryError> {
        self.ensure_open()?;
        self.closed = true;
        self.pending.clear();
        let mut errors = Vec::new();
        let mut not_kept = 0;
        for (_, child) in std::mem::take(&mut self.children) {
            if let Err(e) = child.close() {
                errors.extend(e.errors);
                not_kept += e.not_kept;
            }
        }
        if let Some(pool) = self.pool.take() {
            let (closed, stats) = pool.close_with_stats();
            self.final_stats = Some(stats);
            if let Err(e) = closed {
                errors.extend(e.errors);
                not_kept += e.not_kept;
            }
        }
        self.lock = None;
        if let Some(mlflow) = self.mlflow.take() {
            if self.mlflow_event_files {
                // Ranks sharing the directory: another rank's file may still be written.
                let sharing = self.world_size > 1 && !self.own_directory;
                for (path, name) in event_files(&self.log_dir) {
                    if !(sharing && another_ranks(&name, self.rank)) {
                        mlflow.log_artifact(&path, &name);
                    }
                }
            }
            report_tracker(mlflow.close(), &self.log_dir);
        }
        if let Some(remote) = self.remote.as_mut() {
            // The files are closed: what the mirror ships now is everything.
            let shipped = remote.close();
            if errors.is_empty() && not_kept == 0 {
                return shipped;
            }
            if let Err(error) = shipped {
                log::error!("{error}");
            }
        }
        if errors.is_empty() && not_kept == 0 {
            Ok(())
        } else {
            Err(SummaryError::Close(WriteErrors { errors, not_kept }))
        }
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

/// The event files under `dir` (its sub-runs' too, not hidden directories' or those behind a
/// link), each with its artifact name: `events/` and its path under `dir`, in name order.
fn event_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let is_event_file = |name: &str| name.contains("tfevents") || name.contains(".out.events.");
    let mut found = Vec::new();
    let mut directories = vec![dir.to_path_buf()];
    while let Some(at) = directories.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            match entry.file_type() {
                _ if name.starts_with('.') => {}
                Ok(kind) if kind.is_dir() => directories.push(path),
                Ok(kind) if kind.is_file() && is_event_file(&name) => {
                    let Ok(under) = path.strip_prefix(dir) else {
                        continue;
                    };
                    let parts: Vec<_> = under.iter().map(|part| part.to_string_lossy()).collect();
                    found.push((path.clone(), format!("events/{}", parts.join("/"))));
                }
                _ => {}
            }
        }
    }
    found.sort();
    found
}

/// Whether the event file `name` is another rank's than `rank`, as ranks sharing a directory
/// name theirs: TensorBoard's `….rank<N>`, MindInsight's `….summary.<secs>.<N>.<host>…`.
fn another_ranks(name: &str, rank: u32) -> bool {
    let named = if let Some((_, after)) = name.rsplit_once(".rank") {
        after.split(|c: char| !c.is_ascii_digit()).next()
    } else if let Some((_, after)) = name.split_once(".out.events.summary.") {
        after.split('.').nth(1)
    } else {
        None
    };
    named
        .and_then(|n| n.parse::<u32>().ok())
        .is_some_and(|n| n != rank)
}

/// Logs what a closed tracker sink could not do: nothing of it fails the record, whose files
/// are whole; what is left in the spool goes with the run's next start.
fn report_tracker(report: ember_track::SinkReport, log_dir: &std::path::Path) {
    if let Some(lag) = report.lag {
        log::info!(
            "mlflow: {} entities sent; a batch's oldest point reached the server {} ms after it \
             was recorded (median), {} ms at most",
            report.sent,
            lag.median.as_millis(),
            lag.max.as_millis()
        );
    }
    if !report.dropped.is_empty() {
        log::warn!(
            "mlflow: points dropped (queue or spool full), by tag: {:?}",
            report.dropped
        );
    }
    if report.left > 0 || report.refused > 0 {
        log::warn!(
            "mlflow: {} entities left in the spool of {} for the run's next start, {} refused by \
             the server{}",
            report.left,
            log_dir.display(),
            report.refused,
            report
                .last_failure
                .map(|why| format!(" (last: {why})"))
                .unwrap_or_default()
        );
    }
}

pub(super) fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::{another_ranks, event_files};

    #[test]
    fn another_ranks_files_are_told_by_their_names() {
        for (name, rank, another) in [
            ("events.out.tfevents.0000000001.host.7.0.rank1", 0, true),
            ("events.out.tfevents.0000000001.host.7.0.rank0", 0, false),
            ("events.out.tfevents.0000000001.host.7.0.rank12", 12, false),
            ("events.out.tfevents.0000000001.host.7.0", 3, false),
            ("events.out.events.summary.1.1.host_MS", 0, true),
            ("events.out.events.summary.1.0.host_lineage", 0, false),
        ] {
            assert_eq!(another_ranks(name, rank), another, "{name} for rank {rank}");
        }
    }

    #[test]
    fn the_event_files_sent_to_a_tracker_are_the_runs_own_and_its_sub_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for file in [
            "events.out.tfevents.1.host.1.0",
            "loss_train/events.out.tfevents.2.host.1.0",
            "events.out.events.summary.3.host_lineage",
            ".ember-mlflow/events.out.tfevents.4.host.1.0",
            "checkpoints/ckpt-000000000001.ember",
            "model.bpk",
        ] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, file).unwrap();
        }
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("events.out.tfevents.5.x"), "x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(elsewhere.path(), root.join("linked")).unwrap();

        let names: Vec<String> = event_files(root)
            .into_iter()
            .map(|(_, name)| name)
            .collect();
        assert_eq!(
            names,
            [
                "events/events.out.events.summary.3.host_lineage",
                "events/events.out.tfevents.1.host.1.0",
                "events/loss_train/events.out.tfevents.2.host.1.0",
            ]
        );
    }
}
