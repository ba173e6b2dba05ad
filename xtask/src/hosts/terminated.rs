//! (c) The job across the two hosts, its log and checkpoints in the bucket, sent SIGTERM on
//! both ranks in the middle of an epoch, as a scheduler stops a job: every rank stops after
//! the same step and checkpoints there; `mpirun` exits; `ember train --resume` from the bucket
//! goes on from that checkpoint and ends with the uninterrupted job's model byte for byte, each
//! step once in `ember inspect` and TensorBoard's S3 reader.

use std::path::Path;
use std::time::Duration;

use super::check::Check;
use super::equivalence::TRAIN;
use super::launch::TASK;
use crate::scenario::{Expected, Signalled, StopAndResume};

/// [`TRAIN`]'s checkpoint period and an epoch's steps on two hosts of one worker: a stop at
/// neither could be taken for another checkpoint.
const PERIODS: [u64; 2] = [10, 23];

/// Runs the scenario; `reference` is the one-host run, `took` how long the hosts' job took.
pub(super) fn terminated(check: &Check, reference: &Path, took: f64) -> anyhow::Result<()> {
    let after = [0.3, 0.45, 0.6].map(|share| Duration::from_secs_f64(took * share));
    let stopped = StopAndResume {
        name: "term",
        args: TRAIN,
        whom: Signalled::Ranks(&[0, 1]),
        after: &after,
        periods: &PERIODS,
    }
    .walk(
        check,
        &Expected::of_dir(check.ember, reference)?,
        |_| Ok(()),
    )?;
    check.tensorboard_same(&stopped.place, reference)?;
    eprintln!(
        "{TASK}: (c) SIGTERM to both ranks on their hosts, log in the bucket: every rank \
         stopped at step {} and checkpointed there ({}); resumed from the bucket, the job ended \
         with the uninterrupted job's model byte for byte, each step once in ember inspect and \
         TensorBoard's S3 reader ({:.1} s to stop)",
        stopped.step,
        stopped.newest,
        stopped.ended_after.as_secs_f64()
    );
    Ok(())
}
