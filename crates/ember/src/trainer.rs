//! `Trainer`: data-parallel epochs over a Burn model on ember's pool, with summaries.
//!
//! This file holds the [`Trainer`] and `fit`. `setup.rs` sets a trainer up; `config.rs` holds
//! its configurations and hooks. The loop runs in phases: `run.rs` (the phases in order, and
//! every checkpoint through one `maybe_checkpoint`), `start.rs` (start, resume or restart),
//! `epoch.rs` (an epoch's steps and its end), `steps.rs` (what the loop does around one step).
//! `item.rs` is what it reads from a step's output, `report.rs` and `error.rs` what it gives
//! back, `run_state.rs` what a run knows and `lineage.rs` MindSpore's lineage of it. Its
//! checkpoints, and resuming from one, are `checkpointing.rs`'s, over [`crate::checkpoint`]'s mechanics.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use burn::data::dataloader::DataLoader;
use burn::module::{Module, ModuleDisplay};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::tensor::Device;
use burn::train::{InferenceStep, TrainStep};
use ember_write::ErrorPolicy;
use ember_write::pack::{Format, HParams, SessionStatus};

use crate::collective::Ranks;
use crate::faults::SummaryFaults;
use crate::run::{Begin, Run};
use crate::{SummaryError, SummaryRecord};

#[cfg(test)]
mod attack_tests;
#[cfg(all(test, feature = "object-store"))]
mod bucket_tests;
mod checkpointing;
mod config;
mod epoch;
mod error;
mod item;
mod lineage;
#[cfg(test)]
mod live_reader_tests;
mod optimizer_shards;
mod report;
mod run;
mod run_state;
mod setup;
mod start;
mod steps;
mod system;
#[cfg(test)]
mod tests;

pub use config::{CheckpointConfig, TrainerConfig};
use config::{EpochHook, StepHook, UpdateHook};
pub use error::TrainError;
pub use item::TrainingItem;
use lineage::{eval_lineage, train_lineage};
pub(crate) use optimizer_shards::OptimizerShards;
pub use report::{EpochReport, LOG_GAP_TAG, LogGap, Recovery, StepReport, TrainReport};
pub(crate) use run_state::RunState;

/// What the [`Trainer`] trains: a burn-train model that steps on batches of its input and
/// validates on the same input, whose outputs the Trainer reads losses (and accuracies) from.
/// Every model that meets these bounds has it; it names them once, for every phase of the loop.
pub trait Trainable:
    TrainStep<Input: Send + 'static, Output: TrainingItem + Send + 'static>
    + InferenceStep<Input = <Self as TrainStep>::Input, Output: TrainingItem>
    + Module
    + ModuleDisplay
    + Display
    + 'static
{
}

impl<M> Trainable for M where
    M: TrainStep<Input: Send + 'static, Output: TrainingItem + Send + 'static>
        + InferenceStep<Input = <M as TrainStep>::Input, Output: TrainingItem>
        + Module
        + ModuleDisplay
        + Display
        + 'static
{
}

/// What a [`Trainable`] model's training step gives back.
pub(crate) type TrainItem<M> = <M as TrainStep>::Output;

/// What a [`Trainable`] model's validation step gives back.
pub(crate) type ValidItem<M> = <M as InferenceStep>::Output;

/// Data-parallel training over a Burn model on ember's device pool.
///
/// Each epoch splits the training loader into one contiguous slice per device; every pool step
/// runs one batch per device, brings each device's gradients to the main device (the first)
/// and reduces them by [`TrainerConfig::reduction`], in device order. Every
/// `grad_accumulation` steps the scheduler gives the learning rate and the optimizer steps. Its
/// step is split between the devices for models of 2^18 parameter elements or more, each
/// device stepping whole parameters, balanced by element count: on the CPU one thread each; on
/// distinct devices (wgpu, CUDA) each device sums the gradients of its share and steps them
/// itself, as burn-train's `OptimSharded` does, and the stepped parameters come back to the
/// main device. After each epoch a validation pass runs on the main device.
///
/// **Summary errors.** A failing summary call (a rejected value, a full writer queue, a closed
/// record) ends training only when the record's [`error_policy`](SummaryRecord::error_policy) is
/// [`ErrorPolicy::Raise`](crate::ErrorPolicy::Raise); under the default, [`ErrorPolicy::Log`], the
/// first error of each kind is logged, every one is counted in [`TrainReport::summary_errors`], and
/// training goes on, so a full log disk costs the logs, not the run.
///
/// **The record is the caller's.** `fit` only borrows the [`SummaryRecord`]: it flushes it when
/// the run ends, however it ends, and never closes it.
///
/// **Across processes and hosts.** Given a [`Communicator`](crate::Communicator)
/// ([`communicator`](Self::communicator): `MpiComm` under `mpirun`, or
/// [`LocalGroup`](crate::LocalGroup)'s threads), the run is one rank of a job: parameters start as
/// rank 0's; each rank trains on its own contiguous shard of the training loader, split again
/// between its devices; each accumulation window's gradients, reduced on the rank's main device,
/// are then summed over every rank in one round (and for
/// [`Reduction::Mean`](crate::Reduction::Mean) divided by the number of gradient sets of all
/// ranks); each rank then steps the parameters it owns (whole parameters, balanced by element
/// count: ZeRO-1, each rank holding that part of the optimizer's state alone) and the ranks
/// gather each other's, so parameters stay identical. Rank 0 records
/// the run's summaries (losses, hyper-parameters, graph, epochs, lineage); every rank records its
/// own devices' step times as `rank/<r>/device/<d>/step_seconds`, so a [`SummaryRecord`] built with
/// [`rank`](crate::SummaryRecordBuilder::rank) writes them into its rank's file of the same run.
/// Each rank validates its own contiguous share of the validation loader, and the ranks' sums
/// (losses, batches, hits) are gathered and added up in rank order, so every rank reports the
/// same validation of the whole set while each batch runs once in the job. A shuffling loader
/// shuffles within each
/// slice (burn forks its generator per slice), so ranks see their shards in another order than one
/// process with as many devices would; unshuffled, they train alike. A failure on one rank ends
/// every rank: the failed one with its own error, the others with [`TrainError::Ranks`] (or,
/// in validation, [`TrainError::RanksValidating`]) naming it.
pub struct Trainer<M: TrainStep + Module> {
    devices: Vec<Device>,
    config: TrainerConfig,
    optimizer: OptimizerShards,
    scheduler: ModuleLrScheduler,
    hparams: HParams,
    on_step: Option<StepHook>,
    on_epoch: Option<EpochHook<M>>,
    on_update: Option<UpdateHook<M>>,
    stop: Option<Arc<AtomicBool>>,
    ranks: Option<Ranks>,
    /// How the run begins in a checkpoint directory it has written before
    /// ([`resume_from`](Self::resume_from), [`restart`](Self::restart),
    /// [`resume_if_any`](Self::resume_if_any)); settled when the run starts, once its ranks are
    /// known.
    begin: Option<(Begin, PathBuf)>,
    /// The run, opened by the caller ([`in_run`](Self::in_run)), or by `fit` from `begin` and
    /// the checkpoint directory.
    run: Option<Run>,
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

impl<M: Trainable> Trainer<M> {
    /// Trains `model`, recording into `summary` when given, and returns the trained model and
    /// a report. On a worker failure the error names every failed device; see [`TrainError`]
    /// for what the summaries hold then, and [`stop_when`](Self::stop_when) for a stopped run.
    pub fn fit(
        self,
        model: M,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
        valid: Option<Arc<dyn DataLoader<<M as TrainStep>::Input>>>,
        summary: Option<&mut SummaryRecord>,
    ) -> Result<(M, TrainReport), TrainError> {
        let (model, report, _run) = self.fit_holding_run(model, train, valid, summary)?;
        Ok((model, report))
    }

    /// [`fit`](Self::fit), handing back with the model the [`Run`] it trained (the caller's,
    /// or the one it opened on its checkpoint directory), still claimed: while it is held no
    /// other run can resume or restart in the directory, so the caller saves the model through
    /// it ([`Run::save_model`], which checks the claim first). `None` when the run had no
    /// checkpoint directory.
    pub fn fit_holding_run(
        mut self,
        model: M,
        train: Arc<dyn DataLoader<<M as TrainStep>::Input>>,
        valid: Option<Arc<dyn DataLoader<<M as TrainStep>::Input>>>,
        mut summary: Option<&mut SummaryRecord>,
    ) -> Result<(M, TrainReport, Option<Run>), TrainError> {
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
            Ok((model, run)) => {
                if let Some(summary) = summary {
                    let status = if state.report.interrupted {
                        SessionStatus::Failure
                    } else {
                        SessionStatus::Success
                    };
                    self.finish(summary, &state, status, &mut faults)?;
                }
                state.report.summary_errors = faults.count();
                Ok((model, state.report, run))
            }
            Err(error) => {
                if let Some(ranks) = self.ranks.as_mut()
                    && error.ranks_error().is_none()
                    && let Err(round_error) = ranks.announce_failure()
                {
                    log::error!("telling the other ranks that this one failed: {round_error}");
                }
                if let Some(summary) = summary
                    && state.began
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
        if self.lead() {
            // What follows an interrupted run's stop checkpoint, its resume rolls back from the
            // log: a tracker, which keeps every point it is sent, does not get it.
            summary.set_untracked(state.report.interrupted);
            let recorded = self.record_end(summary, state, status, faults);
            summary.set_untracked(false);
            recorded?;
        }
        faults.check(summary.flush())
    }

    /// [`finish`](Self::finish)'s records, rank 0's.
    fn record_end(
        &self,
        summary: &mut SummaryRecord,
        state: &RunState,
        status: SessionStatus,
        faults: &mut SummaryFaults,
    ) -> Result<(), SummaryError> {
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
        faults.check(summary.record(step))
    }

    /// Whether this run records the run's own summaries: the only run, or rank 0.
    fn lead(&self) -> bool {
        self.ranks.as_ref().is_none_or(|ranks| ranks.rank() == 0)
    }
}
