//! Event files shipped to an object store (`s3://`, `gs://`, `az://`, `file://`), with the
//! `object-store` feature: [`RemoteMirror`].
//!
//! An object cannot be appended to. The writer pool writes into a local staging directory as
//! it always does, and the mirror ships each event file's new whole records, as they come, as
//! *segment objects*: `<prefix>/<file name>.<segment, 8 digits>`, each holding the records
//! written since the previous segment of that file, never cut inside one. So:
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
//!   called (a flush, a close).
//!
//! Credentials, endpoint and region come from the environment as the `object_store` crate reads
//! them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ALLOW_HTTP`, `GOOGLE_APPLICATION_CREDENTIALS`, …); signing, retries with backoff and
//! multipart uploads are that crate's. An upload that still fails is tried again at the next
//! interval: the staging directory keeps what is not yet shipped, so a store that is down for a
//! while loses nothing. The store is tried when the mirror starts: a store that cannot be
//! reached, a bucket that does not exist or credentials it refuses are a [`RemoteError`] there,
//! before any training.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

/// How often the mirror ships what the pool has written, unless asked sooner.
pub const DEFAULT_SHIP_INTERVAL: Duration = Duration::from_secs(2);

/// How long a close keeps trying to ship the last records to a store that does not answer.
pub const CLOSE_PATIENCE: Duration = Duration::from_secs(60);

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
    #[error("the object store refused access to {url}: {source}")]
    Refused {
        /// The log directory's URL.
        url: String,
        /// The store's error.
        source: object_store::Error,
    },
    /// The store could not be reached, or the bucket does not exist.
    #[error("cannot reach {url}: {source}")]
    Unreachable {
        /// The log directory's URL.
        url: String,
        /// The store's error.
        source: object_store::Error,
    },
    /// The staging directory could not be read.
    #[error("cannot read the staging directory {}: {source}", path.display())]
    Staging {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The mirror's thread could not start, or stopped.
    #[error("the remote mirror's thread {0}")]
    Thread(&'static str),
}

/// Counters of what the mirror has shipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Segment objects uploaded.
    pub segments: u64,
    /// Bytes uploaded in them.
    pub bytes: u64,
    /// Uploads that failed (each tried again later).
    pub failed_uploads: u64,
}

enum Request {
    /// Ship now, and say when done (with the error of an upload that failed, if any).
    Ship(Sender<Result<(), String>>),
    /// Ship what is left and stop.
    Close(Sender<Result<(), String>>),
}

/// Ships a staging directory's event files to an object store; see the module docs.
#[derive(Debug)]
pub struct RemoteMirror {
    url: String,
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<MirrorStats>>,
    stats: Arc<std::sync::Mutex<MirrorStats>>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Request::Ship(_) => "Ship",
            Request::Close(_) => "Close",
        })
    }
}

impl RemoteMirror {
    /// Starts mirroring `staging` to `url`, shipping every `interval` and when asked. Tries the
    /// store first (a listing of the prefix): see [`RemoteError`].
    pub fn start(url: &str, staging: &Path, interval: Duration) -> Result<Self, RemoteError> {
        let (store, prefix) = open_store(url)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| RemoteError::Thread("could not start its runtime"))?;
        runtime.block_on(probe(store.as_ref(), &prefix, url))?;
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(std::sync::Mutex::new(MirrorStats::default()));
        let shipper = Shipper {
            store,
            prefix,
            staging: staging.to_path_buf(),
            shipped: BTreeMap::new(),
            stats: Arc::clone(&stats),
        };
        let thread = std::thread::Builder::new()
            .name("ember-remote".into())
            .spawn(move || shipper.run(runtime, rx, interval))
            .map_err(|_| RemoteError::Thread("could not start"))?;
        Ok(Self {
            url: url.to_owned(),
            tx: Some(tx),
            thread: Some(thread),
            stats,
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

/// Downloads every object under `url` into `into` (made when missing, and best empty),
/// keeping their names relative to the prefix and joining each event file's segments back
/// into the file, in order: an object-store log directory as the local directory it was
/// written as, which every local reader (MindInsight too) reads. Returns how many objects
/// there were.
pub fn download(url: &str, into: &Path) -> Result<usize, RemoteError> {
    use futures_util::TryStreamExt;

    let (store, prefix) = open_store(url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|_| RemoteError::Thread("could not start its runtime"))?;
    let unreachable = |source| RemoteError::Unreachable {
        url: url.to_owned(),
        source,
    };
    runtime.block_on(async {
        let mut listed: Vec<object_store::ObjectMeta> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(unreachable)?;
        // A file's segments in order, so that appending them gives the file back.
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        for meta in &listed {
            let relative: Vec<String> = meta
                .location
                .prefix_match(&prefix)
                .map(|parts| parts.map(|p| p.as_ref().to_owned()).collect())
                .unwrap_or_default();
            let Some((name, dirs)) = relative.split_last() else {
                continue;
            };
            // Object names are the store's: only plain path parts become local names.
            if relative
                .iter()
                .any(|p| p.is_empty() || p == "." || p == "..")
            {
                continue;
            }
            let dir = dirs.iter().fold(into.to_path_buf(), |d, p| d.join(p));
            fs::create_dir_all(&dir).map_err(|source| RemoteError::Staging {
                path: dir.clone(),
                source,
            })?;
            let bytes = store
                .get(&meta.location)
                .await
                .map_err(unreachable)?
                .bytes()
                .await
                .map_err(unreachable)?;
            let path = dir.join(file_of_segment(name));
            let written = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut file| std::io::Write::write_all(&mut file, &bytes));
            written.map_err(|source| RemoteError::Staging { path, source })?;
        }
        Ok(listed.len())
    })
}

/// The event file a segment object is part of: its name without the segment number.
fn file_of_segment(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((file, number))
            if number.len() == 8
                && number.bytes().all(|b| b.is_ascii_digit())
                && crate::naming::name_secs(file).is_some() =>
        {
            file
        }
        _ => name,
    }
}

/// The store and the prefix that `url` names, configured from the environment.
fn open_store(url: &str) -> Result<(Box<dyn ObjectStore>, ObjectPath), RemoteError> {
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
        _ => {
            let (store, _) = object_store::parse_url(&parsed).map_err(|e| bad(e.to_string()))?;
            store
        }
    };
    Ok((store, prefix))
}

/// Lists the prefix once: the store answers, the bucket exists, the credentials pass.
async fn probe(store: &dyn ObjectStore, prefix: &ObjectPath, url: &str) -> Result<(), RemoteError> {
    match store.list_with_delimiter(Some(prefix)).await {
        Ok(_) => Ok(()),
        Err(
            source @ (object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }),
        ) => Err(RemoteError::Refused {
            url: url.to_owned(),
            source,
        }),
        Err(source) => Err(RemoteError::Unreachable {
            url: url.to_owned(),
            source,
        }),
    }
}

/// The mirror's thread.
struct Shipper {
    store: Box<dyn ObjectStore>,
    prefix: ObjectPath,
    staging: PathBuf,
    /// For each event file (relative name): bytes shipped, segments shipped.
    shipped: BTreeMap<String, (u64, u64)>,
    stats: Arc<std::sync::Mutex<MirrorStats>>,
}

impl Shipper {
    fn run(
        mut self,
        runtime: tokio::runtime::Runtime,
        rx: Receiver<Request>,
        interval: Duration,
    ) -> MirrorStats {
        loop {
            match rx.recv_timeout(interval) {
                Ok(Request::Ship(ack)) => {
                    let result = runtime.block_on(self.ship_all());
                    let _ = ack.send(result);
                }
                Ok(Request::Close(ack)) => {
                    // The last records have nowhere else to go: a store that is down gets a
                    // while to come back before the close gives up on them.
                    let deadline = std::time::Instant::now() + CLOSE_PATIENCE;
                    let result = loop {
                        match runtime.block_on(self.ship_all()) {
                            Err(error) if std::time::Instant::now() < deadline => {
                                log::warn!(
                                    "ember-write: shipping the last records: {error}; trying again"
                                );
                                std::thread::sleep(Duration::from_secs(1));
                            }
                            result => break result,
                        }
                    };
                    let _ = ack.send(result);
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(error) = runtime.block_on(self.ship_all()) {
                        log::warn!(
                            "ember-write: shipping to the object store: {error}; trying again"
                        );
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = runtime.block_on(self.ship_all());
                    break;
                }
            }
        }
        *self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ships the new whole records of every event file of the staging directory.
    async fn ship_all(&mut self) -> Result<(), String> {
        let mut names: Vec<String> = match fs::read_dir(&self.staging) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| crate::naming::name_secs(name).is_some())
                .collect(),
            Err(e) => return Err(format!("listing {}: {e}", self.staging.display())),
        };
        names.sort();
        let mut first_error = None;
        for name in names {
            if let Err(error) = self.ship_file(&name).await {
                self.count(|s| s.failed_uploads += 1);
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn ship_file(&mut self, name: &str) -> Result<(), String> {
        let (from, segment) = self.shipped.get(name).copied().unwrap_or((0, 0));
        let path = self.staging.join(name);
        let bytes =
            read_from(&path, from).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let whole = whole_records(&bytes);
        if whole == 0 {
            return Ok(());
        }
        let object = self
            .prefix
            .clone()
            .join(format!("{name}.{:08}", segment + 1).as_str());
        let payload = bytes[..whole].to_vec();
        self.store
            .put(&object, payload.into())
            .await
            .map_err(|e| format!("uploading {object}: {e}"))?;
        self.shipped
            .insert(name.to_owned(), (from + whole as u64, segment + 1));
        self.count(|s| {
            s.segments += 1;
            s.bytes += whole as u64;
        });
        Ok(())
    }

    fn count(&self, f: impl FnOnce(&mut MirrorStats)) {
        f(&mut self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

fn read_from(path: &Path, from: u64) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// How many leading bytes of `bytes` are whole framed records: each is a length (8 bytes), its
/// CRC (4), the data and its CRC (4). A record still being written is left for later.
fn whole_records(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    while bytes.len() - at >= 12 {
        let mut len = [0u8; 8];
        len.copy_from_slice(&bytes[at..at + 8]);
        let Ok(len) = usize::try_from(u64::from_le_bytes(len)) else {
            break;
        };
        let Some(end) = at.checked_add(16).and_then(|n| n.checked_add(len)) else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        at = end;
    }
    at
}

#[cfg(test)]
mod tests {
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
        let mut segments: Vec<PathBuf> = std::fs::read_dir(bucket.path().join("run"))
            .unwrap()
            .map(|e| e.unwrap().path())
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
}
