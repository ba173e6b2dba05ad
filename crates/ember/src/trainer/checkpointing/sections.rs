//! The sections of a checkpoint that hold Burn's state beside the meta: each optimizer shard's
//! record, and a rank's parameter ids, by which its optimizer state is keyed; and how they are
//! read back.

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::OptimizerRecord;
use burn::tensor::Tensor;

use super::regroup::{Saved, regroup};
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::collective::owners_by_elements;
use crate::trainer::OptimizerShards;

/// `checkpoint` with one section per optimizer shard's record.
pub(super) fn with_optimizer(
    mut checkpoint: Checkpoint,
    shards: Vec<OptimizerRecord>,
) -> Result<Checkpoint, CheckpointError> {
    for (shard, record) in shards.into_iter().enumerate() {
        let bytes = record.into_bytes().map_err(|e| CheckpointError::Record {
            what: "save the optimizer state",
            reason: e.to_string(),
        })?;
        checkpoint = checkpoint.with(
            &optimizer_section(shard),
            bytes.try_into_vec::<u8>().unwrap_or_else(|b| b.to_vec()),
        );
    }
    Ok(checkpoint)
}

/// Every float parameter's id, in visit order.
pub(super) fn param_ids<M: Module>(model: &M) -> Vec<u64> {
    struct Ids(Vec<u64>);
    impl ModuleVisitor for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.id.val());
        }
    }
    let mut ids = Ids(Vec::new());
    model.visit(&mut ids);
    ids.0
}

pub(super) fn encode_ids(ids: &[u64]) -> String {
    ids.iter().map(|id| format!("{id}\n")).collect()
}

pub(super) fn decode_ids(bytes: &[u8]) -> Option<Vec<u64>> {
    std::str::from_utf8(bytes)
        .ok()?
        .lines()
        .map(|line| line.parse().ok())
        .collect()
}

/// The checkpoint section of optimizer shard `shard`: `optimizer` for the first (and for a
/// single optimizer, as before shards), `optimizer.<shard>` for the others.
pub(super) fn optimizer_section(shard: usize) -> String {
    match shard {
        0 => "optimizer".to_owned(),
        shard => format!("optimizer.{shard}"),
    }
}

/// Where a checkpoint's optimizer state is: the job that saved it had `ranks` ranks, each of
/// which stepped the parameters [`owners_by_elements`] gave it; rank 0's records are in the
/// checkpoint, keyed by the ids of its model record, every other rank's in its part, with the
/// ids its records are keyed by.
pub(super) struct SavedState<'c> {
    pub(super) checkpoint: (&'c Checkpoint, &'c Path),
    /// Rank `r`'s part, for each `r` of `1..ranks` read.
    pub(super) parts: &'c [(usize, Checkpoint, PathBuf)],
    pub(super) ranks: usize,
}

/// This rank's optimizer shards (rank `rank` of a job of `world`) with the saved state of every
/// parameter it steps, whatever ranks and shards saved it (see [`regroup`]). `model` is the
/// model as loaded, whose ids the state is keyed by here.
pub(super) fn load_optimizer<M: Module>(
    mut optimizer: OptimizerShards,
    model: &M,
    (rank, world): (usize, usize),
    saved: SavedState<'_>,
) -> Result<OptimizerShards, CheckpointError> {
    let (ids, sizes) = params(model);
    let owners = |ranks: usize| match ranks {
        0 | 1 => vec![0; sizes.len()],
        ranks => owners_by_elements(&sizes, ranks),
    };
    let now = owners(world);
    let then = owners(saved.ranks);
    let shard = optimizer.shard_of_each(model);
    let shard_of = |place: usize| (now[place] == rank).then(|| shard[place]);
    let holders = holders(&saved, &ids, (&then, &now), rank)?;
    let stepped: Vec<Vec<bool>> = holders
        .iter()
        .map(|(_, _, _, from)| {
            (0..sizes.len())
                .map(|place| from.is_none_or(|from| then[place] == from))
                .collect()
        })
        .collect();
    let mut sources = Vec::new();
    for (file, (holder, _, holder_ids, _)) in holders.iter().enumerate() {
        for index in 0.. {
            let Some(bytes) = holder.section(&optimizer_section(index)) else {
                break;
            };
            sources.push(Saved {
                bytes,
                ids: holder_ids,
                stepped: &stepped[file],
                file,
            });
        }
    }
    let path = holders
        .first()
        .map_or(saved.checkpoint.1, |(_, path, _, _)| *path);
    let regrouped = regroup(&sources, &ids, &shard_of, optimizer.len()).map_err(|reason| {
        CheckpointError::Mismatch {
            path: path.to_path_buf(),
            reason,
        }
    })?;
    for (index, bytes) in regrouped.into_iter().enumerate() {
        let loaded = optimizer.shards()[index]
            .clone()
            .from_bytes(bytes)
            .map_err(record_err(path, "its optimizer state"))?;
        optimizer.set_shard(index, loaded);
    }
    Ok(optimizer)
}

/// What holds the state of the parameters this rank (`rank`, owning those `now` gives it)
/// steps: each saving rank's holder (its part, or rank 0's checkpoint) with the ids its records
/// are keyed by, and the saving rank (`None`: the checkpoint holds every parameter's state).
/// A part without optimizer state (a job whose ranks each stepped every parameter) leaves it
/// to the checkpoint.
#[allow(clippy::type_complexity)]
fn holders<'c>(
    saved: &SavedState<'c>,
    ids: &[u64],
    (then, now): (&[usize], &[usize]),
    rank: usize,
) -> Result<Vec<(&'c Checkpoint, &'c Path, Vec<u64>, Option<usize>)>, CheckpointError> {
    let (checkpoint, checkpoint_path) = saved.checkpoint;
    let mut holders = Vec::new();
    for from in 0..saved.ranks.max(1) {
        if !(0..ids.len()).any(|place| then[place] == from && now[place] == rank) {
            continue;
        }
        let part = saved
            .parts
            .iter()
            .find(|(r, part, _)| *r == from && part.section(&optimizer_section(0)).is_some());
        match part {
            Some((_, part, path)) => {
                let part_ids = match part.section("ids") {
                    Some(text) => decode_ids(text).ok_or_else(|| CheckpointError::Section {
                        path: path.clone(),
                        section: "ids".into(),
                        reason: "not one parameter id a line".into(),
                    })?,
                    None => ids.to_vec(),
                };
                if part_ids.len() != ids.len() {
                    return Err(CheckpointError::Mismatch {
                        path: path.clone(),
                        reason: format!(
                            "its {} parameter ids do not fit this model",
                            part_ids.len()
                        ),
                    });
                }
                holders.push((part, path.as_path(), part_ids, Some(from)));
            }
            None if from == 0 || saved.ranks <= 1 => {
                holders.push((checkpoint, checkpoint_path, ids.to_vec(), Some(0)));
            }
            None => holders.push((checkpoint, checkpoint_path, ids.to_vec(), None)),
        }
    }
    Ok(holders)
}

/// Every float parameter's id and element count, in visit order.
fn params<M: Module>(model: &M) -> (Vec<u64>, Vec<usize>) {
    struct Params(Vec<u64>, Vec<usize>);
    impl ModuleVisitor for Params {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.id.val());
            self.1.push(param.shape().num_elements());
        }
    }
    let mut params = Params(Vec::new(), Vec::new());
    model.visit(&mut params);
    (params.0, params.1)
}

/// Section `name` of `checkpoint` (read from `path`), or the error naming it missing.
pub(super) fn section<'c>(
    checkpoint: &'c Checkpoint,
    path: &Path,
    name: &str,
) -> Result<&'c [u8], CheckpointError> {
    checkpoint
        .section(name)
        .ok_or_else(|| CheckpointError::Section {
            path: path.to_path_buf(),
            section: name.into(),
            reason: "missing".into(),
        })
}

/// The error of a record in the checkpoint at `path` that Burn cannot read into this run.
pub(super) fn record_err(
    path: &Path,
    what: &'static str,
) -> impl FnOnce(burn::store::RecordError) -> CheckpointError {
    let path = path.to_path_buf();
    move |e| CheckpointError::Mismatch {
        path,
        reason: format!("{what}: {e}"),
    }
}
