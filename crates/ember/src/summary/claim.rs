//! Whether a record may still write under its run ([`SummaryRecord::check_claim`]), for
//! builds with and without object stores alike: a module of its own (no record <-> remote
//! cycle).

use crate::{SummaryError, SummaryRecord};

impl SummaryRecord {
    /// Whether this record may still write under its run: always for a local log directory
    /// (its lock is the directory's), and for a run in a bucket while its lease holds (see
    /// `ember_write::remote::Claim::check`): a lease another writer took over is
    /// `SummaryError::Remote(RemoteError::LeaseLost)`. Asked before a write of one's own
    /// under the run, as [`DirLock::check`](ember_write::DirLock::check) is for a local one.
    pub fn check_claim(&self) -> Result<(), SummaryError> {
        #[cfg(feature = "object-store")]
        if let Some(remote) = &self.remote {
            return remote.check_claim();
        }
        Ok(())
    }
}
