//! The training loop, phase by phase: [`Trainer::run`] starts or resumes (`start.rs`), trains
//! epoch after epoch (`epoch.rs`: its steps, then its end) and finishes. Every checkpoint,
//! whatever calls for it, is taken through [`Loop::maybe_checkpoint`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::data::dataloader::DataLoader;
use burn::module::Module;
use burn::train::TrainStep;
use ember_write::DirLock;

use super::Trainable;
use super::Trainer;
use super::checkpointing::{Checkpointer, Identity, Position};
use super::config::{EpochHook, StepHook, TrainerConfig};
use super::error::TrainError;
use super::run_state::RunState;
use super::steps::Stepper;
use super::system::SystemSampler;
use crate::SummaryRecord;
use crate::checkpoint::CheckpointError;
use crate::checkpoint::log_place::LogPlace;
use crate::collective::{Ranks, RoundState};
use crate::faults::SummaryFaults;

/// The step a run starts its log's session at ([`SummaryRecord::start_session`]): a fresh run
/// at its first record's (0), a resumed one at the first step it writes again, the one after
/// its checkpoint's. Nothing the killed run wrote at the checkpoint's step is written again:
/// an optimizer step's checkpoint is not taken at an epoch's last step, before the epoch's
/// records (`epoch.rs`); a stop's there comes before them too, but a stopped run never writes
/// them.
fn session_step(resumed: bool, state: &RunState) -> i64 {
    match resumed {
        true => i64::try_from(state.report.steps).map_or(i64::MAX, |steps| steps.saturating_add(1)),
        false => 0,
    }
}

/// What calls for a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum When {
    /// The run was asked to stop, between two accumulation windows.
    Stopped,
    /// The optimizer stepped; taken when [`CheckpointConfig::every`](super::CheckpointConfig::every)
    /// says it is due.
    Updated,
    /// An epoch ended.
    EpochEnd,
}

/// What the loop carries from step to step: the model being trained (inside its stepper), what
/// the run knows so far, where it records, and its checkpoints.
pub(super) struct Loop<'t, M> {
    pub(super) stepper: Stepper<'t, M>,
    pub(super) config: &'t TrainerConfig,
    pub(super) on_step: Option<&'t mut StepHook>,
    pub(super) on_epoch: Option<&'t mut EpochHook<M>>,
    pub(super) stop: Option<&'t AtomicBool>,
    pub(super) summary: Option<&'t mut SummaryRecord>,
    pub(super) faults: &'t mut SummaryFaults,
    pub(super) state: &'t mut RunState,
    pub(super) checkpointer: Option<Checkpointer>,
    pub(super) identity: Identity,
    pub(super) log_place: Option<LogPlace>,
    /// Samples the system/… scalars; `None` when not asked for or not startable.
    pub(super) system: Option<SystemSampler>,
    /// Whether this run records the run's own summaries: the only run, or rank 0.
    pub(super) lead: bool,
    /// How many ranks train together (1 without a communicator).
    pub(super) world: usize,
    /// This run's rank, across ranks.
    pub(super) rank: Option<usize>,
    /// The checkpoint directory's lock, checked before every checkpoint: a run whose directory
    /// was taken away stops instead of writing into what may be another run's. Declared after
    /// the checkpointer, so dropped after it: a run that ends early releases it only once its
    /// checkpoints in flight are written.
    pub(super) lock: Option<DirLock>,
}

impl<M: Trainable> Trainer<M> {
    pub(super) fn run(
        &mut self,
        model: M,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
        valid: Option<Arc<dyn DataLoader<<M as TrainStep>::Input>>>,
        mut summary: Option<&mut SummaryRecord>,
        faults: &mut SummaryFaults,
        state: &mut RunState,
    ) -> Result<(M, Option<DirLock>), TrainError> {
        let mut started = self.start(model, train, summary.as_deref(), state)?;
        state.began = true;
        let checkpointer = self
            .config
            .checkpoints
            .as_ref()
            .map(|config| Checkpointer::new(config, &started.carried_logs, summary.as_deref()))
            .transpose()?;
        let lead = self.lead();
        if let Some(summary) = summary.as_deref_mut() {
            let resumed = started.from.is_some();
            // A second fresh run into one record goes on in the session the first started.
            if resumed || summary.session_start().is_none() {
                faults.check(summary.start_session(session_step(resumed, state)))?;
            }
            if lead {
                self.record_start(&started.model, resumed, valid.is_some(), summary, faults)?;
                super::checkpointing::note_log_gaps(state, summary, faults)?;
            }
        }
        // A sampler that cannot start costs the run its system/… scalars, nothing else.
        let system = match self.config.system_every {
            Some(every) if lead && summary.is_some() && !every.is_zero() => {
                SystemSampler::start(every, &self.devices)
                    .inspect_err(|error| log::warn!("no system/… scalars: {error}"))
                    .ok()
            }
            _ => None,
        };
        let first_epoch = started
            .from
            .as_ref()
            .map_or(1, |p| p.epoch + usize::from(p.epoch_done));
        let mut looping = Loop {
            stepper: Stepper {
                model: started.model,
                optimizer: &mut self.optimizer,
                scheduler: &mut self.scheduler,
                want_gradients: false,
                gradients: None,
                updates: state.report.optimizer_steps,
                on_update: self.on_update.as_mut(),
            },
            config: &self.config,
            on_step: self.on_step.as_mut(),
            on_epoch: self.on_epoch.as_mut(),
            stop: self.stop.as_deref(),
            summary,
            faults,
            state,
            checkpointer,
            identity: started.identity,
            log_place: started.log_place,
            system,
            lead,
            world: self.ranks.as_ref().map_or(1, Ranks::size),
            rank: self.ranks.as_ref().map(Ranks::rank),
            lock: started.lock.take(),
        };
        for epoch in first_epoch..=looping.config.epochs {
            let from = started.from.as_ref().filter(|p| p.epoch == epoch);
            let driver = &mut started.driver;
            let Some(trained) = looping.train_epoch(driver, self.ranks.as_mut(), epoch, from)?
            else {
                break;
            };
            looping.end_epoch(epoch, trained, valid.as_deref(), self.ranks.as_mut())?;
        }
        looping.finish()
    }
}

impl<M: Module + Clone + 'static> Loop<'_, M> {
    /// Takes a checkpoint at `position` if `when` calls for one in this run. Across ranks every
    /// rank comes here at the same optimizer step, having seen the same rounds (the driver
    /// hands back the rounds of a rank whose shard is done, and a stop ends the epoch on every
    /// rank at the round that carried it), so each decides alike; `position` is this rank's
    /// own (its steps and totals), which its part keeps.
    pub(super) fn maybe_checkpoint(
        &mut self,
        when: When,
        position: &Position,
        ranks: Option<&mut Ranks>,
    ) -> Result<(), TrainError> {
        if !self.checkpoint_due(when) {
            return Ok(());
        }
        if let Some(lock) = self.lock.as_mut() {
            lock.check().map_err(CheckpointError::from)?;
        }
        let mut ranks = ranks;
        if let Some(ranks) = ranks.as_deref_mut()
            && !self.every_rank_ready(position, ranks)?
        {
            return Ok(());
        }
        if self.lead {
            self.save(position)?;
        }
        // A stopped job's ranks exit next, and under mpirun the first to exit (with 143) ends
        // the others: none leaves before rank 0's checkpoint is on the disk.
        if let Some(ranks) = ranks
            && when == When::Stopped
        {
            self.after_the_checkpoint(position, ranks)?;
        }
        Ok(())
    }

    /// Rank 0's checkpoint, the whole job's where every other rank's part is written.
    fn save(&mut self, position: &Position) -> Result<(), TrainError> {
        let Some(checkpointer) = self.checkpointer.as_mut() else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let saved = checkpointer.save(
            position,
            self.state.report.steps,
            self.stepper.updates,
            self.state,
            &self.identity,
            (
                &self.stepper.model,
                &*self.stepper.optimizer,
                &*self.stepper.scheduler,
            ),
            self.log_place.as_ref().zip(self.summary.as_deref_mut()),
            self.faults,
        );
        checkpointer.stalled += started.elapsed();
        saved
    }

    /// One round every rank joins once rank 0's checkpoint is written (rank 0 failing to
    /// write it announces the failure there instead, as [`Trainer::fit`] does with any error).
    fn after_the_checkpoint(
        &mut self,
        position: &Position,
        ranks: &mut Ranks,
    ) -> Result<(), TrainError> {
        let failed = |source| TrainError::Ranks {
            epoch: position.epoch,
            step: 0,
            source,
        };
        if self.lead
            && let Some(checkpointer) = self.checkpointer.as_mut()
        {
            checkpointer.wait()?;
        }
        let mut nothing = ember_pool::step::burn::GradientWindow::new(self.config.reduction);
        let state = RoundState {
            done: true,
            stop: true,
        };
        ranks
            .round(
                std::slice::from_mut(&mut nothing),
                &self.stepper.model,
                state,
                false,
            )
            .map_err(failed)?;
        Ok(())
    }

    /// A job's part of a checkpoint: every rank's part first; then one round without gradients,
    /// which every rank joins only once its part is on the disk (a rank that failed to write
    /// announces its failure in that round instead), saying whether it wrote one. Whether every
    /// rank did, and so rank 0 may write the checkpoint, which names the job's position.
    fn every_rank_ready(
        &mut self,
        position: &Position,
        ranks: &mut Ranks,
    ) -> Result<bool, TrainError> {
        let Some(checkpointer) = self.checkpointer.as_mut() else {
            return Ok(false);
        };
        let mut written = true;
        if !self.lead {
            let started = std::time::Instant::now();
            written = checkpointer.save_part(
                ranks.rank(),
                position,
                (self.state.report.steps, self.stepper.updates),
                (&self.stepper.model, &*self.stepper.optimizer),
                self.log_place.as_ref().zip(self.summary.as_deref_mut()),
                self.faults,
            )?;
            checkpointer.stalled += started.elapsed();
        }
        let mut nothing = ember_pool::step::burn::GradientWindow::new(self.config.reduction);
        let state = RoundState {
            done: written,
            stop: false,
        };
        let round = ranks
            .round(
                std::slice::from_mut(&mut nothing),
                &self.stepper.model,
                state,
                false,
            )
            .map_err(|source| TrainError::Ranks {
                epoch: position.epoch,
                step: 0,
                source,
            })?;
        // A rank that wrote its part, or passed it over, has spent the number already.
        if !round.all_done && self.lead {
            log::warn!(
                "no checkpoint at step {}: a rank's log was not in its store yet; a resume goes \
                 on from the one before",
                self.state.report.steps
            );
            checkpointer.pass_over(self.stepper.updates, position.epoch_done);
        }
        Ok(round.all_done)
    }

    /// Whether `when` calls for a checkpoint in this run now.
    pub(super) fn checkpoint_due(&self, when: When) -> bool {
        self.checkpointer
            .as_ref()
            .is_some_and(|checkpointer| match when {
                When::Stopped => true,
                When::Updated => checkpointer.due(self.stepper.updates),
                When::EpochEnd => true,
            })
    }

    /// Whether the caller's stop flag is raised.
    pub(super) fn stop_requested(&self) -> bool {
        self.stop.is_some_and(|flag| flag.load(Ordering::Acquire))
    }

    /// The last phase: waits for the checkpoint still being written and hands the model back,
    /// with the checkpoint directory's lock (for the caller to hold until it has saved it).
    fn finish(mut self) -> Result<(M, Option<DirLock>), TrainError> {
        if let Some(checkpointer) = self.checkpointer.as_mut() {
            let started = std::time::Instant::now();
            checkpointer.wait()?;
            let report = &mut self.state.report;
            report.checkpoints_written = checkpointer.written;
            report.checkpoints_failed = checkpointer.failed;
            report.checkpoint_stall = checkpointer.stalled;
            report.checkpoint_queue_wait = checkpointer.queue_wait;
            report.checkpoint_end_wait = started.elapsed();
        }
        Ok((self.stepper.model, self.lock))
    }
}
