//! A record whose log directory is an object-store URL (the `object-store` feature): its pool
//! writes a private staging directory, which ember-write's
//! [`RemoteMirror`](ember_write::remote::RemoteMirror) ships to the store as segment objects;
//! see that module for the layout and what a reader sees when.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ember_write::remote::{DEFAULT_SHIP_INTERVAL, MirrorStats, RemoteMirror};

use crate::SummaryError;

/// The staging directory and the mirror of one record.
#[derive(Debug)]
pub(super) struct Remote {
    mirror: Option<RemoteMirror>,
    staging: PathBuf,
}

impl Remote {
    /// Makes a staging directory and starts mirroring it to `url`: a store that cannot be
    /// reached or refuses the credentials is an error here, before anything is written.
    pub(super) fn start(url: &str) -> Result<Self, SummaryError> {
        static RECORDS: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let staging = std::env::temp_dir().join("ember-staging").join(format!(
            "{}-{nanos}-{}",
            std::process::id(),
            RECORDS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&staging).map_err(|source| SummaryError::Staging {
            path: staging.clone(),
            source,
        })?;
        let mirror = RemoteMirror::start(url, &staging, DEFAULT_SHIP_INTERVAL)?;
        Ok(Self {
            mirror: Some(mirror),
            staging,
        })
    }

    /// Where the pool writes.
    pub(super) fn staging(&self) -> &Path {
        &self.staging
    }

    /// Ships every whole record written so far; returns once it is in the store.
    pub(super) fn ship(&self) -> Result<(), SummaryError> {
        match &self.mirror {
            Some(mirror) => mirror.ship().map_err(|message| SummaryError::RemoteShip {
                url: mirror.url().to_owned(),
                message,
            }),
            None => Ok(()),
        }
    }

    /// What was shipped so far.
    pub(super) fn stats(&self) -> Option<MirrorStats> {
        self.mirror.as_ref().map(RemoteMirror::stats)
    }

    /// Ships what is left and stops; the staging directory is removed once everything in it
    /// is in the store, and kept (and named in the error) otherwise.
    pub(super) fn close(&mut self) -> Result<(), SummaryError> {
        let Some(mirror) = self.mirror.take() else {
            return Ok(());
        };
        let url = mirror.url().to_owned();
        match mirror.close() {
            Ok(_) => {
                let _ = std::fs::remove_dir_all(&self.staging);
                Ok(())
            }
            Err(message) => Err(SummaryError::RemoteShip {
                url,
                message: format!(
                    "{message}; what was not shipped stays in {}",
                    self.staging.display()
                ),
            }),
        }
    }
}
