//! The object-store half of [`Place`](super::place::Place): a prefix of a bucket, each file one
//! object, written by one PUT.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use ember_write::remote::Bucket;

use super::store::{Store, Unserved};
use crate::checkpoint::CheckpointError;

/// The store of the URL `url`; one that cannot be opened fails at each use, saying why.
pub(crate) fn open(url: &str) -> Arc<dyn Store> {
    match Bucket::open(url) {
        Ok(bucket) => Arc::new(Prefix(Arc::new(bucket))),
        Err(error) => Arc::new(Unserved(error.to_string())),
    }
}

#[derive(Debug)]
struct Prefix(Arc<Bucket>);

impl Store for Prefix {
    fn remote(&self) -> bool {
        true
    }

    fn names(&self) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .0
            .list()
            .map_err(io::Error::other)?
            .into_iter()
            .map(|listed| match listed.name.split_once('/') {
                Some((top, _)) => top.to_owned(),
                None => listed.name,
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.0.get(name).map_err(io::Error::other)
    }

    fn write(
        &self,
        name: &str,
        fill: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut bytes = Vec::new();
        fill(&mut bytes)?;
        self.0.put(name, bytes).map_err(io::Error::other)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.0.delete(name).map_err(io::Error::other)
    }

    /// Waits at most the lease's stale time to tell a live holder from a dead one.
    fn refuse_holder(&self, _: &Path, rank: u32) -> Result<(), CheckpointError> {
        let timing = ember_write::remote::LeaseTiming::default();
        Ok(ember_write::remote::check_lease(
            self.0.url(),
            rank,
            timing,
        )?)
    }
}
