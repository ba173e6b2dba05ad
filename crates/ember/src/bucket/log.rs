//! A log in a bucket at a checkpoint: its snapshot (ember-write's `BucketSnapshot`: the
//! objects its writers own, by name), taken by listing or as a cut the record's mirror ships,
//! and the rollback to one.

use std::path::{Path, PathBuf};

use ember_write::Ownership;
use ember_write::remote::{Bucket, BucketSnapshot, LogCut};

use super::RemoteError;
use super::mirror::Mirror;
use crate::checkpoint::CheckpointError;
use crate::faults::SummaryFaults;
use crate::{SummaryError, SummaryRecord};

/// A bucket log's snapshot.
pub(crate) type LogSnapshot = BucketSnapshot;

/// A log directory in a bucket: its URL, what to leave out of its snapshots (the checkpoint
/// directory inside it), and whose objects are this writer's.
pub(crate) type Where<'a> = (&'a Path, &'a [PathBuf], Ownership);

/// The bucket of `at`, and the names to leave out of it.
fn bucket((url, exclude, _): Where) -> Result<(Bucket, Vec<String>), CheckpointError> {
    let bucket = Bucket::open(&url.to_string_lossy()).map_err(|e| failed(url, e))?;
    let exclude = (exclude.iter())
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .collect();
    Ok((bucket, exclude))
}

fn failed(url: &Path, error: RemoteError) -> CheckpointError {
    let source = std::io::Error::other(error.to_string());
    crate::run::store::failed("snapshot or roll back", url, "", source)
}

/// The snapshot of a log that holds nothing yet: what a restart rolls back to.
pub(crate) fn empty_snapshot() -> Result<LogSnapshot, CheckpointError> {
    Ok(BucketSnapshot::default())
}

/// `text` read as a bucket snapshot; `None` where it is not one.
pub(crate) fn decode_snapshot(text: &str) -> Option<Result<LogSnapshot, CheckpointError>> {
    BucketSnapshot::is_one(text).then(|| {
        BucketSnapshot::decode(text).ok_or_else(|| {
            CheckpointError::Rollback(ember_write::RollbackError::Malformed(
                "a bucket snapshot that does not read back".into(),
            ))
        })
    })
}

/// The log's objects now, by listing (the caller has flushed and shipped it).
pub(crate) fn take(at: Where) -> Result<LogSnapshot, CheckpointError> {
    let (bucket, exclude) = bucket(at)?;
    BucketSnapshot::take(&bucket, &exclude, at.2).map_err(|e| failed(at.0, e))
}

/// Rolls the log back to `snapshot`; and what a killed writer of it had not shipped, which
/// comes after the checkpoint too, is discarded: `ember push` must not ship it after the
/// resumed run's records.
pub(crate) fn restore(at: Where, snapshot: &LogSnapshot) -> Result<(), CheckpointError> {
    let (bucket, exclude) = bucket(at)?;
    let removed = (snapshot.restore(&bucket, &exclude, at.2)).map_err(|e| failed(at.0, e))?;
    let url = at.0.to_string_lossy();
    log::info!(
        "rolled {url} back to the checkpoint: {} object(s) removed",
        removed.len()
    );
    let discarded = ember_write::orphans::discard_orphans_of(&url).map_err(|e| failed(at.0, e))?;
    for staging in discarded {
        log::info!(
            "removed {}: what the killed run had not shipped to {url} is past the checkpoint",
            staging.display()
        );
    }
    Ok(())
}

/// A bucket log's position at a checkpoint, not yet in the store, with the first step a
/// record was lost at by then.
pub(crate) enum PendingLog {
    /// A cut the writer pool takes in order with the records, to be shipped.
    InOrder(PendingCut),
    /// A cut taken on the training thread, to be shipped.
    Cut(LogCut, Option<i64>),
    /// A log no mirror ships (nothing more reaches the store): listed once settled.
    Listed(Option<i64>),
}

impl PendingLog {
    /// The snapshot once every record it counts is in the store: a cut shipped (the objects
    /// that hold it are then the mirror's to name, added to `base`, the run's objects when it
    /// began writing, without a listing).
    pub(crate) fn settled(
        self,
        base: Option<&LogSnapshot>,
        at: Where,
    ) -> Result<(LogSnapshot, Option<i64>), CheckpointError> {
        let (cut, lost) = match self {
            Self::Listed(lost) => return Ok((take(at)?, lost)),
            Self::Cut(cut, lost) => (cut, lost),
            Self::InOrder(pending) => pending.taken().map_err(|m| shipping(at, m))?,
        };
        let shipped = cut.shipped().map_err(|m| shipping(at, m))?;
        let base = base.ok_or_else(|| {
            shipping(
                at,
                "the run's objects were not listed when it began".to_owned(),
            )
        })?;
        let exclude = bucket(at)?.1;
        Ok((base.with_shipped(shipped, &exclude, at.2), lost))
    }
}

/// The error of a cut of `at` that could not be taken or shipped.
fn shipping(at: Where, message: String) -> CheckpointError {
    let source = std::io::Error::other(message);
    crate::run::store::failed("ship the log up to the checkpoint to", at.0, "", source)
}

/// The log's position at a checkpoint, cut without waiting for the store: by the record's
/// writer pool, in order with the records, where it can ([`SummaryRecord::cut_log_in_order`]);
/// else the writers flushed (a flush error goes where `faults` sends it) and the staging
/// directory cut here. `None`: a cut that cannot be taken (the store is not taking what was
/// written) skips the checkpoint, logged; the next one is tried as usual.
pub(crate) fn cut(
    summary: &mut SummaryRecord,
    faults: &mut SummaryFaults,
) -> Result<Option<PendingLog>, SummaryError> {
    let skipped = |error: SummaryError| {
        log::warn!("skipping a checkpoint: {error}");
        None
    };
    match summary.cut_log_in_order() {
        Ok(Some(pending)) => return Ok(Some(PendingLog::InOrder(pending))),
        Ok(None) => {}
        Err(error) => return Ok(skipped(error)),
    }
    faults.check(summary.flush_writers())?;
    // Read after the flush: every record up to this step has its fate.
    let lost = summary.first_lost_step();
    Ok(match summary.cut_log() {
        Ok(Some(cut)) => Some(PendingLog::Cut(cut, lost)),
        Ok(None) => Some(PendingLog::Listed(lost)),
        Err(error) => skipped(error),
    })
}

/// A cut of a bucket log asked for at a checkpoint and taken on the writer pool's thread, in
/// order with the records: see [`SummaryRecord::cut_log_in_order`].
pub(crate) struct PendingCut(std::sync::mpsc::Receiver<Result<(LogCut, Option<i64>), String>>);

impl PendingCut {
    /// Waits until the pool has written every record recorded before the cut was asked for
    /// and has taken it; returns it with the first step a record was lost at by then.
    pub(crate) fn taken(self) -> Result<(LogCut, Option<i64>), String> {
        self.0
            .recv()
            .map_err(|_| "the summary writer stopped before it took the log's cut".to_owned())?
    }
}

impl SummaryRecord {
    /// The log's position at a checkpoint in a bucket, taken on the writer pool's thread once it
    /// has written every record recorded so far ([`WriterPool::after_written`]): the caller
    /// neither flushes nor walks the staging directory, and goes on at once. `None` where the
    /// log is local, or where `add_scalars`'s runs have writers of their own (one pool's order
    /// cannot cut theirs): flush and [`cut_log`](Self::cut_log) then.
    ///
    /// [`WriterPool::after_written`]: ember_write::WriterPool::after_written
    pub(crate) fn cut_log_in_order(&self) -> Result<Option<PendingCut>, SummaryError> {
        self.ensure_open()?;
        let (Some(remote), Some(pool)) = (&self.remote, &self.pool) else {
            return Ok(None);
        };
        if !self.children.is_empty() {
            return Ok(None);
        }
        let cutter = remote.cutter()?;
        let (tx, rx) = std::sync::mpsc::channel();
        pool.after_written(move |lost| {
            // The checkpoint thread may have given up; nothing to do then.
            let _ = tx.send(cutter.cut().map(|cut| (cut, lost)));
        })?;
        Ok(Some(PendingCut(rx)))
    }

    /// The log's position now, for a checkpoint in a bucket, taken without waiting for the
    /// store (flush the writers first): see [`ember_write::remote::LogCut`]. `None` where the
    /// log directory is local.
    pub(crate) fn cut_log(&self) -> Result<Option<LogCut>, SummaryError> {
        self.remote.as_ref().map(Mirror::cut).transpose()
    }
}
