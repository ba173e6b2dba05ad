//! This process's place in a data-parallel job: alone, or, built with the `mpi` feature and
//! started by `mpirun`, one rank of the job (rank and size from MPI itself).

#[cfg(feature = "mpi")]
use std::cell::RefCell;
#[cfg(feature = "mpi")]
use std::rc::Rc;
use std::time::Duration;

// Called only where the binary is built with MPI; its tests run in every build.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod keepalive;

/// The job this process is part of.
pub(crate) struct Job {
    rank: usize,
    size: usize,
    #[cfg(feature = "mpi")]
    comm: Option<Shared>,
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
                comm: (size > 1).then(|| Shared(Rc::new(RefCell::new(comm)))),
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

    /// Makes `trainer` this process's rank of the job.
    pub(crate) fn join<M: ember::Trainable>(
        &self,
        trainer: ember::Trainer<M>,
    ) -> ember::Trainer<M> {
        #[cfg(feature = "mpi")]
        if let Some(comm) = &self.comm {
            return trainer.communicator(comm.clone());
        }
        trainer
    }

    /// Ends a stopped run's part in the job, once its log is closed, and returns the signal
    /// that stopped the job, the same on every rank: the lowest rank's that received one
    /// (`signal`, this rank's). Across ranks that takes a last round, which no rank leaves
    /// before every rank's log is closed, and every rank must exit as soon as it returns:
    /// under `mpirun` the first rank to exit makes it end the others (SIGTERM, or, once it is
    /// ending the job, SIGKILL at once).
    pub(crate) fn stopped(&mut self, signal: Option<i32>) -> anyhow::Result<Option<i32>> {
        #[cfg(feature = "mpi")]
        if let Some(comm) = self.comm.take() {
            use ember::Communicator;
            let mut signals = vec![0.0; self.size];
            if let Some(slot) = signals.get_mut(self.rank) {
                *slot = signal.unwrap_or(0) as f32;
            }
            let round = comm.0.borrow_mut().all_reduce_sum(&mut signals);
            // MPI is left unfinalized: MPI_Finalize waits for mpirun, which, signalled itself,
            // is ending the job and no longer answers, until its SIGKILL. A rank that exits
            // non-zero without it is one that failed to mpirun, as a stopped one is anyway.
            std::mem::forget(comm);
            round?;
            return Ok(signals.iter().find(|s| **s > 0.0).map(|s| *s as i32));
        }
        Ok(signal)
    }
}

/// The job's communicator, shared by the trainer, whose rounds it carries, and the job, which
/// keeps MPI initialized once the trainer is gone (the communicator's drop finalizes it) and
/// takes a stopped run's last round with it ([`Job::stopped`]).
#[cfg(feature = "mpi")]
#[derive(Debug, Clone)]
struct Shared(Rc<RefCell<ember::MpiComm>>);

#[cfg(feature = "mpi")]
impl ember::Communicator for Shared {
    fn rank(&self) -> usize {
        self.0.borrow().rank()
    }

    fn size(&self) -> usize {
        self.0.borrow().size()
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<(), ember::CollectiveError> {
        self.0.borrow_mut().all_reduce_sum(values)
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<(), ember::CollectiveError> {
        self.0.borrow_mut().broadcast(values, root)
    }

    fn all_gather(&mut self, mine: &[f32], all: &mut [f32]) -> Result<(), ember::CollectiveError> {
        self.0.borrow_mut().all_gather(mine, all)
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
