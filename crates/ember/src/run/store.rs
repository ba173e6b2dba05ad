//! How a run's place stores its files: a local directory's or an object store's, behind one
//! trait, so that the choice is made once, where the place is made.

use std::fmt;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use crate::SummaryRecord;
use crate::checkpoint::CheckpointError;

/// What writes a file's bytes, for [`Store::write`]: called with where they go.
pub(crate) type Fill<'a> = &'a mut dyn FnMut(&mut dyn Write) -> io::Result<()>;

/// How a place's files are read and written: a local directory's or an object store's. Each
/// error names the file (`name` below the place's path `at`).
pub(crate) trait Store: Send + Sync + fmt::Debug {
    /// Whether this is an object store.
    fn remote(&self) -> bool;
    /// The names of the files (and, locally, directories) directly in the place; none when
    /// it does not exist.
    fn names(&self, at: &Path) -> Result<Vec<String>, CheckpointError>;
    /// The file `name`'s bytes; `None` when there is none.
    fn read(&self, at: &Path, name: &str) -> Result<Option<Vec<u8>>, CheckpointError>;
    /// Writes the file `name` whole, replacing any, with what `fill` writes.
    fn write(&self, at: &Path, name: &str, fill: Fill<'_>) -> Result<(), CheckpointError>;
    /// Removes the file `name`; one that is not there is no error.
    fn remove(&self, at: &Path, name: &str) -> Result<(), CheckpointError>;
    /// Refuses, naming it, a live writer of rank `rank` of the place: the holder of its lock,
    /// or of a bucket run's lease.
    fn refuse_holder(&self, at: &Path, rank: u32) -> Result<(), CheckpointError>;
    /// This store, writing only while `log`'s writer holds its run (a bucket's lease: none of
    /// its writes then replaces what another writer put there since); `None` where nothing
    /// but the place's own lock fences it.
    fn fenced_by(&self, log: &SummaryRecord) -> Option<Arc<dyn Store>>;
}

/// The error of operation `op` on `name` below `at`.
pub(crate) fn failed(
    op: &'static str,
    at: &Path,
    name: &str,
    source: io::Error,
) -> CheckpointError {
    CheckpointError::Io {
        op,
        path: if name.is_empty() {
            at.to_path_buf()
        } else {
            at.join(name)
        },
        source,
    }
}

/// A place no store of this build serves: every use fails, saying why.
#[derive(Debug, Clone)]
pub(crate) struct Unserved(pub(crate) String);

impl Unserved {
    fn error(&self, op: &'static str, at: &Path) -> CheckpointError {
        failed(op, at, "", io::Error::other(self.0.clone()))
    }
}

impl Store for Unserved {
    fn remote(&self) -> bool {
        true
    }

    fn names(&self, at: &Path) -> Result<Vec<String>, CheckpointError> {
        Err(self.error("list", at))
    }

    fn read(&self, at: &Path, _: &str) -> Result<Option<Vec<u8>>, CheckpointError> {
        Err(self.error("read", at))
    }

    fn write(&self, at: &Path, _: &str, _: Fill<'_>) -> Result<(), CheckpointError> {
        Err(self.error("write", at))
    }

    fn remove(&self, at: &Path, _: &str) -> Result<(), CheckpointError> {
        Err(self.error("remove", at))
    }

    fn refuse_holder(&self, at: &Path, _: u32) -> Result<(), CheckpointError> {
        Err(self.error("open", at))
    }

    fn fenced_by(&self, _: &SummaryRecord) -> Option<Arc<dyn Store>> {
        None
    }
}
