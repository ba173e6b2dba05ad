//! Log directories in an object store (`s3://`, `gs://`, `az://`, `file://`), with the
//! `object-store` feature: [`RemoteMirror`].
//!
//! An object cannot be appended to. The writer pool writes into a local staging directory as
//! it always does, and the mirror ships it:
//!
//! - each event file's new whole records, as they come, as *segment objects*:
//!   `<prefix>/<file name>.<segment, 8 digits>`, each holding the records written since the
//!   previous segment of that file, never cut inside one;
//! - every other file (exported `.npy` tensors, the projector's config and tensors) whole,
//!   under its own name, once it is whole, and again when it changes.
//!
//! So:
//!
//! - the bytes uploaded are the bytes written, once each (not the whole growing file again at
//!   every flush, as tensorboardX's `s3://` writer does);
//! - names sort in write order (a file's segments by number, files by their names, which the
//!   pool makes sort in creation order), which is the order TensorBoard reads the event files of
//!   a run directory in: its readers see one ordered stream;
//! - a segment is written by one PUT, which the store makes visible whole or not at all, so a
//!   writer killed at any moment leaves only whole records in the bucket;
//! - what is accepted reaches the bucket within the shipping interval (and the time to upload
//!   it) after the pool has written it, and at once when [`ship`](RemoteMirror::ship) is
//!   called (a flush, a close);
//! - shipped records leave the local disk (a hole is punched where they were, on Linux), so
//!   the staging directory holds about what is not in the store yet.
//!
//! Credentials, endpoint and region come from the environment as the `object_store` crate reads
//! them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ALLOW_HTTP`, `GOOGLE_APPLICATION_CREDENTIALS`, …); signing, retries with backoff and
//! multipart uploads are that crate's. An upload that still fails is tried again at the next
//! interval: the staging directory keeps what is not yet shipped, so a store that is down for a
//! while loses nothing. What waits is bounded by a budget of bytes; past it the pool's
//! [`FullQueuePolicy`] decides about the next record ([`RemoteMirror::admit`]). The store is
//! tried when the mirror starts: a store that cannot be reached, a bucket that does not exist
//! or credentials it refuses are a [`RemoteError`] there, before any training.
//!
//! A run in a bucket has no directory to lock: [`RemoteMirror::start_leased`] holds a lease
//! instead, an object in the run's prefix that a second writer finds live and is refused by,
//! renewed while the mirror lives and taken over once stale; see [`lease`] for its timing and
//! takeover rule, and [`check_lease`] for the check an admission makes before anything is
//! written. Nor has it a journal of the files its writers made: before a file's first object,
//! the mirror puts an empty marker (`markers`), and a rollback ([`BucketSnapshot`]) removes
//! only objects of marked files.
//!
//! The pool's size cap keeps its meaning (a file's bytes, which are the bytes uploaded for
//! it); its free-space guard watches the staging disk, the only disk there is to fill.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::FullQueuePolicy;

mod bucket;
mod download;
pub mod lease;
mod markers;
mod shipper;
pub(crate) mod staging;

pub use bucket::{Bucket, BucketSnapshot, Listed};
pub use download::{Downloaded, download, download_private};
pub use lease::{LeaseHolder, LeaseTiming, check_lease};
use shipper::Shipper;
pub use staging::{new_staging, staging_parent};

mod messages;
mod store;

use messages::Request;
pub use messages::{CLOSE_PATIENCE, MirrorStats};
pub use store::RemoteError;
use store::{open_store, probe};

/// How long a record blocked by a backlog over its budget waits for the store by default.
pub const DEFAULT_BLOCK_DEADLINE: Duration = Duration::from_secs(300);

/// How long [`RemoteMirror::admit_within`] may block, and the flag that ends the wait early.
#[derive(Debug, Clone)]
pub struct Wait {
    /// The longest wait.
    pub deadline: Duration,
    /// Set (by a Ctrl-C handler, say) to stop waiting at once.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for Wait {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_BLOCK_DEADLINE,
            stop: None,
        }
    }
}

/// How often the mirror ships what the pool has written, unless asked sooner.
pub const DEFAULT_SHIP_INTERVAL: Duration = Duration::from_secs(2);

/// The default budget of bytes written and not yet in the store: past it, the pool's
/// [`FullQueuePolicy`] decides what happens to the next record (see [`RemoteMirror::admit`]).
pub const DEFAULT_BACKLOG_BUDGET: u64 = 256 << 20;

/// Ships a staging directory's event files to an object store; see the module docs.
#[derive(Debug)]
pub struct RemoteMirror {
    url: String,
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<MirrorStats>>,
    stats: Arc<std::sync::Mutex<MirrorStats>>,
    backlog: Arc<AtomicU64>,
}

impl RemoteMirror {
    /// Starts mirroring `staging` to `url`, shipping every `interval` and when asked. Tries the
    /// store first (a listing of the prefix): see [`RemoteError`].
    pub fn start(url: &str, staging: &Path, interval: Duration) -> Result<Self, RemoteError> {
        let state = staging::ShipState {
            url: url.to_owned(),
            ..staging::ShipState::default()
        };
        Self::start_from(state, staging, interval, None)
    }

    /// [`start`](Self::start), holding `rank`'s lease on the run while the mirror lives (see
    /// [`lease`]): refused with [`RemoteError::Leased`] while another process holds it, before
    /// anything is shipped; renewed by the mirror's thread; released at the close.
    pub fn start_leased(
        url: &str,
        staging: &Path,
        interval: Duration,
        (rank, timing): (u32, LeaseTiming),
    ) -> Result<Self, RemoteError> {
        let state = staging::ShipState {
            url: url.to_owned(),
            ..staging::ShipState::default()
        };
        Self::start_from(state, staging, interval, Some((rank, timing)))
    }

    /// A mirror of the staging directory a writer that was killed left: it goes on from what
    /// `state` says was shipped, under the names it claimed.
    pub(crate) fn resume_staging(
        state: &staging::ShipState,
        staging: &Path,
    ) -> Result<Self, String> {
        Self::start_from(state.clone(), staging, DEFAULT_SHIP_INTERVAL, None)
            .map_err(|e| e.to_string())
    }

    fn start_from(
        state: staging::ShipState,
        staging: &Path,
        interval: Duration,
        lease: Option<(u32, LeaseTiming)>,
    ) -> Result<Self, RemoteError> {
        let url = state.url.clone();
        let (store, prefix) = open_store(&url)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| RemoteError::Thread("could not start its runtime"))?;
        // On a thread of its own: a caller inside a tokio runtime cannot block on another.
        let runtime = store::outside_any_runtime(move || {
            runtime.block_on(probe(store.as_ref(), &prefix, &url))?;
            let lease = match lease {
                Some((rank, timing)) => Some(runtime.block_on(lease::Lease::take(
                    store.as_ref(),
                    &prefix,
                    rank,
                    &url,
                    timing,
                ))?),
                None => None,
            };
            Ok((runtime, store, prefix, lease))
        })?;
        let (runtime, store, prefix, lease) = runtime;
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(std::sync::Mutex::new(MirrorStats::default()));
        let backlog = Arc::new(AtomicU64::new(0));
        let shipper = Shipper {
            store,
            prefix,
            staging: staging.to_path_buf(),
            url: state.url.clone(),
            shipped: state.shipped,
            whole: BTreeMap::new(),
            claimed: state.claimed,
            marked: std::collections::BTreeSet::new(),
            stats: Arc::clone(&stats),
            backlog: Arc::clone(&backlog),
            lease,
        };
        let thread = std::thread::Builder::new()
            .name("ember-remote".into())
            .spawn(move || shipper.run(runtime, rx, interval))
            .map_err(|_| RemoteError::Thread("could not start"))?;
        Ok(Self {
            url: state.url,
            tx: Some(tx),
            thread: Some(thread),
            stats,
            backlog,
        })
    }

    /// The log directory's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Ships every whole record written so far, and returns once it is in the store (or with
    /// the error of the upload that failed; it is tried again at the next interval).
    pub fn ship(&self) -> Result<(), String> {
        self.ask(Request::Ship)
    }

    fn ask(&self, request: fn(Sender<Result<(), String>>) -> Request) -> Result<(), String> {
        let tx = self.tx.as_ref().ok_or("the mirror is closed")?;
        let (ack, done) = mpsc::channel();
        tx.send(request(ack))
            .map_err(|_| "the mirror's thread stopped".to_owned())?;
        done.recv()
            .map_err(|_| "the mirror's thread stopped".to_owned())?
    }

    /// Bytes written to the staging directory and not in the store yet, as measured at most a
    /// quarter of a second ago.
    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Relaxed)
    }

    /// Whether the caller may hand the pool its next record, with `budget` bytes allowed to wait
    /// for the store. Under the budget: yes. Over it, the pool's policy decides, as for a full
    /// queue: [`Block`](FullQueuePolicy::Block) waits until the store has taken enough (while
    /// it is down, training waits and nothing is lost), [`DropNewest`](FullQueuePolicy::DropNewest)
    /// answers no and counts the record, [`Error`](FullQueuePolicy::Error) counts it and returns
    /// [`RemoteError::OverBudget`].
    pub fn admit(&self, policy: FullQueuePolicy, budget: u64) -> Result<bool, RemoteError> {
        self.admit_within(policy, budget, &Wait::default())
    }

    /// [`admit`](Self::admit), a blocked wait bounded by `wait`: past its deadline, or once its
    /// stop flag is set (Ctrl-C), the record is refused with [`RemoteError::Waited`] instead
    /// of the training thread waiting for a store that may not come back.
    pub fn admit_within(
        &self,
        policy: FullQueuePolicy,
        budget: u64,
        wait: &Wait,
    ) -> Result<bool, RemoteError> {
        let mut backlog = self.backlog();
        if backlog <= budget {
            return Ok(true);
        }
        match policy {
            FullQueuePolicy::Block => {
                let started = std::time::Instant::now();
                while backlog > budget && self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
                    let stopped = wait
                        .stop
                        .as_ref()
                        .is_some_and(|stop| stop.load(Ordering::Acquire));
                    let why = if stopped {
                        Some("asked to stop")
                    } else if started.elapsed() >= wait.deadline {
                        Some("the deadline passed")
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        self.count_over_budget();
                        return Err(RemoteError::Waited {
                            url: self.url.clone(),
                            waited: started.elapsed(),
                            backlog,
                            budget,
                            why,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    backlog = self.backlog();
                }
                Ok(true)
            }
            FullQueuePolicy::DropNewest => {
                self.count_over_budget();
                Ok(false)
            }
            FullQueuePolicy::Error => {
                self.count_over_budget();
                Err(RemoteError::OverBudget {
                    url: self.url.clone(),
                    backlog,
                    budget,
                })
            }
        }
    }

    fn count_over_budget(&self) {
        self.stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .records_over_budget += 1;
    }

    /// What the mirror has shipped so far.
    pub fn stats(&self) -> MirrorStats {
        *self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ships what is left and stops; the error of a last upload that failed, if any (what it
    /// held stays in the staging directory).
    pub fn close(mut self) -> Result<MirrorStats, String> {
        let result = self.ask(Request::Close);
        drop(self.tx.take());
        let stats = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        result.map(|()| stats)
    }
}

impl Drop for RemoteMirror {
    fn drop(&mut self) {
        if self.tx.is_some() {
            if let Err(error) = self.ask(Request::Close) {
                log::error!(
                    "ember-write: shipping the last records to {}: {error}",
                    self.url
                );
            }
            drop(self.tx.take());
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::download::file_of_segment;
    use super::shipper::whole_records;
    use super::*;

    #[test]
    fn only_whole_records_are_shipped() {
        let mut bytes = Vec::new();
        crate::framing::frame_into(&mut bytes, b"first");
        crate::framing::frame_into(&mut bytes, b"second record");
        let whole = bytes.len();
        crate::framing::frame_into(&mut bytes, b"third, cut");
        for cut in whole..bytes.len() {
            assert_eq!(whole_records(&bytes[..cut]), whole, "cut at {cut}");
        }
        assert_eq!(whole_records(&bytes), bytes.len());
        assert_eq!(whole_records(&[]), 0);
    }

    #[test]
    fn file_urls_ship_segments_of_whole_records_in_order() {
        let staging = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        let file = staging.path().join("events.out.tfevents.0000000001.h.1.0");
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for record in 0..7u8 {
            crate::framing::frame_into(&mut stream, &[record; 40]);
            ends.push(stream.len());
        }
        // Each round the file holds two more whole records and half of the next one.
        for round in 1..=3 {
            let whole = ends[2 * round - 1];
            let half = whole + (ends[2 * round] - whole) / 2;
            std::fs::write(&file, &stream[..half]).unwrap();
            mirror.ship().unwrap();
        }
        let stats = mirror.close().unwrap();
        assert_eq!((stats.segments, stats.bytes), (3, ends[5] as u64));
        // The segments, beside the marker that says the file is the run's.
        let marker = markers::marker_of("events.out.tfevents.0000000001.h.1.0.00000001");
        assert_eq!(std::fs::read(bucket.path().join("run").join(marker)).unwrap(), b"");
        let mut segments: Vec<PathBuf> = std::fs::read_dir(bucket.path().join("run"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|path| !path.ends_with(".ember-run"))
            .collect();
        segments.sort();
        let names: Vec<String> = segments
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [1, 2, 3].map(|n| format!("events.out.tfevents.0000000001.h.1.0.{n:08}"))
        );
        // In name order, the segments are the file's whole records, each once.
        let shipped: Vec<u8> = segments
            .iter()
            .flat_map(|p| std::fs::read(p).unwrap())
            .collect();
        assert_eq!(shipped, stream[..ends[5]]);
        for segment in &segments {
            let scan = crate::Scan::file(segment).unwrap();
            assert!(scan.problems.is_empty(), "{segment:?}: {:?}", scan.problems);
        }
        // Downloaded, the segments join back into the file as it was shipped.
        let local = tempfile::tempdir().unwrap();
        assert_eq!(download(&url, local.path()).unwrap(), 3);
        let joined = std::fs::read(local.path().join("events.out.tfevents.0000000001.h.1.0"));
        assert_eq!(joined.unwrap(), stream[..ends[5]]);
        assert_eq!(
            file_of_segment("a.summary.1.0.h_lineage.00000002"),
            "a.summary.1.0.h_lineage"
        );
        assert_eq!(
            file_of_segment("projector_config.pbtxt"),
            "projector_config.pbtxt"
        );
    }

    #[test]
    fn other_files_go_whole_and_again_when_they_change() {
        let staging = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        let export = staging.path().join("export_5/tensor");
        std::fs::create_dir_all(&export).unwrap();
        std::fs::write(export.join("loss_3.npy"), b"\x93NUMPY tensor").unwrap();
        std::fs::write(staging.path().join("projector_config.pbtxt"), b"one").unwrap();
        std::fs::write(staging.path().join(".projector_config.pbtxt.9.tmp"), b"x").unwrap();
        mirror.ship().unwrap();
        let stored = |relative: &str| std::fs::read(bucket.path().join("run").join(relative));
        assert_eq!(
            stored("export_5/tensor/loss_3.npy").unwrap(),
            b"\x93NUMPY tensor"
        );
        assert_eq!(stored("projector_config.pbtxt").unwrap(), b"one");
        assert!(stored(".projector_config.pbtxt.9.tmp").is_err());
        // Unchanged files are not sent again; a changed one replaces its object.
        mirror.ship().unwrap();
        std::fs::write(
            staging.path().join("projector_config.pbtxt"),
            b"two, longer",
        )
        .unwrap();
        let stats = mirror.close().unwrap();
        assert_eq!(stored("projector_config.pbtxt").unwrap(), b"two, longer");
        assert_eq!(
            (stats.objects, stats.segments, stats.backlog_bytes),
            (3, 0, 0)
        );
        let local = tempfile::tempdir().unwrap();
        download(&url, local.path()).unwrap();
        let got = std::fs::read(local.path().join("projector_config.pbtxt")).unwrap();
        assert_eq!(got, b"two, longer");
    }

    #[test]
    fn over_the_budget_the_pool_policy_decides_and_nothing_accepted_is_lost() {
        let staging = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        let prefix = bucket.path().join("run");
        std::fs::create_dir_all(&prefix).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        // The store goes away: its directory becomes a file, so every upload fails.
        std::fs::remove_dir(&prefix).unwrap();
        std::fs::write(&prefix, b"").unwrap();
        let mut stream = Vec::new();
        for record in 0..20u8 {
            crate::framing::frame_into(&mut stream, &[record; 100]);
        }
        let file = staging.path().join("events.out.tfevents.0000000001.h.1.0");
        std::fs::write(&file, &stream).unwrap();
        assert!(mirror.ship().is_err());
        assert_eq!(mirror.backlog(), stream.len() as u64);
        let budget = 1000;
        assert!(mirror.admit(FullQueuePolicy::Block, 10_000).unwrap());
        assert!(!mirror.admit(FullQueuePolicy::DropNewest, budget).unwrap());
        assert!(matches!(
            mirror.admit(FullQueuePolicy::Error, budget),
            Err(RemoteError::OverBudget { backlog, .. }) if backlog == stream.len() as u64
        ));
        std::thread::scope(|scope| {
            let blocked = scope.spawn(|| mirror.admit(FullQueuePolicy::Block, budget));
            std::thread::sleep(Duration::from_millis(300));
            assert!(!blocked.is_finished(), "admitted while over the budget");
            // The store comes back: the next pass ships the backlog and the caller goes on.
            std::fs::remove_file(&prefix).unwrap();
            std::fs::create_dir(&prefix).unwrap();
            mirror.ship().unwrap();
            assert!(blocked.join().unwrap().unwrap());
        });
        let stats = mirror.close().unwrap();
        assert_eq!(stats.records_over_budget, 2);
        assert_eq!((stats.bytes, stats.backlog_bytes), (stream.len() as u64, 0));
        assert!(stats.failed_uploads >= 1);
        let local = tempfile::tempdir().unwrap();
        download(&url, local.path()).unwrap();
        let joined = std::fs::read(local.path().join("events.out.tfevents.0000000001.h.1.0"));
        assert_eq!(joined.unwrap(), stream);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn shipped_records_leave_the_local_disk_and_the_file_its_length() {
        use std::os::unix::fs::MetadataExt;
        let staging = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        let mut stream = Vec::new();
        for record in 0..64u8 {
            crate::framing::frame_into(&mut stream, &[record; 16 << 10]);
        }
        let file = staging.path().join("events.out.tfevents.0000000001.h.1.0");
        std::fs::write(&file, &stream).unwrap();
        let before = std::fs::metadata(&file).unwrap().blocks() * 512;
        assert!(before >= stream.len() as u64);
        mirror.ship().unwrap();
        let after = std::fs::metadata(&file).unwrap();
        assert_eq!(after.len(), stream.len() as u64);
        assert!(
            after.blocks() * 512 < before / 4,
            "{} of {before} bytes still on disk",
            after.blocks() * 512
        );
        mirror.close().unwrap();
    }

    #[test]
    fn a_url_of_no_object_store_is_refused_at_start() {
        let staging = tempfile::tempdir().unwrap();
        for url in ["ftp://x/y", "not a url"] {
            assert!(matches!(
                RemoteMirror::start(url, staging.path(), DEFAULT_SHIP_INTERVAL),
                Err(RemoteError::Url { .. })
            ));
        }
        assert!(crate::is_remote("s3://bucket/run") && crate::is_remote("gs://b/p"));
        assert!(!crate::is_remote("runs/s3:/x") && !crate::is_remote("/tmp/run"));
    }

    /// Before: two records of one host and rank to one URL in one second staged files of one
    /// name, and the second writer's PUTs replaced the first's objects.
    #[test]
    fn two_writers_to_one_url_in_one_second_both_keep_their_records() {
        let bucket = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        let name = "events.out.events.summary.1700000000.0.host_MS";
        let mut streams = Vec::new();
        let mut mirrors = Vec::new();
        let stagings: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        for (writer, staging) in stagings.iter().enumerate() {
            let mut stream = Vec::new();
            crate::framing::frame_into(&mut stream, format!("writer {writer}").as_bytes());
            std::fs::write(staging.path().join(name), &stream).unwrap();
            let export = staging.path().join("export_1700000000");
            std::fs::create_dir(&export).unwrap();
            std::fs::write(export.join("w.npy"), format!("tensor of {writer}")).unwrap();
            let mirror =
                RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
            mirror.ship().unwrap();
            streams.push(stream);
            mirrors.push(mirror);
        }
        // The first writer's next segment still goes under the name it claimed.
        crate::framing::frame_into(&mut streams[0], b"writer 0, later");
        std::fs::write(stagings[0].path().join(name), &streams[0]).unwrap();
        for mirror in mirrors {
            mirror.close().unwrap();
        }
        let local = tempfile::tempdir().unwrap();
        download(&url, local.path()).unwrap();
        let moved = "events.out.events.summary.1700000001.0.host_MS";
        assert_eq!(std::fs::read(local.path().join(name)).unwrap(), streams[0]);
        assert_eq!(std::fs::read(local.path().join(moved)).unwrap(), streams[1]);
        for (dir, writer) in [("export_1700000000", 0), ("export_1700000001", 1)] {
            let tensor = std::fs::read_to_string(local.path().join(dir).join("w.npy")).unwrap();
            assert_eq!(tensor, format!("tensor of {writer}"));
        }
    }

    #[test]
    fn a_name_moves_on_by_its_time_alone() {
        use crate::naming::with_secs;
        assert_eq!(
            with_secs("events.out.tfevents.0000000009.a.b.7.0", 10).unwrap(),
            "events.out.tfevents.0000000010.a.b.7.0"
        );
        assert_eq!(
            with_secs("events.out.events.summary.9.0.rank3.host_lineage", 10).unwrap(),
            "events.out.events.summary.10.0.rank3.host_lineage"
        );
        assert_eq!(with_secs("export_9", 10).unwrap(), "export_10");
        assert_eq!(with_secs("projector_config.pbtxt", 10), None);
    }

    /// Before: a blocked record waited for the store with no deadline, and nothing could end
    /// the wait (Ctrl-C was never read).
    #[test]
    fn a_blocked_record_waits_no_longer_than_its_deadline_or_its_stop() {
        let staging = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        let prefix = bucket.path().join("run");
        std::fs::create_dir_all(&prefix).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        std::fs::remove_dir(&prefix).unwrap();
        std::fs::write(&prefix, b"").unwrap();
        let mut stream = Vec::new();
        crate::framing::frame_into(&mut stream, &[7; 500]);
        std::fs::write(
            staging.path().join("events.out.tfevents.0000000001.h.1.0"),
            &stream,
        )
        .unwrap();
        assert!(mirror.ship().is_err());
        let deadline = Wait {
            deadline: Duration::from_millis(200),
            stop: None,
        };
        let started = std::time::Instant::now();
        let waited = mirror.admit_within(FullQueuePolicy::Block, 10, &deadline);
        assert!(
            matches!(
                waited,
                Err(RemoteError::Waited {
                    why: "the deadline passed",
                    ..
                })
            ),
            "{waited:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = Wait {
            deadline: Duration::from_secs(3600),
            stop: Some(Arc::clone(&stop)),
        };
        std::thread::scope(|scope| {
            let blocked =
                scope.spawn(|| mirror.admit_within(FullQueuePolicy::Block, 10, &stopping));
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Release);
            let waited = blocked.join().unwrap();
            assert!(
                matches!(
                    waited,
                    Err(RemoteError::Waited {
                        why: "asked to stop",
                        ..
                    })
                ),
                "{waited:?}"
            );
        });
        std::fs::remove_file(&prefix).unwrap();
        std::fs::create_dir(&prefix).unwrap();
        assert_eq!(mirror.close().unwrap().records_over_budget, 2);
    }

    /// Before: `start` and `download` blocked on a runtime of their own, which panics inside
    /// the caller's tokio runtime.
    #[test]
    fn a_mirror_starts_and_a_download_runs_inside_a_tokio_runtime() {
        let staging = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mirror =
                RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
            let mut stream = Vec::new();
            crate::framing::frame_into(&mut stream, b"from inside a runtime");
            let name = "events.out.tfevents.0000000001.h.1.0";
            std::fs::write(staging.path().join(name), &stream).unwrap();
            mirror.ship().unwrap();
            let local = download_private(&url).unwrap();
            assert_eq!(std::fs::read(local.path().join(name)).unwrap(), stream);
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(local.path())
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o700, "a download directory is private");
            }
            mirror.close().unwrap();
        });
    }

    /// A backlog ships as segments of at most the cap, each of whole records, a record larger
    /// than the cap alone: before, all of it went as one PUT (which S3 refuses past 5 GiB).
    #[test]
    fn a_backlog_is_read_a_segment_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.out.tfevents.0000000001.h.1.0");
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for len in [100usize, 100, 100, 1000, 100] {
            crate::framing::frame_into(&mut stream, &vec![1; len]);
            ends.push(stream.len());
        }
        std::fs::write(&path, &stream).unwrap();
        let cap = 2 * 116 + 50;
        let first = shipper::read_segment(&path, 0, cap).unwrap();
        assert_eq!(whole_records_of(&first), ends[1]);
        let from = ends[2] as u64;
        let big = shipper::read_segment(&path, from, cap).unwrap();
        assert_eq!(whole_records_of(&big), ends[3] - ends[2]);
        let last = shipper::read_segment(&path, ends[3] as u64, cap).unwrap();
        assert_eq!(whole_records_of(&last), ends[4] - ends[3]);
    }

    fn whole_records_of(bytes: &[u8]) -> usize {
        shipper::whole_records(bytes)
    }
}
