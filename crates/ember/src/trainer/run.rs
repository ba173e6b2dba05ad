//! The training loop: `Trainer::run`'s epochs and steps, the summaries recorded at each point
//! of them, the checkpoints taken between them, and the resume that starts a run from one.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::data::dataloader::DataLoader;
use burn::module::{Module, ModuleDisplay};
use burn::train::{InferenceStep, TrainOutput, TrainStep};
use ember_pool::PoolOptions;
use ember_pool::step::burn::Reduction;
use ember_write::pack::{Format, SessionPart, Value};

use super::run_state::RunState;
use super::steps::{Stepper, checkpoint, device_times, scalar, step_error, step_times, validate};
use super::system::SystemSampler;
use super::types::{EpochReport, StepReport, TrainError, TrainingItem};
use super::{Resume, Trainer};
use crate::SummaryRecord;
use crate::checkpoint::LogPlace;
use crate::checkpoint::trainer::{
    self as checkpointing, Checkpointer, EpochTotals, Identity, Position,
};
use crate::collective::{Ranks, RoundState};
use crate::driver::Driver;
use crate::faults::SummaryFaults;
use crate::model_info::{module_graph, named_parameters};

impl<M, O, V> Trainer<M>
where
    M: TrainStep<Output = O> + InferenceStep<Input = <M as TrainStep>::Input, Output = V>,
    M: Module + ModuleDisplay + Display + 'static,
    <M as TrainStep>::Input: Send + 'static,
    O: TrainingItem + Send + 'static,
    TrainOutput<O>: Send,
    V: TrainingItem,
{
    pub(super) fn run(
        &mut self,
        model: M,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
        valid: Option<Arc<dyn DataLoader<<M as TrainStep>::Input>>>,
        mut summary: Option<&mut SummaryRecord>,
        faults: &mut SummaryFaults,
        state: &mut RunState,
    ) -> Result<M, TrainError> {
        if self.config.grad_accumulation == 0 {
            return Err(TrainError::Config(
                "gradient accumulation must be at least 1".into(),
            ));
        }
        let options = PoolOptions {
            step_timeout: self.config.step_timeout,
            worker_threads: self.config.worker_threads,
        };
        let mut driver = Driver::new(
            &self.devices,
            train,
            self.ranks.as_ref(),
            options,
            self.config.max_abandoned_workers,
            self.config.reduction,
            self.config.grad_accumulation,
        )?
        .ok_or_else(|| TrainError::Config("no devices".into()))?;
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
        let lead = self.lead();
        let world = self.ranks.as_ref().map_or(1, Ranks::size);
        let identity = Identity::new(
            &model,
            self.devices.len(),
            world,
            self.config.grad_accumulation,
            self.config.reduction,
        );
        let resume_dir = self.resume.as_ref().map(|resume| match resume {
            Resume::Continue(dir) | Resume::StartOver(dir) => dir.clone(),
        });
        let checkpoint_dir = self
            .config
            .checkpoints
            .as_ref()
            .map(|config| config.dir.clone())
            .or(resume_dir);
        let this_rank = self.ranks.as_ref().map_or(0, Ranks::rank);
        // Nothing to resume from: refused before anything is made or changed.
        let remote = |dir: &std::path::Path| dir.to_str().is_some_and(ember_write::is_remote);
        if let Some(Resume::Continue(dir)) = &self.resume
            && !remote(dir)
            && !dir.is_dir()
        {
            crate::checkpoint::Checkpoints::new(dir, 1).to_resume(world)?;
        }
        // One run per local checkpoint directory and rank, for as long as this one trains (a
        // bucket has no lock to hold).
        let _lock = checkpoint_dir
            .as_deref()
            .filter(|dir| !remote(dir))
            .map(|dir| ember_write::DirLock::acquire(dir, this_rank as u32))
            .transpose()
            .map_err(crate::checkpoint::CheckpointError::from)?;
        let mut log_place = summary
            .as_deref()
            .zip(checkpoint_dir.as_deref())
            .map(|(summary, dir)| LogPlace::of(summary, dir));
        let (model, start) = match self.resume.take() {
            Some(Resume::Continue(dir)) => self.resume(
                &dir,
                model,
                &identity,
                &mut driver,
                summary.as_deref(),
                &mut log_place,
                state,
            )?,
            Some(Resume::StartOver(dir)) => {
                start_over(&dir, summary.as_deref(), log_place.as_ref())?;
                (model, None)
            }
            None => (model, None),
        };
        state.began = true;
        let mut checkpointer = self
            .config
            .checkpoints
            .as_ref()
            .map(Checkpointer::new)
            .transpose()?;

        if lead && let Some(summary) = summary.as_deref_mut() {
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
            for metric in RunState::metric_tags(valid.is_some(), V::CLASSIFIES) {
                if !hparams.metrics.iter().any(|m| m == metric) {
                    hparams.metrics.push(metric.to_string());
                }
            }
            // A resumed run finds its start in the log already; but MindInsight reads a run's
            // lineage from its newest lineage file only, which a resumed run begins afresh, so
            // there the hyper-parameters (lineage, not a series) are written again.
            let resumed_for_mindinsight =
                start.is_some() && summary.format() == Format::MindInsight;
            if start.is_none() || resumed_for_mindinsight {
                faults.check(summary.add_value(crate::Plugin::HParams, "hparams", hparams))?;
                if start.is_none() {
                    faults.check(summary.add_value(
                        crate::Plugin::Graph,
                        "model",
                        module_graph(&model, "model"),
                    ))?;
                }
                faults.check(summary.record(0))?;
            }
        }

        let mut stepper = Stepper {
            model,
            optimizer: &mut self.optimizer,
            scheduler: &mut self.scheduler,
            want_gradients: false,
            gradients: None,
            updates: state.report.optimizer_steps,
            on_update: self.on_update.as_mut(),
        };
        let rank = self.ranks.as_ref().map(Ranks::rank);
        let histogram_every = self.config.histogram_every.filter(|every| *every > 0);
        // A sampler that cannot start costs the run its system/… scalars, nothing else.
        let system = match self.config.system_every {
            Some(every) if lead && summary.is_some() && !every.is_zero() => {
                SystemSampler::start(every, &self.devices)
                    .inspect_err(|error| log::warn!("no system/… scalars: {error}"))
                    .ok()
            }
            _ => None,
        };
        let first_epoch = start
            .as_ref()
            .map_or(1, |p| p.epoch + usize::from(p.epoch_done));
        for epoch in first_epoch..=self.config.epochs {
            let started = Instant::now();
            let mut run = driver.epoch(self.ranks.as_mut());
            let mut totals = EpochTotals::default();
            if let Some(position) = start.as_ref().filter(|p| p.epoch == epoch) {
                run.skip(position.step_in_epoch).map_err(|steps| {
                    let path = state.report.resumed_from.clone().unwrap_or_default();
                    past_the_data(&path, position, format!("{steps} steps"))
                })?;
                totals = position.totals;
            }
            loop {
                if self
                    .stop
                    .as_ref()
                    .is_some_and(|flag| flag.load(Ordering::Acquire))
                {
                    state.report.interrupted = true;
                    // Across ranks a stop is not reached by every rank at the same step, so
                    // the job goes on from its last epoch's checkpoint.
                    if run.window_is_empty()
                        && world == 1
                        && let Some(checkpointer) = checkpointer.as_mut()
                    {
                        let position = Position {
                            epoch,
                            epoch_done: false,
                            step_in_epoch: run.steps_taken(),
                            totals,
                        };
                        checkpoint(
                            checkpointer,
                            &position,
                            state,
                            &identity,
                            &stepper,
                            log_place.as_ref(),
                            summary.as_deref_mut(),
                            faults,
                        )?;
                    }
                    break;
                }
                // Gradient histograms are taken inside the optimizer step they are due at.
                stepper.want_gradients = lead
                    && summary.is_some()
                    && histogram_every
                        .is_some_and(|every| (stepper.updates + 1).is_multiple_of(every));
                let done = match run.step(&mut stepper) {
                    Ok(Some(done)) => done,
                    Ok(None) => {
                        state.report.interrupted |= run.stopped_by_peer();
                        break;
                    }
                    Err(failure) => return Err(step_error(epoch, failure)),
                };
                state.report.steps += 1;
                let global_step = state.report.steps as i64;
                let mut step_loss = 0.0;
                let device_count = done.items.len();
                for output in &done.items {
                    let item = &output.item;
                    state.batch_size.get_or_insert(item.examples());
                    step_loss += scalar(item.loss());
                    totals.examples += item.examples();
                    if let Some((hits, total)) = item.correct() {
                        totals.correct += hits;
                        totals.judged += total;
                    }
                }
                totals.loss_sum += step_loss;
                totals.loss_count += device_count;
                let examples = totals.examples;
                state.latest_train_loss = Some(totals.loss_sum / totals.loss_count.max(1) as f64);
                let gradients = stepper.gradients.take();
                if let Some(lr) = done.learning_rate {
                    state.learning_rate = Some(lr);
                }
                state.report.optimizer_steps = stepper.updates;

                if let Some(summary) = summary.as_deref_mut()
                    && !lead
                {
                    for (tag, seconds) in device_times(rank, &done) {
                        faults.check(summary.add_value(crate::Plugin::Scalar, &tag, seconds))?;
                    }
                    faults.check(summary.record(global_step))?;
                } else if let Some(summary) = summary.as_deref_mut() {
                    let elapsed = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
                    let mut values: Vec<(String, Value)> = vec![
                        (
                            "train/loss".into(),
                            Value::Scalar(step_loss / device_count as f64),
                        ),
                        (
                            "train/examples_per_second".into(),
                            Value::Scalar(examples as f64 / elapsed),
                        ),
                    ];
                    for (tag, seconds) in device_times(rank, &done) {
                        values.push((tag, Value::Scalar(seconds)));
                    }
                    for (tag, seconds) in step_times(&done) {
                        values.push((tag.into(), Value::Scalar(seconds)));
                    }
                    for (tag, value) in system
                        .as_ref()
                        .and_then(SystemSampler::take)
                        .into_iter()
                        .flatten()
                    {
                        values.push((tag, Value::Scalar(value)));
                    }
                    if let Some(lr) = done.learning_rate {
                        values.push(("train/learning_rate".into(), Value::Scalar(lr)));
                    }
                    if let Some(gradients) = gradients {
                        for (name, _, weights) in named_parameters(&stepper.model) {
                            values.push((format!("weights/{name}"), Value::histogram(weights)));
                        }
                        for (name, gradient) in gradients {
                            values.push((format!("gradients/{name}"), Value::histogram(gradient)));
                        }
                    }
                    for (tag, value) in values {
                        faults.check(summary.add(&tag, value))?;
                    }
                    faults.check(summary.record(global_step))?;
                }
                if let Some(hook) = self.on_step.as_mut() {
                    let elapsed = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
                    hook(&StepReport {
                        epoch,
                        step_in_epoch: done.step,
                        step: global_step,
                        loss: step_loss / device_count as f64,
                        examples,
                        examples_per_second: examples as f64 / elapsed,
                        devices_seconds: done.timing.devices.as_secs_f64(),
                        device_seconds: done
                            .items
                            .iter()
                            .map(|output| output.elapsed.as_secs_f64())
                            .collect(),
                        reduce_seconds: done.timing.reduce.as_secs_f64(),
                        optimizer_seconds: done.timing.optimize.as_secs_f64(),
                    });
                }
                // Across ranks only at epoch ends: a rank whose shard is done joins the others'
                // rounds inside the driver, with no point between them where every rank is.
                if done.learning_rate.is_some()
                    && world == 1
                    && let Some(checkpointer) = checkpointer.as_mut()
                    && checkpointer.due(stepper.updates)
                {
                    let position = Position {
                        epoch,
                        epoch_done: false,
                        step_in_epoch: done.step,
                        totals,
                    };
                    checkpoint(
                        checkpointer,
                        &position,
                        state,
                        &identity,
                        &stepper,
                        log_place.as_ref(),
                        summary.as_deref_mut(),
                        faults,
                    )?;
                }
            }
            // A partial accumulation window still updates the model, as burn-train does; a
            // stopped run too, so the model returned reflects every step it ran.
            stepper.want_gradients = false;
            if let Some(lr) = run
                .finish(&mut stepper)
                .map_err(|failure| step_error(epoch, failure))?
            {
                state.learning_rate = Some(lr);
            }
            state.report.optimizer_steps = stepper.updates;
            if state.report.interrupted {
                break;
            }
            let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
            let EpochTotals {
                loss_sum,
                loss_count,
                examples,
                correct,
                judged,
            } = totals;
            state.train_examples = Some(examples);
            let (valid_loss, valid_accuracy) = match &valid {
                Some(valid) => {
                    let totals = validate(&stepper.model, valid.as_ref())
                        .map_err(|source| TrainError::Validation { epoch, source })?;
                    state.valid_examples = Some(totals.examples);
                    (Some(totals.loss), totals.accuracy)
                }
                None => (None, None),
            };
            let epoch_report = EpochReport {
                epoch,
                train_loss: loss_sum / loss_count.max(1) as f64,
                train_accuracy: (judged > 0).then(|| correct as f64 / judged as f64),
                valid_loss,
                valid_accuracy,
                examples_per_second: examples as f64 / seconds,
            };
            if lead && let Some(summary) = summary.as_deref_mut() {
                let step = state.report.steps as i64;
                let mut values = vec![("epoch", epoch as f64)];
                if let Some(accuracy) = epoch_report.train_accuracy {
                    values.push(("train/accuracy", accuracy));
                }
                if let Some(loss) = valid_loss {
                    values.push(("valid/loss", loss));
                }
                if let Some(accuracy) = valid_accuracy {
                    values.push(("valid/accuracy", accuracy));
                }
                for (tag, value) in values {
                    faults.check(summary.add_value(crate::Plugin::Scalar, tag, value))?;
                }
                faults.check(summary.record(step))?;
            }
            if let Some(hook) = self.on_epoch.as_mut() {
                faults.check(hook(
                    &stepper.model,
                    &epoch_report,
                    state.report.steps as i64,
                    summary.as_deref_mut(),
                ))?;
            }
            state.report.epochs.push(epoch_report);
            if let Some(checkpointer) = checkpointer.as_mut() {
                let position = Position {
                    epoch,
                    epoch_done: true,
                    step_in_epoch: 0,
                    totals: EpochTotals::default(),
                };
                if let Some(ranks) = self.ranks.as_mut() {
                    // Every rank's part first; then one round without gradients, which every
                    // rank joins only once its part is on the disk (a rank that failed to
                    // write announces its failure in that round instead), and only then rank
                    // 0's checkpoint, which names the job's position.
                    if !lead {
                        checkpointer.save_part(
                            ranks.rank(),
                            state.report.steps,
                            true,
                            log_place.as_ref().zip(summary.as_deref_mut()),
                            faults,
                        )?;
                    }
                    let mut nothing =
                        ember_pool::step::burn::GradientWindow::new(self.config.reduction);
                    ranks
                        .round(&mut nothing, &stepper.model, RoundState::default())
                        .map_err(|source| TrainError::Ranks {
                            epoch,
                            step: 0,
                            source,
                        })?;
                }
                if lead {
                    checkpoint(
                        checkpointer,
                        &position,
                        state,
                        &identity,
                        &stepper,
                        log_place.as_ref(),
                        summary.as_deref_mut(),
                        faults,
                    )?;
                }
            }
        }
        if let Some(checkpointer) = checkpointer.as_mut() {
            checkpointer.wait()?;
            state.report.checkpoints_written = checkpointer.written;
        }
        Ok(stepper.model)
    }

    /// Starts a resumed run: reads the newest whole checkpoint of `dir` into the model,
    /// optimizer, scheduler and `state`, rolls the log back to it, and begins the loaders'
    /// epochs before it. Returns the model and where to go on from. Without a whole
    /// checkpoint it fails before anything is changed.
    #[allow(clippy::too_many_arguments)]
    fn resume(
        &mut self,
        dir: &std::path::Path,
        model: M,
        identity: &Identity,
        driver: &mut Driver<M>,
        summary: Option<&SummaryRecord>,
        log_place: &mut Option<LogPlace>,
        state: &mut RunState,
    ) -> Result<(M, Option<Position>), TrainError> {
        let (resumed, loaded) = checkpointing::load(
            dir,
            identity,
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
        if let (Some(place), Some(summary)) = (log_place.as_ref(), summary) {
            let rank = self.ranks.as_ref().map_or(0, Ranks::rank);
            place.roll_back(&checkpointing::snapshot_of(&loaded, rank)?, summary)?;
        }
        self.optimizer = resumed.optimizer;
        self.scheduler = resumed.scheduler;
        *state = resumed.state;
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
        Ok((resumed.model, Some(position)))
    }
}

/// Discards what a run stopped before wrote, for [`Trainer::start_over`]: its checkpoints in
/// `dir` and its files in the log.
fn start_over(
    dir: &std::path::Path,
    summary: Option<&SummaryRecord>,
    log_place: Option<&LogPlace>,
) -> Result<(), TrainError> {
    log::warn!(
        "starting the run over: removing its checkpoints in {} and its log",
        dir.display()
    );
    crate::checkpoint::Checkpoints::new(dir, 1).remove_all()?;
    if let (Some(place), Some(summary)) = (log_place, summary) {
        place.roll_back(
            &crate::checkpoint::log_place::Snapshot::empty(place),
            summary,
        )?;
    }
    Ok(())
}

/// The error of a checkpoint whose position lies past what this run trains (`holds`): a
/// checkpoint of other data or another run, or a crafted one.
fn past_the_data(path: &std::path::Path, position: &Position, holds: String) -> TrainError {
    crate::checkpoint::CheckpointError::Mismatch {
        path: path.to_path_buf(),
        reason: format!(
            "it is at step {} of epoch {}, past this run's {holds}",
            position.step_in_epoch, position.epoch
        ),
    }
    .into()
}
