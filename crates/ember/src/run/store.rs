//! How a run's place stores its files: a local directory's or an object store's, behind one
//! trait, so that the choice is made once, where the place is made.

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use crate::checkpoint::CheckpointError;

/// How a place's files are read and written: a local directory's or an object store's.
pub(crate) trait Store: Send + Sync + fmt::Debug {
    /// Whether this is an object store.
    fn remote(&self) -> bool;
    /// The names of the files (and, locally, directories) directly in the place; none when
    /// it does not exist.
    fn names(&self) -> io::Result<Vec<String>>;
    /// The file `name`'s bytes; `None` when there is none.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Writes the file `name` whole, replacing any, with what `fill` writes.
    fn write(
        &self,
        name: &str,
        fill: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()>;
    /// Removes the file `name`; one that is not there is no error.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Refuses, naming it, a live writer of rank `rank` of the place (`dir`): the holder of its
    /// lock, or of a bucket run's lease.
    fn refuse_holder(&self, dir: &Path, rank: u32) -> Result<(), CheckpointError>;
}

/// A place no store of this build serves: every use fails, saying why.
#[derive(Debug, Clone)]
pub(crate) struct Unserved(pub(crate) String);

impl Unserved {
    fn error(&self) -> io::Error {
        io::Error::other(self.0.clone())
    }
}

impl Store for Unserved {
    fn remote(&self) -> bool {
        true
    }

    fn names(&self) -> io::Result<Vec<String>> {
        Err(self.error())
    }

    fn read(&self, _: &str) -> io::Result<Option<Vec<u8>>> {
        Err(self.error())
    }

    fn write(
        &self,
        _: &str,
        _: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        Err(self.error())
    }

    fn remove(&self, _: &str) -> io::Result<()> {
        Err(self.error())
    }

    fn refuse_holder(&self, dir: &Path, _: u32) -> Result<(), CheckpointError> {
        Err(CheckpointError::Io {
            op: "open",
            path: dir.to_path_buf(),
            source: self.error(),
        })
    }
}
