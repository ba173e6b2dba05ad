//! What can go wrong with a remote log directory ([`RemoteError`]), the store a URL names and
//! the probe that tries it once, and an object store's error in one short line.

use std::path::PathBuf;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use super::holder::LeaseHolder;

/// What can go wrong with a remote log directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The URL is not one of an object store this build serves.
    #[error(
        "`{url}` is not an object store URL this ember serves (s3://, gs://, az://, file://): {reason}"
    )]
    Url {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
    /// The store refused the credentials, or access to the bucket.
    #[error(
        "the object store refused access to {url} (check the credentials it was given): {reason}"
    )]
    Refused {
        /// The log directory's URL.
        url: String,
        /// The store's answer, in short.
        reason: String,
    },
    /// The store could not be reached, or the bucket does not exist.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The log directory's URL.
        url: String,
        /// The store's answer or the connection's error, in short.
        reason: String,
    },
    /// The staging directory could not be read.
    #[error("cannot read the staging directory {}: {source}", path.display())]
    Staging {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The records not yet in the store are over the budget, and the policy is
    /// [`FullQueuePolicy::Error`](crate::FullQueuePolicy::Error): the record was not accepted.
    #[error(
        "{backlog} bytes for {url} are not in the store yet (budget {budget}): record not accepted"
    )]
    OverBudget {
        /// The log directory's URL.
        url: String,
        /// Bytes written and not yet shipped.
        backlog: u64,
        /// The budget.
        budget: u64,
    },
    /// A staging directory (or its parent) is not private to this user.
    #[error("the staging directory {} is not private: {why}; remove it or set TMPDIR elsewhere", path.display())]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A blocked record waited past its deadline, or was told to stop waiting, for the store to
    /// take the backlog.
    #[error(
        "waited {waited:?} for {url} to take {backlog} bytes (budget {budget}): {why}; record not accepted"
    )]
    Waited {
        /// The log directory's URL.
        url: String,
        /// How long it waited.
        waited: Duration,
        /// Bytes written and not yet shipped.
        backlog: u64,
        /// The budget.
        budget: u64,
        /// The deadline passed, or a stop was asked for.
        why: &'static str,
    },
    /// Another process holds the run's lease (see [`lease`](super::lease)): it writes the run.
    #[error(
        "{url} is in use by process {pid} on host {host}{} (lease renewed {}s ago): one writer \
         per run; wait for it to end or choose another directory",
        run.as_ref().map(|run| format!(", run {run}")).unwrap_or_default(),
        renewed_ago.as_secs()
    )]
    Leased {
        /// The log directory's URL.
        url: String,
        /// The holder's process id.
        pid: u32,
        /// The holder's host.
        host: String,
        /// The id of the run the holder writes, where it named one.
        run: Option<String>,
        /// How long ago, by this host's clock, the holder last renewed the lease.
        renewed_ago: Duration,
    },
    /// Another writer took the run's lease over while this one held it (this one did not renew
    /// it for `stale_after`: it was paused, or cut off from the store): this writer writes
    /// nothing more under the run (see [`lease`](super::lease)'s fencing rule).
    #[error(
        "{url} is no longer this writer's: {} took its lease over (a lease not renewed for \
         {stale_after:?} is taken over: this writer was stopped, or cut off from the store); it \
         writes nothing more under the run",
        taker(holder.as_ref())
    )]
    LeaseLost {
        /// The log directory's URL.
        url: String,
        /// Who holds the lease now, where its object said.
        holder: Option<LeaseHolder>,
        /// How long a lease not renewed stays its holder's.
        stale_after: Duration,
    },
    /// The mirror's thread could not start, or stopped.
    #[error("the remote mirror's thread {0}")]
    Thread(&'static str),
}

fn taker(holder: Option<&LeaseHolder>) -> String {
    match holder {
        Some(holder) => format!("process {} on host {}", holder.pid, holder.host),
        None => "another writer, which has released it since,".into(),
    }
}

/// Runs `work` on a thread of its own and waits for it: a caller inside a tokio runtime may
/// neither block on another runtime nor drop one, both of which `work` may do.
pub(super) fn outside_any_runtime<T: Send>(
    work: impl FnOnce() -> Result<T, RemoteError> + Send,
) -> Result<T, RemoteError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    std::thread::scope(|scope| {
        scope
            .spawn(work)
            .join()
            .map_err(|_| RemoteError::Thread("panicked"))?
    })
}

/// The store and the prefix that `url` names, configured from the environment.
pub(super) fn open_store(url: &str) -> Result<(Box<dyn ObjectStore>, ObjectPath), RemoteError> {
    let bad = |reason: String| RemoteError::Url {
        url: url.to_owned(),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    let prefix = ObjectPath::from_url_path(parsed.path()).map_err(|e| bad(e.to_string()))?;
    // A few quick retries: a store that is down fails the start in about a second, and an
    // upload that fails during the run is tried again at the next interval anyway.
    let retry = object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: Duration::from_secs(20),
    };
    let store: Box<dyn ObjectStore> = match parsed.scheme() {
        "s3" | "s3a" => Box::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_url(url)
                .with_retry(retry)
                .build()
                .map_err(|e| bad(e.to_string()))?,
        ),
        "gs" => Box::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .build()
                .map_err(|e| bad(e.to_string()))?,
        ),
        // Account, key (or other credentials) and endpoint from the environment
        // (`AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`,
        // `AZURE_STORAGE_USE_EMULATOR` with `AZURITE_BLOB_STORAGE_URL`, …): `parse_url` reads
        // none of them.
        "az" | "adl" | "azure" | "abfs" | "abfss" => Box::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .build()
                .map_err(|e| bad(e.to_string()))?,
        ),
        _ => {
            let (store, _) = object_store::parse_url(&parsed).map_err(|e| bad(e.to_string()))?;
            store
        }
    };
    Ok((store, prefix))
}

/// Tries the store once: the credentials pass (a HEAD of an object that need not exist, which
/// the store answers 403 or 401 when it refuses them), then the store answers and the bucket
/// exists (a listing of the prefix).
pub(super) async fn probe(
    store: &dyn ObjectStore,
    prefix: &ObjectPath,
    url: &str,
) -> Result<(), RemoteError> {
    use object_store::{Error, ObjectStoreExt};
    let refused = |error: &Error| RemoteError::Refused {
        url: url.to_owned(),
        reason: in_short(error),
    };
    let unreachable = |error: &Error| RemoteError::Unreachable {
        url: url.to_owned(),
        reason: in_short(error),
    };
    match store.head(&prefix.clone().join(".ember-probe")).await {
        Ok(_) | Err(Error::NotFound { .. }) => {}
        Err(error @ (Error::PermissionDenied { .. } | Error::Unauthenticated { .. })) => {
            return Err(refused(&error));
        }
        Err(error) => return Err(unreachable(&error)),
    }
    match store.list_with_delimiter(Some(prefix)).await {
        Ok(_) => Ok(()),
        Err(error @ (Error::PermissionDenied { .. } | Error::Unauthenticated { .. })) => {
            Err(refused(&error))
        }
        Err(error) => Err(unreachable(&error)),
    }
}

/// An object store error in one short line: its root cause, with an S3-style XML answer
/// reduced to its code and message (the whole chain repeats each cause in every layer).
pub(super) fn in_short(error: &object_store::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&format!("</{name}>"))?;
        Some(text[start..end].to_owned())
    };
    let status = text
        .find("status code: ")
        .map(|at| &text[at + "status code: ".len()..])
        .and_then(|rest| rest.split(':').next())
        .map(str::trim);
    match (status, element("Code"), element("Message")) {
        // Azure's messages run over several lines (a request id, a time): the first is the
        // message, and an error is one line.
        (Some(status), Some(code), Some(message)) => {
            let message = message.lines().next().unwrap_or_default().trim();
            format!("{status}, {code}: {message}")
        }
        (Some(status), _, _) => status.to_owned(),
        _ => text.lines().next().unwrap_or_default().trim().to_owned(),
    }
}
