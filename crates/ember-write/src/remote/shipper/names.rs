//! The names a mirror's objects take in the store: a staged file's own, or, where another
//! writer took it or the run's files there would sort after it, one claimed later
//! ([`Shipper::claim`]); every later object of the file under the name claimed.

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};

use super::super::download::file_of_segment;
use super::Shipper;
use super::whole_records;

/// How many later seconds a claimed name may move on to before the upload fails.
const CLAIM_TRIES: usize = 100;

impl Shipper {
    /// The name the staged event file `relative` starts claiming from: its own, or, where the
    /// run already has an event file of its kind in the store made in that second or later (a
    /// run resumed within the second its last file was made in), one second after the newest:
    /// readers take a directory's files in name order, as the pool names a first file after
    /// those already in a local directory.
    pub(super) async fn after_the_run_s(&self, relative: &str) -> Result<String, String> {
        let (dir, file) = relative.rsplit_once('/').unwrap_or(("", relative));
        let Some(secs) = crate::naming::name_secs(file) else {
            return Ok(relative.to_owned());
        };
        let prefix = match dir {
            "" => self.prefix.clone(),
            dir => self.object(dir),
        };
        let listed = self
            .store
            .list_with_delimiter(Some(&prefix))
            .await
            .map_err(|e| format!("listing {prefix}: {e}"))?;
        let kind = crate::naming::kind_of(file);
        let newest = listed
            .objects
            .iter()
            .filter_map(|meta| meta.location.filename().map(file_of_segment))
            .filter(|other| *other != file && crate::naming::kind_of(other) == kind)
            .filter_map(crate::naming::name_secs)
            .max();
        Ok(match newest {
            Some(newest) if newest >= secs => crate::naming::with_secs(relative, newest + 1)
                .unwrap_or_else(|| relative.to_owned()),
            _ => relative.to_owned(),
        })
    }

    /// Uploads the first object of `staged` (an event file's first segment, an export
    /// directory's first file: `object_of(name)`) under `name` (the staged name, or where it
    /// starts: see [`Shipper::after_the_run_s`]), or, where another writer has an object of
    /// that name already (two records to one URL in one second), under the same name one
    /// second later, and so on: a create-only PUT (`PutMode::Create`) decides, so that two
    /// writers racing cannot both win. Every later object of `staged` takes the name claimed.
    /// An object found in place with these very bytes is this writer's own (a PUT retried
    /// after its answer was lost).
    pub(super) async fn claim(
        &mut self,
        (staged, mut name): (&str, String),
        object_of: impl Fn(&str) -> String,
        payload: &[u8],
    ) -> Result<(), String> {
        for _ in 0..CLAIM_TRIES {
            self.mark(&object_of(&name)).await?;
            let object = self.object(&object_of(&name));
            self.fence()?;
            let put = self
                .store
                .put_opts(
                    &object,
                    payload.to_vec().into(),
                    PutOptions {
                        mode: PutMode::Create,
                        ..PutOptions::default()
                    },
                )
                .await;
            match put {
                Ok(_) => {}
                Err(object_store::Error::AlreadyExists { .. })
                    if self.holds_the_start_of(&object, payload).await =>
                {
                    // Killed before it kept its state, this writer shipped the start of what it
                    // ships now: the longer object replaces it.
                    self.fence()?;
                    self.store
                        .put(&object, payload.to_vec().into())
                        .await
                        .map_err(|e| format!("uploading {object}: {e}"))?;
                }
                Err(object_store::Error::AlreadyExists { .. }) => {
                    let secs = crate::naming::name_secs(&name)
                        .or_else(|| name.strip_prefix("export_")?.parse().ok());
                    let next = secs.and_then(|secs| crate::naming::with_secs(&name, secs + 1));
                    match next {
                        Some(next) => {
                            log::warn!(
                                "ember-write: {object} is another writer's; this one's goes on \
                                 one second later"
                            );
                            name = next;
                            continue;
                        }
                        None => return Err(format!("uploading {object}: another writer has it")),
                    }
                }
                Err(error) => return Err(format!("uploading {object}: {error}")),
            }
            self.claimed.insert(staged.to_owned(), name);
            return Ok(());
        }
        Err(format!(
            "uploading {staged}: the next {CLAIM_TRIES} seconds' names are all taken"
        ))
    }

    /// Whether the store's `object` holds `payload` or, where it is records, whole records
    /// `payload` begins with.
    async fn holds_the_start_of(&self, object: &ObjectPath, payload: &[u8]) -> bool {
        match self.store.get(object).await {
            Ok(found) => found.bytes().await.is_ok_and(|bytes| {
                bytes == payload
                    || (payload.starts_with(&bytes)
                        && !bytes.is_empty()
                        && whole_records(&bytes) == bytes.len())
            }),
            Err(_) => false,
        }
    }

    /// The name in the store of the staged event file or export directory `staged`.
    pub(super) fn claimed_name(&self, staged: &str) -> String {
        self.claimed
            .get(staged)
            .cloned()
            .unwrap_or_else(|| staged.to_owned())
    }

    /// `relative` with its top-level name replaced by the one claimed for it.
    pub(super) fn object_relative(&self, relative: &str) -> String {
        match relative.split_once('/') {
            Some((top, rest)) => format!("{}/{rest}", self.claimed_name(top)),
            None => self.claimed_name(relative),
        }
    }

    /// The object named as the staged file is, byte for byte: an embedding's directory
    /// (`embedding%2Fhidden_460`) keeps its `%`, which the projector's config refers to. Only a
    /// name the store's paths cannot hold as it is gets their escaping.
    pub(super) fn object(&self, relative: &str) -> ObjectPath {
        ObjectPath::parse(format!("{}/{relative}", self.prefix)).unwrap_or_else(|_| {
            relative
                .split('/')
                .fold(self.prefix.clone(), |path, part| path.join(part))
        })
    }
}
