//! An object-store prefix used as a directory of whole files, blocking: where checkpoints, the
//! run's command line and model go when the log directory is a URL, and what a resume lists,
//! reads and removes there. A PUT is whole or absent, so a file written here is either whole
//! or missing, with no temporary name and rename to make it so. Fenced by a writer's claim on
//! the run ([`Bucket::fenced_by`]), it writes only while the claim holds, and never replaces
//! what another writer put since (see `lease`'s fencing rule).

use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use super::claim::{Claim, Unfenced, put_fenced};
use super::markers::{marked_file, marked_files};
use super::staged::PROJECTOR_CONFIG;
use super::store::{RemoteError, in_short, open_store, outside_any_runtime};

/// A prefix of an object store (`s3://bucket/run/checkpoints`), its objects read and written
/// whole; see the module docs.
pub struct Bucket {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// The claim every write asks first, where the bucket is fenced.
    claim: Option<Claim>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.url).finish()
    }
}

/// An object of a [`Bucket`]: its name below the prefix and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The name, `/`-separated below the bucket's prefix.
    pub name: String,
    /// Bytes.
    pub size: u64,
}

impl Bucket {
    /// The prefix `url` names, the store configured from the environment as for a log
    /// directory. Nothing is asked of the store yet.
    pub fn open(url: &str) -> Result<Self, RemoteError> {
        let (store, prefix) = open_store(url)?;
        Ok(Self {
            url: url.trim_end_matches('/').to_owned(),
            store: Arc::from(store),
            prefix,
            claim: None,
        })
    }

    /// This bucket, writing only while `claim` (a writer's on the run the bucket lies in)
    /// holds: each write and removal asks it first and fails with its error (once the lease is
    /// lost, [`RemoteError::LeaseLost`]); a new object is created create-only and an existing
    /// one replaced only in the version read before the check, so that a write racing a
    /// takeover never replaces the new holder's.
    pub fn fenced_by(&self, claim: Claim) -> Self {
        Self {
            url: self.url.clone(),
            store: Arc::clone(&self.store),
            prefix: self.prefix.clone(),
            claim: Some(claim),
        }
    }

    /// The prefix's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bucket of the prefix `name` below this one.
    pub fn join(&self, name: &str) -> Result<Self, RemoteError> {
        Self::open(&format!("{}/{name}", self.url))
    }

    /// The object `name` (as [`list`](Self::list) gives it) names: taken as it is, as the
    /// mirror's objects are put, so that a name holding a `%` (the projector's
    /// `embedding%2F…` directories) is the object listed, not one with the `%` escaped again.
    fn object(&self, name: &str) -> ObjectPath {
        ObjectPath::parse(format!("{}/{name}", self.prefix)).unwrap_or_else(|_| {
            name.split('/')
                .filter(|part| !part.is_empty())
                .fold(self.prefix.clone(), |path, part| path.join(part))
        })
    }

    fn failed(&self, what: &str, error: &object_store::Error) -> RemoteError {
        let refused = matches!(
            error,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ) || in_short(error).contains("403 Forbidden");
        if refused {
            return RemoteError::Refused {
                url: self.url.clone(),
                reason: in_short(error),
            };
        }
        RemoteError::Unreachable {
            url: format!("{}: {what}", self.url),
            reason: in_short(error),
        }
    }

    /// Runs `work` on a runtime of its own, on a thread of its own where the caller is inside
    /// a tokio runtime.
    fn run<T: Send>(
        &self,
        work: impl std::future::Future<Output = Result<T, RemoteError>> + Send,
    ) -> Result<T, RemoteError> {
        outside_any_runtime(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|_| RemoteError::Thread("could not start its runtime"))?
                .block_on(work)
        })
    }

    /// Every object below the prefix, by name.
    pub fn list(&self) -> Result<Vec<Listed>, RemoteError> {
        use futures_util::TryStreamExt;
        self.run(async {
            let listed: Vec<object_store::ObjectMeta> = self
                .store
                .list(Some(&self.prefix))
                .try_collect()
                .await
                .map_err(|e| self.failed("listing", &e))?;
            let mut found: Vec<Listed> = listed
                .into_iter()
                .filter_map(|meta| {
                    let parts: Vec<String> = meta
                        .location
                        .prefix_match(&self.prefix)?
                        .map(|p| p.as_ref().to_owned())
                        .collect();
                    Some(Listed {
                        name: parts.join("/"),
                        size: meta.size,
                    })
                })
                .collect();
            found.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(found)
        })
    }

    /// The object `name`'s bytes; `None` when there is none.
    pub fn get(&self, name: &str) -> Result<Option<Vec<u8>>, RemoteError> {
        let object = self.object(name);
        self.run(async {
            match self.store.get(&object).await {
                Ok(found) => Ok(Some(
                    found
                        .bytes()
                        .await
                        .map_err(|e| self.failed("reading", &e))?
                        .to_vec(),
                )),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.failed("reading", &e)),
            }
        })
    }

    /// Writes `bytes` as the object `name`, whole, replacing any (fenced: see
    /// [`fenced_by`](Self::fenced_by)).
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), RemoteError> {
        let object = self.object(name);
        let Some(claim) = &self.claim else {
            return self.run(async {
                self.store
                    .put(&object, bytes.into())
                    .await
                    .map(drop)
                    .map_err(|e| self.failed("uploading", &e))
            });
        };
        let check = || claim.check();
        self.run(async {
            match put_fenced(self.store.as_ref(), &object, bytes.into(), &check).await {
                Ok(()) => Ok(()),
                Err(Unfenced::Refused(error)) => Err(error),
                Err(Unfenced::Changed) => Err(RemoteError::Unreachable {
                    url: format!("{}: uploading", self.url),
                    reason: format!("{name} changed while this writer replaced it: not replaced"),
                }),
                Err(Unfenced::Store(e)) => Err(self.failed("uploading", &e)),
            }
        })
    }

    /// Removes the object `name`; one that is not there is no error.
    pub fn delete(&self, name: &str) -> Result<(), RemoteError> {
        let object = self.object(name);
        if let Some(claim) = &self.claim {
            claim.check()?;
        }
        self.run(async {
            match self.store.delete(&object).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.failed("removing", &e)),
            }
        })
    }
}

/// What an object-store log directory held at a checkpoint: every object this writer owns
/// (segment objects and whole files, by name and size) and the projector config's text. Taken
/// right after a flush, which ships everything written, so that a segment never straddles the
/// checkpoint: what came after it is in objects of its own, which [`restore`](Self::restore)
/// removes. An object is this writer's when its file is marked as made by ember's writers (see
/// `.ember-run/objects/`) and its rank owns it by name: another tool's object, or a copy
/// of the run's file under another name, is never the run's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketSnapshot {
    objects: std::collections::BTreeMap<String, u64>,
    projector_config: Option<Vec<u8>>,
    /// Taken before ember marked its files (`bucket-snapshot 1`): the run's objects are told
    /// by their names alone, as then.
    by_name_alone: bool,
}

/// The line a [`BucketSnapshot`]'s text starts with: the version that tells the run's objects by
/// their markers, and the one before, by their names alone.
const BUCKET_SNAPSHOT: &str = "bucket-snapshot 2";
const BUCKET_SNAPSHOT_BY_NAME: &str = "bucket-snapshot 1";

impl BucketSnapshot {
    /// The objects of `bucket` that are this writer's (marked as made by ember's writers, and
    /// of its rank by `ownership`), those under `exclude` (the checkpoints) left out.
    pub fn take(
        bucket: &Bucket,
        exclude: &[String],
        ownership: crate::Ownership,
    ) -> Result<Self, RemoteError> {
        let mut snapshot = Self::default();
        let listed = bucket.list()?;
        let marked = marked_files(listed.iter().map(|l| l.name.as_str()));
        for listed in listed {
            if !snapshot.ours(&listed.name, &marked, exclude, ownership) {
                continue;
            }
            if listed.name == PROJECTOR_CONFIG {
                snapshot.projector_config = bucket.get(PROJECTOR_CONFIG)?;
            } else {
                snapshot.objects.insert(listed.name, listed.size);
            }
        }
        Ok(snapshot)
    }

    /// This snapshot (the log when the run began writing to it) with what the run's mirror
    /// shipped up to a cut: the objects a listing would count as this writer's once the cut is
    /// shipped, as they were at the cut, without the listing (see [`LogCut`](super::LogCut)).
    pub fn with_shipped(
        &self,
        shipped: super::cut::ShippedCut,
        exclude: &[String],
        ownership: crate::Ownership,
    ) -> Self {
        let mut snapshot = self.clone();
        snapshot.by_name_alone = false;
        let ours = |name: &str| owned(name, exclude, ownership);
        snapshot
            .objects
            .extend(shipped.objects.into_iter().filter(|(name, _)| ours(name)));
        if shipped.projector_config.is_some() && ours(PROJECTOR_CONFIG) {
            snapshot.projector_config = shipped.projector_config;
        }
        snapshot
    }

    /// Whether the object `name` is this writer's, `marked` the files the bucket's markers
    /// name.
    fn ours(
        &self,
        name: &str,
        marked: &std::collections::BTreeSet<String>,
        exclude: &[String],
        ownership: crate::Ownership,
    ) -> bool {
        owned(name, exclude, ownership)
            && (self.by_name_alone || marked.contains(&marked_file(name)))
    }

    /// Rolls `bucket` back to this snapshot: every object this writer owns that the snapshot
    /// does not list is removed, newest name first (the reverse of the order they were written
    /// in, so that at every moment what is there is the checkpoint's log and a run of what
    /// followed it, never a later part without an earlier one), then the projector config is
    /// put back. Each step removes or restores what the snapshot says; a crash between any two
    /// leaves a state the same rollback, run again, completes. Returns what was removed.
    pub fn restore(
        &self,
        bucket: &Bucket,
        exclude: &[String],
        ownership: crate::Ownership,
    ) -> Result<Vec<String>, RemoteError> {
        let listed = bucket.list()?;
        let marked = marked_files(listed.iter().map(|l| l.name.as_str()));
        let mut later: Vec<String> = listed
            .into_iter()
            .filter(|listed| self.ours(&listed.name, &marked, exclude, ownership))
            .filter(|listed| listed.name != PROJECTOR_CONFIG)
            .filter(|listed| !self.objects.contains_key(&listed.name))
            .map(|listed| listed.name)
            .collect();
        later.sort();
        for name in later.iter().rev() {
            bucket.delete(name)?;
        }
        let config_ours = self.projector_config.is_some()
            || self.ours(PROJECTOR_CONFIG, &marked, exclude, ownership);
        if config_ours && ownership.owns(std::path::Path::new(PROJECTOR_CONFIG)) {
            match &self.projector_config {
                Some(text) => {
                    if bucket.get(PROJECTOR_CONFIG)?.as_ref() != Some(text) {
                        bucket.put(PROJECTOR_CONFIG, text.clone())?;
                    }
                }
                None => bucket.delete(PROJECTOR_CONFIG)?,
            }
        }
        Ok(later)
    }

    /// The snapshot as text: its first line says it is a bucket's, and its version; names
    /// hex-encoded.
    pub fn encode(&self) -> String {
        let version = if self.by_name_alone {
            BUCKET_SNAPSHOT_BY_NAME
        } else {
            BUCKET_SNAPSHOT
        };
        let mut lines = vec![version.to_owned()];
        for (name, size) in &self.objects {
            lines.push(format!("o {} {size}", hex::encode(name.as_bytes())));
        }
        if let Some(text) = &self.projector_config {
            lines.push(format!("p {}", hex::encode(text)));
        }
        lines.join("\n") + "\n"
    }

    /// Whether `text` is a bucket snapshot's.
    pub fn is_one(text: &str) -> bool {
        matches!(
            text.lines().next(),
            Some(BUCKET_SNAPSHOT | BUCKET_SNAPSHOT_BY_NAME)
        )
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub fn decode(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let by_name_alone = match lines.next() {
            Some(BUCKET_SNAPSHOT) => false,
            Some(BUCKET_SNAPSHOT_BY_NAME) => true,
            _ => return None,
        };
        let mut snapshot = Self {
            by_name_alone,
            ..Self::default()
        };
        for line in lines {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["o", name, size] => {
                    let name = String::from_utf8(hex::decode(name).ok()?).ok()?;
                    snapshot.objects.insert(name, size.parse().ok()?);
                }
                ["p", text] => snapshot.projector_config = Some(hex::decode(text).ok()?),
                _ => return None,
            }
        }
        Some(snapshot)
    }
}

/// Whether the object `name` is this writer's: not under `exclude`, and, as the file it is a
/// segment of, one ember writes and `ownership` gives this rank.
fn owned(name: &str, exclude: &[String], ownership: crate::Ownership) -> bool {
    if exclude
        .iter()
        .any(|dir| name == dir || name.starts_with(&format!("{dir}/")))
    {
        return false;
    }
    let (dir, file) = name.rsplit_once('/').unwrap_or(("", name));
    let file = super::download::file_of_segment(file);
    let relative = if dir.is_empty() {
        file.to_owned()
    } else {
        format!("{dir}/{file}")
    };
    ownership.owns(std::path::Path::new(&relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lists_reads_writes_and_removes_whole_objects() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        let bucket = Bucket::open(&format!("file://{}/run", dir.path().display())).unwrap();
        assert!(bucket.list().unwrap().is_empty());
        assert_eq!(bucket.get("checkpoints/a").unwrap(), None);
        bucket.put("checkpoints/a", b"whole".to_vec()).unwrap();
        bucket.put("b", b"xy".to_vec()).unwrap();
        let names: Vec<(String, u64)> = bucket
            .list()
            .unwrap()
            .into_iter()
            .map(|l| (l.name, l.size))
            .collect();
        assert_eq!(names, [("b".into(), 2), ("checkpoints/a".into(), 5)]);
        let below = bucket.join("checkpoints").unwrap();
        assert_eq!(below.get("a").unwrap().unwrap(), b"whole");
        below.delete("a").unwrap();
        below.delete("a").unwrap();
        assert_eq!(bucket.list().unwrap().len(), 1);
    }

    /// Puts `name` as ember's shipper does: its file's marker first, then the object.
    fn ours(bucket: &Bucket, name: &str, bytes: &[u8]) {
        bucket
            .put(&super::super::markers::marker_of(name), Vec::new())
            .unwrap();
        bucket.put(name, bytes.to_vec()).unwrap();
    }

    /// The objects of `bucket` but the markers.
    fn names(bucket: &Bucket) -> Vec<String> {
        let names = bucket.list().unwrap().into_iter().map(|l| l.name);
        names.filter(|n| !n.starts_with(".ember-run/")).collect()
    }

    #[test]
    fn a_bucket_rolls_back_to_its_snapshot_and_a_second_rollback_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        let bucket = Bucket::open(&format!("file://{}/run", dir.path().display())).unwrap();
        let tb = "events.out.tfevents.0000000001.h.7.0";
        let alone = crate::Ownership::ALONE;
        let exclude = ["checkpoints".to_owned()];
        ours(&bucket, &format!("{tb}.00000001"), b"one");
        ours(&bucket, PROJECTOR_CONFIG, b"config a");
        bucket
            .put("checkpoints/ckpt-000000000001.ember", b"c".to_vec())
            .unwrap();
        bucket.put("notes.txt", b"the user's".to_vec()).unwrap();
        let snapshot = BucketSnapshot::take(&bucket, &exclude, alone).unwrap();
        assert_eq!(
            BucketSnapshot::decode(&snapshot.encode()),
            Some(snapshot.clone())
        );
        // What came after the checkpoint, and another tool's event file and a copy of one of
        // the run's segments, which are not the run's, whatever their names.
        write_after_the_checkpoint(&bucket, tb);
        bucket
            .put("checkpoints/ckpt-000000000002.ember", b"c".to_vec())
            .unwrap();
        let evaluator = "eval/events.out.tfevents.1700000000.h.1.0";
        let copy = format!("backup/{tb}.00000002");
        bucket.put(evaluator, vec![7; 6000]).unwrap();
        bucket.put(&copy, b"two".to_vec()).unwrap();
        let removed = snapshot.restore(&bucket, &exclude, alone).unwrap();
        assert_eq!(
            removed,
            [
                "events.out.tfevents.0000000001.h.7.0.00000002",
                "events.out.tfevents.0000000001.h.7.0.00000003",
                "export_1/w.npy"
            ]
        );
        assert_eq!(
            names(&bucket),
            [
                copy.as_str(),
                "checkpoints/ckpt-000000000001.ember",
                "checkpoints/ckpt-000000000002.ember",
                evaluator,
                "events.out.tfevents.0000000001.h.7.0.00000001",
                "notes.txt",
                PROJECTOR_CONFIG,
            ]
        );
        assert_eq!(bucket.get(evaluator).unwrap().unwrap(), vec![7; 6000]);
        assert_eq!(bucket.get(&copy).unwrap().unwrap(), b"two");
        assert_eq!(bucket.get(PROJECTOR_CONFIG).unwrap().unwrap(), b"config a");
        assert!(
            snapshot
                .restore(&bucket, &exclude, alone)
                .unwrap()
                .is_empty()
        );
        assert!(!BucketSnapshot::is_one("f 00 1\n"));

        // A resume killed between any two of the rollback's writes: the next one finishes it.
        let expected = whole(&bucket);
        // The rollback's writes in its order: the later objects newest name first, then the
        // config; killed after `done` of them.
        let mut later = [
            "export_1/w.npy".to_owned(),
            format!("{tb}.00000003"),
            format!("{tb}.00000002"),
        ];
        later.sort();
        for done in 0..=later.len() {
            write_after_the_checkpoint(&bucket, tb);
            for name in later.iter().rev().take(done) {
                bucket.delete(name).unwrap();
            }
            snapshot.restore(&bucket, &exclude, alone).unwrap();
            assert_eq!(whole(&bucket), expected, "killed after {done} write(s)");
        }
    }

    /// What a run writes after its checkpoint: two more segments, an export and a new config.
    fn write_after_the_checkpoint(bucket: &Bucket, tb: &str) {
        ours(bucket, &format!("{tb}.00000002"), b"two");
        ours(bucket, &format!("{tb}.00000003"), b"three");
        ours(bucket, "export_1/w.npy", b"x");
        ours(bucket, PROJECTOR_CONFIG, b"config b");
    }

    /// A snapshot from before the markers (`bucket-snapshot 1`) still tells the run's objects by
    /// their names, as it was taken to: a resume of such a run goes on as it did.
    #[test]
    fn a_snapshot_from_before_the_markers_tells_the_run_s_objects_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("run")).unwrap();
        let bucket = Bucket::open(&format!("file://{}/run", dir.path().display())).unwrap();
        let tb = "events.out.tfevents.0000000001.h.7.0";
        let hex = hex::encode(format!("{tb}.00000001"));
        let snapshot = BucketSnapshot::decode(&format!("bucket-snapshot 1\no {hex} 3\n")).unwrap();
        bucket
            .put(&format!("{tb}.00000001"), b"one".to_vec())
            .unwrap();
        bucket
            .put(&format!("{tb}.00000002"), b"two".to_vec())
            .unwrap();
        let removed = snapshot
            .restore(&bucket, &[], crate::Ownership::ALONE)
            .unwrap();
        assert_eq!(removed, [format!("{tb}.00000002")]);
        assert!(snapshot.encode().starts_with("bucket-snapshot 1\n"));
    }

    /// Every object of `bucket` with its bytes, in name order.
    fn whole(bucket: &Bucket) -> Vec<(String, Vec<u8>)> {
        bucket
            .list()
            .unwrap()
            .into_iter()
            .map(|l| {
                let bytes = bucket.get(&l.name).unwrap().unwrap();
                (l.name, bytes)
            })
            .collect()
    }
}
