//! The [`Trainer`](crate::Trainer)'s checkpoints: what a run's position is made of, writing it without holding the
//! training loop up longer than taking it needs, and starting again from one.
//!
//! A checkpoint is taken only where the gradient-accumulation window is empty (right after an
//! optimizer step, or at an epoch's end), so no gradient is ever part of one. The data order
//! is Burn's loader's: each epoch's shuffle advances the loader's generator once, and its
//! state cannot be read out, so a checkpoint keeps how many epochs the loaders have begun and a
//! resumed run begins (and drops) as many on its fresh loaders before it goes on, which leaves
//! their generators where the killed run's were; the batches the resumed epoch had already
//! trained on are then drawn and dropped without training.

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::tensor::Bytes;
use ember_write::durable;

use super::{CheckpointConfig, OptimizerShards, RunState, TrainError};
use crate::SummaryRecord;
use crate::checkpoint::log_place::LogPlace;
use crate::checkpoint::{Checkpoint, CheckpointError, Checkpoints, no_room};
use crate::faults::SummaryFaults;

mod load;
mod log_at;
mod meta;
mod position;
mod regroup;
mod sections;
mod writers;

use load::carried_log;
pub(crate) use load::{load, snapshot_of};
use log_at::{Taken, flushed_snapshot};
use meta::{encode_meta, encode_part_meta, with_lost_records};
pub(crate) use position::{EpochTotals, Identity, Position};
use sections::{encode_ids, param_ids, with_optimizer};
use writers::{Pending, Writers, Written};

/// Writes a run's checkpoints: the state is taken on the training thread (it must be this
/// step's), the file written, fsynced and renamed on a checkpoint thread, so that training
/// goes on while the disk or the store works; up to [`IN_FLIGHT`] at a time, the next waiting
/// for the oldest beyond that.
pub(crate) struct Checkpointer {
    store: Checkpoints,
    /// What the local checkpoint directory was when the run began writing to it: a write finds
    /// it replaced (deleted and made again) and fails rather than put a checkpoint there.
    dir_identity: Option<(u64, u64)>,
    every: Option<usize>,
    next_seq: u64,
    /// The checkpoint threads, and the checkpoints handed to them, oldest first.
    writers: Writers,
    in_flight: std::collections::VecDeque<Pending>,
    /// The job's optimizer step and epoch state of the last checkpoint taken, not to take it
    /// twice.
    last: Option<(usize, bool)>,
    /// The log snapshots of ranks this job lacks, which each checkpoint carries on (see
    /// [`load`]).
    carried_logs: Vec<(String, Vec<u8>)>,
    pub(crate) written: usize,
    /// Checkpoints the disk had no room for (the run went on without them).
    pub(crate) failed: usize,
    /// How long taking checkpoints held the training thread up (see
    /// [`TrainReport::checkpoint_stall`](crate::TrainReport::checkpoint_stall)).
    pub(crate) stalled: std::time::Duration,
    /// Of `stalled`, how long waiting for older checkpoints took.
    pub(crate) queue_wait: std::time::Duration,
}

impl Checkpointer {
    /// The checkpoints of `config`, written into `store` (the run's checkpoint directory), each carrying on `carried_logs`, the log snapshots of the
    /// ranks this job lacks: (rank, snapshot), as a resume read them.
    pub(crate) fn new(
        config: &CheckpointConfig,
        store: Checkpoints,
        carried_logs: &[(usize, String)],
    ) -> Result<Self, CheckpointError> {
        store.clean()?;
        Ok(Self {
            next_seq: store.next_seq()?,
            dir_identity: durable::identity(&config.dir),
            store,
            every: config.every.filter(|n| *n > 0),
            writers: Writers::default(),
            in_flight: std::collections::VecDeque::new(),
            last: None,
            carried_logs: carried_logs
                .iter()
                .map(|(rank, text)| (carried_log(*rank), text.clone().into_bytes()))
                .collect(),
            written: 0,
            failed: 0,
            stalled: std::time::Duration::ZERO,
            queue_wait: std::time::Duration::ZERO,
        })
    }

    /// Whether a checkpoint is due after optimizer step `updates`.
    pub(crate) fn due(&self, updates: usize) -> bool {
        self.every
            .is_some_and(|every| updates.is_multiple_of(every))
    }

    /// Takes a checkpoint of the run at `position`: the log flushed and snapshot (when there
    /// is one), the model, optimizer and scheduler turned into bytes, then the file written
    /// on the checkpoint thread.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn save<M: Module + 'static>(
        &mut self,
        position: &Position,
        steps: usize,
        optimizer_steps: usize,
        state: &RunState,
        identity: &Identity,
        parts: (&M, &OptimizerShards, &ModuleLrScheduler),
        log: Option<(&LogPlace, &mut SummaryRecord)>,
        faults: &mut SummaryFaults,
    ) -> Result<(), TrainError> {
        if self.last == Some((optimizer_steps, position.epoch_done)) {
            return Ok(());
        }
        self.make_room()?;
        let log_at = match log.map(|log| flushed_snapshot(log, faults)).transpose()? {
            Some(Taken::At(at)) => Some(*at),
            Some(Taken::Skipped) => {
                self.pass_over(optimizer_steps, position.epoch_done);
                return Ok(());
            }
            None => None,
        };
        // The state as it is at this step, taken as Burn shares it (its tensors' storage, one
        // count more each), not copied: reading it out of Burn (`into_record`, a copy of every
        // tensor's bytes) and into bytes is the checkpoint thread's. The steps after this one
        // cannot change what it reads: a backend writes in place only into storage nothing
        // else holds, and makes new storage otherwise.
        let (model, optimizer, scheduler) = parts;
        let model = model.clone();
        let optimizer: Vec<ModuleOptimizer> = optimizer.shards().to_vec();
        let scheduler = scheduler.to_record();
        let meta = encode_meta(position, steps, optimizer_steps, state, identity);
        let stamp = job_stamp(optimizer_steps, position.epoch_done);
        let carried_logs = self.carried_logs.clone();
        let build = move || -> Result<Checkpoint, CheckpointError> {
            // The log's records the snapshot counts reach the disk, or the store, before the
            // checkpoint that relies on them does.
            let (log, lost_from) = match log_at {
                Some(at) => {
                    let (snapshot, lost_from) = at.settled()?;
                    (snapshot.encode(), lost_from)
                }
                None => (String::new(), None),
            };
            let meta = with_lost_records(meta, lost_from, steps);
            let record_err = |what| {
                move |e: burn::store::RecordError| CheckpointError::Record {
                    what,
                    reason: e.to_string(),
                }
            };
            let bytes = |b: Bytes| b.try_into_vec::<u8>().unwrap_or_else(|b| b.to_vec());
            let model = model.into_record();
            let optimizer = optimizer.iter().map(ModuleOptimizer::to_record).collect();
            let mut checkpoint = Checkpoint::new()
                .with("meta", meta.into_bytes())
                .with(JOB_STAMP, stamp)
                .with(
                    "model",
                    bytes(model.into_bytes().map_err(record_err("save the model"))?),
                );
            checkpoint = with_optimizer(checkpoint, optimizer)?;
            checkpoint = with_carried(checkpoint, carried_logs);
            Ok(checkpoint
                .with(
                    "scheduler",
                    bytes(
                        scheduler
                            .into_bytes()
                            .map_err(record_err("save the scheduler state"))?,
                    ),
                )
                .with("log", log.into_bytes()))
        };
        self.last = Some((optimizer_steps, position.epoch_done));
        self.write_in_background(build)
    }

    /// Hands the next checkpoint to the checkpoint threads: `build` makes it, then it is
    /// written, unless the directory was replaced since the run began writing there.
    fn write_in_background(
        &mut self,
        build: impl FnOnce() -> Result<Checkpoint, CheckpointError> + Send + 'static,
    ) -> Result<(), TrainError> {
        let store = self.store.clone();
        let seq = self.next_seq;
        self.next_seq += 1;
        let dir_identity = self.dir_identity;
        let writing = self
            .writers
            .start(IN_FLIGHT, move || {
                let checkpoint = build()?;
                same_directory(&store, dir_identity)?;
                store.write(seq, &checkpoint)
            })
            .map_err(|source| CheckpointError::Io {
                op: "start the checkpoint thread for",
                path: self.store.dir().to_path_buf(),
                source,
            })?;
        self.in_flight.push_back(writing);
        Ok(())
    }

    /// Writes this rank's part of the job's next checkpoint (a rank other than 0, in a job of
    /// several): what rank 0's checkpoint cannot hold, its own log's snapshot and the state of
    /// the optimizer for the parameters this rank steps, with the parameter ids that state is
    /// keyed by, and its own place in the epoch (its steps and totals: a rank whose shard is
    /// done has taken fewer steps than the others). Written in line and durably: rank 0
    /// writes the checkpoint only once every rank's part is there. Whether the part was
    /// written: a bucket that has not taken the rank's log yet passes it over, and then every
    /// rank passes the checkpoint over.
    pub(crate) fn save_part<M: Module>(
        &mut self,
        rank: usize,
        position: &Position,
        (steps, optimizer_steps): (usize, usize),
        (model, optimizer): (&M, &OptimizerShards),
        log: Option<(&LogPlace, &mut SummaryRecord)>,
        faults: &mut SummaryFaults,
    ) -> Result<bool, TrainError> {
        let epoch_done = position.epoch_done;
        if self.last == Some((optimizer_steps, epoch_done)) {
            return Ok(true);
        }
        let snapshot = match log.map(|log| flushed_snapshot(log, faults)).transpose()? {
            Some(Taken::At(at)) => match (at.remote(), (*at).settled()) {
                (_, Ok((snapshot, _))) => snapshot.encode(),
                (true, Err(error)) => {
                    log::warn!("skipping a checkpoint: {error}");
                    self.pass_over(optimizer_steps, epoch_done);
                    return Ok(false);
                }
                (false, Err(error)) => return Err(error.into()),
            },
            Some(Taken::Skipped) => {
                self.pass_over(optimizer_steps, epoch_done);
                return Ok(false);
            }
            None => String::new(),
        };
        let part = Checkpoint::new()
            .with("meta", encode_part_meta(rank, steps, position).into_bytes())
            .with(JOB_STAMP, job_stamp(optimizer_steps, epoch_done))
            .with("log", snapshot.into_bytes())
            .with("ids", encode_ids(&param_ids(model)).into_bytes());
        let optimizer: Vec<_> = optimizer
            .shards()
            .iter()
            .map(ModuleOptimizer::to_record)
            .collect();
        let part = with_optimizer(part, optimizer)?;
        self.store.write_part(self.next_seq, rank, &part)?;
        self.next_seq += 1;
        self.last = Some((optimizer_steps, epoch_done));
        self.written += 1;
        Ok(true)
    }

    /// Passes the job's checkpoint at optimizer step `optimizer_steps` over on this rank: its number is spent all the
    /// same, and it is not tried again at that step, as on every other rank, so that every
    /// rank's next part and rank 0's next checkpoint share one number whichever rank passed
    /// this one over (parts of different steps never make one checkpoint).
    pub(crate) fn pass_over(&mut self, optimizer_steps: usize, epoch_done: bool) {
        self.next_seq += 1;
        self.last = Some((optimizer_steps, epoch_done));
    }

    /// Waits for every checkpoint being written; see [`finished`](Self::finished) for what
    /// a failed one does.
    pub(crate) fn wait(&mut self) -> Result<(), TrainError> {
        while let Some(pending) = self.in_flight.pop_front() {
            self.finished(pending.wait())?;
        }
        Ok(())
    }

    /// Collects the checkpoints written meanwhile, and waits for the oldest while
    /// [`IN_FLIGHT`] are being written: a store slower than the checkpoints come holds
    /// training up only once that many are queued (each holds a snapshot of the model and
    /// optimizer, which Burn copies once training writes over it).
    fn make_room(&mut self) -> Result<(), TrainError> {
        while let Some(oldest) = self.in_flight.pop_front() {
            let written = match oldest.done() {
                Some(written) => written,
                None if self.in_flight.len() + 1 >= IN_FLIGHT => {
                    let waiting = std::time::Instant::now();
                    let written = oldest.wait();
                    self.queue_wait += waiting.elapsed();
                    written
                }
                None => {
                    self.in_flight.push_front(oldest);
                    break;
                }
            };
            self.finished(written)?;
        }
        Ok(())
    }

    /// The result of a checkpoint's thread. A checkpoint a bucket did not take (the store is
    /// down), or a full disk had no room for, is logged and passed over: the run goes on (its
    /// model is worth more than the checkpoint), and the next checkpoint is tried as usual; the
    /// one before it stays the newest whole one. Any other failure ends the run.
    fn finished(&mut self, written: Written) -> Result<(), TrainError> {
        match written {
            Ok(_) => self.written += 1,
            Err(error) if self.store.is_remote() && !error.claim_lost() => {
                log::warn!("a checkpoint was not written ({error}); training goes on");
            }
            Err(error) if no_room(&error) => {
                self.failed += 1;
                // The first says it; the disk stays full for the ones after, as a rule.
                if self.failed == 1 {
                    log::error!(
                        "a checkpoint was not written ({error}); training goes on, and a \
                             resume goes on from the last one written until there is room"
                    );
                } else {
                    log::debug!("a checkpoint was not written: {error}");
                }
            }
            Err(error) => return Err(error.into()),
        }
        Ok(())
    }
}

/// How many checkpoints may be written at once: two lets the next be taken while the store
/// still takes the last (a bucket's round trips can outlast the steps between them) without
/// holding training up.
const IN_FLIGHT: usize = 2;

/// The section every rank's part and rank 0's checkpoint carry alike: the job's optimizer
/// step (the same on every rank, whose pool steps differ once a shard is done), which
/// [`Checkpoints`] compares before it counts a checkpoint whole.
const JOB_STAMP: &str = crate::checkpoint::JOB_STAMP;

fn job_stamp(optimizer_steps: usize, epoch_done: bool) -> Vec<u8> {
    format!("optimizer_steps={optimizer_steps} epoch_done={epoch_done}").into_bytes()
}

/// `checkpoint` with the log snapshots it carries on for ranks the job lacks.
fn with_carried(checkpoint: Checkpoint, carried_logs: Vec<(String, Vec<u8>)>) -> Checkpoint {
    carried_logs
        .into_iter()
        .fold(checkpoint, |checkpoint, (name, log)| {
            checkpoint.with(&name, log)
        })
}

impl Drop for Checkpointer {
    /// A run that ends in an error (a failed step, a poisoned loader) still finishes the
    /// checkpoint it had begun: the file is whole or absent either way, and a resume that comes
    /// at once, in this process or the next, must find it.
    fn drop(&mut self) {
        if let Err(error) = self.wait() {
            log::warn!("the last checkpoint was not written: {error}");
        }
    }
}

/// Fails with [`LockError::Lost`](ember_write::LockError::Lost) when the local directory of
/// `store` is no longer the one that was `identity` (the training thread checks its lock before
/// each checkpoint; this closes most of the time the write takes after that check).
fn same_directory(
    store: &Checkpoints,
    identity: Option<(u64, u64)>,
) -> Result<(), CheckpointError> {
    match identity {
        Some(identity) if durable::identity(store.dir()) != Some(identity) => {
            Err(ember_write::LockError::Lost {
                dir: store.dir().to_path_buf(),
                why: "the directory was deleted, replaced or moved".into(),
            }
            .into())
        }
        _ => Ok(()),
    }
}

/// Warns of each gap a resumed run found in its log (records lost while training went on,
/// before the checkpoint it went on from: a resume cannot write them again), and notes it in the
/// log at its first step under [`LOG_GAP_TAG`](crate::LOG_GAP_TAG), once: the checkpoints after
/// this point count it noted.
pub(crate) fn note_log_gaps(
    state: &mut RunState,
    summary: &mut SummaryRecord,
    faults: &mut SummaryFaults,
) -> Result<(), TrainError> {
    for gap in std::mem::take(&mut state.unnoted_log_gaps) {
        let (from, to) = (gap.from, gap.to);
        log::warn!(
            "the log under {} lacks records of steps {from}..={to}: they were lost (a full disk, \
             a failed writer) while training went on, and this resume goes on from the \
             checkpoint at step {to}, so they cannot be written again",
            summary.log_dir().display()
        );
        let note = format!(
            "steps {from}..={to} lack records in this log: they were lost (a full disk, a failed \
             writer) while training went on, before the checkpoint at step {to} a resume went on \
             from"
        );
        faults.check(summary.add_text(crate::LOG_GAP_TAG, &note, from))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
