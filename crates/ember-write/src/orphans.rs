//! What writers that were killed left in their staging directories: shipped by `ember push`
//! ([`ship_orphans`]), or discarded by a resume of the same URL ([`discard_orphans_of`]), whose
//! rollback makes them records of a future that did not happen.

use std::fs;
use std::path::PathBuf;

use crate::remote::{RemoteError, RemoteMirror, staging};

/// What [`ship_orphans`] did with one staging directory.
#[derive(Debug)]
pub struct Orphan {
    /// The staging directory.
    pub staging: PathBuf,
    /// Where it shipped to (when its state said).
    pub url: Option<String>,
    /// `Ok(bytes shipped)` when everything is in the store now (and the directory removed),
    /// or why not (the directory kept).
    pub outcome: Result<u64, String>,
}

/// Ships what the writers that were killed left in `stagings` (every staging directory of
/// this user's parent when empty) to the URL each recorded, from where each had got, and
/// removes each directory once everything in it is in the store. A directory whose writer is
/// still alive (it holds its lock) is left alone, as is one without a state to go by; one that
/// cannot be locked (its lock file cannot be made or locked) is left alone and reported, with
/// a warning naming it.
pub fn ship_orphans(stagings: &[PathBuf]) -> Result<Vec<Orphan>, RemoteError> {
    let stagings = if stagings.is_empty() {
        staging_directories()?
    } else {
        stagings.to_vec()
    };
    let mut orphans = Vec::new();
    for staging in stagings {
        let lock = match crate::DirLock::acquire(&staging, 0) {
            Ok(lock) => lock,
            // Held by a live writer: its own mirror ships it.
            Err(crate::LockError::Held { .. }) => continue,
            // Not known to be live: said, not passed over as if it were.
            Err(error) => {
                log::warn!(
                    "ember-write: cannot lock the staging directory {}: {error}; left alone",
                    staging.display()
                );
                orphans.push(Orphan {
                    staging,
                    url: None,
                    outcome: Err(format!("cannot be locked, left alone: {error}")),
                });
                continue;
            }
        };
        let Some(state) = staging::ShipState::read(&staging) else {
            orphans.push(Orphan {
                staging,
                url: None,
                outcome: Err(format!(
                    "no {} in it: not a staging directory, or its writer died before \
                     its first pass",
                    staging::STATE_FILE
                )),
            });
            continue;
        };
        let outcome = RemoteMirror::resume_staging(&state, &staging)
            .and_then(|mirror| mirror.close().map_err(|e| e.to_string()))
            .map(|stats| stats.bytes);
        drop(lock);
        if outcome.is_ok() {
            let _ = fs::remove_dir_all(&staging);
        }
        orphans.push(Orphan {
            staging,
            url: Some(state.url),
            outcome,
        });
    }
    Ok(orphans)
}

/// Removes the staging directories that killed writers left of the log at exactly `url`, and
/// returns them. A resume of that log rolls it back to a checkpoint, and a checkpoint of a log
/// in a bucket counts only once its writer had shipped every record up to it: what such a
/// directory still holds was written after the checkpoint, and shipped later (`ember push`) it
/// would put the steps the resumed run writes again into the log a second time. A directory
/// that a live writer holds (the resumed run's own) or that cannot be locked is left alone, as
/// is one of another URL.
pub fn discard_orphans_of(url: &str) -> Result<Vec<PathBuf>, RemoteError> {
    let mut removed = Vec::new();
    for staging in staging_directories()? {
        // Told by its state (replaced whole, so read as it is) before it is locked: another
        // log's directories are never locked, not even for a moment, so a push or a writer of
        // theirs never finds them held by this resume.
        let of_url = staging::ShipState::read(&staging)
            .is_some_and(|state| state.url.trim_end_matches('/') == url.trim_end_matches('/'));
        if !of_url {
            continue;
        }
        let Ok(lock) = crate::DirLock::acquire(&staging, 0) else {
            continue;
        };
        fs::remove_dir_all(&staging).map_err(|source| RemoteError::Staging {
            path: staging.clone(),
            source,
        })?;
        drop(lock);
        removed.push(staging);
    }
    Ok(removed)
}

/// Every staging directory of this user's parent, in name order.
fn staging_directories() -> Result<Vec<PathBuf>, RemoteError> {
    let parent = staging::staging_parent()?;
    let mut found: Vec<PathBuf> = fs::read_dir(&parent)
        .map_err(|source| RemoteError::Staging {
            path: parent.clone(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::remote::{download_private, new_staging};

    /// A writer killed between passes leaves its staging directory with what it had not
    /// shipped; `ship_orphans` (`ember push`) ships it, from where the writer got and under the
    /// names it claimed, and removes the directory.
    #[test]
    fn a_killed_writer_s_staging_is_shipped_from_where_it_got() {
        let bucket = tempfile::tempdir().unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let staging = new_staging().unwrap();
        let name = "events.out.tfevents.0000000001.h.1.0";
        let mut stream = Vec::new();
        crate::framing::frame_into(&mut stream, b"shipped before the kill");
        std::fs::write(staging.join(name), &stream).unwrap();
        let mirror = RemoteMirror::start(&url, &staging, Duration::from_secs(3600)).unwrap();
        mirror.ship().unwrap();
        // Killed: its thread ships nothing more (SIGKILL runs no close).
        std::mem::forget(mirror);
        crate::framing::frame_into(&mut stream, b"written, never shipped");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(staging.join(name))
            .unwrap();
        let tail = &stream[stream.len() - 38..];
        std::io::Write::write_all(&mut file, tail).unwrap();
        drop(file);
        let orphans = ship_orphans(std::slice::from_ref(&staging)).unwrap();
        assert_eq!(orphans.len(), 1);
        assert_eq!(orphans[0].outcome.as_ref().unwrap(), &(tail.len() as u64));
        assert!(!staging.exists(), "a shipped staging directory is removed");
        let local = download_private(&url).unwrap();
        assert_eq!(std::fs::read(local.path().join(name)).unwrap(), stream);
    }

    /// A writer killed at any step of a pass (after any upload, any keeping of its shipped
    /// state, any freeing of shipped bytes) leaves a staging directory that `ember push` ships
    /// into the very log it wrote, each record once. Before, a pass freed the shipped bytes
    /// (a hole punched in the file) before it kept the state that says they were shipped: a
    /// kill between the two left the state behind the holes, and the push shipped the holes'
    /// zeros over the segment in the store (`cargo xtask objects`: a corrupt record header
    /// near the end of a killed and pushed run, about one run in five).
    #[test]
    fn a_writer_killed_at_any_step_of_a_pass_is_pushed_whole() {
        let name = "events.out.tfevents.0000000001.h.1.0";
        let frame = |stream: &mut Vec<u8>, text: &str| {
            // Records of several blocks, so that freeing them leaves holes of zeros.
            crate::framing::frame_into(stream, text.repeat(2000).as_bytes());
        };
        for steps in 0.. {
            let bucket = tempfile::tempdir().unwrap();
            let url = format!("file://{}/run", bucket.path().display());
            std::fs::create_dir_all(bucket.path().join("run")).unwrap();
            let staging = new_staging().unwrap();
            let mirror = RemoteMirror::start_killed_after(&url, &staging, steps).unwrap();
            let mut stream = Vec::new();
            frame(&mut stream, "before the checkpoint ");
            std::fs::write(staging.join(name), &stream).unwrap();
            // A checkpoint's cut: the pass ships two segments, one each side of it.
            let cut = mirror.cut().unwrap();
            frame(&mut stream, "after the checkpoint ");
            std::fs::write(staging.join(name), &stream).unwrap();
            std::fs::create_dir_all(staging.join("export_1")).unwrap();
            std::fs::write(staging.join("export_1/loss.npy"), b"exported").unwrap();
            let killed = mirror.ship().is_err();
            std::mem::forget((mirror, cut));
            frame(&mut stream, "written after the kill ");
            std::fs::write(staging.join(name), &stream).unwrap();

            let orphans = ship_orphans(std::slice::from_ref(&staging)).unwrap();
            assert!(
                orphans[0].outcome.is_ok(),
                "killed after {steps}: {orphans:?}"
            );
            let local = download_private(&url).unwrap();
            let pushed = std::fs::read(local.path().join(name)).unwrap();
            assert!(
                pushed == stream,
                "killed after {steps} step(s): the log differs"
            );
            let export = std::fs::read(local.path().join("export_1/loss.npy")).unwrap();
            assert_eq!(export, b"exported", "killed after {steps} step(s)");
            if !killed {
                assert!(steps > 4, "a pass of {steps} step(s) is too short to test");
                break;
            }
        }
    }

    /// Before: a staging directory that could not be locked was passed over in silence, as if
    /// a live writer held it.
    #[test]
    fn a_staging_directory_that_cannot_be_locked_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("staging");
        std::fs::write(&not_a_dir, b"").unwrap();
        let orphans = ship_orphans(std::slice::from_ref(&not_a_dir)).unwrap();
        assert_eq!(orphans.len(), 1);
        assert_eq!(orphans[0].staging, not_a_dir);
        let why = orphans[0].outcome.as_ref().unwrap_err();
        assert!(why.starts_with("cannot be locked"), "{why}");
    }

    /// A killed writer's staging directory of `url`: one pass shipped, then more written.
    fn killed_writer_of(url: &str) -> PathBuf {
        let staging = new_staging().unwrap();
        let name = "events.out.tfevents.0000000001.h.1.0";
        let mut stream = Vec::new();
        crate::framing::frame_into(&mut stream, b"shipped before the kill");
        std::fs::write(staging.join(name), &stream).unwrap();
        let mirror = RemoteMirror::start(url, &staging, Duration::from_secs(3600)).unwrap();
        mirror.ship().unwrap();
        std::mem::forget(mirror);
        crate::framing::frame_into(&mut stream, b"written after the checkpoint");
        std::fs::write(staging.join(name), &stream).unwrap();
        staging
    }

    /// Before: a resume left the killed run's staging directories, and `ember push` then
    /// shipped records the resume had rolled back, after the resumed run's own.
    #[test]
    fn a_resume_discards_the_killed_writers_stagings_of_its_url_alone() {
        let bucket = tempfile::tempdir().unwrap();
        let url = |run: &str| {
            std::fs::create_dir_all(bucket.path().join(run)).unwrap();
            format!("file://{}/{run}", bucket.path().display())
        };
        let (resumed, other) = (url("resumed"), url("other"));
        let killed = [killed_writer_of(&resumed), killed_writer_of(&resumed)];
        let live = killed_writer_of(&resumed);
        let held = crate::DirLock::acquire(&live, 0).unwrap();
        let another = killed_writer_of(&other);

        let mut removed = discard_orphans_of(&format!("{resumed}/")).unwrap();
        removed.sort();
        let mut expected = killed.to_vec();
        expected.sort();
        assert_eq!(removed, expected);
        assert!(killed.iter().all(|dir| !dir.exists()));
        assert!(live.is_dir(), "a live writer's staging was removed");
        assert!(another.is_dir(), "another URL's staging was removed");
        // Not even locked for a moment: a push of it running beside this resume would have
        // found it held, and passed it over.
        assert!(
            !another.join(crate::lock::LOCKS).exists(),
            "another URL's staging was locked"
        );

        drop(held);
        for dir in [live, another] {
            let orphans = ship_orphans(std::slice::from_ref(&dir)).unwrap();
            assert!(orphans[0].outcome.is_ok(), "{orphans:?}");
        }
    }
}
