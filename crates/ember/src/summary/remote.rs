//! A record whose log directory is an object-store URL (the `object-store` feature): its pool
//! writes a private staging directory, which ember-write's
//! [`RemoteMirror`](ember_write::remote::RemoteMirror) ships to the store as segment objects;
//! see that module for the layout and what a reader sees when. The mirror holds the run's lease:
//! once another writer has taken it over, the record takes no record more and says why
//! ([`RemoteError::LeaseLost`]), and its staging directory goes at the close.

use std::path::{Path, PathBuf};

use ember_write::FullQueuePolicy;
use ember_write::remote::{
    Claim, DEFAULT_SHIP_INTERVAL, LeaseTiming, MirrorStats, RemoteError, RemoteMirror, Wait,
};

use crate::SummaryError;

/// The staging directory and the mirror of one record.
#[derive(Debug)]
pub(super) struct Remote {
    mirror: Option<RemoteMirror>,
    /// The mirror's claim on the run, which outlives its close.
    claim: Option<Claim>,
    staging: PathBuf,
    /// Held while this record writes: `ember push` leaves a live writer's staging alone.
    _lock: ember_write::DirLock,
    /// How long a blocked record waits for the store, and what ends the wait early.
    wait: Wait,
    /// Bytes that may wait for the store before `policy` decides about the next record.
    budget: u64,
    policy: FullQueuePolicy,
    /// The mirror's counters as its close left them.
    final_stats: Option<MirrorStats>,
}

impl Remote {
    /// Makes a staging directory (private to this user, of a random name, locked while this
    /// record writes) and starts mirroring it to `url`, holding `rank`'s lease on the run (see
    /// [`ember_write::remote::LeaseTiming`]): a store that cannot be reached or refuses the
    /// credentials, or a run another process holds, is an error here, before anything is
    /// written.
    pub(super) fn start(
        url: &str,
        rank: u32,
        (budget, policy): (u64, FullQueuePolicy),
        wait: Wait,
    ) -> Result<Self, SummaryError> {
        let staging = ember_write::remote::new_staging()?;
        let lock = ember_write::DirLock::acquire(&staging, 0)?;
        let lease = (rank, LeaseTiming::default());
        let mirror = match RemoteMirror::start_leased(url, &staging, DEFAULT_SHIP_INTERVAL, lease) {
            Ok(mirror) => mirror,
            Err(error) => {
                drop(lock);
                let _ = std::fs::remove_dir_all(&staging);
                return Err(error.into());
            }
        };
        Ok(Self {
            claim: mirror.claim().cloned(),
            mirror: Some(mirror),
            staging,
            _lock: lock,
            budget,
            policy,
            wait,
            final_stats: None,
        })
    }

    /// The mirror's claim on the run while it lives (its lease released at the close).
    pub(super) fn claim(&self) -> Option<Claim> {
        self.mirror.as_ref()?;
        self.claim.clone()
    }

    /// Whether this writer may write under the run now: see [`Claim::check`].
    pub(super) fn check_claim(&self) -> Result<(), SummaryError> {
        match &self.claim {
            Some(claim) => Ok(claim.check()?),
            None => Ok(()),
        }
    }

    /// [`RemoteError::LeaseLost`] once another writer has taken the run over; `Ok` otherwise,
    /// for records go to the staging directory, not the store, whatever the store's state.
    fn not_lost(&self) -> Result<(), SummaryError> {
        match self.check_claim() {
            Err(SummaryError::Remote(error @ RemoteError::LeaseLost { .. })) => Err(error.into()),
            _ => Ok(()),
        }
    }

    /// Whether the next record may go to the pool: see [`RemoteMirror::admit`].
    pub(super) fn admit(&self) -> Result<bool, SummaryError> {
        self.not_lost()?;
        match &self.mirror {
            Some(mirror) => Ok(mirror.admit_within(self.policy, self.budget, &self.wait)?),
            None => Ok(true),
        }
    }

    /// Where the pool writes.
    pub(super) fn staging(&self) -> &Path {
        &self.staging
    }

    /// Ships every whole record written so far; returns once it is in the store.
    pub(super) fn ship(&self) -> Result<(), SummaryError> {
        self.not_lost()?;
        match &self.mirror {
            Some(mirror) => mirror.ship().map_err(|message| SummaryError::RemoteShip {
                url: mirror.url().to_owned(),
                message,
            }),
            None => Ok(()),
        }
    }

    /// The log's position now: see [`RemoteMirror::cut`].
    pub(super) fn cut(&self) -> Result<ember_write::remote::LogCut, SummaryError> {
        self.not_lost()?;
        let mirror = self.mirror.as_ref().ok_or(SummaryError::Closed)?;
        mirror.cut().map_err(|message| SummaryError::RemoteShip {
            url: mirror.url().to_owned(),
            message,
        })
    }

    /// What takes the log's cuts on the writer pool's thread: see [`RemoteMirror::cutter`].
    pub(super) fn cutter(&self) -> Result<ember_write::remote::Cutter, SummaryError> {
        self.not_lost()?;
        let mirror = self.mirror.as_ref().ok_or(SummaryError::Closed)?;
        mirror.cutter().map_err(|message| SummaryError::RemoteShip {
            url: mirror.url().to_owned(),
            message,
        })
    }

    /// What was shipped so far.
    pub(super) fn stats(&self) -> Option<MirrorStats> {
        self.mirror
            .as_ref()
            .map(RemoteMirror::stats)
            .or(self.final_stats)
    }

    /// Ships what is left and stops; the staging directory is removed once everything in it
    /// is in the store, and kept (and named in the error) otherwise. Once another writer has
    /// taken the run over, what the staging holds came after the new holder's checkpoint and
    /// must never reach the store: it is removed, and the close says why.
    pub(super) fn close(&mut self) -> Result<(), SummaryError> {
        let Some(mirror) = self.mirror.take() else {
            return Ok(());
        };
        let url = mirror.url().to_owned();
        self.final_stats = Some(mirror.stats());
        let closed = mirror.close();
        if let Err(lost) = self.not_lost() {
            let _ = std::fs::remove_dir_all(&self.staging);
            return Err(lost);
        }
        match closed {
            Ok(stats) => {
                self.final_stats = Some(stats);
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

#[cfg(test)]
mod tests {
    use std::fs;

    use ember_write::FullQueuePolicy;

    use crate::SummaryRecord;

    #[test]
    fn over_its_budget_a_record_follows_the_queue_policy_and_ships_all_it_accepted() {
        let bucket = tempfile::tempdir().unwrap();
        let prefix = bucket.path().join("run");
        fs::create_dir_all(&prefix).unwrap();
        let url = format!("file://{}", prefix.display());
        let mut record = SummaryRecord::builder(&url)
            .queue(1024, FullQueuePolicy::DropNewest)
            .remote_backlog_budget(1)
            .build()
            .unwrap();
        record.add_scalar("loss", 1.0, 1).unwrap();
        record.flush().unwrap();
        // The store goes away: its directory is moved aside for a file, and every upload fails.
        let aside = bucket.path().join("aside");
        fs::rename(&prefix, &aside).unwrap();
        fs::write(&prefix, b"").unwrap();
        record.add_scalar("loss", 2.0, 2).unwrap();
        assert!(record.flush().is_err(), "shipped to a store that is gone");
        for step in 3..=5 {
            record.add_scalar("loss", step as f64, step).unwrap();
        }
        let stats = record.remote_stats().unwrap();
        assert_eq!(stats.records_over_budget, 3);
        assert!(stats.backlog_bytes > 1);
        // Back again: the close ships what was accepted.
        fs::remove_file(&prefix).unwrap();
        fs::rename(&aside, &prefix).unwrap();
        record.close().unwrap();
        let shipped = record.remote_stats().unwrap();
        assert!(shipped.segments >= 2 && shipped.bytes > 0, "{shipped:?}");
        let read = crate::read::Summaries::read_dir(&url).unwrap();
        let steps: Vec<i64> = read.scalars["loss"].iter().map(|p| p.step).collect();
        assert_eq!(steps, [1, 2]);
        assert_eq!(record.stats().unwrap().records_written, 2);
    }

    #[test]
    fn ranks_share_a_url_each_with_its_own_files() {
        use crate::RankLayout;
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        fs::create_dir_all(bucket.path().join("run")).unwrap();
        for layout in [RankLayout::FileName, RankLayout::Directory] {
            let mut records: Vec<SummaryRecord> = (0..2)
                .map(|rank| {
                    SummaryRecord::builder(&url)
                        .rank(rank, 2)
                        .rank_layout(layout)
                        .build()
                        .unwrap()
                })
                .collect();
            for step in 1..=3 {
                for (rank, record) in records.iter_mut().enumerate() {
                    let tag = format!("{layout:?}/rank{rank}");
                    record.add_scalar(&tag, step as f64, step).unwrap();
                }
            }
            for record in &mut records {
                record.close().unwrap();
            }
        }
        let by_name = crate::read::Summaries::read_dir(&url).unwrap();
        for rank in 0..2 {
            let steps: Vec<i64> = by_name.scalars[&format!("FileName/rank{rank}")]
                .iter()
                .map(|p| p.step)
                .collect();
            assert_eq!(steps, [1, 2, 3], "rank {rank}");
            let own = crate::read::Summaries::read_dir(format!("{url}/rank_{rank}")).unwrap();
            let steps: Vec<i64> = own.scalars[&format!("Directory/rank{rank}")]
                .iter()
                .map(|p| p.step)
                .collect();
            assert_eq!(steps, [1, 2, 3], "rank {rank}'s directory");
            assert_eq!(own.scalars.len(), 1);
        }
    }

    #[test]
    fn exports_and_the_projector_reach_the_store_as_written_locally() {
        let bucket = tempfile::tempdir().unwrap();
        let local = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        fs::create_dir_all(bucket.path().join("run")).unwrap();
        for dir in [url.clone(), local.path().display().to_string()] {
            let mut record = SummaryRecord::builder(&dir)
                .export_tensors(true)
                .build()
                .unwrap();
            record
                .add_tensor("weights/l1", &[1.0f32, 2.0, 3.0][..], 7)
                .unwrap();
            let labels = Some(vec!["a".to_owned(), "b".to_owned()]);
            record
                .add_embedding(
                    "hidden",
                    ember_write::pack::TensorValue::from_slice(&[0.5f32, 1.5, 2.5, 3.5], [2, 2]),
                    labels,
                    None,
                    7,
                )
                .unwrap();
            record.close().unwrap();
        }
        // Every file the local run has besides its event files is in the bucket, byte for byte
        // (an export directory is named after the second it was made in: that part aside).
        let files = |root: &std::path::Path| {
            let mut found = std::collections::BTreeMap::new();
            let mut dirs = vec![root.to_path_buf()];
            while let Some(dir) = dirs.pop() {
                for entry in fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.ends_with(".ember-locks")
                        || path.ends_with(ember_write::journal::RUN_DIR)
                    {
                        // The record's lock and journal of its local directory: not the log's.
                        continue;
                    }
                    if path.is_dir() {
                        dirs.push(path);
                        continue;
                    }
                    let name = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    if name.contains("tfevents") {
                        continue;
                    }
                    let name = match name.split_once('/') {
                        Some((first, rest)) if first.starts_with("export_") => {
                            format!("export_*/{rest}")
                        }
                        _ => name,
                    };
                    found.insert(name, fs::read(&path).unwrap());
                }
            }
            found
        };
        let written = files(local.path());
        assert_eq!(files(&bucket.path().join("run")), written);
        let compared = written.len();
        assert!(compared >= 4, "only {compared} files compared");
    }
}
