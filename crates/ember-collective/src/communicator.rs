//! The trait every way of joining ranks implements, in a module of its own so that the
//! communicators (`local`, `mpi_comm`) and the rounds (`ranks`) build on it without reaching
//! into the crate root.

use crate::error::CollectiveError;

/// One process's view of a data-parallel job: its rank, the job's size and the collective
/// operations the rounds need.
///
/// Every rank must call the same operations in the same order with buffers of the same length;
/// [`Ranks`](crate::ranks::Ranks) keeps to that. Results are the same bits on every rank.
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
    /// Every rank's `mine` (as long on every rank) into `all`, rank after rank, on every rank
    /// alike; `all` holds `size × mine.len()` values.
    ///
    /// By default a sum over `all` in which each rank fills its own block and leaves −0.0 in
    /// every other slot: adding −0.0 changes no value's bits (+0.0, −0.0 and infinities
    /// included), so the sum is an exact gather, moving twice the bytes a gather of its own
    /// (MPI's) moves.
    fn all_gather(&mut self, mine: &[f32], all: &mut [f32]) -> Result<(), CollectiveError> {
        let block = mine.len();
        let expected = block * self.size();
        if all.len() != expected {
            return Err(CollectiveError::GatherLength {
                len: all.len(),
                expected,
            });
        }
        all.fill(-0.0);
        let at = self.rank() * block;
        all[at..at + block].copy_from_slice(mine);
        self.all_reduce_sum(all)
    }
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
    fn all_gather(&mut self, mine: &[f32], all: &mut [f32]) -> Result<(), CollectiveError> {
        (**self).all_gather(mine, all)
    }
}
