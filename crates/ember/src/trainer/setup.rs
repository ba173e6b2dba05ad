//! How a [`Trainer`] is set up: its devices, optimizer and scheduler, and what it is given
//! before `fit`: hyper-parameters, hooks, a communicator, a stop flag, a checkpoint to resume.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use burn::optim::ModuleOptimizer;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::tensor::Device;
use ember_write::pack::HParams;

use crate::collective::{Communicator, Ranks};
use crate::{SummaryError, SummaryRecord};

use super::Trainable;
use super::Trainer;
use super::config::TrainerConfig;
use super::optimizer_shards::OptimizerShards;
use super::report::{EpochReport, StepReport};
use crate::run::{Begin, Run};

impl<M: Trainable> Trainer<M> {
    /// A trainer on `devices` (the first is the main device) with `optimizer` and a learning-rate
    /// `scheduler`, taken as Burn's own `Learner::new` takes it: a plain `f64` (a constant
    /// rate), any `LrScheduler`, or what a scheduler config's `init()` returns.
    pub fn new(
        devices: Vec<Device>,
        optimizer: ModuleOptimizer,
        scheduler: impl Into<ModuleLrScheduler>,
        config: TrainerConfig,
    ) -> Self {
        // One optimizer shard per device: on the CPU a thread each, where the optimizer step
        // was the largest serial part of a step; on distinct devices (wgpu) a device each,
        // stepped from this thread, since shards stepped on other threads left NaN parameters
        // on wgpu (the distinct-device suite).
        let optimizer = if devices.iter().all(|device| *device == Device::flex()) {
            OptimizerShards::new(optimizer, devices.len())
        } else {
            let mut distinct: Vec<Device> = Vec::new();
            for device in &devices {
                if !distinct.contains(device) {
                    distinct.push(device.clone());
                }
            }
            OptimizerShards::on_devices(optimizer, distinct)
        };
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
            begin: None,
            run: None,
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
    /// trained so far, the epoch's figures, the step the epoch's summaries were recorded at and the
    /// summary record (when [`fit`](Self::fit) was given one): for per-epoch summaries of the
    /// caller's own, such as sample predictions. An error from the hook is a summary error: it
    /// stops training when the record's policy is [`ErrorPolicy::Raise`](crate::ErrorPolicy::Raise)
    /// or when `fit` was given no record, and is logged and counted otherwise.
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
    /// [`SessionStatus::Failure`](crate::pack::SessionStatus::Failure), with the final metrics
    /// known so far. [`fit`](Self::fit) returns the model as trained so far and a report with
    /// [`interrupted`](crate::TrainReport::interrupted) set.
    pub fn stop_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Goes on from the newest whole checkpoint in `dir` (see
    /// [`CheckpointConfig`](crate::CheckpointConfig)) instead of starting afresh: the model `fit`
    /// is given takes the checkpoint's parameters, the optimizer and scheduler their state, and
    /// training goes on from the checkpoint's step, mid-epoch included (the epoch's batches trained
    /// on before it are drawn and dropped). With the same data, seed, devices and configuration,
    /// the run ends with the parameters an uninterrupted run would have, bit for bit on a
    /// deterministic backend.
    ///
    /// The summary log given to `fit` is first rolled back to the checkpoint: every file of the log
    /// is cut back to its length then, and files made since are removed, so every reader shows each
    /// step once. Newer checkpoints that are torn or damaged are passed over (logged, and listed in
    /// [`TrainReport::checkpoints_skipped`](crate::TrainReport::checkpoints_skipped)).
    ///
    /// `fit` refuses, before it changes anything, with
    /// [`TrainError::Checkpoint`](crate::TrainError::Checkpoint): when `dir` is missing or holds
    /// no whole checkpoint of this job
    /// ([`CheckpointError::NothingToResume`](crate::checkpoint::CheckpointError::NothingToResume),
    /// naming each file passed over and why), and when the checkpoint was taken with another
    /// accumulation, reduction or model, on more ranks than the job began with or a count that
    /// does not divide them, or on a device count that neither divides the run's nor is a
    /// multiple of it that divides its gradient accumulation
    /// ([`CheckpointError::Mismatch`](crate::checkpoint::CheckpointError::Mismatch)). Starting
    /// such a run over is [`restart`](Self::restart), asked for by name.
    ///
    /// On fewer devices or ranks that divide the ones it began with, the run goes on with the
    /// same data split and global batch: each device runs several of a step's slices, each rank
    /// the slices of the ranks it stands for, and the optimizer's state is regrouped by
    /// parameter. On `k` times the devices, where `k` divides the gradient accumulation, each
    /// slice's devices run `k` consecutive steps of a window at once (devices that are one
    /// memory, as CPU devices are: a slice's batches are drawn on its first). Bit for bit on
    /// one process, within float rounding across ranks (a step's gradients are summed in
    /// another order). See docs/resuming.md.
    pub fn resume_from(mut self, dir: impl Into<PathBuf>) -> Self {
        self.begin = Some((Begin::Resume, dir.into()));
        self
    }

    /// Starts the run whose checkpoints are in `dir` again from its first step: its checkpoints
    /// there are removed and the summary log given to `fit` loses every file this process's
    /// writers made in it before (files of other ranks and the user's own are left), so that
    /// readers show the new run's steps once. For a run stopped before its first checkpoint,
    /// which [`resume_from`](Self::resume_from) refuses.
    pub fn restart(mut self, dir: impl Into<PathBuf>) -> Self {
        self.begin = Some((Begin::Restart, dir.into()));
        self
    }

    /// Trains in `run`, opened by the caller ([`Run::builder`]): begun as it was admitted
    /// (fresh, resumed from the checkpoint it read, or restarted), its checkpoints in its
    /// directory ([`CheckpointConfig::dir`](crate::CheckpointConfig::dir) must name the same one,
    /// or be left to it). `fit_holding_run` hands it back.
    pub fn in_run(mut self, run: Run) -> Self {
        self.run = Some(run);
        self
    }

    /// One call for a run's first start and every start after it, as a scheduler that stops
    /// and starts the same job again needs (`dir` is the run's configured
    /// [`CheckpointConfig::dir`](crate::CheckpointConfig::dir)): where `dir` holds no
    /// checkpoint the run starts fresh, where it holds a whole one the run goes on from
    /// the newest as [`resume_from`](Self::resume_from) does, and where it holds checkpoint
    /// files but none whole (stopped while writing its first) it is restarted as
    /// [`restart`](Self::restart) does. A run that has finished goes on from its last
    /// epoch's checkpoint and so trains nothing more: `fit` hands back its model.
    ///
    /// Another run's checkpoint is refused as `resume_from` refuses it (another model,
    /// accumulation or reduction, more ranks, devices that cannot keep the global batch:
    /// [`CheckpointError::Mismatch`](crate::checkpoint::CheckpointError::Mismatch)), and so is
    /// a directory another process holds.
    pub fn resume_if_any(mut self, dir: impl Into<PathBuf>) -> Self {
        self.begin = Some((Begin::ResumeIfAny, dir.into()));
        self
    }
}
