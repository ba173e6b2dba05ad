//! Whether a record may still write under its run ([`SummaryRecord::check_claim`]), and what
//! it shipped: a module of its own (no record <-> bucket cycle).

use crate::{SummaryError, SummaryRecord};

impl SummaryRecord {
    /// Whether this record may still write under its run: always for a local log directory
    /// (its lock is the directory's), and for a run in a bucket while its lease holds (see
    /// `ember_write::remote::Claim::check`): a lease another writer took over is
    /// `SummaryError::Remote(RemoteError::LeaseLost)`. Asked before a write of one's own
    /// under the run, as [`DirLock::check`](ember_write::DirLock::check) is for a local one.
    pub fn check_claim(&self) -> Result<(), SummaryError> {
        match &self.remote {
            Some(remote) => remote.check_claim(),
            None => Ok(()),
        }
    }

    /// The bytes shipped to the object store so far (after [`close`](Self::close), in all),
    /// when the log directory is a URL; `None` for a local one.
    pub fn shipped_bytes(&self) -> Option<u64> {
        self.remote.as_ref()?.shipped_bytes()
    }
}
