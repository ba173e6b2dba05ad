//! An object-store log directory brought back to a local directory, each event file's
//! segments joined: what every local reader (MindInsight too) reads.

use std::fs;
use std::path::Path;

use object_store::ObjectStoreExt;

use super::store::{RemoteError, in_short, open_store};

/// Downloads every object under `url` into `into` (made when missing, and best empty),
/// keeping their names relative to the prefix and joining each event file's segments back
/// into the file, in order: an object-store log directory as the local directory it was
/// written as, which every local reader (MindInsight too) reads. Returns how many objects
/// of the log there were (a run's lease and its markers are not).
pub fn download(url: &str, into: &Path) -> Result<usize, RemoteError> {
    super::store::outside_any_runtime(|| download_here(url, into))
}

fn download_here(url: &str, into: &Path) -> Result<usize, RemoteError> {
    use futures_util::TryStreamExt;

    let (store, prefix) = open_store(url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|_| RemoteError::Thread("could not start its runtime"))?;
    let unreachable = |error| RemoteError::Unreachable {
        url: url.to_owned(),
        reason: in_short(&error),
    };
    runtime.block_on(async {
        let mut listed: Vec<object_store::ObjectMeta> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(unreachable)?;
        // A file's segments in order, so that appending them gives the file back.
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        let mut downloaded = 0;
        for meta in &listed {
            let relative: Vec<String> = meta
                .location
                .prefix_match(&prefix)
                .map(|parts| parts.map(|p| p.as_ref().to_owned()).collect())
                .unwrap_or_default();
            let Some((name, dirs)) = relative.split_last() else {
                continue;
            };
            // Object names are the store's: only plain path parts become local names. A run's
            // lease and the markers of its files are no part of its log.
            if relative
                .iter()
                .any(|p| p.is_empty() || p == "." || p == "..")
                || name.starts_with(".ember-lease")
                || relative.first().is_some_and(|top| top == ".ember-run")
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
            downloaded += 1;
        }
        Ok(downloaded)
    })
}

/// A log directory downloaded into a private temporary directory (mode 0700, a random name),
/// removed when dropped.
#[derive(Debug)]
pub struct Downloaded {
    dir: tempfile::TempDir,
    /// How many objects there were.
    pub objects: usize,
}

impl Downloaded {
    /// The local directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// [`download`] into a new private temporary directory: no other user can read the run or
/// plant files in it, and no name is guessed ahead (nor followed, as a link planted there
/// would be).
pub fn download_private(url: &str) -> Result<Downloaded, RemoteError> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("ember-download-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o700));
    }
    let dir = builder.tempdir().map_err(|source| RemoteError::Staging {
        path: std::env::temp_dir(),
        source,
    })?;
    let objects = download(url, dir.path())?;
    Ok(Downloaded { dir, objects })
}

/// The event file a segment object is part of: its name without the segment number.
pub(super) fn file_of_segment(name: &str) -> &str {
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
