//! A bucket run's lease: the object store's stand-in for a directory lock, so that a second
//! writer of one URL (a `--resume` while the first run still writes) is refused naming the
//! first, as a second writer of a local directory is.
//!
//! - The lease is one object in the run's prefix, `.ember-lease` (rank 0) or
//!   `.ember-lease.rank<R>`: its holder's host, process id, when it was taken and when last
//!   renewed (`key=value` lines, times in milliseconds since the Unix epoch).
//! - It is taken by a create-only PUT ([`PutMode::Create`]): of two writers starting at once,
//!   the store lets one create it.
//! - A thread of the mirror's renews it every [`LeaseTiming::renew_every`] (2 s) by a
//!   conditional update against the version it wrote last, apart from the uploads, so that a
//!   long one does not let the lease go stale under a live writer. A renewal the store refuses
//!   because the lease is another writer's now (or gone) loses it: see the fencing rule below.
//! - A lease is *stale* once it has not changed for [`LeaseTiming::stale_after`] (8 s, four
//!   renewals): as its holder's clock says (clocks are taken to agree within seconds), or as
//!   watched from here, whichever comes first; and at once when its holder is a process of
//!   this host that no longer exists (a run killed here and resumed here waits for nothing).
//!   A stopped process of this host (`SIGSTOP`, `scontrol suspend`) renews nothing, as a
//!   remote one that is cut off: its renewals alone tell. A lease that is not stale is watched
//!   until it is renewed (its holder lives: refused with [`RemoteError::Leased`]) or goes
//!   stale: a resume right after a kill on another host waits at most `stale_after`, and says
//!   so.
//! - A stale lease is taken over by a conditional update ([`PutMode::Update`]) against the
//!   version read: of two takers, the store lets one win; the other is refused naming it.
//!   Where the store cannot update conditionally (a `file://` store, an S3 store with
//!   conditional PUTs disabled), the stale lease is deleted and created again create-only:
//!   two takers of one stale lease in the same instant may then both go on, until the
//!   renewal of the loser finds the object not its own.
//! - The lease is deleted when the mirror closes, unless it is lost (or cannot be renewed
//!   first, where its holder's window has passed: another writer may hold it).
//!
//! # Fencing: a writer that lost the lease writes nothing more
//!
//! A process can stop for longer than `stale_after` (`SIGSTOP`, a suspended job, a paused
//! VM, a partition) and wake to find the run taken over. Whatever it writes under the run
//! (the mirror's segments, markers and files, checkpoints) asks its [`Claim`] first:
//!
//! 1. A renewal the store took lets its holder write for [`LeaseTiming::valid_for`], half of
//!    `stale_after`, counted by the holder's own monotonic clock from when the renewal was
//!    *sent*. A taker takes the lease over only once it has not changed for `stale_after`,
//!    counted (by the holder's stamp or the taker's watch) from no earlier than that send: the
//!    holder stops writing `stale_after - valid_for` (4 s) before anyone may take over, room
//!    for clocks that disagree by less and for a write checked just before its window closed.
//!    A process that wakes past its window refuses every write until a renewal succeeds, and
//!    none does once the lease was taken over: the claim is then lost for good, and every
//!    check answers [`RemoteError::LeaseLost`], which ends the writer. The mirror then ships
//!    nothing more and removes its staging's state, so that `ember push` never ships it.
//! 2. Nothing it writes can replace what the new holder wrote: segments and markers are of
//!    files named after their writer (host, process, time), each file's first object created
//!    create-only (another writer's name is never taken); every other object (a checkpoint,
//!    the projector's files) is created create-only where new, and replaced only in the
//!    version read before the check, by a conditional update (`claim::put_fenced`): a write
//!    racing the takeover fails rather than replace the new holder's.
//!
//! What remains: a request already on its way when the process stopped lands when it
//! arrives (a store has no fencing token to refuse it), so a segment of the old writer's own
//! file may appear after the new holder's rollback removed that file's later ones; a store
//! that cannot update conditionally replaces an existing object after the check alone; a
//! paused VM whose monotonic clock did not count the pause learns of it at its next renewal,
//! within `renew_every`; and an object written by a plain PUT after a check (the CLI's
//! `model.bpk`) is covered by the check alone.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Instant;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use super::claim::Claim;
use super::holder::{LeaseHolder, LeaseTiming, now_ms};
use super::store::{RemoteError, in_short};

/// The lease object of `rank` in `prefix`.
pub(super) fn lease_object(prefix: &ObjectPath, rank: u32) -> ObjectPath {
    match rank {
        0 => prefix.clone().join(".ember-lease"),
        _ => prefix.clone().join(format!(".ember-lease.rank{rank}")),
    }
}

/// A lease this process holds.
#[derive(Debug)]
pub(super) struct Lease {
    object: ObjectPath,
    url: String,
    holder: LeaseHolder,
    version: UpdateVersion,
    timing: LeaseTiming,
    /// What the renewals leave of it, which every write under the run asks.
    claim: Claim,
}

/// What a lease found in place comes to.
enum Found {
    /// No lease (or it went away while watched).
    Free,
    /// A stale lease, of this version.
    Stale(LeaseHolder, UpdateVersion),
}

impl Lease {
    /// Takes the lease of `rank` in `prefix` for this process: see [`take_as`](Self::take_as).
    #[cfg(test)]
    pub(super) async fn take(
        store: &dyn ObjectStore,
        prefix: &ObjectPath,
        rank: u32,
        url: &str,
        timing: LeaseTiming,
    ) -> Result<Self, RemoteError> {
        let holder = LeaseHolder::this_process(None);
        Self::take_as(store, (prefix, rank), url, timing, holder).await
    }

    /// Takes the lease of `rank` in `prefix` for `holder` (this process, or a test's writer
    /// of another host): creates it, or takes a stale one over; refused with
    /// [`RemoteError::Leased`] while another process holds it.
    pub(super) async fn take_as(
        store: &dyn ObjectStore,
        (prefix, rank): (&ObjectPath, u32),
        url: &str,
        timing: LeaseTiming,
        holder: LeaseHolder,
    ) -> Result<Self, RemoteError> {
        let object = lease_object(prefix, rank);
        let unreachable = |error: &object_store::Error| failed(url, &object, error);
        // Each pass either takes the lease, is refused, or found the lease gone meanwhile.
        let mut deleted_stale = None;
        for _ in 0..4 {
            let sent = Instant::now();
            let created = put(store, &object, &holder, PutMode::Create).await;
            let error = match created {
                Ok(version) => {
                    if let Some(stale) = &deleted_stale {
                        said_taken_over(url, stale);
                    }
                    return Ok(Self::held(object, url, (holder, version), timing, sent));
                }
                Err(object_store::Error::AlreadyExists { .. }) => None,
                Err(error) => Some(error),
            };
            if let Some(error) = error {
                return Err(unreachable(&error));
            }
            let Found::Stale(stale, version) = watch(store, &object, url, timing).await? else {
                continue;
            };
            let update = PutMode::Update(version);
            let sent = Instant::now();
            match put(store, &object, &holder, update).await {
                Ok(version) => {
                    said_taken_over(url, &stale);
                    return Ok(Self::held(object, url, (holder, version), timing, sent));
                }
                // Azurite answers a failed `If-Match` 409, which comes back as `AlreadyExists`.
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => {
                    let winner = read(store, &object).await.ok().flatten();
                    return Err(leased(url, winner.map_or(stale, |(h, _)| h)));
                }
                // No conditional update here: delete the stale lease and create it again.
                Err(object_store::Error::NotImplemented { .. }) => {
                    match store.delete(&object).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(error) => return Err(unreachable(&error)),
                    }
                    deleted_stale = Some(stale);
                }
                Err(error) => return Err(unreachable(&error)),
            }
        }
        Err(RemoteError::Unreachable {
            url: url.to_owned(),
            reason: format!("the lease {object} changed hands four times while being taken"),
        })
    }

    fn held(
        object: ObjectPath,
        url: &str,
        (holder, version): (LeaseHolder, UpdateVersion),
        timing: LeaseTiming,
        sent: Instant,
    ) -> Self {
        Self {
            object,
            url: url.to_owned(),
            holder,
            version,
            timing,
            claim: Claim::new(url, timing, sent),
        }
    }

    /// Renews the lease. A store that refuses the renewal because the object is another
    /// writer's now, or gone, loses the claim for good; any other failure is tried again at
    /// the next renewal (past `stale_after`, another writer may take the lease meanwhile).
    pub(super) async fn renew(&mut self, store: &dyn ObjectStore) {
        if self.claim.is_lost() {
            return;
        }
        #[cfg(test)]
        if self.claim.paused() {
            return;
        }
        let sent = Instant::now();
        self.holder.renewed_ms = now_ms();
        let update = PutMode::Update(self.version.clone());
        let renewed = match put(store, &self.object, &self.holder, update).await {
            Err(object_store::Error::NotImplemented { .. }) => {
                self.renew_unconditionally(store).await
            }
            renewed => renewed,
        };
        match renewed {
            Ok(version) => {
                self.version = version;
                self.claim.renewed(sent);
            }
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::NotFound { .. },
            ) => self.lose(store, sent).await,
            Err(error) => log::warn!(
                "ember-write: renewing {}'s lease: {}",
                self.url,
                in_short(&error)
            ),
        }
    }

    /// Where the store has no conditional update: the lease is rewritten when it is still
    /// this process's, as far as a read tells.
    async fn renew_unconditionally(
        &self,
        store: &dyn ObjectStore,
    ) -> Result<UpdateVersion, object_store::Error> {
        match read(store, &self.object).await? {
            Some((found, _)) if found.pid == self.holder.pid && found.host == self.holder.host => {
                put(store, &self.object, &self.holder, PutMode::Overwrite).await
            }
            _ => Err(object_store::Error::Precondition {
                path: self.object.to_string(),
                source: "the lease is another writer's".into(),
            }),
        }
    }

    /// The store refused the renewal sent at `sent`: the lease is lost, unless the object is
    /// still this holder's (the same host, process and time taken): a retry of a PUT the
    /// store had taken is refused as if the lease had moved on, and a store restored from
    /// before the last renewal holds an earlier one, which the next renewal updates.
    async fn lose(&mut self, store: &dyn ObjectStore, sent: Instant) {
        let holder = match read(store, &self.object).await {
            Ok(Some((found, version)))
                if (&found.host, found.pid, found.taken_ms)
                    == (&self.holder.host, self.holder.pid, self.holder.taken_ms) =>
            {
                self.version = version;
                if found == self.holder {
                    self.claim.renewed(sent);
                }
                return;
            }
            Ok(found) => found.map(|(holder, _)| holder),
            Err(error) => {
                log::warn!(
                    "ember-write: reading {}'s lease after a refused renewal: {}",
                    self.url,
                    in_short(&error)
                );
                return;
            }
        };
        self.claim.lose(holder);
        if let Err(error) = self.claim.check() {
            log::error!("ember-write: {error}");
        }
    }

    /// Deletes the lease, unless another writer may hold it now: lost, or past its window
    /// and not renewed first.
    pub(super) async fn release(mut self, store: &dyn ObjectStore) {
        if self.claim.check().is_err() {
            self.renew(store).await;
        }
        if self.claim.check().is_err() {
            return;
        }
        match store.delete(&self.object).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => log::warn!(
                "ember-write: releasing {}'s lease: {}",
                self.url,
                in_short(&error)
            ),
        }
    }
}

/// The thread that renews a held lease every [`LeaseTiming::renew_every`], apart from the
/// mirror's uploads, and releases it once dropped.
#[derive(Debug)]
pub(super) struct Keeper {
    claim: Claim,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Keeps `lease`, on a thread of its own with a runtime and a client of its own: a
    /// connection the mirror's client opened is served by the mirror's runtime, which runs
    /// only while the mirror ships, and a renewal sent over it would wait for the next pass.
    pub(super) fn start(lease: Lease) -> Result<Self, RemoteError> {
        let (store, _) = super::store::open_store(&lease.url)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| RemoteError::Thread("could not start its runtime"))?;
        let claim = lease.claim.clone();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ember-lease".into())
            .spawn(move || {
                let mut lease = lease;
                while let Err(RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(lease.timing.renew_every)
                {
                    runtime.block_on(lease.renew(store.as_ref()));
                }
                runtime.block_on(lease.release(store.as_ref()));
            })
            .map_err(|_| RemoteError::Thread("could not start"))?;
        Ok(Self {
            claim,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// What the renewals leave of the lease.
    pub(super) fn claim(&self) -> &Claim {
        &self.claim
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes `holder` to `object` as `mode` says; the version written.
async fn put(
    store: &dyn ObjectStore,
    object: &ObjectPath,
    holder: &LeaseHolder,
    mode: PutMode,
) -> Result<UpdateVersion, object_store::Error> {
    let options = PutOptions {
        mode,
        ..PutOptions::default()
    };
    let result = store
        .put_opts(object, holder.encode().into(), options)
        .await?;
    Ok(UpdateVersion {
        e_tag: result.e_tag,
        version: result.version,
    })
}

/// The lease in `object` and its version, if there is one. A lease of no holder ember can read
/// is taken for one renewed long ago.
async fn read(
    store: &dyn ObjectStore,
    object: &ObjectPath,
) -> Result<Option<(LeaseHolder, UpdateVersion)>, object_store::Error> {
    let got = match store.get(object).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let bytes = got.bytes().await?;
    let holder = LeaseHolder::decode(&bytes).unwrap_or(LeaseHolder {
        host: "?".into(),
        pid: 0,
        taken_ms: 0,
        renewed_ms: 0,
        run: None,
    });
    Ok(Some((holder, version)))
}

/// The store's error about the lease `object`: refused credentials as the probe reports them.
fn failed(url: &str, object: &ObjectPath, error: &object_store::Error) -> RemoteError {
    let reason = format!("the lease {object}: {}", in_short(error));
    match error {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => RemoteError::Refused {
            url: url.to_owned(),
            reason,
        },
        _ => RemoteError::Unreachable {
            url: url.to_owned(),
            reason,
        },
    }
}

fn said_taken_over(url: &str, stale: &LeaseHolder) {
    log::warn!(
        "ember-write: took over {url}'s lease from process {} on host {}, not renewed for {:.0?} \
         (or gone)",
        stale.pid,
        stale.host,
        stale.renewed_ago()
    );
}

fn leased(url: &str, holder: LeaseHolder) -> RemoteError {
    RemoteError::Leased {
        url: url.to_owned(),
        renewed_ago: holder.renewed_ago(),
        host: holder.host,
        pid: holder.pid,
        run: holder.run,
    }
}

/// Watches the lease in `object` until it is free or stale, or refuses it: renewed while
/// watched, or held by a live process of this host. Waits at most `timing.stale_after`.
async fn watch(
    store: &dyn ObjectStore,
    object: &ObjectPath,
    url: &str,
    timing: LeaseTiming,
) -> Result<Found, RemoteError> {
    let unreachable = |error: &object_store::Error| failed(url, object, error);
    let Some((first, version)) = read(store, object).await.map_err(|e| unreachable(&e))? else {
        return Ok(Found::Free);
    };
    let watched = Instant::now();
    let mut said = false;
    loop {
        let Some((holder, now)) = read(store, object).await.map_err(|e| unreachable(&e))? else {
            return Ok(Found::Free);
        };
        if now != version || holder != first {
            return Err(leased(url, holder));
        }
        match holder.alive_here() {
            Some(false) => return Ok(Found::Stale(holder, version)),
            Some(true) => return Err(leased(url, holder)),
            None => {}
        }
        if holder.renewed_ago() >= timing.stale_after || watched.elapsed() >= timing.stale_after {
            return Ok(Found::Stale(holder, version));
        }
        if !said {
            said = true;
            log::warn!(
                "{url} is leased by process {} on host {}, renewed {:.1?} ago: waiting up to \
                 {:?} for it to be renewed (the run lives) or not (it died)",
                holder.pid,
                holder.host,
                holder.renewed_ago(),
                timing.stale_after
            );
        }
        tokio::time::sleep(timing.renew_every / 4).await;
    }
}

/// Refuses `url`'s lease of `rank` while another process holds it (waiting, as
/// leases do, at most [`LeaseTiming::stale_after`] to tell a live holder from a dead one);
/// reads only, takes nothing.
pub fn check_lease(url: &str, rank: u32, timing: LeaseTiming) -> Result<(), RemoteError> {
    let (store, prefix) = super::store::open_store(url)?;
    super::store::outside_any_runtime(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| RemoteError::Thread("could not start its runtime"))?;
        let object = lease_object(&prefix, rank);
        // The store tried as the mirror tries it, so that refused credentials or a missing
        // bucket read the same from either.
        runtime.block_on(async {
            super::store::probe(store.as_ref(), &prefix, url).await?;
            watch(store.as_ref(), &object, url, timing)
                .await
                .map(|_| ())
        })
    })
}

#[cfg(test)]
mod tests;
