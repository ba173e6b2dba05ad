//! ember across processes and hosts: hierarchical data parallelism.
//!
//! ember-collective is layer L1, beside `ember-pool`. The pool uses every device of one
//! process; this crate joins several such processes (*ranks*, one per host or per group of
//! devices) into one data-parallel job:
//!
//! 1. Parameters start identical: [`Ranks::broadcast_module`] replaces every rank's parameters
//!    with rank 0's.
//! 2. Each rank trains on its own contiguous shard of the data ([`Ranks::shard`], by rank, the
//!    rule burn's `split_dataloader` uses for devices), split again between its devices.
//! 3. Each rank reduces its devices' gradients with the pool path (ember-step's
//!    [`GradientWindow`](ember_step::burn::GradientWindow)); then one **round**
//!    ([`Ranks::round`]) sums every rank's window in one all-reduce, divides by the number of
//!    gradient sets of all ranks together for [`Reduction::Mean`](ember_step::burn::Reduction),
//!    and every rank steps its optimizer on the same bits, so parameters stay identical.
//!
//! A round carries, after the gradients, each rank's state: how many sets it added, whether its
//! shard ran dry or it was asked to stop, and whether it failed. A rank whose shard is done
//! keeps joining rounds until every rank's is; a rank that fails joins one last round saying
//! so ([`Ranks::announce_failure`]), and every other rank ends with
//! [`CollectiveError::PeersFailed`] naming it. So a failure anywhere ends every rank with an
//! error that names the failed rank, and no rank waits for a round that never comes.
//!
//! A rank that dies without a word (killed, out of memory) cannot announce anything: every
//! [`Communicator`] bounds its waits ([`LocalGroup`] returns [`CollectiveError::Timeout`] or
//! [`CollectiveError::PeerGone`]; `MpiComm` aborts the job, as MPI cannot cancel a collective
//! in flight), and `mpirun` itself ends the job when one of its processes dies.
//!
//! Communicators: [`LocalGroup`] joins threads of one process (for tests, and for ranks as
//! threads); with the `mpi` feature, `MpiComm` joins the processes `mpirun` starts.
//!
//! **Architecture invariant:** every rank makes the same sequence of collective calls, each of
//! the same length: the job's shape never depends on one rank's data.

#![deny(missing_docs)]

mod flat;
mod local;
#[cfg(feature = "mpi")]
mod mpi_comm;
mod ranks;

use std::time::Duration;

pub use local::{LocalComm, LocalGroup};
#[cfg(feature = "mpi")]
pub use mpi_comm::{MpiComm, MpiInitError};
pub use ranks::{Ranks, Round, RoundState, broadcast_u64};

/// One process's view of a data-parallel job: its rank, the job's size and the two collective
/// operations the rounds need.
///
/// Every rank must call the same operations in the same order with buffers of the same length;
/// [`Ranks`] keeps to that. Results are the same bits on every rank.
pub trait Communicator: std::fmt::Debug {
    /// This process's rank, from 0.
    fn rank(&self) -> usize;
    /// How many ranks the job has.
    fn size(&self) -> usize;
    /// Sums `values` element-wise over every rank, in place, every rank receiving the same
    /// bits.
    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), CollectiveError>;
    /// Replaces `values` on every rank with rank `root`'s.
    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<(), CollectiveError>;
}

impl<C: Communicator + ?Sized> Communicator for Box<C> {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), CollectiveError> {
        (**self).all_reduce_sum(values)
    }
    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<(), CollectiveError> {
        (**self).broadcast(values, root)
    }
}

/// Why a collective operation, or a round, failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CollectiveError {
    /// Another rank announced that it failed; its own error says why.
    #[error("{} failed; see {} own error", ranks_list(ranks), if ranks.len() == 1 { "its" } else { "their" })]
    PeersFailed {
        /// The failed ranks, ascending.
        ranks: Vec<usize>,
    },
    /// The other ranks did not join an operation in time.
    #[error("the {operation} waited {waited:?} for the other ranks (rank {rank} of {size})")]
    Timeout {
        /// The operation: `all-reduce` or `broadcast`.
        operation: &'static str,
        /// This rank.
        rank: usize,
        /// The job's size.
        size: usize,
        /// How long it waited.
        waited: Duration,
    },
    /// A rank left the job (its handle was dropped, its thread ended) before an operation
    /// every rank must join.
    #[error("rank {rank} left the job before the {operation}")]
    PeerGone {
        /// The rank that left.
        rank: usize,
        /// The operation it did not join.
        operation: &'static str,
    },
    /// Ranks called the same operation with buffers of different lengths: their models differ.
    #[error(
        "rank {rank} has {len} values where rank {root} has {root_len}: the ranks' models differ"
    )]
    LengthMismatch {
        /// The rank that differs.
        rank: usize,
        /// Its buffer's length.
        len: usize,
        /// The rank compared against.
        root: usize,
        /// That rank's length.
        root_len: usize,
    },
    /// A broadcast from a rank the job does not have.
    #[error("no rank {root} in a job of {size}")]
    NoSuchRank {
        /// The rank asked for.
        root: usize,
        /// The job's size.
        size: usize,
    },
    /// A round was asked of a [`Ranks`] that has not broadcast the model yet, so the size of a
    /// round is unknown.
    #[error("no round before the model is broadcast")]
    NotStarted,
}

fn ranks_list(ranks: &[usize]) -> String {
    match ranks {
        [one] => format!("rank {one}"),
        _ => {
            let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
            format!("ranks {}", list.join(", "))
        }
    }
}

/// A range of `items` split into `parts` contiguous shards, shard `index` of them: each holds
/// `items / parts`, the last the rest too (the rule burn's `split_dataloader` splits a loader
/// between devices with, so ranks × devices shards match one process's devices × ranks).
pub fn shard_range(items: usize, parts: usize, index: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    let index = index.min(parts - 1);
    let step = items / parts;
    let start = step * index;
    let end = if index == parts - 1 {
        items
    } else {
        start + step
    };
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_item_once_as_burn_splits_devices() {
        for items in [0usize, 1, 7, 64, 65, 1437] {
            for parts in 1..=5 {
                let shards: Vec<_> = (0..parts).map(|i| shard_range(items, parts, i)).collect();
                assert_eq!(shards[0].start, 0);
                assert_eq!(shards[parts - 1].end, items);
                for pair in shards.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start);
                }
                // Two levels (ranks, then devices) give one level's shards when they divide.
                if items % (parts * 2) == 0 {
                    let inner = shard_range(shards[0].len(), 2, 1);
                    assert_eq!(inner.len(), shard_range(items, parts * 2, 1).len());
                }
            }
        }
    }

    #[test]
    fn errors_name_the_failed_ranks() {
        assert_eq!(
            CollectiveError::PeersFailed { ranks: vec![1] }.to_string(),
            "rank 1 failed; see its own error"
        );
        assert_eq!(
            CollectiveError::PeersFailed { ranks: vec![0, 2] }.to_string(),
            "ranks 0, 2 failed; see their own error"
        );
    }
}
