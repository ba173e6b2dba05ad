//! This process's place in a data-parallel job: alone, or, built with the `mpi` feature and
//! started by `mpirun`, one rank of the job (rank and size from MPI itself).

use std::time::Duration;

use crate::digits::DigitMlp;

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
