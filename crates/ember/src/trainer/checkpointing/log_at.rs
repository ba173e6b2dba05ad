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
    /// The log's position, and the first step its record lost, if any.
    At(Box<LogAt>, Option<i64>),
    /// No checkpoint now: the log's store is not taking what was written.
    #[cfg(feature = "object-store")]
    Skipped,
}

/// The log's position at a checkpoint, not yet durable.
pub(super) enum LogAt {
    /// A local directory's file lengths (or no log), to be synced.
    Taken(LogPlace, Snapshot),
    /// A bucket's cut, to be shipped.
    #[cfg(feature = "object-store")]
    Cut(LogPlace, ember_write::remote::LogCut),
}

impl LogAt {
    /// Whether the log is in an object store.
    pub(super) fn remote(&self) -> bool {
        match self {
            Self::Taken(place, _) => place.remote(),
            #[cfg(feature = "object-store")]
            Self::Cut(..) => true,
        }
    }

    /// The snapshot, once every record it counts is durable: a local log's files synced to
    /// the disk, a bucket's cut shipped to the store (the objects that hold it are then the
    /// mirror's to name, without a listing).
    pub(super) fn settled(self) -> Result<Snapshot, CheckpointError> {
        match self {
            Self::Taken(place, snapshot) => {
                snapshot.sync(&place)?;
                Ok(snapshot)
            }
            #[cfg(feature = "object-store")]
            Self::Cut(place, cut) => {
                let shipped = cut.shipped().map_err(|message| CheckpointError::Io {
                    op: "ship the log up to the checkpoint to",
                    path: place.dir.clone(),
                    source: std::io::Error::other(message),
                })?;
                place.shipped(shipped)
            }
        }
    }
}

/// Flushes the summaries and records the log's position at this checkpoint; making it
/// durable (an fsync, a bucket's upload) is left to [`LogAt::settled`], on whichever thread may
/// wait for the disk or the store. Every writer has flushed before the position is taken; a
/// flush error goes where the record's policy sends it (raised: no checkpoint; logged:
/// counted, and the snapshot records the files as the failed writer left them).
///
/// An object-store log is cut in its staging directory, without waiting for the store: the
/// records up to this step are shipped as segments of their own, and the checkpoint is written
/// once they are in the store, so one that exists always has its log (see
/// [`ember_write::remote::LogCut`]). A cut that cannot be taken skips the checkpoint (logged);
/// the next one is tried as usual.
pub(super) fn flushed_snapshot(
    (place, summary): (&LogPlace, &mut SummaryRecord),
    faults: &mut SummaryFaults,
) -> Result<Taken, TrainError> {
    faults.check(summary.flush_writers())?;
    // Read after the flush: every record up to this step has its fate.
    let lost_from = summary.first_lost_step();
    #[cfg(feature = "object-store")]
    if place.remote() {
        return Ok(match summary.cut_log() {
            Ok(Some(cut)) => Taken::At(Box::new(LogAt::Cut(place.clone(), cut)), lost_from),
            Ok(None) => Taken::At(
                Box::new(LogAt::Taken(place.clone(), place.take()?)),
                lost_from,
            ),
            Err(error) => {
                log::warn!("skipping a checkpoint: {error}");
                Taken::Skipped
            }
        });
    }
    let snapshot = place.take()?;
    Ok(Taken::At(
        Box::new(LogAt::Taken(place.clone(), snapshot)),
        lost_from,
    ))
}
