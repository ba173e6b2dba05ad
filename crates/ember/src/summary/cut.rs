//! A bucket log's cut at a checkpoint, taken by the record's writer pool in order with the
//! records ([`SummaryRecord::cut_log_in_order`]), and the claim on the run the checkpoints are
//! fenced by ([`SummaryRecord::claim`]): the record's methods of a bucket log alone.

use ember_write::remote::{Claim, LogCut};

use crate::{SummaryError, SummaryRecord};

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

    /// This record's claim on its run in a bucket (see [`Claim`]): what a writer of other
    /// objects under the run (checkpoints, the model) asks before it writes, or fences a
    /// [`Bucket`](ember_write::remote::Bucket) with. `None` for a local log directory, and
    /// once the record is closed (its lease released).
    pub fn claim(&self) -> Option<Claim> {
        self.remote.as_ref()?.claim()
    }
}
