//! What `ember train`'s command line asks for, once settled.

use std::path::PathBuf;

use ember::devices::DeviceSpec;
use ember::run::Begin;

use super::args::TrainArgs;
use super::logdir::CHECKPOINTS;
use crate::job::Job;

/// What the command line asks for, settled: the run's own arguments on `--resume` and
/// `--restart`, its workers' devices, the job this process is a rank of, and its log
/// directory.
pub(crate) struct Plan {
    pub(super) args: TrainArgs,
    pub(super) begin: Begin,
    pub(super) specs: Vec<DeviceSpec>,
    pub(super) job: Job,
    pub(super) logdir: PathBuf,
}

impl Plan {
    pub(super) fn epochs(&self) -> usize {
        usize::from(self.args.epochs)
    }

    pub(super) fn checkpoints(&self) -> PathBuf {
        self.logdir.join(CHECKPOINTS)
    }

    pub(super) fn checkpointing(&self) -> bool {
        !self.args.no_checkpoints
    }
}
