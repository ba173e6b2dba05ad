//! A record's methods of a log in a bucket: the claim on the run its checkpoints and model are
//! fenced by ([`SummaryRecord::claim`]) and what was shipped ([`SummaryRecord::remote_stats`]).
//! Its cut at a checkpoint is `log.rs`'s.

use ember_write::remote::{Claim, MirrorStats};

use super::mirror::Mirror;
use crate::SummaryRecord;

impl SummaryRecord {
    /// This record's claim on its run in a bucket (see [`Claim`]): what a writer of other
    /// objects under the run (checkpoints, the model) asks before it writes, or fences a
    /// [`Bucket`](ember_write::remote::Bucket) with. `None` for a local log directory, and
    /// once the record is closed (its lease released).
    pub fn claim(&self) -> Option<Claim> {
        self.remote.as_ref()?.claim()
    }

    /// What was shipped to the object store so far (after [`close`](Self::close), in all),
    /// when the log directory is a URL.
    pub fn remote_stats(&self) -> Option<MirrorStats> {
        self.remote.as_ref().and_then(Mirror::stats)
    }
}
