//! The log's position a checkpoint records: taken on the training thread, made durable (a
//! local log's files synced, a bucket's cut shipped) on the checkpoint thread, before the
//! checkpoint that relies on it is written.

use crate::SummaryRecord;
use crate::bucket::{self, PendingLog};
use crate::checkpoint::CheckpointError;
use crate::checkpoint::log_place::{LogPlace, Snapshot};
use crate::faults::SummaryFaults;
use crate::trainer::TrainError;

/// What [`flushed_snapshot`] took.
pub(super) enum Taken {
    /// The log's position (with the first step its record lost, if any, once settled).
    At(Box<LogAt>),
    /// No checkpoint now: the log's store is not taking what was written.
    Skipped,
}

/// The log's position at a checkpoint, not yet durable, and the first step a record of the
/// log was lost at by then, if any.
pub(super) enum LogAt {
    /// A local directory's file lengths (or no log), to be synced.
    Taken(LogPlace, Snapshot, Option<i64>),
    /// A bucket's cut, to be shipped.
    Bucket(LogPlace, PendingLog),
}

impl LogAt {
    /// Whether the log is in an object store.
    pub(super) fn remote(&self) -> bool {
        match self {
            Self::Taken(place, ..) => place.remote(),
            Self::Bucket(..) => true,
        }
    }

    /// The snapshot, once every record it counts is durable: a local log's files synced to
    /// the disk, a bucket's cut (taken first, where the writer pool takes it) shipped to the
    /// store. With it, the first step a record was lost at by then.
    pub(super) fn settled(self) -> Result<(Snapshot, Option<i64>), CheckpointError> {
        match self {
            Self::Taken(place, snapshot, lost) => {
                snapshot.sync(&place)?;
                Ok((snapshot, lost))
            }
            Self::Bucket(place, pending) => {
                let (snapshot, lost) = pending.settled(place.base.as_ref(), place.bucket())?;
                Ok((Snapshot::Bucket(snapshot), lost))
            }
        }
    }
}

/// Records the log's position at this checkpoint; making it durable (an fsync, a bucket's
/// upload) is left to [`LogAt::settled`], on whichever thread may wait for the disk or the
/// store.
///
/// A local log's writers are flushed first and its files' lengths taken here. A flush error
/// goes where the record's policy sends it (raised: no checkpoint; logged: counted, and the
/// snapshot records the files as the failed writer left them).
///
/// An object-store log is cut in its staging directory, without waiting for the store: the
/// records up to this step are shipped as segments of their own, and the checkpoint is written
/// once they are in the store, so one that exists always has its log (see the `bucket`
/// module's `cut`). A cut that cannot be taken skips the checkpoint (logged), the next one tried
/// as usual.
pub(super) fn flushed_snapshot(
    (place, summary): (&LogPlace, &mut SummaryRecord),
    faults: &mut SummaryFaults,
) -> Result<Taken, TrainError> {
    if place.remote() {
        return Ok(match bucket::cut(summary, faults)? {
            Some(pending) => Taken::At(Box::new(LogAt::Bucket(place.clone(), pending))),
            None => Taken::Skipped,
        });
    }
    faults.check(summary.flush_writers())?;
    // Read after the flush: every record up to this step has its fate.
    let lost_from = summary.first_lost_step();
    let snapshot = place.take()?;
    Ok(Taken::At(Box::new(LogAt::Taken(
        place.clone(),
        snapshot,
        lost_from,
    ))))
}
