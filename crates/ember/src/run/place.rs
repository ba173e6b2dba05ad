//! A run's place: the directory that holds its files, a local one or a prefix of an object
//! store, read and written as whole files. Which of the two is chosen once, where a place is
//! made ([`Place::at`]); everything above asks the same questions of either, so that a local run
//! and a bucket run cannot disagree on what a file write or a listing means.
//!
//! A local file is written durably (a temporary file of this writer's own, fsynced, renamed, the
//! directory fsynced: [`ember_write::durable`]); an object by one PUT, so whole or absent either
//! way.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ember_write::durable;

use super::store::{Fill, Store, failed};
use crate::SummaryRecord;
use crate::checkpoint::CheckpointError;

/// A directory of a run's files (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    path: PathBuf,
    store: Arc<dyn Store>,
}

impl Place {
    /// The place `dir` names: an object store's prefix for a URL (`s3://…`, with the
    /// `object-store` feature; without it, or for a URL no store serves, every use fails
    /// saying so), else a local directory.
    pub(crate) fn at(dir: impl Into<PathBuf>) -> Self {
        let path = dir.into();
        let store = match path.to_str().filter(|d| ember_write::is_remote(d)) {
            Some(url) => crate::bucket::open_place(url),
            None => Arc::new(LocalDir) as Arc<dyn Store>,
        };
        Self { path, store }
    }

    /// The directory or URL.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the place is an object store's.
    pub(crate) fn remote(&self) -> bool {
        self.store.remote()
    }

    /// This place, written only while `log`'s writer holds its run (see [`Store::fenced_by`]).
    pub(crate) fn fenced_by(self, log: &SummaryRecord) -> Self {
        match self.store.fenced_by(log) {
            Some(store) => Self { store, ..self },
            None => self,
        }
    }

    /// Refuses, naming it, another live writer of rank `rank` here (see [`Store::refuse_holder`]).
    pub(crate) fn refuse_holder(&self, rank: u32) -> Result<(), CheckpointError> {
        self.store.refuse_holder(&self.path, rank)
    }

    /// The names directly in the place (none when it does not exist).
    pub(crate) fn names(&self) -> Result<Vec<String>, CheckpointError> {
        self.store.names(&self.path)
    }

    /// The file `name`'s bytes; `None` when there is none.
    pub(crate) fn read(&self, name: &str) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.store.read(&self.path, name)
    }

    /// Writes `bytes` as the file `name`, whole (see the module docs).
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.write_with(name, |out| out.write_all(bytes))
    }

    /// Writes the file `name` whole with what `fill` writes, without gathering it first on a
    /// local disk (a checkpoint may hold a model of hundreds of megabytes).
    pub(crate) fn write_with(
        &self,
        name: &str,
        mut fill: impl FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> Result<(), CheckpointError> {
        self.store.write(&self.path, name, &mut fill)
    }

    /// Removes the file `name`; one that is not there is no error.
    pub(crate) fn remove(&self, name: &str) -> Result<(), CheckpointError> {
        self.store.remove(&self.path, name)
    }
}

/// A local directory.
#[derive(Debug)]
struct LocalDir;

impl Store for LocalDir {
    fn remote(&self) -> bool {
        false
    }

    fn names(&self, at: &Path) -> Result<Vec<String>, CheckpointError> {
        let entries = match std::fs::read_dir(at) {
            Ok(entries) => entries,
            Err(e) if absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(failed("list", at, "", e)),
        };
        entries
            .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
            .collect::<io::Result<_>>()
            .map_err(|e| failed("list", at, "", e))
    }

    fn read(&self, at: &Path, name: &str) -> Result<Option<Vec<u8>>, CheckpointError> {
        match std::fs::read(at.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if absent(&e) => Ok(None),
            Err(e) => Err(failed("read", at, name, e)),
        }
    }

    fn write(&self, at: &Path, name: &str, fill: Fill<'_>) -> Result<(), CheckpointError> {
        durable::create_dir(at).map_err(|e| failed("create", at, "", e))?;
        durable::replace_with(&at.join(name), |tmp| {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(tmp)?;
            let mut buffered = io::BufWriter::with_capacity(1 << 20, file);
            fill(&mut buffered)?;
            buffered.flush()
        })
        .map_err(|e| failed("write", at, name, e))
    }

    fn remove(&self, at: &Path, name: &str) -> Result<(), CheckpointError> {
        match std::fs::remove_file(at.join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            removed => removed.map_err(|e| failed("remove", at, name, e)),
        }
    }

    fn refuse_holder(&self, at: &Path, rank: u32) -> Result<(), CheckpointError> {
        match ember_write::DirLock::holder(at, rank) {
            Some(holder) => Err(ember_write::LockError::Held {
                dir: at.to_path_buf(),
                holder,
            }
            .into()),
            None => Ok(()),
        }
    }

    fn fenced_by(&self, _: &SummaryRecord) -> Option<Arc<dyn Store>> {
        None
    }
}

/// Whether `error` says there is nothing at the path (or a file where a directory would be).
fn absent(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::store::Unserved;

    #[test]
    fn a_local_place_reads_back_what_it_wrote_and_lists_nothing_where_there_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::at(dir.path().join("run"));
        assert!(place.names().unwrap().is_empty());
        assert_eq!(place.read("a").unwrap(), None);
        place.write("a", b"one").unwrap();
        Place::at(dir.path().join("run/sub"))
            .write("b", b"two")
            .unwrap();
        let mut names = place.names().unwrap();
        names.sort();
        assert_eq!(names, ["a", "sub"]);
        assert_eq!(place.read("a").unwrap().as_deref(), Some(&b"one"[..]));
        let sub = Place::at(dir.path().join("run/sub"));
        assert_eq!(sub.read("b").unwrap().as_deref(), Some(&b"two"[..]));
        place.remove("a").unwrap();
        place.remove("a").unwrap();
        assert_eq!(place.read("a").unwrap(), None);
    }

    #[test]
    fn a_place_no_store_serves_fails_at_each_use_saying_why() {
        let place = Place {
            path: "s3://bucket/run".into(),
            store: Arc::new(Unserved("no store here".into())),
        };
        let message = place.names().unwrap_err().to_string();
        assert!(
            message.contains("s3://bucket/run") && message.contains("no store here"),
            "{message}"
        );
        assert!(place.write("a", b"x").is_err() && place.read("a").is_err());
    }
}
