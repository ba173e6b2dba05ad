//! The one owner of a run: what a run *is* and where it lives, decided in one place for
//! `ember train`, the [`Trainer`](crate::Trainer) and every rank of a job.
//!
//! A [`Run`] is opened ([`RunBuilder::open`]) on its checkpoint directory and, for a command's
//! run, its run directory (the log directory, where its model goes). Opening it:
//!
//! - refuses a place another process writes (its lock, or a bucket run's lease), naming it;
//! - reads the run's record (`run.json`: its id and command, see `record.rs`) and settles how the
//!   run begins ([`Begin`]): fresh, resumed from its newest whole checkpoint, or restarted from
//!   its first step; [`Begin::ResumeIfAny`] by what the directory holds;
//! - refuses, before anything is written: a fresh run where a name it would write exists and is
//!   not its own (a model, a run record, a checkpoint, an event file of its rank's naming, its
//!   hidden directories: another program's or another run's files are never replaced); a resume
//!   from a checkpoint another run took (its id is not the record's: a copied checkpoint), or
//!   taken with other settings (learning rate, seeds, model and data sizes, batch, format, …:
//!   each difference named), or of a job it cannot go on (more ranks, a count that does not
//!   divide them); a resume of a finished run whose final model is on disk;
//! - reads the newest whole checkpoint once, with every rank's part, and hands it on;
//! - claims the checkpoint directory (its lock) and writes the run's record.
//!
//! It then owns what the run writes besides its log: its checkpoints' directory, starting the
//! run over (its checkpoints removed, for the Trainer's restart) and its model files
//! ([`Run::save_model`]: `model.bpk` only for a run trained to its end, see `model.rs`). Where
//! the run lives, a local directory or a bucket's prefix, is chosen once, when its place is made
//! (`place.rs`), the object store's half in the crate's `bucket` module.

mod admit;
mod identity;
mod model;
pub(crate) mod place;
mod record;
pub(crate) mod store;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use burn::module::Module;
use ember_write::DirLock;
use ember_write::pack::Format;

pub use identity::{RunId, Settings};
pub use model::{INTERRUPTED_MODEL_FILE, MODEL_FILE, MODEL_RECORD};
pub use record::{LEGACY_COMMAND_FILE, RECORD_FILE, RunRecord};

use crate::checkpoint::{CheckpointError, Checkpoints, Loaded};
use place::Place;

/// How a run asks to begin in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// A new run: no name it writes may be there already.
    Fresh,
    /// The run going on from its newest whole checkpoint.
    Resume,
    /// The run trained again from its first step, what it wrote discarded.
    Restart,
    /// Whichever of the three the directory holds asks for: a resume where there is a whole
    /// checkpoint, a restart where there are checkpoint files but none whole (the run stopped
    /// while writing its first), a fresh start where there is none. For a scheduler that starts
    /// the same job again and again.
    ResumeIfAny,
}

/// How the run a checkpoint was taken by cut its data: into a shard a rank and a slice a
/// device of the job that began it. A run that goes on on other devices or ranks keeps both
/// cuts, and counts its steps by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataLayout {
    /// The devices a rank the job began with: the slices of each rank's shard.
    pub devices: usize,
    /// The ranks the job began with: the shards of the data.
    pub data_ranks: usize,
}

/// A run, opened: admitted, its place claimed (see the module docs).
#[derive(Debug)]
pub struct Run {
    checkpoints: Place,
    dir: Option<Place>,
    rank: u32,
    world: usize,
    begin: Begin,
    id: Option<RunId>,
    settings: Settings,
    format: Option<Format>,
    newest: Option<Loaded>,
    /// The checkpoint directory's lock, held for as long as the run is: one writer per
    /// directory and rank.
    lock: Option<DirLock>,
}

/// What a run claims, to be opened by [`open`](Self::open).
#[derive(Debug, Clone)]
pub struct RunBuilder {
    begin: Begin,
    checkpoints: PathBuf,
    dir: Option<PathBuf>,
    rank: u32,
    world: usize,
    epochs: Option<usize>,
    settings: Settings,
    format: Option<Format>,
    /// (name, value, whether the value is a rank's share, which a job of other ranks counts
    /// otherwise).
    counts: Vec<(String, usize, bool)>,
    command: Option<Vec<String>>,
    writes_checkpoints: bool,
}

impl Run {
    /// A run that begins as `begin`, its checkpoints in `checkpoints` (a directory or, with the
    /// `object-store` feature, a URL), rank 0 of one, with nothing else to check yet.
    pub fn builder(begin: Begin, checkpoints: impl Into<PathBuf>) -> RunBuilder {
        RunBuilder {
            begin,
            checkpoints: checkpoints.into(),
            dir: None,
            rank: 0,
            world: 1,
            epochs: None,
            settings: Settings::new(),
            format: None,
            counts: Vec::new(),
            command: None,
            writes_checkpoints: true,
        }
    }

    /// How the run begins, settled: [`Begin::Fresh`], [`Begin::Resume`] or [`Begin::Restart`].
    pub fn begin(&self) -> Begin {
        self.begin
    }

    /// The run's id; `None` for a run an ember from before ids began (and, fresh, on a rank but
    /// 0, whose parts name none).
    pub fn id(&self) -> Option<&RunId> {
        self.id.as_ref()
    }

    /// The settings the run was opened with: what its checkpoints record.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The log format the run was opened with, where it has a log.
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// The checkpoint directory.
    pub fn checkpoint_dir(&self) -> &Path {
        self.checkpoints.path()
    }

    /// This process's rank and the job's size.
    pub fn rank(&self) -> (u32, usize) {
        (self.rank, self.world)
    }

    /// The run's checkpoints, keeping the newest `keep` when writing.
    pub fn checkpoints(&self, keep: usize) -> Checkpoints {
        Checkpoints::at(self.checkpoints.clone(), keep)
    }

    /// A resume's checkpoint, handed on to what reads it into the run.
    pub(crate) fn take_resumed(&mut self) -> Option<Loaded> {
        self.newest.take()
    }

    /// How the run a resume goes on from cut its data, where its checkpoint records it.
    pub fn layout(&self) -> Option<DataLayout> {
        let meta = self.newest.as_ref()?.meta();
        Some(DataLayout {
            devices: meta.usize("devices").ok()?,
            data_ranks: meta
                .usize("data_ranks")
                .or_else(|_| meta.usize("ranks"))
                .ok()?,
        })
    }

    /// Writes under the run (its checkpoints, its model) only while `log`'s writer holds it: a
    /// run in a bucket is fenced by its lease (see [`Checkpoints::fenced_by`]); a local one by
    /// its lock alone.
    pub fn fence_by(&mut self, log: &crate::SummaryRecord) {
        self.checkpoints = self.checkpoints.clone().fenced_by(log);
        self.dir = self.dir.take().map(|dir| dir.fenced_by(log));
    }

    /// Whether this process still holds the run's checkpoint directory (see
    /// [`DirLock::check`]): a run whose directory was taken away stops writing there.
    pub fn check_claim(&mut self) -> Result<(), CheckpointError> {
        match self.lock.as_mut() {
            Some(lock) => Ok(lock.check()?),
            None => Ok(()),
        }
    }

    /// Starts the run over: removes its checkpoints (every rank's parts too), so that its next
    /// resume does not find them, and its model files, so that a restart stopped before its
    /// end is not taken for a finished run by the model of its earlier training. Its log is
    /// rolled back by its record's owner.
    pub(crate) fn start_over(&self) -> Result<(), CheckpointError> {
        log::warn!(
            "starting the run over: removing its checkpoints in {}",
            self.checkpoints.path().display()
        );
        self.checkpoints(1).remove_all()?;
        match &self.dir {
            Some(dir) => model::remove_all(dir),
            None => Ok(()),
        }
    }

    /// Saves `model` in the run directory: as the trained model (`model.bpk`, with its record)
    /// when the run has trained to its end (`finished`) at pool step `steps`, else as the model
    /// of a run stopped before it (`model.interrupted.bpk`). The claim on the run is checked
    /// first: a run whose directory was taken away writes nothing. Refused for a run opened
    /// without a run directory.
    pub fn save_model<M: Module>(
        &mut self,
        model: &M,
        steps: usize,
        finished: bool,
    ) -> Result<PathBuf, CheckpointError> {
        self.check_claim()?;
        let dir = self.dir.clone().ok_or_else(|| CheckpointError::Io {
            op: "save the model of",
            path: self.checkpoints.path().to_path_buf(),
            source: std::io::Error::other("the run was opened without a run directory"),
        })?;
        let bytes =
            model
                .clone()
                .into_record()
                .into_bytes()
                .map_err(|e| CheckpointError::Record {
                    what: "save the model",
                    reason: e.to_string(),
                })?;
        let bytes = bytes.try_into_vec::<u8>().unwrap_or_else(|b| b.to_vec());
        if finished {
            model::write_final(&dir, self.id.as_ref(), steps, &bytes)?;
            Ok(dir.path().join(MODEL_FILE))
        } else {
            model::write_interrupted(&dir, &bytes)?;
            Ok(dir.path().join(INTERRUPTED_MODEL_FILE))
        }
    }
}

/// How a checkpoint's meta names a log format.
pub(crate) fn format_name(format: Format) -> &'static str {
    match format {
        Format::TensorBoard => "tensorboard",
        Format::MindInsight => "mindinsight",
    }
}

impl RunBuilder {
    /// The run's own directory: its log and its model files. Refused while another process
    /// writes it, and, fresh, where a name the run writes there is not its own.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// This process's rank in a job of `world_size` ranks.
    pub fn rank(mut self, rank: u32, world_size: usize) -> Self {
        self.rank = rank;
        self.world = world_size.max(1);
        self
    }

    /// The epochs the run trains: a resume from a checkpoint at the end of the last, with the
    /// run's final model in its directory, is refused, the run having finished.
    pub fn epochs(mut self, epochs: usize) -> Self {
        self.epochs = Some(epochs);
        self
    }

    /// The settings that shape the run's result: a resume from a checkpoint taken with other
    /// ones is refused, naming each difference.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The format the run logs in: a resume from a checkpoint whose run logged in another is
    /// refused.
    pub fn format(mut self, format: Format) -> Self {
        self.format = Some(format);
        self
    }

    /// A count the run was recorded with, that a resumed checkpoint must hold the same
    /// (`batch_size`: the examples of a worker's first batch, as the Trainer counts them).
    pub fn count(mut self, name: &str, value: usize) -> Self {
        self.counts.push((name.to_owned(), value, false));
        self
    }

    /// A count of this rank's share of the job (`train_examples`: the examples of an epoch on
    /// rank 0), compared only with a checkpoint of a job of as many ranks.
    pub fn rank_count(mut self, name: &str, value: usize) -> Self {
        self.counts.push((name.to_owned(), value, true));
        self
    }

    /// The command line's arguments of this start, recorded for a fresh run (and for a run
    /// whose record was lost), for its next start to read.
    pub fn command(mut self, args: Vec<String>) -> Self {
        self.command = Some(args);
        self
    }

    /// Whether the run writes checkpoints (by default it does); one that does not claims no
    /// checkpoint directory.
    pub fn writes_checkpoints(mut self, writes: bool) -> Self {
        self.writes_checkpoints = writes;
        self
    }
}
