//! Where a run's summary log is, to snapshot at a checkpoint and roll back to on resume: a
//! local directory (ember-write's [`LogSnapshot`]: the length of every file the run's
//! [`Journal`](ember_write::Journal) lists, so that a rollback touches only what the run
//! wrote, never another tool's file, a copy or an empty directory) or, with the `object-store`
//! feature, a URL (its [`BucketSnapshot`](ember_write::remote::BucketSnapshot): every object's
//! name, told the run's by the marker its writers put before a file's first object, so that
//! another tool's object or a copy beside the run's is never rolled back).
//!
//! A checkpoint taken with no summary record holds an empty `log` section: no position of the
//! log ([`Snapshot::Unrecorded`]). Resumed with a record whose log holds files the run wrote,
//! it is refused before anything changes ([`CheckpointError::LogNotRecorded`]): taking it for
//! an empty log would remove them all. A checkpoint with no `log` section at all is refused as
//! well, when the resume has a record (`trainer::checkpointing::snapshot_of`).

use std::path::{Path, PathBuf};

use ember_write::{LogSnapshot, Ownership};

use super::error::CheckpointError;
use crate::{SummaryRecord, bucket};

/// Where the run's log directory is, to snapshot and roll back.
#[derive(Debug, Clone)]
pub(crate) struct LogPlace {
    pub(crate) dir: PathBuf,
    /// The checkpoint directory, relative to the log directory, when it is inside it.
    pub(crate) exclude: Vec<PathBuf>,
    pub(crate) ownership: Ownership,
    /// A bucket's objects of this run when it began writing (after a resume's rollback): a
    /// checkpoint's snapshot is these and what the mirror shipped since, up to its cut.
    pub(crate) base: Option<bucket::LogSnapshot>,
}

/// A log's position at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Snapshot {
    /// A local directory's.
    Dir(LogSnapshot),
    /// An object-store log directory's.
    Bucket(bucket::LogSnapshot),
    /// None: the checkpoint was taken with no summary record.
    Unrecorded,
}

impl Snapshot {
    /// The position of a log that holds nothing yet: what a restart rolls back to.
    pub(crate) fn empty(place: &LogPlace) -> Result<Self, CheckpointError> {
        Ok(match place.remote() {
            true => Self::Bucket(bucket::empty_snapshot()?),
            false => Self::Dir(LogSnapshot::default()),
        })
    }

    /// The snapshot as the text a checkpoint's `log` section holds.
    pub(crate) fn encode(&self) -> String {
        match self {
            Self::Dir(snapshot) => snapshot.encode(),
            Self::Bucket(snapshot) => snapshot.encode(),
            Self::Unrecorded => String::new(),
        }
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub(crate) fn decode(text: &str) -> Result<Self, CheckpointError> {
        if text.is_empty() {
            return Ok(Self::Unrecorded);
        }
        if let Some(snapshot) = bucket::decode_snapshot(text) {
            return snapshot.map(Self::Bucket);
        }
        Ok(Self::Dir(LogSnapshot::decode(text)?))
    }

    /// Makes the bytes the snapshot counts durable before the checkpoint relying on them is:
    /// an fsync of every file counted; a bucket's objects are durable once written.
    pub(crate) fn sync(&self, place: &LogPlace) -> Result<(), CheckpointError> {
        match self {
            Self::Dir(snapshot) => Ok(snapshot.sync(&place.dir)?),
            Self::Bucket(_) | Self::Unrecorded => Ok(()),
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
            base: None,
        }
    }

    /// This place, a bucket's objects of the run now recorded as what the run's checkpoints
    /// add their shipped cuts to: one listing, when the run begins writing (after its
    /// rollback), instead of one at every checkpoint.
    pub(crate) fn with_base(mut self) -> Result<Self, CheckpointError> {
        if self.remote() {
            self.base = Some(bucket::take(self.bucket())?);
        }
        Ok(self)
    }

    /// Where in a bucket the log is, as the bucket's door takes it.
    pub(crate) fn bucket(&self) -> bucket::Where<'_> {
        (&self.dir, &self.exclude, self.ownership)
    }

    /// This place for a job of `world` ranks whose log `ranks` ranks wrote: where they were
    /// more (a job resumed with fewer ranks than began it), a rollback takes a missing rank's
    /// files for that rank's, not a stranger's.
    pub(crate) fn among_ranks(&self, ranks: usize, world: usize) -> Self {
        let mut place = self.clone();
        if ranks > world {
            place.ownership.world_size = u32::try_from(ranks).unwrap_or(u32::MAX);
        }
        place
    }

    /// Whether the log directory is an object-store URL.
    pub(crate) fn remote(&self) -> bool {
        self.dir.to_str().is_some_and(ember_write::is_remote)
    }

    /// The log's position now (the caller has flushed it).
    pub(crate) fn take(&self) -> Result<Snapshot, CheckpointError> {
        if self.remote() {
            return Ok(Snapshot::Bucket(bucket::take(self.bucket())?));
        }
        Ok(Snapshot::Dir(LogSnapshot::take(
            &self.dir,
            &self.exclude,
            self.ownership,
        )?))
    }

    /// Rolls the log back to `snapshot`, leaving the files `summary` has made already.
    pub(crate) fn roll_back(
        &self,
        snapshot: &Snapshot,
        summary: &SummaryRecord,
    ) -> Result<(), CheckpointError> {
        let snapshot = match snapshot {
            Snapshot::Dir(snapshot) => snapshot,
            Snapshot::Unrecorded => return self.check_unrecorded(summary),
            Snapshot::Bucket(snapshot) => return bucket::restore(self.bucket(), snapshot),
        };
        let keep = self.kept(summary);
        if snapshot.is_legacy() {
            log::warn!(
                "the checkpoint of {} was written before ember listed the files a run makes: its \
                 files are cut back to their lengths then, and nothing is removed (an event file \
                 written after it, left in place, may show its steps twice)",
                self.dir.display()
            );
        }
        let restored = snapshot.restore(&self.dir, &self.exclude, &keep, self.ownership)?;
        for path in &restored.left {
            log::warn!(
                "{} looks like an event file but this run did not write it: left as it is (a \
                 reader of the directory may show its steps beside the run's)",
                self.dir.join(path).display()
            );
        }
        for path in &restored.shorter {
            log::warn!(
                "{} is shorter than when the checkpoint was taken (the machine went down before \
                 its bytes reached the disk): its last records are lost",
                self.dir.join(path).display()
            );
        }
        Ok(())
    }

    /// The files `summary`'s writers have made already, relative to the log directory.
    fn kept(&self, summary: &SummaryRecord) -> Vec<PathBuf> {
        summary
            .stats()
            .map(|stats| {
                stats
                    .writers
                    .iter()
                    .filter_map(|w| w.path.as_deref())
                    .filter_map(|p| relative_to(p, &self.dir))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A checkpoint with no position of the log is resumed only where the log holds nothing
    /// the run wrote before (`summary`'s own new files aside): then there is nothing to roll
    /// back. A bucket, which has no journal, is left as it is, with a warning.
    fn check_unrecorded(&self, summary: &SummaryRecord) -> Result<(), CheckpointError> {
        if self.remote() {
            log::warn!(
                "the checkpoint holds no position of the log {} (taken with no summary record): \
                 the log is left as it is",
                self.dir.display()
            );
            return Ok(());
        }
        let keep = self.kept(summary);
        let made = ember_write::Journal::read(&self.dir, self.ownership.rank)
            .map_err(ember_write::RollbackError::from)?
            .unwrap_or_default();
        let files = made
            .files
            .iter()
            .filter(|file| !keep.iter().any(|k| file.starts_with(k)))
            .filter(|file| self.dir.join(file).is_file())
            .count();
        match files {
            0 => Ok(()),
            files => Err(CheckpointError::LogNotRecorded {
                dir: self.dir.clone(),
                files,
            }),
        }
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

#[cfg(test)]
mod tests {
    use ember_tests::event_files;

    use super::*;

    /// Issue 41: a checkpoint taken with no summary record, resumed with one, used to roll the
    /// log back to nothing and remove the run's event file.
    #[test]
    fn no_log_position_is_refused_where_the_log_holds_the_runs_files() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let checkpoints = log.join("checkpoints");
        let build = || SummaryRecord::builder(&log).rank(0, 1).build().unwrap();
        // Into a log that holds nothing of the run's: nothing to roll back, nothing refused.
        let mut record = build();
        let place = LogPlace::of(&record, &checkpoints);
        place.roll_back(&Snapshot::Unrecorded, &record).unwrap();
        record.add_scalar("loss", 1.0, 1).unwrap();
        record.close().unwrap();
        let written = event_files(&log);
        assert_eq!(written.len(), 1, "{written:?}");
        let bytes = std::fs::read(&written[0]).unwrap();

        let mut record = build();
        let unrecorded = Snapshot::decode("").unwrap();
        let error = place.roll_back(&unrecorded, &record).unwrap_err();
        assert!(
            matches!(error, CheckpointError::LogNotRecorded { files: 1, .. }),
            "{error}"
        );
        assert_eq!(event_files(&log), written);
        assert_eq!(std::fs::read(&written[0]).unwrap(), bytes);
        record.close().unwrap();
    }
}
