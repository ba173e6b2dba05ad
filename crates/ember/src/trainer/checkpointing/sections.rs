//! The sections of a checkpoint that hold Burn's state beside the meta: each optimizer shard's
//! record, and a rank's parameter ids, by which its optimizer state is keyed; and how they are
//! read back.

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::OptimizerRecord;
use burn::tensor::{Bytes, Tensor};

use crate::checkpoint::{Checkpoint, CheckpointError, Loaded};
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

/// `model` with its float parameters' ids replaced by `ids` (in visit order); `None` when
/// the model has a different number of them.
pub(super) fn with_param_ids<M: Module>(model: M, ids: &[u64]) -> Option<M> {
    if param_ids(&model).len() != ids.len() {
        return None;
    }
    struct Rename<'a> {
        ids: &'a [u64],
        at: usize,
    }
    impl ModuleMapper for Rename<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let id = ParamId::from(self.ids[self.at]);
            self.at += 1;
            let (_, value, mapper) = param.consume();
            Param::from_mapped_value(id, value, mapper)
        }
    }
    Some(model.map(&mut Rename { ids, at: 0 }))
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

/// `model` with the parameter ids a rank's part (and its path) holds, when it holds them.
pub(super) fn with_part_ids<M: Module>(
    model: M,
    part: Option<&(Checkpoint, PathBuf)>,
) -> Result<M, CheckpointError> {
    let Some((part, part_path)) = part else {
        return Ok(model);
    };
    let Some(ids) = part.section("ids") else {
        return Ok(model);
    };
    let ids = decode_ids(ids).ok_or_else(|| CheckpointError::Section {
        path: part_path.clone(),
        section: "ids".into(),
        reason: "not one parameter id a line".into(),
    })?;
    let count = ids.len();
    with_param_ids(model, &ids).ok_or_else(|| CheckpointError::Mismatch {
        path: part_path.clone(),
        reason: format!("its {count} parameter ids do not fit this model"),
    })
}

/// What holds the optimizer's state: this rank's part where it holds some, else the checkpoint.
pub(super) fn optimizer_holder<'c>(
    loaded: &'c Loaded,
    part: Option<&'c (Checkpoint, PathBuf)>,
) -> (&'c Checkpoint, PathBuf) {
    match part {
        Some((part, part_path)) if part.section(&optimizer_section(0)).is_some() => {
            (part, part_path.clone())
        }
        _ => (&loaded.checkpoint, loaded.path.clone()),
    }
}

/// Loads every optimizer shard's state from `holder` (a checkpoint or a rank's part, read from
/// its path). A checkpoint holds one optimizer section per shard; one written by a single
/// optimizer holds every parameter's state, which serves each shard as well, since a shard
/// only reads the state of the parameters it owns.
pub(super) fn load_optimizer(
    optimizer: OptimizerShards,
    (holder, holder_path): (&Checkpoint, PathBuf),
) -> Result<OptimizerShards, CheckpointError> {
    // Shards by thread (one per device the run started on) are kept as they were: each holds
    // the state of the parameters it steps.
    let saved = (0..)
        .take_while(|shard| holder.section(&optimizer_section(*shard)).is_some())
        .count();
    let mut optimizer = optimizer.regrouped(saved);
    for shard in 0..optimizer.len() {
        let name = optimizer_section(shard);
        let name = if holder.section(&name).is_some() {
            name
        } else {
            optimizer_section(0)
        };
        let bytes = section(holder, &holder_path, &name)?;
        let stepped = optimizer.shards()[shard]
            .clone()
            .from_bytes(Bytes::from_bytes_vec(bytes.to_vec()))
            .map_err(record_err(&holder_path, "its optimizer state"))?;
        optimizer.set_shard(shard, stepped);
    }
    Ok(optimizer)
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
