//! Where a run's summary log is, to snapshot at a checkpoint and roll back to on resume: a
//! local directory (ember-write's [`LogSnapshot`]: every file's length) or, with the
//! `object-store` feature, a URL (its [`BucketSnapshot`](ember_write::remote::BucketSnapshot):
//! every object's name).

use std::path::{Path, PathBuf};

use ember_write::{LogSnapshot, Ownership};

use super::error::CheckpointError;
use crate::SummaryRecord;

/// Where the run's log directory is, to snapshot and roll back.
#[derive(Debug, Clone)]
pub(crate) struct LogPlace {
    pub(crate) dir: PathBuf,
    /// The checkpoint directory, relative to the log directory, when it is inside it.
    pub(crate) exclude: Vec<PathBuf>,
    pub(crate) ownership: Ownership,
}

/// A log's position at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Snapshot {
    /// A local directory's.
    Dir(LogSnapshot),
    /// An object-store log directory's.
    #[cfg(feature = "object-store")]
    Bucket(ember_write::remote::BucketSnapshot),
}

impl Snapshot {
    /// The position of a log that holds nothing yet: what starting over rolls back to.
    pub(crate) fn empty(place: &LogPlace) -> Self {
        #[cfg(feature = "object-store")]
        if place.remote() {
            return Self::Bucket(ember_write::remote::BucketSnapshot::default());
        }
        let _ = place;
        Self::Dir(LogSnapshot::default())
    }

    /// The snapshot as the text a checkpoint's `log` section holds.
    pub(crate) fn encode(&self) -> String {
        match self {
            Self::Dir(snapshot) => snapshot.encode(),
            #[cfg(feature = "object-store")]
            Self::Bucket(snapshot) => snapshot.encode(),
        }
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub(crate) fn decode(text: &str) -> Result<Self, CheckpointError> {
        #[cfg(feature = "object-store")]
        if ember_write::remote::BucketSnapshot::is_one(text) {
            return ember_write::remote::BucketSnapshot::decode(text)
                .map(Self::Bucket)
                .ok_or_else(|| {
                    CheckpointError::Rollback(ember_write::RollbackError::Malformed(
                        "a bucket snapshot that does not read back".into(),
                    ))
                });
        }
        Ok(Self::Dir(LogSnapshot::decode(text)?))
    }

    /// Makes the bytes the snapshot counts durable before the checkpoint relying on them is:
    /// an fsync of every file counted; a bucket's objects are durable once written.
    pub(crate) fn sync(&self, place: &LogPlace) -> Result<(), CheckpointError> {
        match self {
            Self::Dir(snapshot) => Ok(snapshot.sync(&place.dir)?),
            #[cfg(feature = "object-store")]
            Self::Bucket(_) => Ok(()),
        }
    }
}

impl LogPlace {
    pub(crate) fn of(summary: &SummaryRecord, checkpoints: &Path) -> Self {
        let dir = summary.log_dir().to_path_buf();
        let exclude = relative_to(checkpoints, &dir).into_iter().collect();
        Self {
            dir,
            exclude,
            ownership: summary.ownership(),
        }
    }

    /// Whether the log directory is an object-store URL.
    pub(crate) fn remote(&self) -> bool {
        self.dir.to_str().is_some_and(ember_write::is_remote)
    }

    /// The bucket of a URL log directory, and what to leave out of it.
    #[cfg(feature = "object-store")]
    fn bucket(&self) -> Result<(ember_write::remote::Bucket, Vec<String>), CheckpointError> {
        let url = self.dir.to_string_lossy();
        let bucket = ember_write::remote::Bucket::open(&url).map_err(|e| CheckpointError::Io {
            op: "open",
            path: self.dir.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let exclude = self
            .exclude
            .iter()
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .collect();
        Ok((bucket, exclude))
    }

    /// The log's position now (the caller has flushed it).
    pub(crate) fn take(&self) -> Result<Snapshot, CheckpointError> {
        #[cfg(feature = "object-store")]
        if self.remote() {
            let (bucket, exclude) = self.bucket()?;
            return ember_write::remote::BucketSnapshot::take(&bucket, &exclude, self.ownership)
                .map(Snapshot::Bucket)
                .map_err(|e| self.remote_err(e));
        }
        Ok(Snapshot::Dir(LogSnapshot::take(
            &self.dir,
            &self.exclude,
            self.ownership,
        )?))
    }

    #[cfg(feature = "object-store")]
    fn remote_err(&self, error: ember_write::remote::RemoteError) -> CheckpointError {
        CheckpointError::Io {
            op: "snapshot or roll back",
            path: self.dir.clone(),
            source: std::io::Error::other(error.to_string()),
        }
    }

    /// Rolls the log back to `snapshot`, leaving the files `summary` has made already.
    pub(crate) fn roll_back(
        &self,
        snapshot: &Snapshot,
        summary: &SummaryRecord,
    ) -> Result<(), CheckpointError> {
        // Without the `object-store` feature a snapshot is always a directory's.
        #[allow(clippy::infallible_destructuring_match)]
        let snapshot = match snapshot {
            Snapshot::Dir(snapshot) => snapshot,
            #[cfg(feature = "object-store")]
            Snapshot::Bucket(snapshot) => {
                let (bucket, exclude) = self.bucket()?;
                let removed = snapshot
                    .restore(&bucket, &exclude, self.ownership)
                    .map_err(|e| self.remote_err(e))?;
                log::info!(
                    "rolled {} back to the checkpoint: {} object(s) removed",
                    self.dir.display(),
                    removed.len()
                );
                return Ok(());
            }
        };
        let keep: Vec<PathBuf> = summary
            .stats()
            .map(|stats| {
                stats
                    .writers
                    .iter()
                    .filter_map(|w| w.path.as_deref())
                    .filter_map(|p| relative_to(p, &self.dir))
                    .collect()
            })
            .unwrap_or_default();
        let restored = snapshot.restore(&self.dir, &self.exclude, &keep, self.ownership)?;
        for path in &restored.shorter {
            log::warn!(
                "{} is shorter than when the checkpoint was taken (the machine went down before \
                 its bytes reached the disk): its last records are lost",
                self.dir.join(path).display()
            );
        }
        Ok(())
    }
}

fn relative_to(path: &Path, base: &Path) -> Option<PathBuf> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    absolute(path)
        .strip_prefix(absolute(base))
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
}
