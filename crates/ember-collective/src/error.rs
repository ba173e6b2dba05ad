//! Why an operation across ranks failed, in a module of its own: every communicator and the
//! rounds return it, and the crate root only re-exports it, so none of them reaches the root.

use std::time::Duration;

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
        /// The operation: `all-reduce`, `broadcast` or `all-gather`.
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
    /// A round was asked of a [`Ranks`](crate::ranks::Ranks) that has not broadcast the model
    /// yet, so the size of a round is unknown.
    #[error("no round before the model is broadcast")]
    NotStarted,
    /// An all-gather's buffer does not hold one block per rank.
    #[error("an all-gather needs {expected} values, the buffer holds {len}")]
    GatherLength {
        /// The buffer's length.
        len: usize,
        /// One block per rank.
        expected: usize,
    },
    /// [`Ranks::gather_totals`](crate::ranks::Ranks::gather_totals) was given more values than
    /// a round has room for.
    #[error("{count} totals to gather, at most {most} fit a round")]
    TooManyTotals {
        /// The values given.
        count: usize,
        /// The most a round carries.
        most: usize,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

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
