//! One epoch of the loop: its steps ([`Loop::train_epoch`]), each counted into the epoch's
//! totals and recorded ([`Loop::record_step`]), then its end ([`Loop::end_epoch`]): validation,
//! the epoch's report and summaries, the epoch hook and the epoch's checkpoint.

use std::time::{Duration, Instant};

use burn::data::dataloader::DataLoader;

use burn::train::TrainStep;
use ember_write::pack::Value;

use super::checkpointing::{EpochTotals, Position};
use super::error::TrainError;
use super::item::TrainingItem;
use super::report::{EpochReport, StepReport};
use super::run::{Loop, When};
use super::start::past_the_data;
use super::steps::{ValidFailure, device_times, scalar, step_error, step_times, validate};
use super::system::SystemSampler;
use super::{TrainItem, Trainable};
use crate::collective::Ranks;
use crate::driver::{Driver, Epoch, StepDone};
use crate::model_info::named_parameters;

/// What an epoch's steps add up to, for its end.
pub(super) struct Trained {
    totals: EpochTotals,
    seconds: f64,
}

impl<M: Trainable> Loop<'_, M> {
    /// Trains epoch `epoch` step by step, from `from` when a resumed run is inside it. `None`
    /// when the run was stopped (by the caller's flag, or by a peer rank) during it.
    pub(super) fn train_epoch(
        &mut self,
        driver: &mut Driver<M>,
        ranks: Option<&mut Ranks>,
        epoch: usize,
        from: Option<&Position>,
    ) -> Result<Option<Trained>, TrainError> {
        let started = Instant::now();
        let mut run = driver.epoch(ranks, self.stepper.gradient_homes());
        let mut totals = EpochTotals::default();
        if let Some(position) = from {
            run.skip(position.step_in_epoch).map_err(|steps| {
                let path = self.state.report.resumed_from.clone().unwrap_or_default();
                past_the_data(&path, position, format!("{steps} steps"))
            })?;
            totals = position.totals;
        }
        loop {
            // Across ranks the stop rides on this rank's next round, which ends the epoch on
            // every rank at one optimizer step; the steps come back `None` after it. Raised
            // after the epoch's last round, it has no round left here: the epoch ends as on
            // every other rank, and the next epoch's first round carries it.
            let no_round_left = self.world > 1 && run.rounds_over();
            if self.stop_requested() && !no_round_left {
                self.state.report.interrupted = true;
                if self.world > 1 {
                    run.ask_stop();
                } else {
                    if run.window_is_empty() {
                        let position = Position::within(epoch, run.steps_taken(), totals);
                        self.maybe_checkpoint(When::Stopped, &position, None)?;
                    }
                    break;
                }
            }
            self.stepper.want_gradients = self.histograms_due();
            let step_started = Instant::now();
            let done = match run.step(&mut self.stepper) {
                Ok(Some(done)) => done,
                Ok(None) => {
                    self.state.report.interrupted |= run.stopped_by_peer();
                    if self.state.report.interrupted && self.world > 1 {
                        let position = Position::within(epoch, run.steps_taken(), totals);
                        self.maybe_checkpoint(When::Stopped, &position, run.ranks())?;
                    }
                    break;
                }
                Err(failure) => return Err(step_error(epoch, failure)),
            };
            if done.learning_rate.is_some() {
                self.state.trained_again(step_started);
            }
            // Steps the devices ran at once (a run on more devices than its job began with)
            // are recorded one by one, as the job recorded them.
            for done in done.into_job_steps() {
                self.after_step(&mut run, (epoch, &done), &mut totals, started.elapsed())?;
            }
        }
        // A partial accumulation window still updates the model, as burn-train does; a
        // stopped run too, so the model returned reflects every step it ran.
        self.stepper.want_gradients = false;
        if let Some(lr) = run
            .finish(&mut self.stepper)
            .map_err(|failure| step_error(epoch, failure))?
        {
            self.state.learning_rate = Some(lr);
        }
        self.state.report.optimizer_steps = self.stepper.updates;
        if self.state.report.interrupted {
            return Ok(None);
        }
        let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
        Ok(Some(Trained { totals, seconds }))
    }

    /// Whether this step's optimizer step is due to record gradient histograms (they are taken
    /// inside the optimizer step they are due at).
    fn histograms_due(&self) -> bool {
        self.lead
            && self.summary.is_some()
            && self
                .config
                .histogram_every
                .filter(|every| *every > 0)
                .is_some_and(|every| (self.stepper.updates + 1).is_multiple_of(every))
    }

    /// Records step `done` of epoch `epoch` (`elapsed` into it) and takes the checkpoint it
    /// calls for.
    fn after_step(
        &mut self,
        run: &mut Epoch<'_, M>,
        (epoch, done): (usize, &StepDone<TrainItem<M>>),
        totals: &mut EpochTotals,
        elapsed: Duration,
    ) -> Result<(), TrainError> {
        if done.items.is_empty() {
            // A round of the other ranks', this rank's shard done: the model stepped.
            self.state.learning_rate = done.learning_rate;
            self.state.report.optimizer_steps = self.stepper.updates;
        } else {
            self.record_step(epoch, done, totals, elapsed)?;
        }
        // Not at the epoch's last step: the epoch's records of that step (validation,
        // accuracy) come after it, which a resume from it would write again beside the
        // step's train/loss it keeps, and no session start can make a live TensorBoard
        // forget the one and not the other. The epoch's end checkpoint, taken after those
        // records, stands for it. Across ranks the round just taken says so for every rank
        // alike (it ended the epoch, or a stop did, whose own checkpoint follows).
        let epoch_goes_on = match self.world {
            1 => run.has_next(),
            _ => !run.rounds_over(),
        };
        if done.learning_rate.is_some() && self.checkpoint_due(When::Updated) && epoch_goes_on {
            let position = Position::within(epoch, run.steps_taken(), *totals);
            self.maybe_checkpoint(When::Updated, &position, run.ranks())?;
        }
        Ok(())
    }

    /// Counts a step into the epoch's totals and the run's state, then records it: its
    /// summaries, and the step hook.
    fn record_step(
        &mut self,
        epoch: usize,
        done: &StepDone<TrainItem<M>>,
        totals: &mut EpochTotals,
        elapsed: Duration,
    ) -> Result<(), TrainError> {
        self.state.report.steps += 1;
        let mut step_loss = 0.0;
        for output in &done.items {
            let item = &output.item;
            self.state.batch_size.get_or_insert(item.examples());
            step_loss += scalar(item.loss());
            totals.examples += item.examples();
            if let Some((hits, total)) = item.correct() {
                totals.correct += hits;
                totals.judged += total;
            }
        }
        totals.loss_sum += step_loss;
        totals.loss_count += done.items.len();
        self.state.latest_train_loss = Some(totals.loss_sum / totals.loss_count.max(1) as f64);
        if let Some(lr) = done.learning_rate {
            self.state.learning_rate = Some(lr);
        }
        self.state.report.optimizer_steps = self.stepper.updates;
        let report = StepReport {
            epoch,
            step_in_epoch: done.step,
            step: self.state.report.steps as i64,
            loss: step_loss / done.items.len() as f64,
            examples: totals.examples,
            examples_per_second: totals.examples as f64
                / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
            devices_seconds: done.timing.devices.as_secs_f64(),
            device_seconds: done.items.iter().map(|o| o.elapsed.as_secs_f64()).collect(),
            reduce_seconds: done.timing.reduce.as_secs_f64(),
            optimizer_seconds: done.timing.optimize.as_secs_f64(),
        };
        self.record_step_summaries(done, &report)?;
        if let Some(hook) = self.on_step.as_mut() {
            hook(&report);
        }
        Ok(())
    }

    /// The step's summaries: on the lead, its loss, speed, times, system scalars, learning rate
    /// and any histograms due; on another rank, its devices' times only.
    fn record_step_summaries(
        &mut self,
        done: &StepDone<TrainItem<M>>,
        report: &StepReport,
    ) -> Result<(), TrainError> {
        // Taken with the optimizer step that took them: the last of the job steps the devices
        // ran at once.
        let gradients = done
            .learning_rate
            .and_then(|_| self.stepper.gradients.take());
        let Some(summary) = self.summary.as_deref_mut() else {
            return Ok(());
        };
        let mut values: Vec<(String, Value)> = Vec::new();
        if self.lead {
            values.push(("train/loss".into(), Value::Scalar(report.loss)));
            values.push((
                "train/examples_per_second".into(),
                Value::Scalar(report.examples_per_second),
            ));
        }
        for (tag, seconds) in device_times(self.rank, done) {
            values.push((tag, Value::Scalar(seconds)));
        }
        if self.lead {
            for (tag, seconds) in step_times(done) {
                values.push((tag.into(), Value::Scalar(seconds)));
            }
            let sample = self.system.as_ref().and_then(SystemSampler::take);
            for (tag, value) in sample.into_iter().flatten() {
                values.push((tag, Value::Scalar(value)));
            }
            if let Some(lr) = done.learning_rate {
                values.push(("train/learning_rate".into(), Value::Scalar(lr)));
            }
            if let Some(gradients) = gradients {
                for (name, _, weights) in named_parameters(&self.stepper.model) {
                    values.push((format!("weights/{name}"), Value::histogram(weights)));
                }
                for (name, gradient) in gradients {
                    values.push((format!("gradients/{name}"), Value::histogram(gradient)));
                }
            }
        }
        for (tag, value) in values {
            self.faults.check(summary.add(&tag, value))?;
        }
        self.faults.check(summary.record(report.step))?;
        Ok(())
    }

    /// Ends epoch `epoch`: validates, reports and records the epoch, runs the epoch hook, and
    /// takes the epoch's checkpoint.
    pub(super) fn end_epoch(
        &mut self,
        epoch: usize,
        trained: Trained,
        valid: Option<&dyn DataLoader<<M as TrainStep>::Input>>,
        ranks: Option<&mut Ranks>,
    ) -> Result<(), TrainError> {
        let Trained { totals, seconds } = trained;
        self.state.train_examples = Some(totals.examples);
        let mut ranks = ranks;
        let (valid_loss, valid_accuracy) = match valid {
            Some(valid) => {
                let totals = validate(&self.stepper.model, valid, ranks.as_deref_mut()).map_err(
                    |failure| match failure {
                        ValidFailure::Here(source) => TrainError::Validation { epoch, source },
                        ValidFailure::Ranks(source) => {
                            TrainError::RanksValidating { epoch, source }
                        }
                    },
                )?;
                self.state.valid_examples = Some(totals.examples);
                (Some(totals.loss()), totals.accuracy())
            }
            None => (None, None),
        };
        let report = EpochReport {
            epoch,
            train_loss: totals.loss_sum / totals.loss_count.max(1) as f64,
            train_accuracy: (totals.judged > 0)
                .then(|| totals.correct as f64 / totals.judged as f64),
            valid_loss,
            valid_accuracy,
            examples_per_second: totals.examples as f64 / seconds,
        };
        let step = self.state.report.steps as i64;
        if self.lead
            && let Some(summary) = self.summary.as_deref_mut()
        {
            let values = [
                ("epoch", Some(epoch as f64)),
                ("train/accuracy", report.train_accuracy),
                ("valid/loss", valid_loss),
                ("valid/accuracy", valid_accuracy),
            ];
            for (tag, value) in values {
                if let Some(value) = value {
                    let added = summary.add_value(crate::Plugin::Scalar, tag, value);
                    self.faults.check(added)?;
                }
            }
            self.faults.check(summary.record(step))?;
        }
        if let Some(hook) = self.on_epoch.as_mut() {
            let summary = self.summary.as_deref_mut();
            self.faults
                .check(hook(&self.stepper.model, &report, step, summary))?;
        }
        self.state.report.epochs.push(report);
        self.maybe_checkpoint(When::EpochEnd, &Position::end_of(epoch), ranks)
    }
}
