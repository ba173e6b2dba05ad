//! A build without the `object-store` feature: the names of `bucket.rs`, none of which a value
//! can be made of. A URL is refused where a record ([`Mirror::start`]) or a run's place
//! ([`open_place`]) is made, and read nowhere; what would act on a bucket's values has none to
//! act on.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ember_write::FullQueuePolicy;

use crate::SummaryError;
use crate::read::ReadError;

pub use error::RemoteError;
#[cfg(feature = "burn")]
pub(crate) use error::lease_lost;
use unserved::UNSERVED;

/// What only a build with object stores offers.
pub(crate) mod exported {}

mod error {
    /// What an object store did wrong: nothing, in a build without object stores.
    #[derive(Debug)]
    pub enum RemoteError {}

    impl std::fmt::Display for RemoteError {
        fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match *self {}
        }
    }

    impl std::error::Error for RemoteError {}

    #[cfg(feature = "burn")]
    pub(crate) fn lease_lost(error: &RemoteError) -> bool {
        match *error {}
    }
}

mod unserved {
    /// Why a URL is refused.
    pub(super) const UNSERVED: &str = "this ember was built without the `object-store` feature";
}

pub(crate) fn download(url: &str, _: &Path) -> Result<usize, ReadError> {
    Err(unserved_read(url))
}

pub(crate) fn read_downloaded<T>(
    url: &str,
    _: impl FnOnce(&Path) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    Err(unserved_read(url))
}

fn unserved_read(url: &str) -> ReadError {
    ReadError::Remote {
        url: url.to_owned(),
        message: UNSERVED.into(),
    }
}

/// A record's mirror to a bucket: none.
#[derive(Debug)]
pub(crate) enum Mirror {}

impl Mirror {
    pub(crate) fn start(
        (url, _): (&str, Option<&str>),
        _: u32,
        _: (Option<u64>, FullQueuePolicy),
        _: Option<(Duration, Option<Arc<AtomicBool>>)>,
    ) -> Result<Self, SummaryError> {
        Err(SummaryError::RemoteUnsupported(url.to_owned()))
    }

    pub(crate) fn check_claim(&self) -> Result<(), SummaryError> {
        match *self {}
    }

    pub(crate) fn admit(&self) -> Result<bool, SummaryError> {
        match *self {}
    }

    pub(crate) fn staging(&self) -> &Path {
        match *self {}
    }

    pub(crate) fn ship(&self) -> Result<(), SummaryError> {
        match *self {}
    }

    pub(crate) fn close(&mut self) -> Result<(), SummaryError> {
        match *self {}
    }

    pub(crate) fn shipped_bytes(&self) -> Option<u64> {
        match *self {}
    }
}

#[cfg(feature = "burn")]
pub(crate) use runs::{
    LogSnapshot, PendingLog, Where, cut, decode_snapshot, empty_snapshot, open_place, restore, take,
};

/// A run's place and log in a bucket: none.
#[cfg(feature = "burn")]
mod runs {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use ember_write::Ownership;

    use super::unserved::UNSERVED;
    use crate::checkpoint::CheckpointError;
    use crate::faults::SummaryFaults;
    use crate::run::store::{Store, Unserved};
    use crate::{SummaryError, SummaryRecord};

    pub(crate) fn open_place(url: &str) -> Arc<dyn Store> {
        Arc::new(Unserved(format!("{url}: {UNSERVED}")))
    }

    /// A bucket log's snapshot: none.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum LogSnapshot {}

    impl LogSnapshot {
        pub(crate) fn encode(&self) -> String {
            match *self {}
        }
    }

    /// A log directory in a bucket: its URL, what to leave out, whose objects.
    pub(crate) type Where<'a> = (&'a Path, &'a [PathBuf], Ownership);

    pub(crate) fn empty_snapshot() -> Result<LogSnapshot, CheckpointError> {
        Err(unserved_checkpoint(Path::new("")))
    }

    pub(crate) fn decode_snapshot(_: &str) -> Option<Result<LogSnapshot, CheckpointError>> {
        None
    }

    pub(crate) fn take((url, ..): Where) -> Result<LogSnapshot, CheckpointError> {
        Err(unserved_checkpoint(url))
    }

    pub(crate) fn restore(_: Where, snapshot: &LogSnapshot) -> Result<(), CheckpointError> {
        match *snapshot {}
    }

    fn unserved_checkpoint(url: &Path) -> CheckpointError {
        CheckpointError::Io {
            op: "open",
            path: url.to_path_buf(),
            source: std::io::Error::other(UNSERVED),
        }
    }

    /// A bucket log's position at a checkpoint: none.
    pub(crate) enum PendingLog {}

    impl PendingLog {
        pub(crate) fn settled(
            self,
            _: Option<&LogSnapshot>,
            _: Where,
        ) -> Result<(LogSnapshot, Option<i64>), CheckpointError> {
            match self {}
        }
    }

    /// No record logs to a bucket here: nothing to cut.
    pub(crate) fn cut(
        _: &mut SummaryRecord,
        _: &mut SummaryFaults,
    ) -> Result<Option<PendingLog>, SummaryError> {
        Ok(None)
    }
}
