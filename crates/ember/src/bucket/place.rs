//! The object-store half of a run's place (`run/place.rs`): a prefix of a bucket, each file one
//! object, written by one PUT; fenced by its run's lease where a record holds one.

use std::io;
use std::path::Path;
use std::sync::Arc;

use ember_write::remote::{Bucket, RemoteError};

use crate::SummaryRecord;
use crate::checkpoint::CheckpointError;
use crate::run::store::{Fill, Store, Unserved, failed};

/// The store of the URL `url`; one that cannot be opened fails at each use, saying why.
pub(crate) fn open(url: &str) -> Arc<dyn Store> {
    match Bucket::open(url) {
        Ok(bucket) => Arc::new(Prefix(Arc::new(bucket))),
        Err(error) => Arc::new(Unserved(error.to_string())),
    }
}

#[derive(Debug)]
struct Prefix(Arc<Bucket>);

/// The error of `op` on `name`: a lost lease as itself (the run is another writer's now, not
/// a store that failed), any other as the store's failure.
fn remote(op: &'static str, at: &Path, name: &str) -> impl FnOnce(RemoteError) -> CheckpointError {
    move |error| match error {
        RemoteError::LeaseLost { .. } => CheckpointError::Leased(error),
        error => failed(op, at, name, io::Error::other(error.to_string())),
    }
}

impl Store for Prefix {
    fn remote(&self) -> bool {
        true
    }

    fn names(&self, at: &Path) -> Result<Vec<String>, CheckpointError> {
        let mut names: Vec<String> = (self.0.list().map_err(remote("list", at, ""))?)
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

    fn read(&self, at: &Path, name: &str) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.0.get(name).map_err(remote("read", at, name))
    }

    fn write(&self, at: &Path, name: &str, fill: Fill<'_>) -> Result<(), CheckpointError> {
        let mut bytes = Vec::new();
        fill(&mut bytes).map_err(|e| failed("write", at, name, e))?;
        self.0.put(name, bytes).map_err(remote("write", at, name))
    }

    fn remove(&self, at: &Path, name: &str) -> Result<(), CheckpointError> {
        self.0.delete(name).map_err(remote("remove", at, name))
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

    fn fenced_by(&self, log: &SummaryRecord) -> Option<Arc<dyn Store>> {
        let claim = log.claim()?;
        Some(Arc::new(Self(Arc::new(self.0.fenced_by(claim)))))
    }
}
