//! The trait every way of joining ranks implements, in a module of its own so that the
//! communicators (`local`, `mpi_comm`) and the rounds (`ranks`) build on it without reaching
//! into the crate root.

use crate::error::CollectiveError;

/// One process's view of a data-parallel job: its rank, the job's size and the two collective
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
