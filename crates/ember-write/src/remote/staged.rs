//! The files of a staging directory, as the mirror ships them and a cut records them.

use std::fs;
use std::path::{Path, PathBuf};

/// The projector's config, rewritten whole: a snapshot or a cut keeps its text.
pub(super) const PROJECTOR_CONFIG: &str = "projector_config.pbtxt";

/// A file of the staging directory, by its name relative to it (`/`-separated).
pub(super) struct Staged {
    pub(super) relative: String,
    pub(super) path: PathBuf,
    pub(super) event_file: bool,
}

/// Every regular file of the staging directory, its subdirectories included, in name order;
/// temporary files (named with a leading dot) are not the log's yet.
pub(super) fn staged_files(staging: &Path) -> Result<Vec<Staged>, String> {
    let mut files = Vec::new();
    let mut dirs = vec![(staging.to_path_buf(), String::new())];
    while let Some((dir, relative)) = dirs.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let joined = if relative.is_empty() {
                name.clone()
            } else {
                format!("{relative}/{name}")
            };
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => dirs.push((entry.path(), joined)),
                Ok(kind) if kind.is_file() => files.push(Staged {
                    event_file: crate::naming::name_secs(&name).is_some(),
                    relative: joined,
                    path: entry.path(),
                }),
                _ => {}
            }
        }
    }
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(files)
}
