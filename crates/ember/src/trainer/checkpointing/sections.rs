//! The sections of a checkpoint that hold Burn's state beside the meta: each optimizer shard's
//! record, and a rank's parameter ids, by which its optimizer state is keyed.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::OptimizerRecord;
use burn::tensor::Tensor;

use crate::checkpoint::{Checkpoint, CheckpointError};

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
