//! A writer's claim on its run, as its lease's renewals leave it ([`Claim`]), and the write
//! that cannot replace what another writer put since the claim was checked ([`put_fenced`]).
//! The rule they keep is in the `lease` module's docs.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::holder::{LeaseHolder, LeaseTiming};
use super::store::RemoteError;

/// This process's hold on a run's lease: cheap to clone and to ask, shared by whatever writes
/// under the run (the mirror's uploads, checkpoints, the model), each of which asks
/// [`check`](Self::check) right before it writes.
#[derive(Debug, Clone)]
pub struct Claim(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    url: String,
    timing: LeaseTiming,
    hold: Mutex<Hold>,
    /// Where a test stops the renewals, as a stopped process renews nothing.
    #[cfg(test)]
    paused: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Clone)]
enum Hold {
    /// The last renewal the store took was sent at this instant.
    Renewed(Instant),
    /// Another writer has the lease now: named, where its object says who.
    Lost(Option<LeaseHolder>),
}

impl Claim {
    pub(super) fn new(url: &str, timing: LeaseTiming, sent: Instant) -> Self {
        Self(Arc::new(Shared {
            url: url.to_owned(),
            timing,
            hold: Mutex::new(Hold::Renewed(sent)),
            #[cfg(test)]
            paused: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Stops (or lets go on) the renewals, as stopping the process would.
    #[cfg(test)]
    pub(crate) fn pause(&self, paused: bool) {
        self.0
            .paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
    }

    #[cfg(test)]
    pub(super) fn paused(&self) -> bool {
        self.0.paused.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn hold(&self) -> Hold {
        self.0
            .hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, hold: Hold) {
        *self.0.hold.lock().unwrap_or_else(PoisonError::into_inner) = hold;
    }

    /// Whether this writer may write under the run now: `Ok` within
    /// [`LeaseTiming::valid_for`] of the last renewal the store took (by this process's
    /// monotonic clock); [`RemoteError::LeaseLost`] once another writer has taken the lease
    /// over, for good; [`RemoteError::Unreachable`] in between (not renewed for that long, not
    /// known to be lost: the store may be down), until a renewal succeeds.
    pub fn check(&self) -> Result<(), RemoteError> {
        let url = &self.0.url;
        let valid_for = self.0.timing.valid_for();
        match self.hold() {
            Hold::Renewed(sent) if sent.elapsed() < valid_for => Ok(()),
            Hold::Renewed(sent) => Err(RemoteError::Unreachable {
                url: url.clone(),
                reason: format!(
                    "its lease was last renewed {:.1?} ago, more than the {valid_for:?} a \
                     renewal lets this writer write for: nothing is written under the run \
                     until a renewal succeeds",
                    sent.elapsed()
                ),
            }),
            Hold::Lost(holder) => Err(RemoteError::LeaseLost {
                url: url.clone(),
                holder,
                stale_after: self.0.timing.stale_after,
            }),
        }
    }

    /// Whether another writer has taken the lease over.
    pub fn is_lost(&self) -> bool {
        matches!(self.hold(), Hold::Lost(_))
    }

    /// A renewal sent at `sent` was taken by the store.
    pub(super) fn renewed(&self, sent: Instant) {
        if !self.is_lost() {
            self.set(Hold::Renewed(sent));
        }
    }

    /// Another writer has the lease now (`holder`, where known).
    pub(super) fn lose(&self, holder: Option<LeaseHolder>) {
        self.set(Hold::Lost(holder));
    }
}

/// Why [`put_fenced`] did not write.
#[derive(Debug)]
pub(super) enum Unfenced {
    /// The claim refused the write: see [`Claim::check`].
    Refused(RemoteError),
    /// The object changed between this writer's read and its write: another writer's now.
    Changed,
    /// The store failed.
    Store(object_store::Error),
}

impl From<object_store::Error> for Unfenced {
    fn from(error: object_store::Error) -> Self {
        Self::Store(error)
    }
}

/// Writes `payload` as `object` while `check` (a [`Claim`]'s) lets it, so that a write racing
/// a takeover never replaces what the new holder put there: a new object is created
/// create-only, an existing one replaced only in the version read before the last check. A
/// store that cannot write conditionally (`file://`) replaces it after the check alone.
pub(super) async fn put_fenced(
    store: &dyn ObjectStore,
    object: &ObjectPath,
    payload: PutPayload,
    check: &(dyn Fn() -> Result<(), RemoteError> + Sync),
) -> Result<(), Unfenced> {
    let with = |mode| PutOptions {
        mode,
        ..PutOptions::default()
    };
    check().map_err(Unfenced::Refused)?;
    match store
        .put_opts(object, payload.clone(), with(PutMode::Create))
        .await
    {
        Err(object_store::Error::AlreadyExists { .. }) => {}
        Err(object_store::Error::NotImplemented { .. }) => {
            store.put(object, payload).await?;
            return Ok(());
        }
        created => return created.map(drop).map_err(Unfenced::Store),
    }
    let found = store.head(object).await?;
    check().map_err(Unfenced::Refused)?;
    let version = UpdateVersion {
        e_tag: found.e_tag,
        version: found.version,
    };
    match store
        .put_opts(object, payload.clone(), with(PutMode::Update(version)))
        .await
    {
        Ok(_) => Ok(()),
        Err(object_store::Error::NotImplemented { .. }) => {
            store.put(object, payload).await?;
            Ok(())
        }
        // Azurite answers a failed `If-Match` 409, which comes back as `AlreadyExists`.
        Err(
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. },
        ) => Err(Unfenced::Changed),
        Err(error) => Err(Unfenced::Store(error)),
    }
}
