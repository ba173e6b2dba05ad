//! The log's position a checkpoint records: taken on the training thread, made durable (a
//! local log's files synced, a bucket's cut shipped) on the checkpoint thread, before the
//! checkpoint that relies on it is written.

use crate::SummaryRecord;
use crate::checkpoint::CheckpointError;
use crate::checkpoint::log_place::{LogPlace, Snapshot};
use crate::faults::SummaryFaults;
use crate::trainer::TrainError;

/// What [`flushed_snapshot`] took.
pub(super) enum Taken {
    /// The log's position (with the first step its record lost, if any, once settled).
    At(Box<LogAt>),
    /// No checkpoint now: the log's store is not taking what was written.
    #[cfg(feature = "object-store")]
    Skipped,
}

/// The log's position at a checkpoint, not yet durable, and the first step a record of the
/// log was lost at by then, if any.
pub(super) enum LogAt {
    /// A local directory's file lengths (or no log), to be synced.
    Taken(LogPlace, Snapshot, Option<i64>),
    /// A bucket's cut, to be shipped.
    #[cfg(feature = "object-store")]
    Cut(LogPlace, ember_write::remote::LogCut, Option<i64>),
    /// A bucket's cut the writer pool takes in order with the records, to be shipped.
    #[cfg(feature = "object-store")]
    InOrder(LogPlace, crate::summary::PendingCut),
}

impl LogAt {
    /// Whether the log is in an object store.
    pub(super) fn remote(&self) -> bool {
        match self {
            Self::Taken(place, ..) => place.remote(),
            #[cfg(feature = "object-store")]
            Self::Cut(..) | Self::InOrder(..) => true,
        }
    }

    /// The snapshot, once every record it counts is durable: a local log's files synced to
    /// the disk, a bucket's cut (taken first, where the writer pool takes it) shipped to the
    /// store (the objects that hold it are then the mirror's to name, without a listing).
    /// With it, the first step a record was lost at by then.
    pub(super) fn settled(self) -> Result<(Snapshot, Option<i64>), CheckpointError> {
        match self {
            Self::Taken(place, snapshot, lost) => {
                snapshot.sync(&place)?;
                Ok((snapshot, lost))
            }
            #[cfg(feature = "object-store")]
            Self::Cut(place, cut, lost) => Ok((ship(&place, cut)?, lost)),
            #[cfg(feature = "object-store")]
            Self::InOrder(place, pending) => {
                let (cut, lost) = pending
                    .taken()
                    .map_err(|message| shipping(&place, message))?;
                Ok((ship(&place, cut)?, lost))
            }
        }
    }
}

/// The snapshot of the log in a bucket up to `cut`, once the cut is in the store.
#[cfg(feature = "object-store")]
fn ship(place: &LogPlace, cut: ember_write::remote::LogCut) -> Result<Snapshot, CheckpointError> {
    let shipped = cut.shipped().map_err(|message| shipping(place, message))?;
    place.shipped(shipped)
}

/// The error of a cut of `place` that could not be taken or shipped.
#[cfg(feature = "object-store")]
fn shipping(place: &LogPlace, message: String) -> CheckpointError {
    CheckpointError::Io {
        op: "ship the log up to the checkpoint to",
        path: place.dir.clone(),
        source: std::io::Error::other(message),
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
/// once they are in the store, so one that exists always has its log (see
/// [`ember_write::remote::LogCut`]). The writer pool takes the cut itself, once it has written
/// the records before it ([`SummaryRecord::cut_log_in_order`]), so the training thread neither
/// waits for the writers nor walks the staging directory; where `add_scalars`'s runs write
/// beside the pool, it flushes and cuts here. A cut that cannot be taken here skips the
/// checkpoint (logged), the next one tried as usual; one the pool could not take fails the
/// checkpoint's thread as an upload would.
pub(super) fn flushed_snapshot(
    (place, summary): (&LogPlace, &mut SummaryRecord),
    faults: &mut SummaryFaults,
) -> Result<Taken, TrainError> {
    #[cfg(feature = "object-store")]
    if place.remote() {
        match summary.cut_log_in_order() {
            Ok(Some(pending)) => {
                return Ok(Taken::At(Box::new(LogAt::InOrder(place.clone(), pending))));
            }
            Ok(None) => {}
            Err(error) => {
                log::warn!("skipping a checkpoint: {error}");
                return Ok(Taken::Skipped);
            }
        }
    }
    faults.check(summary.flush_writers())?;
    // Read after the flush: every record up to this step has its fate.
    let lost_from = summary.first_lost_step();
    #[cfg(feature = "object-store")]
    if place.remote() {
        return Ok(match summary.cut_log() {
            Ok(Some(cut)) => Taken::At(Box::new(LogAt::Cut(place.clone(), cut, lost_from))),
            Ok(None) => Taken::At(Box::new(LogAt::Taken(
                place.clone(),
                place.take()?,
                lost_from,
            ))),
            Err(error) => {
                log::warn!("skipping a checkpoint: {error}");
                Taken::Skipped
            }
        });
    }
    let snapshot = place.take()?;
    Ok(Taken::At(Box::new(LogAt::Taken(
        place.clone(),
        snapshot,
        lost_from,
    ))))
}
