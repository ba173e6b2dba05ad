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
//!   the staging directory holds about what is not in the store yet; only once the staging's
//!   state says they are shipped, so that `ember push` never ships a hole's zeros;
//! - a checkpoint's position in the log is a [`LogCut`], taken from the staging directory
//!   without waiting for the store: no segment crosses it, and once it is shipped the mirror
//!   names the objects up to it (see `cut`).
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
//! takeover rule, the fencing rule by which a writer that lost it writes nothing more (its
//! [`Claim`], which a [`Bucket`] of the run's checkpoints asks too), and [`check_lease`] for
//! the check an admission makes before anything is written. Nor has it a journal of the files its writers made: before a file's first object,
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
mod claim;
mod cut;
mod download;
mod holder;
pub mod lease;
mod log_cut;
mod markers;
mod shipper;
mod staged;
pub(crate) mod staging;

pub use bucket::{Bucket, BucketSnapshot, Listed};
pub use claim::Claim;
pub use cut::ShippedCut;
pub use download::{Downloaded, download, download_private};
pub use holder::{LeaseHolder, LeaseTiming};
pub use lease::check_lease;
pub use log_cut::LogCut;
use shipper::{KillSwitch, Shipper};
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

/// Takes a mirror's cuts from any thread: see [`RemoteMirror::cutter`].
#[derive(Debug, Clone)]
pub struct Cutter {
    staging: std::path::PathBuf,
    cuts: Arc<std::sync::Mutex<cut::Cuts>>,
    tx: mpsc::Sender<Request>,
}

impl Cutter {
    /// The log's position now, as [`RemoteMirror::cut`] takes it: every record written to the
    /// staging directory so far, and every other file there.
    pub fn cut(&self) -> Result<LogCut, String> {
        let id = cut::Cuts::lock(&self.cuts).take(&self.staging)?;
        Ok(LogCut::new(id, self.tx.clone()))
    }
}

/// Ships a staging directory's event files to an object store; see the module docs.
#[derive(Debug)]
pub struct RemoteMirror {
    url: String,
    staging: std::path::PathBuf,
    cuts: Arc<std::sync::Mutex<cut::Cuts>>,
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<MirrorStats>>,
    stats: Arc<std::sync::Mutex<MirrorStats>>,
    backlog: Arc<AtomicU64>,
    /// This writer's claim on the run, when the mirror holds its lease.
    claim: Option<Claim>,
}

impl RemoteMirror {
    /// Starts mirroring `staging` to `url`, shipping every `interval` and when asked. Tries the
    /// store first (a listing of the prefix): see [`RemoteError`].
    pub fn start(url: &str, staging: &Path, interval: Duration) -> Result<Self, RemoteError> {
        let state = staging::ShipState {
            url: url.to_owned(),
            ..staging::ShipState::default()
        };
        Self::start_from(state, staging, interval, None, KillSwitch::default())
    }

    /// [`start`](Self::start), its thread killed after `steps` of its steps (see
    /// [`KillSwitch`]).
    #[cfg(test)]
    pub(crate) fn start_killed_after(
        url: &str,
        staging: &Path,
        steps: usize,
    ) -> Result<Self, RemoteError> {
        let state = staging::ShipState {
            url: url.to_owned(),
            ..staging::ShipState::default()
        };
        let interval = Duration::from_secs(3600);
        Self::start_from(state, staging, interval, None, KillSwitch::after(steps))
    }

    /// [`start`](Self::start), holding `rank`'s lease on the run while the mirror lives (see
    /// [`lease`]): refused with [`RemoteError::Leased`] while another process holds it, before
    /// anything is shipped; renewed by a thread of the mirror's; released at the close. Once
    /// another writer has taken it over, the mirror ships nothing more: see [`claim`](Self::claim).
    /// The lease names `run`, the id of the run written, where the writer gives one.
    pub fn start_leased(
        url: &str,
        staging: &Path,
        interval: Duration,
        (rank, timing, run): (u32, LeaseTiming, Option<&str>),
    ) -> Result<Self, RemoteError> {
        let holder = LeaseHolder::this_process(run);
        Self::start_leased_as(url, staging, interval, (rank, timing, holder))
    }

    /// [`start_leased`](Self::start_leased), for `holder` (a test's writer of another host).
    pub(crate) fn start_leased_as(
        url: &str,
        staging: &Path,
        interval: Duration,
        lease: (u32, LeaseTiming, LeaseHolder),
    ) -> Result<Self, RemoteError> {
        let state = staging::ShipState {
            url: url.to_owned(),
            ..staging::ShipState::default()
        };
        Self::start_from(state, staging, interval, Some(lease), KillSwitch::default())
    }

    /// A mirror of the staging directory a writer that was killed left: it goes on from what
    /// `state` says was shipped, under the names it claimed.
    pub(crate) fn resume_staging(
        state: &staging::ShipState,
        staging: &Path,
    ) -> Result<Self, String> {
        let interval = DEFAULT_SHIP_INTERVAL;
        Self::start_from(
            state.clone(),
            staging,
            interval,
            None,
            KillSwitch::default(),
        )
        .map_err(|e| e.to_string())
    }

    fn start_from(
        state: staging::ShipState,
        staging: &Path,
        interval: Duration,
        lease: Option<(u32, LeaseTiming, LeaseHolder)>,
        kill: KillSwitch,
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
                Some((rank, timing, holder)) => Some(runtime.block_on(lease::Lease::take_as(
                    store.as_ref(),
                    (&prefix, rank),
                    &url,
                    timing,
                    holder,
                ))?),
                None => None,
            };
            Ok((runtime, store, prefix, lease))
        })?;
        let (runtime, store, prefix, lease) = runtime;
        let lease = lease.map(lease::Keeper::start).transpose()?;
        let claim = lease.as_ref().map(|keeper| keeper.claim().clone());
        // Kept before anything is shipped: a writer killed before its first pass leaves a
        // staging directory that `ember push` can still ship.
        state
            .write(staging)
            .map_err(|source| RemoteError::Staging {
                path: staging.to_path_buf(),
                source,
            })?;
        let kept_state = Some(state.encode());
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(std::sync::Mutex::new(MirrorStats::default()));
        let backlog = Arc::new(AtomicU64::new(0));
        let cuts = Arc::default();
        let shipper = Shipper {
            store,
            prefix,
            staging: staging.to_path_buf(),
            url: state.url.clone(),
            shipped: state.shipped,
            segment_ends: BTreeMap::new(),
            cuts: Arc::clone(&cuts),
            whole: BTreeMap::new(),
            claimed: state.claimed,
            marked: std::collections::BTreeSet::new(),
            stats: Arc::clone(&stats),
            backlog: Arc::clone(&backlog),
            claim: claim.clone(),
            lease,
            kept_state,
            kill,
        };
        let thread = std::thread::Builder::new()
            .name("ember-remote".into())
            .spawn(move || shipper.run(runtime, rx, interval))
            .map_err(|_| RemoteError::Thread("could not start"))?;
        Ok(Self {
            url: state.url,
            staging: staging.to_path_buf(),
            cuts,
            tx: Some(tx),
            thread: Some(thread),
            stats,
            backlog,
            claim,
        })
    }

    /// This writer's claim on the run, when the mirror holds its lease: what whatever else
    /// writes under the run (checkpoints, the model) asks before it writes, and what a
    /// [`Bucket`] fenced by it ([`Bucket::fenced_by`]) asks for each write.
    pub fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
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

    /// The log's position now, for a checkpoint: every record the pool has written (flush it
    /// first) and every other file there, taken from the staging directory without waiting for
    /// the store. Ship it with [`LogCut::shipped`] (on any thread) before writing the
    /// checkpoint; see the `cut` module.
    pub fn cut(&self) -> Result<LogCut, String> {
        self.cutter()?.cut()
    }

    /// What takes [`cut`](Self::cut)s from another thread: the writer pool's, in order with
    /// the records ([`WriterPool::after_written`](crate::WriterPool::after_written)), so that
    /// the thread that writes the records need not wait for them to be written first.
    pub fn cutter(&self) -> Result<Cutter, String> {
        Ok(Cutter {
            staging: self.staging.clone(),
            cuts: Arc::clone(&self.cuts),
            tx: self.tx.clone().ok_or("the mirror is closed")?,
        })
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
mod tests;
