//! Where a remote record's files wait for the store: a staging directory private to its user,
//! and what the mirror has shipped of it, kept beside it so that the staging of a writer that
//! was killed can still be shipped ([`ship_orphans`](super::ship_orphans), `ember push`).
//!
//! Every user has a parent of their own, `$TMPDIR/ember-staging-<uid>` (mode 0700, refused
//! when it is a link, another user's, or open to others: a shared or planted parent would let
//! another user read the run or plant files uploaded with this user's credentials). Each
//! record stages in a directory of random name inside it (`tempfile`), locked by its writer
//! for as long as it writes. Beside the files, `.ember-mirror` holds the URL and, for each file,
//! how much of it is in the store and under which name: written durably when the mirror starts,
//! and after each segment shipped, before its bytes are freed.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::store::RemoteError;

/// The file of a staging directory that says where it ships and how far it got.
pub(crate) const STATE_FILE: &str = ".ember-mirror";

/// The parent of this user's staging directories, made private when missing and checked when
/// not.
pub fn staging_parent() -> Result<PathBuf, RemoteError> {
    let parent = std::env::temp_dir().join(format!("ember-staging-{}", user_id()));
    let staging_err = |source| RemoteError::Staging {
        path: parent.clone(),
        source,
    };
    match fs::symlink_metadata(&parent) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::options::create_dir_private(&parent).map_err(staging_err)?;
        }
        Err(e) => return Err(staging_err(e)),
        Ok(meta) => check_private(&parent, &meta)?,
    }
    // Made by us a moment ago, or found: checked again, as what is there now.
    check_private(
        &parent,
        &fs::symlink_metadata(&parent).map_err(staging_err)?,
    )?;
    Ok(parent)
}

/// A new staging directory of random name (mode 0700) in this user's parent.
pub fn new_staging() -> Result<PathBuf, RemoteError> {
    let parent = staging_parent()?;
    let mut builder = tempfile::Builder::new();
    builder.prefix("run-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o700));
    }
    let dir = builder
        .tempdir_in(&parent)
        .map_err(|source| RemoteError::Staging {
            path: parent.clone(),
            source,
        })?;
    Ok(dir.keep())
}

#[cfg(unix)]
fn user_id() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(not(unix))]
fn user_id() -> u32 {
    0
}

fn check_private(path: &Path, meta: &fs::Metadata) -> Result<(), RemoteError> {
    let refuse = |why: String| RemoteError::NotPrivate {
        path: path.to_path_buf(),
        why,
    };
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(refuse("it is not a directory (a link, or a file)".into()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if meta.uid() != user_id() {
            return Err(refuse(format!("it belongs to user {}", meta.uid())));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(refuse(format!("others may use it (mode {mode:o})")));
        }
    }
    Ok(())
}

/// What the mirror has shipped of a staging directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ShipState {
    /// The log directory's URL.
    pub(crate) url: String,
    /// For each event file: bytes shipped, segments shipped.
    pub(super) shipped: BTreeMap<String, (u64, u64)>,
    /// For each staged event file and export directory, the name its objects have.
    pub(super) claimed: BTreeMap<String, String>,
}

impl ShipState {
    /// One line a fact, names hex-encoded (any name survives).
    pub(super) fn encode(&self) -> String {
        let mut lines = vec![format!("url {}", hex::encode(self.url.as_bytes()))];
        for (file, (bytes, segments)) in &self.shipped {
            lines.push(format!(
                "shipped {} {bytes} {segments}",
                hex::encode(file.as_bytes())
            ));
        }
        for (staged, name) in &self.claimed {
            lines.push(format!(
                "claimed {} {}",
                hex::encode(staged.as_bytes()),
                hex::encode(name.as_bytes())
            ));
        }
        lines.join("\n") + "\n"
    }

    pub(super) fn decode(text: &str) -> Option<Self> {
        let mut state = Self::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["url", url] => state.url = unhex(url)?,
                ["shipped", file, bytes, segments] => {
                    state
                        .shipped
                        .insert(unhex(file)?, (bytes.parse().ok()?, segments.parse().ok()?));
                }
                ["claimed", staged, name] => {
                    state.claimed.insert(unhex(staged)?, unhex(name)?);
                }
                _ => return None,
            }
        }
        (!state.url.is_empty()).then_some(state)
    }

    /// The state kept in `staging`, if any is readable.
    pub(crate) fn read(staging: &Path) -> Option<Self> {
        Self::decode(&fs::read_to_string(staging.join(STATE_FILE)).ok()?)
    }

    /// Keeps the state in `staging`, replacing the last one whole.
    pub(super) fn write(&self, staging: &Path) -> std::io::Result<()> {
        crate::durable::replace(&staging.join(STATE_FILE), self.encode().as_bytes())
    }
}

fn unhex(text: &str) -> Option<String> {
    String::from_utf8(hex::decode(text).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ship_state_reads_back_whatever_the_names() {
        let mut state = ShipState {
            url: "s3://b/run with space".into(),
            ..ShipState::default()
        };
        state.shipped.insert("a b\n.c".into(), (10, 2));
        state.claimed.insert("export_1".into(), "export_2".into());
        assert_eq!(ShipState::decode(&state.encode()), Some(state));
        assert_eq!(ShipState::decode("url zz"), None);
        assert_eq!(ShipState::decode(""), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_staging_parent_open_to_others_or_a_link_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let meta = fs::symlink_metadata(&open).unwrap();
        assert!(check_private(&open, &meta).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        let meta = fs::symlink_metadata(&link).unwrap();
        assert!(check_private(&link, &meta).is_err());
        let private = dir.path().join("private");
        crate::options::create_dir_private(&private).unwrap();
        let meta = fs::symlink_metadata(&private).unwrap();
        assert!(check_private(&private, &meta).is_ok());
        // A new staging directory is private, of a name no one can guess.
        let staging = new_staging().unwrap();
        let mode = fs::metadata(&staging).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::remove_dir_all(staging).unwrap();
    }
}
