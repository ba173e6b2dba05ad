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
//!    ([`Ranks::round`]) sums every rank's window in one all-reduce and divides by the number
//!    of gradient sets of all ranks together for
//!    [`Reduction::Mean`](ember_step::burn::Reduction).
//! 4. The optimizer step is split between the ranks, ZeRO-1 style: each parameter belongs to
//!    one rank ([`owners_by_elements`], whole parameters balanced by element count), which
//!    alone steps it and alone keeps its optimizer state; [`Ranks::gather_parameters`] then
//!    gives every rank every owner's stepped parameters in one all-gather. Burn's optimizers
//!    step each parameter on its own, so this gives the bits one optimizer stepping every
//!    parameter gives, on every rank, while each rank does 1/N of the optimizer's work and
//!    holds 1/N of its state.
//! 5. Work that each rank does on its own share and that every rank must then agree on (the
//!    validation pass's sums) meets in [`Ranks::gather_totals`]: every rank gets every rank's
//!    values, to add up in rank order to the same bits.
//!
//! A round carries, after the gradients, each rank's state (and every exchange has a round's
//! length, so a failure announced anywhere meets whichever exchange the others are in): how many sets it added, whether its
//! shard ran dry or it was asked to stop, and whether it failed. A rank whose shard is done
//! keeps joining rounds until every rank's is; a rank that fails joins one last round saying
//! so ([`Ranks::announce_failure`]), or, when its optimizer step failed, the gather that
//! follows the round ([`Ranks::announce_step_failure`]), and every other rank ends with
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

mod communicator;
mod error;
mod flat;
mod local;
#[cfg(feature = "mpi")]
mod mpi_comm;
mod ranks;
mod shard;

pub use communicator::Communicator;
pub use error::CollectiveError;
pub use local::{LocalComm, LocalGroup};
#[cfg(feature = "mpi")]
pub use mpi_comm::{MpiComm, MpiInitError};
pub use ranks::{MAX_TOTALS, Ranks, Round, RoundState, broadcast_u64};
pub use shard::{owners_by_elements, shard_range};
