//! `Trainer`: data-parallel epochs over a Burn model on ember's pool, with summaries.
//!
//! This file runs past 600 lines on purpose: the training loop and the summaries it records at
//! each point of it read best together; the types (`types.rs`) and what a run knows
//! (`run_state.rs`) live beside it.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use burn::data::dataloader::DataLoader;
use burn::module::{Module, ModuleDisplay};
use burn::optim::GradientsParams;
use burn::optim::ModuleOptimizer;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::tensor::{Device, Tensor};
use burn::train::{InferenceStep, TrainOutput, TrainStep};
use ember_pool::PoolOptions;
use ember_pool::step::burn::Reduction;
use ember_write::ErrorPolicy;
use ember_write::pack::{Format, HParams, SessionPart, SessionStatus, Value};

use crate::collective::{Communicator, Ranks, RoundState};
use crate::driver::{self, Driver, Optimize, StepFailure, StepFailureSource, ValidationError};
use crate::faults::SummaryFaults;
use crate::model_info::{module_graph, named_gradients, named_parameters};
use crate::{SummaryError, SummaryRecord};

mod checkpointing;
mod run_state;
mod types;

use crate::checkpoint::LogPlace;
use checkpointing::{Checkpointer, EpochTotals, Identity, Position};
use run_state::{RunState, eval_lineage, train_lineage};
pub use types::{
    CheckpointConfig, EpochReport, StepReport, TrainError, TrainReport, TrainerConfig, TrainingItem,
};
use types::{EpochHook, StepHook, UpdateHook};

/// Data-parallel training over a Burn model on ember's device pool.
///
/// Each epoch splits the training loader into one contiguous slice per device; every pool step
/// runs one batch per device, brings each device's gradients to the main device (the first)
/// and reduces them by [`TrainerConfig::reduction`], in device order. Every
/// `grad_accumulation` steps the scheduler gives the learning rate and the optimizer steps on the
/// main device. After each epoch a validation pass runs on the main device.
///
/// **Summary errors.** A failing summary call (a rejected value, a full writer queue, a closed
/// record) ends training only when the record's [`error_policy`](SummaryRecord::error_policy)
/// is [`ErrorPolicy::Raise`]; under the default, [`ErrorPolicy::Log`], the first error of each
/// kind is logged, every one is counted in [`TrainReport::summary_errors`], and training goes
/// on, so a full log disk costs the logs, not the run.
///
/// **The record is the caller's.** `fit` only borrows the [`SummaryRecord`]: it flushes it when
/// the run ends, however it ends, and never closes it.
///
/// **Across processes and hosts.** Given a [`Communicator`] ([`communicator`](Self::communicator):
/// `MpiComm` under `mpirun`, or [`LocalGroup`](crate::LocalGroup)'s threads), the run is one
/// rank of a job: parameters start as rank 0's; each rank trains on its own contiguous shard of
/// the training loader, split again between its devices; each accumulation window's gradients,
/// reduced on the rank's main device, are then summed over every rank in one round (and for
/// [`Reduction::Mean`] divided by the number of gradient sets of all ranks), and every rank
/// steps on the same gradients, so parameters stay identical. Rank 0 records the run's
/// summaries (losses, hyper-parameters, graph, epochs, lineage); every rank records its own
/// devices' step times as `rank/<r>/device/<d>/step_seconds`, so a [`SummaryRecord`] built
/// with [`rank`](crate::SummaryRecordBuilder::rank) writes them into its rank's file of the
/// same run. Every rank validates on the whole validation loader. A shuffling loader shuffles
/// within each slice (burn forks its generator per slice), so ranks see their shards in
/// another order than one process with as many devices would; unshuffled, they train alike.
/// A failure on one rank ends every rank: the failed one with its own error, the others with
/// [`TrainError::Ranks`] naming it.
pub struct Trainer<M: TrainStep + Module> {
    devices: Vec<Device>,
    config: TrainerConfig,
    optimizer: ModuleOptimizer,
    scheduler: ModuleLrScheduler,
    hparams: HParams,
    on_step: Option<StepHook>,
    on_epoch: Option<EpochHook<M>>,
    on_update: Option<UpdateHook<M>>,
    stop: Option<Arc<AtomicBool>>,
    ranks: Option<Ranks>,
    resume: Option<PathBuf>,
    model: std::marker::PhantomData<M>,
}

impl<M: TrainStep + Module> std::fmt::Debug for Trainer<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("devices", &self.devices.len())
            .field("config", &self.config)
            .field("on_step", &self.on_step.is_some())
            .field("on_epoch", &self.on_epoch.is_some())
            .field("on_update", &self.on_update.is_some())
            .field("stop", &self.stop)
            .field("ranks", &self.ranks)
            .finish()
    }
}

impl<M, O, V> Trainer<M>
where
    M: TrainStep<Output = O> + InferenceStep<Input = <M as TrainStep>::Input, Output = V>,
    M: Module + ModuleDisplay + Display + 'static,
    <M as TrainStep>::Input: Send + 'static,
    O: TrainingItem + Send + 'static,
    TrainOutput<O>: Send,
    V: TrainingItem,
{
    /// A trainer on `devices` (the first is the main device) with `optimizer` and a learning-rate
    /// `scheduler`, taken as Burn's own `Learner::new` takes it: a plain `f64` (a constant
    /// rate), any `LrScheduler`, or what a scheduler config's `init()` returns.
    pub fn new(
        devices: Vec<Device>,
        optimizer: ModuleOptimizer,
        scheduler: impl Into<ModuleLrScheduler>,
        config: TrainerConfig,
    ) -> Self {
        Self {
            devices,
            config,
            optimizer,
            scheduler: scheduler.into(),
            hparams: HParams::new(),
            on_step: None,
            on_epoch: None,
            on_update: None,
            stop: None,
            ranks: None,
            resume: None,
            model: std::marker::PhantomData,
        }
    }

    /// Hyper-parameters to record at the start (the trainer adds its own: devices, epochs,
    /// reduction, gradient accumulation).
    pub fn hparams(mut self, hparams: HParams) -> Self {
        self.hparams = hparams;
        self
    }

    /// Runs `hook` after every pool step, once the step's summaries are queued: for progress
    /// displays. The hook runs on the training thread, so it should be quick.
    pub fn on_step(mut self, hook: impl FnMut(&StepReport) + Send + 'static) -> Self {
        self.on_step = Some(Box::new(hook));
        self
    }

    /// Runs `hook` after every epoch, once the epoch's figures are recorded, with the model as
    /// trained so far, the epoch's figures, the step the epoch's summaries were recorded at and
    /// the summary record (when [`fit`](Self::fit) was given one): for per-epoch summaries of
    /// the caller's own, such as sample predictions. An error from the hook is a summary error:
    /// it stops training when the record's policy is [`ErrorPolicy::Raise`] or when `fit` was
    /// given no record, and is logged and counted otherwise.
    pub fn on_epoch(
        mut self,
        hook: impl FnMut(&M, &EpochReport, i64, Option<&mut SummaryRecord>) -> Result<(), SummaryError>
        + Send
        + 'static,
    ) -> Self {
        self.on_epoch = Some(Box::new(hook));
        self
    }

    /// Runs `hook` after every optimizer step with the updated model and the number of
    /// optimizer steps so far (from 1): for checkpoints, moving averages or checks of the
    /// parameters. Across ranks it runs on every rank, also for the rounds a rank whose shard
    /// is done only joins. The hook runs on the training thread.
    pub fn on_update(mut self, hook: impl FnMut(&M, usize) + Send + 'static) -> Self {
        self.on_update = Some(Box::new(hook));
        self
    }

    /// Makes this run one rank of the data-parallel job `communicator` connects; see the
    /// type's docs. A job of one rank trains as without it.
    pub fn communicator(mut self, communicator: impl Communicator + 'static) -> Self {
        self.ranks = Some(Ranks::new(communicator));
        self
    }

    /// Stops training between steps once `flag` is true (set it from a signal handler, another
    /// thread or a hook). The flag is read before every pool step, so the step running when it
    /// is set finishes, and its gradients still update the model; the unfinished epoch gets no
    /// validation and no [`EpochReport`]. The run's summaries are then completed as for a
    /// failed run, since TensorBoard's sessions know no other end than success and failure:
    /// a `run/interrupted` scalar of 1 and the hyper-parameters with status
    /// [`SessionStatus::Failure`], with the final metrics known so far. [`fit`](Self::fit)
    /// returns the model as trained so far and a report with
    /// [`interrupted`](TrainReport::interrupted) set.
    pub fn stop_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Goes on from the newest whole checkpoint in `dir` (see [`CheckpointConfig`]) instead of
    /// starting afresh: the model `fit` is given takes the checkpoint's parameters, the
    /// optimizer and scheduler their state, and training goes on from the checkpoint's step,
    /// mid-epoch included (the epoch's batches trained on before it are drawn and dropped).
    /// With the same data, seed, devices and configuration, the run ends with the parameters
    /// an uninterrupted run would have, bit for bit on a deterministic backend.
    ///
    /// The summary log given to `fit` is first rolled back to the checkpoint: every file of the
    /// log is cut back to its length then, and files made since are removed, so every reader
    /// shows each step once. Newer checkpoints that are torn or damaged are passed over (logged,
    /// and listed in [`TrainReport::checkpoints_skipped`]). When `dir` holds no whole
    /// checkpoint, training starts from the beginning, with the log's files from an earlier
    /// start removed. A checkpoint of another device count, rank count, accumulation,
    /// reduction or model is refused with [`TrainError::Checkpoint`].
    pub fn resume_from(mut self, dir: impl Into<PathBuf>) -> Self {
        self.resume = Some(dir.into());
        self
    }

    /// Trains `model`, recording into `summary` when given, and returns the trained model and
    /// a report. On a worker failure the error names every failed device; see [`TrainError`]
    /// for what the summaries hold then, and [`stop_when`](Self::stop_when) for a stopped run.
    pub fn fit(
        mut self,
        model: M,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
        valid: Option<Arc<dyn DataLoader<<M as TrainStep>::Input>>>,
        mut summary: Option<&mut SummaryRecord>,
    ) -> Result<(M, TrainReport), TrainError> {
        // Without a record, the only summary errors are the epoch hook's own: the caller's to
        // act on.
        let policy = summary
            .as_deref()
            .map_or(ErrorPolicy::Raise, SummaryRecord::error_policy);
        let mut faults = SummaryFaults::new(policy);
        let mut state = RunState::default();
        let result = self.run(
            model,
            train,
            valid,
            summary.as_deref_mut(),
            &mut faults,
            &mut state,
        );
        match result {
            Ok(model) => {
                if let Some(summary) = summary {
                    let status = if state.report.interrupted {
                        SessionStatus::Failure
                    } else {
                        SessionStatus::Success
                    };
                    self.finish(summary, &state, status, &mut faults)?;
                }
                state.report.summary_errors = faults.count();
                Ok((model, state.report))
            }
            Err(error) => {
                if let Some(ranks) = self.ranks.as_mut()
                    && !matches!(error, TrainError::Ranks { .. })
                    && let Err(round_error) = ranks.announce_failure()
                {
                    log::error!("telling the other ranks that this one failed: {round_error}");
                }
                if let Some(summary) = summary
                    && let Err(summary_error) =
                        self.finish(summary, &state, SessionStatus::Failure, &mut faults)
                {
                    // The error to report is the training one.
                    log::error!("recording the end of a failed run: {summary_error}");
                }
                Err(error)
            }
        }
    }

    /// Records how the run ended, with the final metrics known so far, and flushes: the end of
    /// the hyper-parameter session started at step 0 (its status), the final metrics as
    /// scalars and, for MindInsight, MindSpore's train lineage and, when the run validated, its
    /// evaluation lineage, which its lineage page needs to list the run.
    fn finish(
        &self,
        summary: &mut SummaryRecord,
        state: &RunState,
        status: SessionStatus,
        faults: &mut SummaryFaults,
    ) -> Result<(), SummaryError> {
        if !self.lead() {
            return faults.check(summary.flush());
        }
        let step = state.report.steps as i64;
        if state.report.interrupted {
            faults.check(summary.add_scalar("run/interrupted", 1.0, step))?;
        }
        faults.check(summary.add_value(crate::Plugin::HParams, "hparams", HParams::end(status)))?;
        for (tag, value) in state.final_metrics() {
            faults.check(summary.add_value(crate::Plugin::Scalar, tag, value))?;
        }
        if summary.format() == Format::MindInsight {
            faults.check(summary.add_value(
                crate::Plugin::TrainLineage,
                "train_lineage",
                train_lineage::<M>(&self.hparams, self.devices.len(), self.config.epochs, state),
            ))?;
            if let Some(eval) = eval_lineage(state) {
                faults.check(summary.add_value(
                    crate::Plugin::EvalLineage,
                    "eval_lineage",
                    eval,
                ))?;
            }
        }
        faults.check(summary.record(step))?;
        faults.check(summary.flush())
    }

    /// Whether this run records the run's own summaries: the only run, or rank 0.
    fn lead(&self) -> bool {
        self.ranks.as_ref().is_none_or(|ranks| ranks.rank() == 0)
    }

    fn run(
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
        let mut checkpointer = self
            .config
            .checkpoints
            .as_ref()
            .map(Checkpointer::new)
            .transpose()?;
        let mut log_place = summary.as_deref().and_then(|summary| {
            let dir = checkpointer
                .as_ref()
                .map(Checkpointer::dir)
                .or(self.resume.as_deref())?;
            Some(LogPlace::of(summary, dir))
        });
        if self.resume.is_some() && summary.as_deref().is_some_and(SummaryRecord::is_remote) {
            return Err(TrainError::Config(
                "resuming into an object-store log directory is not supported: the segments \
                 already shipped cannot be rolled back"
                    .into(),
            ));
        }
        let (model, start) = match self.resume.take() {
            Some(dir) => self.resume(
                &dir,
                model,
                &identity,
                &mut driver,
                summary.as_deref(),
                &mut log_place,
                state,
            )?,
            None => (model, None),
        };

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
        let first_epoch = start
            .as_ref()
            .map_or(1, |p| p.epoch + usize::from(p.epoch_done));
        for epoch in first_epoch..=self.config.epochs {
            let started = Instant::now();
            let mut run = driver.epoch(self.ranks.as_mut());
            let mut totals = EpochTotals::default();
            if let Some(position) = start.as_ref().filter(|p| p.epoch == epoch) {
                run.skip(position.step_in_epoch);
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
                    for output in &done.items {
                        faults.check(summary.add_value(
                            crate::Plugin::Scalar,
                            &step_seconds_tag(rank, output.device),
                            output.elapsed.as_secs_f64(),
                        ))?;
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
                    for output in &done.items {
                        values.push((
                            step_seconds_tag(rank, output.device),
                            Value::Scalar(output.elapsed.as_secs_f64()),
                        ));
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
    /// epochs before it. Returns the model and where to go on from (`None`: from the start,
    /// when `dir` holds no checkpoint).
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
        let loaded = checkpointing::load(
            dir,
            identity,
            model.clone(),
            self.optimizer.clone(),
            self.scheduler.clone(),
        )?;
        let Some((resumed, loaded)) = loaded else {
            log::warn!(
                "no whole checkpoint in {}: training from the start",
                dir.display()
            );
            if let (Some(place), Some(summary)) = (log_place.as_ref(), summary) {
                place.roll_back(&ember_write::LogSnapshot::default(), summary)?;
            }
            return Ok((model, None));
        };
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
        let position = resumed.position;
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

/// Takes a checkpoint at `position` of the run as `stepper` and `state` have it.
fn checkpoint<M: Module + Clone>(
    checkpointer: &mut Checkpointer,
    position: &Position,
    state: &RunState,
    identity: &Identity,
    stepper: &Stepper<'_, M>,
    log_place: Option<&LogPlace>,
    summary: Option<&mut SummaryRecord>,
) -> Result<(), TrainError> {
    checkpointer.save(
        position,
        state.report.steps,
        stepper.updates,
        state,
        identity,
        (&stepper.model, &*stepper.optimizer, &*stepper.scheduler),
        log_place.zip(summary),
    )
}

/// The Trainer's side of the driver's optimizer step: Burn's optimizer and scheduler on the
/// model it owns, and, when asked, each parameter's reduced gradient for histograms.
struct Stepper<'a, M> {
    model: M,
    optimizer: &'a mut ModuleOptimizer,
    scheduler: &'a mut ModuleLrScheduler,
    /// Whether the next optimizer step keeps the gradients for histograms.
    want_gradients: bool,
    gradients: Option<Vec<(String, Vec<f32>)>>,
    /// Optimizer steps so far.
    updates: usize,
    on_update: Option<&'a mut UpdateHook<M>>,
}

/// The tag of a device's step time: per rank across ranks, so that each rank's devices have
/// series of their own in the run.
fn step_seconds_tag(rank: Option<usize>, device: usize) -> String {
    match rank {
        Some(rank) => format!("rank/{rank}/device/{device}/step_seconds"),
        None => format!("device/{device}/step_seconds"),
    }
}

fn step_error(epoch: usize, failure: StepFailure) -> TrainError {
    match failure.source {
        StepFailureSource::Devices(source) => TrainError::Step {
            epoch,
            step: failure.step,
            source,
        },
        StepFailureSource::Ranks(source) => TrainError::Ranks {
            epoch,
            step: failure.step,
            source,
        },
    }
}

impl<M: Module + Clone> Optimize<M> for Stepper<'_, M> {
    fn model(&self) -> M {
        self.model.clone()
    }

    fn step(&mut self, grads: GradientsParams) -> f64 {
        if self.want_gradients {
            self.gradients = Some(named_gradients(&self.model, &grads));
        }
        let lr = self.scheduler.step();
        let base = lr.base();
        self.model = self.optimizer.step(lr, self.model.clone(), grads);
        self.updates += 1;
        if let Some(hook) = self.on_update.as_mut() {
            hook(&self.model, self.updates);
        }
        base
    }
}

/// What a validation pass adds up to.
struct ValidTotals {
    loss: f64,
    accuracy: Option<f64>,
    examples: usize,
}

/// Mean loss, accuracy and example count of the validation set, on the main device through the
/// driver: a batch that cannot be loaded, or a panicking step, is a [`ValidationError`].
fn validate<M, V>(
    model: &M,
    valid: &dyn DataLoader<<M as TrainStep>::Input>,
) -> Result<ValidTotals, ValidationError>
where
    M: TrainStep + InferenceStep<Input = <M as TrainStep>::Input, Output = V> + Module,
    V: TrainingItem,
{
    let (mut loss, mut batches, mut correct, mut judged) = (0.0, 0usize, 0usize, 0usize);
    let mut examples = 0usize;
    driver::validate(model, valid, |_, output: V, _| {
        loss += scalar(output.loss());
        batches += 1;
        examples += output.examples();
        if let Some((hits, total)) = output.correct() {
            correct += hits;
            judged += total;
        }
        Ok::<(), ValidationError>(())
    })?;
    Ok(ValidTotals {
        loss: loss / batches.max(1) as f64,
        accuracy: (judged > 0).then(|| correct as f64 / judged as f64),
        examples,
    })
}

fn scalar(tensor: &Tensor<1>) -> f64 {
    tensor.to_data().iter::<f64>().next().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use burn::optim::SgdConfig;
    use burn::tensor::Device;
    use ember_tests::{Mlp, parameters, regression_loader};

    use super::*;

    #[test]
    fn hooks_see_every_step_and_every_epoch_with_the_trained_model() {
        let device = Device::flex().autodiff();
        let steps = Arc::new(Mutex::new(Vec::new()));
        let epochs = Arc::new(Mutex::new(Vec::new()));
        let (seen_steps, seen_epochs) = (steps.clone(), epochs.clone());
        let dir = tempfile::tempdir().unwrap();
        let mut summary = SummaryRecord::new(dir.path()).unwrap();
        let (model, report) = Trainer::new(
            vec![device.clone(), device.clone()],
            SgdConfig::new().init(),
            0.05,
            TrainerConfig {
                epochs: 2,
                histogram_every: None,
                ..TrainerConfig::default()
            },
        )
        .on_step(move |step| {
            seen_steps.lock().unwrap().push((
                step.epoch,
                step.step_in_epoch,
                step.step,
                step.examples,
            ));
            assert!(step.loss.is_finite() && step.examples_per_second > 0.0);
        })
        .on_epoch(move |model: &Mlp, epoch, step, summary| {
            assert!(summary.is_some());
            seen_epochs
                .lock()
                .unwrap()
                .push((epoch.epoch, step, parameters(model)));
            Ok(())
        })
        .fit(
            Mlp::new(4, &device),
            regression_loader(1, 64, 8, &device),
            None,
            Some(&mut summary),
        )
        .unwrap();
        summary.close().unwrap();

        // 64 rows in batches of 8 over 2 workers: 4 steps per epoch, 16 examples a step.
        let steps = steps.lock().unwrap().clone();
        let expected: Vec<_> = (1..=8usize)
            .map(|s| {
                (
                    (s - 1) / 4 + 1,
                    (s - 1) % 4 + 1,
                    s as i64,
                    16 * ((s - 1) % 4 + 1),
                )
            })
            .collect();
        assert_eq!(steps, expected);
        let epochs = epochs.lock().unwrap();
        assert_eq!(
            epochs.iter().map(|(e, s, _)| (*e, *s)).collect::<Vec<_>>(),
            [(1, 4), (2, 8)]
        );
        assert_eq!(report.steps, 8);
        // The last epoch's hook saw the model fit returned; the first saw an earlier one.
        assert_eq!(epochs[1].2, parameters(&model));
        assert_ne!(epochs[0].2, parameters(&model));
    }

    #[test]
    fn an_epoch_hook_error_stops_training() {
        let device = Device::flex().autodiff();
        let result = Trainer::new(
            vec![device.clone()],
            SgdConfig::new().init(),
            0.05,
            TrainerConfig {
                epochs: 3,
                ..TrainerConfig::default()
            },
        )
        .on_epoch(|_: &Mlp, _, _, _| Err(SummaryError::Closed))
        .fit(
            Mlp::new(4, &device),
            regression_loader(1, 16, 8, &device),
            None,
            None,
        );
        assert!(matches!(
            result,
            Err(TrainError::Summary(SummaryError::Closed))
        ));
    }
}
