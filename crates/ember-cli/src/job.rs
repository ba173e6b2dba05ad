//! This process's place in a data-parallel job: alone, or, built with the `mpi` feature and
//! started by `mpirun`, one rank of the job (rank and size from MPI itself).

use std::time::Duration;

use crate::digits::DigitMlp;

// Called only where the binary is built with MPI; its tests run in every build.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod keepalive;

/// The job this process is part of.
pub(crate) struct Job {
    rank: usize,
    size: usize,
    #[cfg(feature = "mpi")]
    comm: Option<ember::MpiComm>,
}

impl Job {
    /// Joins the job: with MPI, the world `mpirun` started (whose collective waits give up
    /// after `timeout`); without, a job of one.
    pub(crate) fn start(timeout: Duration) -> anyhow::Result<Self> {
        #[cfg(feature = "mpi")]
        {
            use ember::Communicator;
            let comm = ember::MpiComm::world(timeout)?;
            let (rank, size) = (comm.rank(), comm.size());
            if rank == 0 {
                warn_of_a_lost_host(size, timeout);
            }
            Ok(Self {
                rank,
                size,
                // A job of one trains as without MPI.
                comm: (size > 1).then_some(comm),
            })
        }
        #[cfg(not(feature = "mpi"))]
        {
            let _ = timeout;
            Ok(Self { rank: 0, size: 1 })
        }
    }

    /// This process's rank, from 0.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the job has.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Whether this process reports for the job: prints, draws the progress bar, records the
    /// run's own summaries.
    pub(crate) fn lead(&self) -> bool {
        self.rank == 0
    }

    /// Rank 0's `value`, on every rank (so that every rank picks the same default log dir).
    pub(crate) fn rank_zero_s(&mut self, value: u64) -> anyhow::Result<u64> {
        #[cfg(feature = "mpi")]
        if let Some(comm) = self.comm.as_mut() {
            return Ok(ember::collective::broadcast_u64(comm, value, 0)?);
        }
        Ok(value)
    }

    /// "rank r of n: " across ranks, nothing alone: a prefix for what every rank prints.
    pub(crate) fn prefix(&self) -> String {
        if self.size > 1 {
            format!("rank {} of {}: ", self.rank, self.size)
        } else {
            String::new()
        }
    }

    /// The job's communicator, for a trainer of another model than `ember train`'s (a job of
    /// one has none).
    #[cfg(feature = "mpi")]
    pub(crate) fn take_comm(&mut self) -> Option<ember::MpiComm> {
        self.comm.take()
    }

    /// Makes `trainer` this process's rank of the job.
    pub(crate) fn join(&mut self, trainer: ember::Trainer<DigitMlp>) -> ember::Trainer<DigitMlp> {
        #[cfg(feature = "mpi")]
        if let Some(comm) = self.comm.take() {
            return trainer.communicator(comm);
        }
        trainer
    }
}

/// Says, once, what a lost host will do to a job across hosts under Open MPI whose keepalive
/// does not notice it before `timeout` (`keepalive.rs`). Open MPI tells each rank how many of
/// the job's ranks run on its host; another MPI sets no such variable, and has none of Open
/// MPI's parameters either.
#[cfg(feature = "mpi")]
fn warn_of_a_lost_host(size: usize, timeout: Duration) {
    let Some(local) = std::env::var("OMPI_COMM_WORLD_LOCAL_SIZE")
        .ok()
        .and_then(|n| n.parse().ok())
    else {
        return;
    };
    if let Some(line) = keepalive::lost_host_warning(keepalive::mca_setting, (local, size), timeout)
    {
        crate::output::err(line);
    }
}
