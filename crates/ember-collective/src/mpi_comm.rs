//! The processes `mpirun` starts, as a [`Communicator`] (rsmpi over the system's MPI).

use std::time::{Duration, Instant};

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::environment::Universe;
use mpi::request::{Request, Scope, scope};
use mpi::topology::{Communicator as _, SimpleCommunicator};

use crate::communicator::Communicator;
use crate::error::CollectiveError;

/// Why MPI could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MpiInitError {
    /// MPI was initialized already in this process (by another `MpiComm` or other code).
    #[error("mpi is initialized already in this process")]
    AlreadyInitialized,
}

/// `MPI_COMM_WORLD`: every process of the `mpirun` job, one rank each.
///
/// MPI is initialized when this is made and finalized when it is dropped, once per process.
///
/// **Bounded waits.** Each operation is started non-blocking (`MPI_Iallreduce`, `MPI_Ibcast`,
/// `MPI_Iallgather`)
/// and polled until it completes or `timeout` passes. MPI cannot cancel a collective in
/// flight, and its buffers stay MPI's until it completes, so on a timeout this rank prints
/// which operation waited how long and calls `MPI_Abort`, which ends every process of the
/// job. A rank that dies (killed, out of memory) is found sooner by `mpirun` itself, which
/// ends the job and names the rank. A rank that *fails* is not a timeout: it announces its
/// failure in the next round (see
/// [`Ranks::announce_failure`](crate::ranks::Ranks::announce_failure)).
pub struct MpiComm {
    // Declared before the universe: the world is dropped before MPI is finalized.
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    timeout: Duration,
    /// The all-reduce's send buffer, kept between rounds: a round's gradients are often
    /// megabytes, whose fresh allocation (and page faults) cost more than the copy.
    send: Vec<f32>,
    // Held for its drop, which finalizes MPI.
    _universe: Universe,
}

impl std::fmt::Debug for MpiComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The exit status every process of the job ends with after a timeout.
const TIMEOUT_EXIT: i32 = 124;

impl MpiComm {
    /// Initializes MPI (MPI calls then come from one thread at a time, the one that trains)
    /// and joins the world; each operation waits at most `timeout` for the other ranks.
    pub fn world(timeout: Duration) -> Result<Self, MpiInitError> {
        let (universe, _threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or(MpiInitError::AlreadyInitialized)?;
        let world = universe.world();
        let rank = usize::try_from(world.rank()).unwrap_or(0);
        let size = usize::try_from(world.size()).unwrap_or(1).max(1);
        Ok(Self {
            world,
            rank,
            size,
            timeout,
            send: Vec::new(),
            _universe: universe,
        })
    }

    /// The MPI library's own version string.
    pub fn library_version(&self) -> String {
        mpi::environment::library_version().unwrap_or_default()
    }

    /// Host name of this process, as MPI names it.
    pub fn processor_name(&self) -> String {
        mpi::environment::processor_name().unwrap_or_default()
    }

    fn wait<'a, B: ?Sized, S: Scope<'a>>(&self, mut request: Request<'a, B, S>, operation: &str) {
        let started = Instant::now();
        let mut polls = 0u32;
        loop {
            match request.test() {
                Ok(_) => return,
                Err(pending) => request = pending,
            }
            let waited = started.elapsed();
            if waited >= self.timeout {
                eprintln!(
                    "error: rank {} of {}: the {operation} waited {waited:.1?} for the other ranks; \
                     ending the job (a rank is hung or gone)",
                    self.rank, self.size
                );
                self.world.abort(TIMEOUT_EXIT);
            }
            // Spin briefly (a round between busy ranks completes in microseconds), then
            // yield the core to the pool's workers.
            polls = polls.saturating_add(1);
            if polls < 1_000 {
                std::hint::spin_loop();
            } else if polls < 10_000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), CollectiveError> {
        let mut send = std::mem::take(&mut self.send);
        send.clear();
        send.extend_from_slice(values);
        scope(|scope| {
            let request = self.world.immediate_all_reduce_into(
                scope,
                &send[..],
                values,
                SystemOperation::sum(),
            );
            self.wait(request, "all-reduce");
        });
        self.send = send;
        Ok(())
    }

    fn all_gather(&mut self, mine: &[f32], all: &mut [f32]) -> Result<(), CollectiveError> {
        let expected = mine.len() * self.size;
        if all.len() != expected {
            return Err(CollectiveError::GatherLength {
                len: all.len(),
                expected,
            });
        }
        scope(|scope| {
            let request = self.world.immediate_all_gather_into(scope, mine, all);
            self.wait(request, "all-gather");
        });
        Ok(())
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<(), CollectiveError> {
        let Some(root_rank) = (root < self.size)
            .then(|| i32::try_from(root).ok())
            .flatten()
        else {
            return Err(CollectiveError::NoSuchRank {
                root,
                size: self.size,
            });
        };
        let root_process = self.world.process_at_rank(root_rank);
        scope(|scope| {
            let request = root_process.immediate_broadcast_into(scope, values);
            self.wait(request, "broadcast");
        });
        Ok(())
    }
}
