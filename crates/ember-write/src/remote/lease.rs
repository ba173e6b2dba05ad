//! A bucket run's lease: the object store's stand-in for a directory lock, so that a second
//! writer of one URL (a `--resume` while the first run still writes) is refused naming the
//! first, as a second writer of a local directory is.
//!
//! - The lease is one object in the run's prefix, `.ember-lease` (rank 0) or
//!   `.ember-lease.rank<R>`: its holder's host, process id, when it was taken and when last
//!   renewed (`key=value` lines, times in milliseconds since the Unix epoch).
//! - It is taken by a create-only PUT ([`PutMode::Create`]): of two writers starting at once,
//!   the store lets one create it.
//! - The mirror's thread renews it every [`LeaseTiming::renew_every`] (2 s) by a conditional
//!   update against the version it wrote last; a renewal the store refuses (another writer
//!   took the lease over) is logged as an error, and the mirror renews no more.
//! - A lease is *stale* once it has not changed for [`LeaseTiming::stale_after`] (8 s, four
//!   renewals): as its holder's clock says (clocks are taken to agree within seconds), or as
//!   watched from here, whichever comes first; and at once when its holder is a process of
//!   this host that no longer exists (a run killed here and resumed here waits for nothing).
//!   A lease that is not stale is watched until it is renewed (its holder lives: refused with
//!   [`RemoteError::Leased`]) or goes stale: a resume right after a kill on another host
//!   waits at most `stale_after`, and says so.
//! - A stale lease is taken over by a conditional update ([`PutMode::Update`]) against the
//!   version read: of two takers, the store lets one win; the other is refused naming it.
//!   Where the store cannot update conditionally (a `file://` store, an S3 store with
//!   conditional PUTs disabled), the stale lease is deleted and created again create-only:
//!   two takers of one stale lease in the same instant may then both go on, which the
//!   renewal of the loser, finding the object not its own, logs.
//! - The lease is deleted when the mirror closes.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use super::store::{RemoteError, in_short};

/// How often a lease is renewed, and when one that was not is taken for its holder's death.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How often the holder renews it.
    pub renew_every: Duration,
    /// How long a lease not renewed stays its holder's.
    pub stale_after: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            renew_every: Duration::from_secs(2),
            stale_after: Duration::from_secs(8),
        }
    }
}

/// Who holds a lease, as its object says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When it took the lease, in milliseconds since the Unix epoch.
    pub taken_ms: u64,
    /// When it last renewed it, in milliseconds since the Unix epoch.
    pub renewed_ms: u64,
}

impl LeaseHolder {
    fn this_process() -> Self {
        let now = now_ms();
        Self {
            host: crate::naming::host_name(),
            pid: std::process::id(),
            taken_ms: now,
            renewed_ms: now,
        }
    }

    fn encode(&self) -> Vec<u8> {
        format!(
            "host={}\npid={}\ntaken={}\nrenewed={}\n",
            self.host, self.pid, self.taken_ms, self.renewed_ms
        )
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let field = |key: &str| {
            text.lines()
                .filter_map(|line| line.split_once('='))
                .find(|(k, _)| *k == key)
                .map(|(_, value)| value)
        };
        Some(Self {
            host: field("host")?.to_owned(),
            pid: field("pid")?.parse().ok()?,
            taken_ms: field("taken")?.parse().ok()?,
            renewed_ms: field("renewed")?.parse().ok()?,
        })
    }

    /// How long ago, by this host's clock, the holder last renewed the lease.
    pub fn renewed_ago(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.renewed_ms))
    }

    /// Whether the holder is a process of this host that is alive (`Some(false)`: it is gone),
    /// or lives elsewhere (`None`: only its renewals tell).
    fn alive_here(&self) -> Option<bool> {
        if self.host != crate::naming::host_name() {
            return None;
        }
        #[cfg(unix)]
        {
            let pid = i32::try_from(self.pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)?;
            // EPERM: it exists, another user's. A zombie (killed, not yet reaped: a job's
            // rank whose parent died before it) holds nothing either.
            let exists = !matches!(
                rustix::process::test_kill_process(pid),
                Err(rustix::io::Errno::SRCH)
            );
            Some(exists && !is_zombie(self.pid))
        }
        #[cfg(not(unix))]
        None
    }
}

/// Whether process `pid` has ended and waits only to be reaped (Linux: its state in
/// `/proc/<pid>/stat` is `Z` or `X`); `false` where that cannot be read.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses and may hold any byte.
            let after_name = &stat[stat.rfind(')')? + 1..];
            after_name
                .split_whitespace()
                .next()
                .map(|state| state == "Z" || state == "X")
        })
        .unwrap_or(false)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

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
    renewed_at: Instant,
    /// Another writer has the object now: not renewed, not deleted.
    lost: bool,
}

/// What a lease found in place comes to.
enum Found {
    /// No lease (or it went away while watched).
    Free,
    /// A stale lease, of this version.
    Stale(LeaseHolder, UpdateVersion),
}

impl Lease {
    /// Takes the lease of `rank` in `prefix`: creates it, or takes a stale one over; refused
    /// with [`RemoteError::Leased`] while another process holds it.
    pub(super) async fn take(
        store: &dyn ObjectStore,
        prefix: &ObjectPath,
        rank: u32,
        url: &str,
        timing: LeaseTiming,
    ) -> Result<Self, RemoteError> {
        let object = lease_object(prefix, rank);
        let holder = LeaseHolder::this_process();
        let unreachable = |error: &object_store::Error| failed(url, &object, error);
        // Each pass either takes the lease, is refused, or found the lease gone meanwhile.
        let mut deleted_stale = None;
        for _ in 0..4 {
            let created = put(store, &object, &holder, PutMode::Create).await;
            let error = match created {
                Ok(version) => {
                    if let Some(stale) = &deleted_stale {
                        said_taken_over(url, stale);
                    }
                    return Ok(Self::held(object, url, holder, version, timing));
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
            match put(store, &object, &holder, update).await {
                Ok(version) => {
                    said_taken_over(url, &stale);
                    return Ok(Self::held(object, url, holder, version, timing));
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
        holder: LeaseHolder,
        version: UpdateVersion,
        timing: LeaseTiming,
    ) -> Self {
        Self {
            object,
            url: url.to_owned(),
            holder,
            version,
            timing,
            renewed_at: Instant::now(),
            lost: false,
        }
    }

    /// Renews the lease when a renewal is due; a store that refuses the renewal (another
    /// writer took the lease over) is logged once, and the lease is renewed no more.
    pub(super) async fn renew_if_due(&mut self, store: &dyn ObjectStore) {
        if self.lost || self.renewed_at.elapsed() < self.timing.renew_every {
            return;
        }
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
                self.renewed_at = Instant::now();
            }
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => self.lose(),
            // Tried again at the next pass; past `stale_after` another writer may take it.
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

    fn lose(&mut self) {
        self.lost = true;
        log::error!(
            "ember-write: {}'s lease was taken over by another writer (this one's renewals \
             stopped for longer than {:?}): two writers may now write the run",
            self.url,
            self.timing.stale_after
        );
    }

    /// Deletes the lease, unless another writer holds it now.
    pub(super) async fn release(self, store: &dyn ObjectStore) {
        if self.lost {
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
