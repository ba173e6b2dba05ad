//! The run's first phase: the device pool opened, the model made every rank's, the checkpoint
//! directory claimed, and the run begun fresh, resumed from its newest whole checkpoint, or
//! restarted; then the hyper-parameters and graph recorded at step 0. Everything that can
//! refuse a run refuses here, before the log or the checkpoints are touched.

use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::DataLoader;
use burn::module::Module;
use burn::train::TrainStep;
use ember_pool::PoolOptions;
use ember_pool::step::burn::Reduction;
use ember_write::pack::{Format, SessionPart};

use super::Trainer;
use super::checkpointing::{self, Identity, Position};
use super::error::TrainError;
use super::item::TrainingItem;
use super::run_state::RunState;
use super::{Trainable, ValidItem};
use crate::SummaryRecord;
use crate::checkpoint::log_place::{LogPlace, Snapshot};
use crate::checkpoint::{CheckpointError, Loaded};
use crate::collective::Ranks;
use crate::driver::Driver;
use crate::faults::SummaryFaults;
use crate::model_info::module_graph;
use crate::run::{Begin, Run, Settings};

/// A run ready for its first epoch.
pub(super) struct Started<M: TrainStep + Module + 'static> {
    pub(super) driver: Driver<M>,
    /// The model to train: the caller's, rank 0's across ranks, or the checkpoint's.
    pub(super) model: M,
    /// Where a resumed run goes on from; `None` for a run from its first step.
    pub(super) from: Option<Position>,
    /// What a checkpoint of this run must match.
    pub(super) identity: Identity,
    /// The log's place beside the checkpoints, for their snapshots.
    pub(super) log_place: Option<LogPlace>,
    /// The run, claimed for as long as it trains.
    pub(super) run: Option<Run>,
    /// The log snapshots of the ranks this job lacks, which rank 0's checkpoints carry on.
    pub(super) carried_logs: Vec<(usize, String)>,
}

impl<M: Trainable> Trainer<M> {
    /// Opens the pool and the run (its checkpoint directory claimed) and begins it as admitted:
    /// fresh, resumed or restarted.
    pub(super) fn start(
        &mut self,
        model: M,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
        summary: Option<&SummaryRecord>,
        state: &mut RunState,
    ) -> Result<Started<M>, TrainError> {
        // Each step draws at least one item: a checkpoint further into an epoch than this is
        // of other data (or crafted), refused before the log is rolled back.
        let items = train.num_items();
        let mut run = self.open_run(summary)?;
        if let (Some(run), Some(summary)) = (run.as_mut(), summary) {
            run.fence_by(summary);
        }
        let mut driver = self.open_driver(train)?;
        let model = match self.ranks.as_mut() {
            Some(ranks) => ranks
                .broadcast_module(model)
                .map_err(|source| TrainError::Ranks {
                    epoch: 0,
                    step: 0,
                    source,
                })?,
            None => model,
        };
        let mut identity = Identity::new(
            &model,
            self.devices.len(),
            self.ranks.as_ref().map_or(1, Ranks::size),
            self.config.grad_accumulation,
            self.config.reduction,
        );
        if let Some(run) = &run {
            identity.run = run.id().cloned();
            identity.settings = run.settings().clone();
            identity.format = run.format();
        }
        let log_place = summary
            .zip(run.as_ref())
            .map(|(summary, run)| LogPlace::of(summary, run.checkpoint_dir()));
        let mut data_ranks = identity.data_ranks;
        let mut carried_logs = Vec::new();
        let begin = run.as_ref().map_or(Begin::Fresh, Run::begin);
        let resumed = run.as_mut().and_then(Run::take_resumed);
        let (model, from) = match (begin, resumed) {
            (Begin::Resume, Some(loaded)) => {
                let place = log_place.as_ref().zip(summary);
                let within = (&mut driver, items);
                let resumed = self.resume(loaded, model, &identity, within, place, state)?;
                data_ranks = resumed.data_ranks;
                carried_logs = resumed.carried_logs;
                (resumed.model, resumed.from)
            }
            (Begin::Restart, _) => {
                if let Some(run) = &run {
                    restart(run, summary, log_place.as_ref())?;
                }
                (model, None)
            }
            _ => (model, None),
        };
        // What the run's checkpoints in a bucket add their log's cuts to, the log rolled back.
        let log_place = log_place.map(LogPlace::with_base).transpose()?;
        // A resharded run's checkpoints name the devices and ranks it started on, whose data
        // split it goes on with.
        let identity = Identity {
            devices: driver.shards(),
            data_ranks,
            ..identity
        };
        Ok(Started {
            driver,
            model,
            from,
            identity,
            log_place,
            run,
            carried_logs,
        })
    }

    /// The run: the caller's ([`in_run`](Trainer::in_run)), or one opened here on the directory
    /// resumed from or checkpointed into, admitted by the same checks `ember train` makes (its
    /// settings this trainer's hyper-parameters and the log's format), before anything is made
    /// or changed; `None` for a run with neither. The log directory is the caller's record's,
    /// which holds its claim already.
    fn open_run(&mut self, summary: Option<&SummaryRecord>) -> Result<Option<Run>, TrainError> {
        let world = self.ranks.as_ref().map_or(1, Ranks::size);
        let rank = self.ranks.as_ref().map_or(0, Ranks::rank) as u32;
        let configured = self.config.checkpoints.as_ref().map(|c| c.dir.clone());
        if let Some(run) = self.run.take() {
            if run.rank() != (rank, world) {
                return Err(TrainError::Config(format!(
                    "the run was opened as rank {} of {}, this trainer is rank {rank} of {world}",
                    run.rank().0,
                    run.rank().1
                )));
            }
            same_directory(configured.as_deref(), run.checkpoint_dir())?;
            return Ok(Some(run));
        }
        let (begin, dir) = match self.begin.take() {
            Some((begin, dir)) => {
                same_directory(configured.as_deref(), &dir)?;
                (begin, dir)
            }
            None => match configured {
                Some(dir) => (Begin::Fresh, dir),
                None => return Ok(None),
            },
        };
        let mut builder = Run::builder(begin, dir)
            .rank(rank, world)
            .settings(Settings::of(&self.hparams))
            .writes_checkpoints(self.config.checkpoints.is_some());
        if let Some(summary) = summary {
            builder = builder.format(summary.format());
        }
        Ok(Some(builder.open()?))
    }

    /// The device pool and its loaders, after the configuration is checked.
    fn open_driver(
        &self,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
    ) -> Result<Driver<M>, TrainError> {
        if self.config.grad_accumulation == 0 {
            return Err(TrainError::Config(
                "gradient accumulation must be at least 1".into(),
            ));
        }
        let options = PoolOptions {
            step_timeout: self.config.step_timeout,
            worker_threads: self.config.worker_threads,
        };
        Driver::new(
            &self.devices,
            train,
            self.ranks.as_ref(),
            options,
            self.config.max_abandoned_workers,
            self.config.reduction,
            self.config.grad_accumulation,
        )?
        .ok_or_else(|| TrainError::Config("no devices".into()))
    }

    /// Starts a resumed run: reads `loaded`, the run's newest whole checkpoint, into the model,
    /// optimizer, scheduler and `state`, rolls the log back to it, and begins the loaders'
    /// epochs before it. Returns the model and where to go on from. Without a whole
    /// checkpoint, or with one whose position lies past the data (`items`, the training
    /// loader's, and the configured epochs), it fails before anything is changed. A position
    /// within the items but past the epoch's batches is found only when the epoch's batches are
    /// drawn, after the rollback: their count is the loader's to know.
    fn resume(
        &mut self,
        loaded: Loaded,
        model: M,
        identity: &Identity,
        (driver, items): (&mut Driver<M>, usize),
        log: Option<(&LogPlace, &SummaryRecord)>,
        state: &mut RunState,
    ) -> Result<ResumedRun<M>, TrainError> {
        let rank = self.ranks.as_ref().map_or(0, Ranks::rank);
        let dir = loaded
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let (resumed, loaded) = checkpointing::load(
            loaded,
            identity,
            rank,
            model,
            self.optimizer.clone(),
            self.scheduler.clone(),
        )?;
        let position = resumed.position;
        if position.epoch > self.config.epochs {
            return Err(past_the_data(
                &resumed.path,
                &position,
                format!("{} epoch(s)", self.config.epochs),
            ));
        }
        if !position.epoch_done && position.step_in_epoch > items {
            return Err(past_the_data(
                &resumed.path,
                &position,
                format!("{items} training item(s) an epoch"),
            ));
        }
        reshard(
            driver,
            (resumed.shards, resumed.data_ranks),
            (rank, identity.ranks),
        )
        .map_err(|apart| spread_apart(&resumed.path, apart))?;
        let rolling_back = std::time::Instant::now();
        if let Some((place, summary)) = log {
            same_ranks_in_a_bucket(place, (resumed.taken_ranks, identity.ranks), &resumed.path)?;
            let place = place.among_ranks(resumed.data_ranks, identity.ranks);
            place.roll_back(&checkpointing::snapshot_of(&loaded, rank)?, summary)?;
        }
        let recovery = crate::Recovery {
            read: resumed.read,
            restore: resumed.restore,
            rollback: rolling_back.elapsed(),
            ..crate::Recovery::default()
        };
        self.optimizer = resumed.optimizer;
        self.scheduler = resumed.scheduler;
        *state = resumed.state;
        state.recovering = Some((recovery, std::time::Instant::now()));
        state.report.steps = resumed.steps;
        state.report.optimizer_steps = resumed.optimizer_steps;
        state.report.resumed_from = Some(resumed.path);
        state.report.checkpoints_skipped = loaded.skipped;
        // The epoch in progress is begun by the loop; the ones before it, here.
        driver.begin_epochs(position.epoch - usize::from(!position.epoch_done));
        log::info!(
            "resuming from checkpoint {} ({}): epoch {}, step {}",
            resumed.seq,
            dir.display(),
            position.epoch,
            state.report.steps
        );
        Ok(ResumedRun {
            model: resumed.model,
            from: Some(position),
            data_ranks: resumed.data_ranks,
            carried_logs: resumed.carried_logs,
        })
    }

    /// Records what the run is, at step 0: its hyper-parameters (the session start, declaring
    /// every metric the run will record) and the model's graph. A resumed run finds them in
    /// its log already, except that MindInsight reads lineage from the newest lineage file
    /// only, which a resumed run begins afresh.
    pub(super) fn record_start(
        &self,
        model: &M,
        resumed: bool,
        validates: bool,
        summary: &mut SummaryRecord,
        faults: &mut SummaryFaults,
    ) -> Result<(), TrainError> {
        let resumed_for_mindinsight = resumed && summary.format() == Format::MindInsight;
        if resumed && !resumed_for_mindinsight {
            return Ok(());
        }
        let as_int = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let mut hparams = self
            .hparams
            .clone()
            .with("devices", as_int(self.devices.len()))
            .with("epochs", as_int(self.config.epochs))
            .with(
                "reduction",
                match self.config.reduction {
                    Reduction::Mean => "mean",
                    Reduction::Sum => "sum",
                },
            )
            .with("grad_accumulation", as_int(self.config.grad_accumulation));
        if let Some(ranks) = &self.ranks {
            hparams = hparams.with("ranks", as_int(ranks.size()));
        }
        // The session starts once, with every metric the run will record: TensorBoard keeps
        // the first experiment of a run, so a metric declared later never becomes a column.
        hparams.part = SessionPart::Start;
        hparams.status = None;
        for metric in RunState::metric_tags(validates, ValidItem::<M>::CLASSIFIES) {
            if !hparams.metrics.iter().any(|m| m == metric) {
                hparams.metrics.push(metric.to_string());
            }
        }
        faults.check(summary.add_value(crate::Plugin::HParams, "hparams", hparams))?;
        if !resumed {
            let graph = module_graph(model, "model");
            faults.check(summary.add_value(crate::Plugin::Graph, "model", graph))?;
        }
        faults.check(summary.record(0))?;
        Ok(())
    }
}

/// Refuses a resume with another rank count (`ranks`: the job's that took the checkpoint at
/// `path`, and this one's) of a log in a bucket, whose rollback tells a rank's objects by name
/// among every rank's, as many ranks as write there: a job of other ranks would take the
/// others' for its own.
fn same_ranks_in_a_bucket(
    place: &LogPlace,
    (taken, ranks): (usize, usize),
    path: &Path,
) -> Result<(), TrainError> {
    if taken == ranks || !place.remote() {
        return Ok(());
    }
    Err(CheckpointError::Mismatch {
        path: path.to_path_buf(),
        reason: format!(
            "its job had {taken} rank(s) and this one has {ranks}: a log in a bucket ({}) goes \
             on only with as many ranks as wrote it",
            place.dir.display()
        ),
    }
    .into())
}

/// Cuts the data as the job that took the checkpoint did (`taken`: the devices, that is the
/// shards of a rank's data, and the ranks it began with), for rank `rank` of `ranks` here, where
/// they differ from this run's own. Refuses, with the two devices (public indices), a run on
/// more devices than the job began with whose devices would share a slice's batches but are
/// not one memory; nothing has been changed then.
fn reshard<M: Trainable>(
    driver: &mut Driver<M>,
    (shards, data_ranks): (usize, usize),
    (rank, ranks): (usize, usize),
) -> Result<(), (usize, usize)> {
    let world = ranks.max(1);
    if shards == driver.shards() && data_ranks == world {
        return Ok(());
    }
    driver.reshard(shards, (data_ranks, rank, world));
    if let Some(apart) = driver.spread_apart() {
        return Err(apart);
    }
    let devices = driver.devices();
    let shards = shards * data_ranks / world;
    log::info!(
        "going on on {devices} device(s) with {shards} shards of the data, as it started: {}",
        match driver.spread() {
            1 => format!(
                "each device runs {} of a step's batches",
                shards / devices.max(1)
            ),
            at_once => format!("each shard's devices run {at_once} steps at once"),
        }
    );
    Ok(())
}

/// The error of a resume on more devices than its job began with whose devices `apart`
/// (public indices) would share a slice's batches, drawn on the first, but are not one
/// device's memory.
fn spread_apart(path: &Path, (first, other): (usize, usize)) -> TrainError {
    CheckpointError::Mismatch {
        path: path.to_path_buf(),
        reason: format!(
            "this run has more devices than the job began with, so devices {first} and \
             {other} would run consecutive batches of one slice of the data, drawn on device \
             {first}; that holds only for devices that are one memory (CPU devices), and these \
             are not: resume on as many devices as it began with, or fewer"
        ),
    }
    .into()
}

/// What a resume gives the run: the checkpoint's model, where to go on from, the shards its
/// data is cut into across ranks, and the log snapshots rank 0 carries on.
pub(super) struct ResumedRun<M> {
    model: M,
    from: Option<Position>,
    data_ranks: usize,
    carried_logs: Vec<(usize, String)>,
}

/// Discards what a run wrote, for [`Trainer::restart`]: its checkpoints, its model files and its
/// files in the log.
fn restart(
    run: &Run,
    summary: Option<&SummaryRecord>,
    log_place: Option<&LogPlace>,
) -> Result<(), TrainError> {
    run.start_over()?;
    if let (Some(place), Some(summary)) = (log_place, summary) {
        place.roll_back(&Snapshot::empty(place)?, summary)?;
    }
    Ok(())
}

/// Refuses a run whose checkpoints would be written elsewhere than where it was opened or is
/// resumed from: one run, one checkpoint directory.
fn same_directory(configured: Option<&Path>, dir: &Path) -> Result<(), TrainError> {
    match configured {
        Some(configured) if configured != dir => Err(TrainError::Config(format!(
            "the run's checkpoint directory is {}, and its configuration names {}: one run, one \
             checkpoint directory",
            dir.display(),
            configured.display()
        ))),
        _ => Ok(()),
    }
}

/// The error of a checkpoint whose position lies past what this run trains (`holds`): a
/// checkpoint of other data or another run, or a crafted one.
pub(super) fn past_the_data(path: &Path, position: &Position, holds: String) -> TrainError {
    CheckpointError::Mismatch {
        path: path.to_path_buf(),
        reason: format!(
            "it is at step {} of epoch {}, past this run's {holds}",
            position.step_in_epoch, position.epoch
        ),
    }
    .into()
}
