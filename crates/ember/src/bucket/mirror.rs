//! A record whose log directory is an object-store URL: its pool
//! writes a private staging directory, which ember-write's
//! [`RemoteMirror`](ember_write::remote::RemoteMirror) ships to the store as segment objects;
//! see that module for the layout and what a reader sees when. The mirror holds the run's lease:
//! once another writer has taken it over, the record takes no record more and says why
//! ([`RemoteError::LeaseLost`]), and its staging directory goes at the close.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ember_write::FullQueuePolicy;
use ember_write::remote::{
    Claim, DEFAULT_BACKLOG_BUDGET, DEFAULT_SHIP_INTERVAL, LeaseTiming, MirrorStats, RemoteError,
    RemoteMirror, Wait,
};

use crate::SummaryError;

/// The staging directory and the mirror of one record.
#[derive(Debug)]
pub(crate) struct Mirror {
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

impl Mirror {
    /// For a record of `rank` in the bucket log `url` (its writer pool's queue full by
    /// `policy`): makes a staging directory (private to this user, of a random name, locked
    /// while this record writes) and starts mirroring it to `url`, holding `rank`'s lease on
    /// the run (see [`ember_write::remote::LeaseTiming`]): a store that cannot be reached or
    /// refuses the credentials, or a run another process holds, is an error here, before
    /// anything is written. `budget` is the backlog a record may leave before `policy` decides
    /// about the next; `wait`, how long a blocked record waits at most, and a flag that ends
    /// the wait; the defaults where `None`. The lease names `run`, where the record was given
    /// its run's id.
    pub(crate) fn start(
        (url, run): (&str, Option<&str>),
        rank: u32,
        (budget, policy): (Option<u64>, FullQueuePolicy),
        wait: Option<(Duration, Option<Arc<AtomicBool>>)>,
    ) -> Result<Self, SummaryError> {
        let staging = ember_write::remote::new_staging()?;
        let lock = ember_write::DirLock::acquire(&staging, 0)?;
        let lease = (rank, LeaseTiming::default(), run);
        let mirror = match RemoteMirror::start_leased(url, &staging, DEFAULT_SHIP_INTERVAL, lease) {
            Ok(mirror) => mirror,
            Err(error) => {
                drop(lock);
                let _ = std::fs::remove_dir_all(&staging);
                return Err(error.into());
            }
        };
        let wait = wait.map_or_else(Wait::default, |(deadline, stop)| Wait { deadline, stop });
        Ok(Self {
            claim: mirror.claim().cloned(),
            mirror: Some(mirror),
            staging,
            _lock: lock,
            budget: budget.unwrap_or(DEFAULT_BACKLOG_BUDGET),
            policy,
            wait,
            final_stats: None,
        })
    }

    /// The mirror's claim on the run while it lives (its lease released at the close).
    pub(crate) fn claim(&self) -> Option<Claim> {
        self.mirror.as_ref()?;
        self.claim.clone()
    }

    /// Whether this writer may write under the run now: see [`Claim::check`].
    pub(crate) fn check_claim(&self) -> Result<(), SummaryError> {
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
    pub(crate) fn admit(&self) -> Result<bool, SummaryError> {
        self.not_lost()?;
        match &self.mirror {
            Some(mirror) => Ok(mirror.admit_within(self.policy, self.budget, &self.wait)?),
            None => Ok(true),
        }
    }

    /// Where the pool writes.
    pub(crate) fn staging(&self) -> &Path {
        &self.staging
    }

    /// Ships every whole record written so far; returns once it is in the store.
    pub(crate) fn ship(&self) -> Result<(), SummaryError> {
        self.not_lost()?;
        match &self.mirror {
            Some(mirror) => mirror.ship().map_err(shipping(mirror)),
            None => Ok(()),
        }
    }

    /// The log's position now: see [`RemoteMirror::cut`].
    #[cfg(feature = "burn")]
    pub(crate) fn cut(&self) -> Result<ember_write::remote::LogCut, SummaryError> {
        self.not_lost()?;
        let mirror = self.mirror.as_ref().ok_or(SummaryError::Closed)?;
        mirror.cut().map_err(shipping(mirror))
    }

    /// What takes the log's cuts on the writer pool's thread: see [`RemoteMirror::cutter`].
    #[cfg(feature = "burn")]
    pub(crate) fn cutter(&self) -> Result<ember_write::remote::Cutter, SummaryError> {
        self.not_lost()?;
        let mirror = self.mirror.as_ref().ok_or(SummaryError::Closed)?;
        mirror.cutter().map_err(shipping(mirror))
    }

    /// The bytes shipped so far.
    pub(crate) fn shipped_bytes(&self) -> Option<u64> {
        self.stats().map(|stats| stats.bytes)
    }

    /// What was shipped so far.
    pub(crate) fn stats(&self) -> Option<MirrorStats> {
        self.mirror
            .as_ref()
            .map(RemoteMirror::stats)
            .or(self.final_stats)
    }

    /// Ships what is left and stops; the staging directory is removed once everything in it
    /// is in the store, and kept (and named in the error) otherwise. Once another writer has
    /// taken the run over, what the staging holds came after the new holder's checkpoint and
    /// must never reach the store: it is removed, and the close says why.
    pub(crate) fn close(&mut self) -> Result<(), SummaryError> {
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

/// Whether `error` says the run's lease was taken over by another writer.
#[cfg(feature = "burn")]
pub(crate) fn lease_lost(error: &RemoteError) -> bool {
    matches!(error, RemoteError::LeaseLost { .. })
}

/// What an error of `mirror`'s shipping, said in `message`, is to the record's user.
fn shipping(mirror: &RemoteMirror) -> impl FnOnce(String) -> SummaryError + '_ {
    |message| SummaryError::RemoteShip {
        url: mirror.url().to_owned(),
        message,
    }
}
