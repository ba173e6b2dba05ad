//! Starting again from a checkpoint: the newest whole one of the job chosen, and read into
//! this rank's model, optimizer, scheduler and place in the epoch, whatever ranks took it.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;

use super::meta::{Fields, decode_meta, decode_part_position};
use super::position::{EpochTotals, Identity, Position};
use super::sections::{SavedState, load_optimizer, record_err, section};
use crate::checkpoint::log_place::Snapshot;
use crate::checkpoint::{Checkpoint, CheckpointError, Loaded};
use crate::trainer::{OptimizerShards, RunState};

/// A resumed run's starting point, read from a checkpoint.
pub(crate) struct Resumed<M> {
    pub(crate) model: M,
    pub(crate) optimizer: OptimizerShards,
    pub(crate) scheduler: ModuleLrScheduler,
    pub(crate) position: Position,
    /// How many shards each of the data's rank shards is split into (the devices a rank
    /// started on).
    pub(crate) shards: usize,
    /// How many shards the data is cut into across ranks (the ranks the job started with).
    pub(crate) data_ranks: usize,
    /// The ranks of the job that took the checkpoint.
    pub(crate) taken_ranks: usize,
    /// The log snapshots rank 0 carries on for ranks this job lacks: (rank, snapshot).
    pub(crate) carried_logs: Vec<(usize, String)>,
    pub(crate) steps: usize,
    pub(crate) optimizer_steps: usize,
    pub(crate) state: RunState,
    pub(crate) path: PathBuf,
    pub(crate) seq: u64,
    /// How long choosing and reading the checkpoint took, and its state into Burn's.
    pub(crate) read: std::time::Duration,
    pub(crate) restore: std::time::Duration,
}

/// Reads `loaded`, the run's newest whole checkpoint as [`Run`](crate::run::Run) read it once,
/// into rank `rank` of a run of `identity` on `model`'s structure, with `optimizer` and
/// `scheduler` as configured; an error saying why it cannot go on from it. The log is not
/// touched here.
///
/// A job may go on with fewer ranks than took the checkpoint, where they divide the shards its
/// data was cut into (`data_ranks`): each rank then runs the shards of the ranks it stands for,
/// from the furthest of their places in the epoch, their epoch totals added up; and the state
/// of the optimizer, which each saving rank held for the parameters it stepped, is regrouped by
/// parameter ([`regroup`]). As many ranks as the data's shards again: each goes on with the
/// shards, and the place, of the rank it is, its epoch totals from then.
pub(crate) fn load<M: Module>(
    loaded: Loaded,
    identity: &Identity,
    rank: usize,
    model: M,
    optimizer: OptimizerShards,
    scheduler: ModuleLrScheduler,
) -> Result<(Resumed<M>, Loaded), CheckpointError> {
    let started = std::time::Instant::now();
    let path = loaded.path.clone();
    let bad_meta = |reason: String| CheckpointError::Section {
        path: path.clone(),
        section: "meta".into(),
        reason,
    };
    let meta = section(&loaded.checkpoint, &path, "meta")?;
    let fields = Fields::parse(std::str::from_utf8(meta).map_err(|e| bad_meta(e.to_string()))?);
    if let Some(reason) = identity.mismatch(&fields) {
        return Err(CheckpointError::Mismatch { path, reason });
    }
    let (position, steps, optimizer_steps, state) = decode_meta(&fields).map_err(bad_meta)?;
    let taken_ranks = fields.usize("ranks").unwrap_or(identity.ranks).max(1);
    let data_ranks = fields.usize("data_ranks").unwrap_or(taken_ranks).max(1);
    let bytes = |name: &str| {
        section(&loaded.checkpoint, &path, name).map(|b| Bytes::from_bytes_vec(b.to_vec()))
    };
    let record =
        ModuleRecord::from_bytes(bytes("model")?).map_err(record_err(&path, "its model"))?;
    let model = model
        .try_load_record(record)
        .map_err(record_err(&path, "its model does not fit this one"))?;
    let world = identity.ranks.max(1);
    let parts = parts_of(&loaded, (rank, world), taken_ranks)?;
    let (position, steps) = {
        let taken = (taken_ranks, data_ranks);
        place_of_rank(&parts, (position, steps), (rank, world), taken)?
    };
    let optimizer = load_optimizer(
        optimizer,
        &model,
        (rank, world),
        SavedState {
            checkpoint: (&loaded.checkpoint, &path),
            parts: &parts,
            ranks: taken_ranks,
        },
    )?;
    let scheduler = scheduler.load_record(
        LrSchedulerRecord::from_bytes(bytes("scheduler")?)
            .map_err(record_err(&path, "its scheduler state"))?,
    );
    // Rank 0 carries on the log snapshots of the ranks this job lacks, for a job of them to roll
    // their logs back to when it goes on.
    let carried_logs = (world..data_ranks)
        .filter(|_| rank == 0)
        .map(|absent| Ok((absent, snapshot_text(&loaded, absent, taken_ranks)?)))
        .collect::<Result<_, CheckpointError>>()?;
    let resumed = Resumed {
        model,
        optimizer,
        scheduler,
        position,
        shards: fields.usize("devices").unwrap_or(identity.devices),
        data_ranks,
        taken_ranks,
        carried_logs,
        steps,
        optimizer_steps,
        state,
        path: loaded.path.clone(),
        seq: loaded.seq,
        read: loaded.read,
        restore: started.elapsed(),
    };
    Ok((resumed, loaded))
}

/// The parts of checkpoint `loaded` (of a job of `taken` ranks) that rank `rank` of a job of
/// `world` reads: those of the saving ranks it stands for, and whose parameters it may step; its
/// own alone when the job has as many ranks as took the checkpoint.
fn parts_of(
    loaded: &Loaded,
    (rank, world): (usize, usize),
    taken: usize,
) -> Result<Vec<(usize, Checkpoint, PathBuf)>, CheckpointError> {
    (1..taken)
        .filter(|from| taken != world || *from == rank)
        .map(|from| {
            let path = loaded.part_path(from);
            let part = loaded
                .part(from)
                .cloned()
                .ok_or_else(|| CheckpointError::Damaged {
                    path: path.clone(),
                    reason: "not read with its checkpoint".into(),
                })?;
            Ok((from, part, path))
        })
        .collect()
}

/// Where rank `rank` of a job of `world` goes on from, given rank 0's place (`at`) and the
/// `parts` it read of a job of `taken` ranks, whose data was cut into `data_ranks` shards: the
/// furthest of the ranks whose shards it runs, and the totals of those whose first shard is its
/// own.
fn place_of_rank(
    parts: &[(usize, Checkpoint, PathBuf)],
    at: (Position, usize),
    (rank, world): (usize, usize),
    (taken, data_ranks): (usize, usize),
) -> Result<(Position, usize), CheckpointError> {
    let mut places = vec![(0, at.0.clone(), at.1)];
    for (from, part, part_path) in parts {
        // A part from before parts held a place was written at an epoch's end, where rank 0's
        // place is every rank's.
        let (place, steps) = part_place(part, part_path)?.unwrap_or_else(|| at.clone());
        places.push((*from, place, steps));
    }
    let shards_of = |rank: usize, ranks: usize| {
        let per = data_ranks / ranks.max(1);
        rank * per..(rank + 1) * per
    };
    let mine = shards_of(rank, world);
    let mut position: Option<Position> = None;
    let mut steps = 0;
    let mut totals = EpochTotals::default();
    for (from, place, place_steps) in &places {
        let theirs = shards_of(*from, taken);
        if theirs.end <= mine.start || mine.end <= theirs.start {
            continue;
        }
        steps = steps.max(*place_steps);
        if mine.contains(&theirs.start) {
            let t = &place.totals;
            totals.loss_sum += t.loss_sum;
            totals.loss_count += t.loss_count;
            totals.examples += t.examples;
            totals.correct += t.correct;
            totals.judged += t.judged;
        }
        position = Some(match position {
            Some(furthest) if furthest.step_in_epoch >= place.step_in_epoch => furthest,
            _ => place.clone(),
        });
    }
    let position = position.unwrap_or(at.0);
    Ok((Position { totals, ..position }, steps))
}

/// The place in the epoch a rank's part holds (`None` for a part from before parts held one).
fn part_place(
    part: &Checkpoint,
    path: &Path,
) -> Result<Option<(Position, usize)>, CheckpointError> {
    let bad = |reason: String| CheckpointError::Section {
        path: path.to_path_buf(),
        section: "meta".into(),
        reason,
    };
    let meta = std::str::from_utf8(section(part, path, "meta")?).map_err(|e| bad(e.to_string()))?;
    decode_part_position(&Fields::parse(meta)).map_err(bad)
}

/// The log snapshot of rank `rank` that a loaded checkpoint holds: rank 0's in the checkpoint,
/// another rank's in its part, or, where the job that took it had fewer ranks, as rank 0
/// carried it on.
pub(crate) fn snapshot_of(loaded: &Loaded, rank: usize) -> Result<Snapshot, CheckpointError> {
    let taken = loaded.meta().usize("ranks").unwrap_or(rank + 1);
    Snapshot::decode(&snapshot_text(loaded, rank, taken)?)
}

/// The text of rank `rank`'s log snapshot in a checkpoint taken by a job of `taken` ranks.
fn snapshot_text(loaded: &Loaded, rank: usize, taken: usize) -> Result<String, CheckpointError> {
    let (path, holder, name) = if rank == 0 {
        (loaded.path.clone(), &loaded.checkpoint, "log".to_owned())
    } else if rank < taken {
        let path = loaded.part_path(rank);
        let part = loaded.part(rank).ok_or_else(|| CheckpointError::Damaged {
            path: path.clone(),
            reason: "not read with its checkpoint".into(),
        })?;
        (path, part, "log".to_owned())
    } else {
        (loaded.path.clone(), &loaded.checkpoint, carried_log(rank))
    };
    // Without the section nothing tells which of the log's records came after the checkpoint:
    // refused, rather than taken for an empty log (which would remove every file of the run).
    let text = holder
        .section(&name)
        .ok_or_else(|| CheckpointError::Section {
            path: path.clone(),
            section: name.clone(),
            reason: "missing: nothing tells which of the log's records came after it".into(),
        })?;
    std::str::from_utf8(text)
        .map(str::to_owned)
        .map_err(|e| CheckpointError::Section {
            path,
            section: name,
            reason: e.to_string(),
        })
}

/// The section of rank 0's checkpoint that carries on rank `rank`'s log snapshot, in a job of
/// fewer ranks than its data's shards.
pub(super) fn carried_log(rank: usize) -> String {
    format!("log.rank{rank}")
}
