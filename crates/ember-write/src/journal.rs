//! What a run made in its log directory, by exact name: the ground a rollback stands on.
//!
//! A log directory is shared with whatever else the user runs there (an evaluator writing its
//! own event files, a backup copy, a script's empty directory), so no file name says whether a
//! file is the run's. Each rank's writers therefore append to a journal of their own,
//! `.ember-run/files.rank<r>` in the log directory (hidden, beside `.ember-locks`), one line
//! for each file or directory they are about to create, and fsync it **before** creating it: a
//! kill right after the creation still finds the name listed. A name is relative to the log
//! directory (sub-runs, exports and embeddings are below it). A creation that then finds the
//! name taken (another process's file) is retracted by a line of its own, so the journal never
//! claims what the run did not make.
//!
//! [`LogSnapshot`](crate::LogSnapshot) takes the lengths of exactly the files listed, and its
//! restore touches nothing else. The journal is only ever appended to: a line is one `write`
//! to a file opened for appending, so lines of ranks or writers never interleave, and a torn
//! last line (a kill during the write) names nothing that was created.
//!
//! ```text
//! f <hex name>   a file created
//! d <hex name>   a directory created
//! r <hex name>   a file that existed, rewritten whole (the projector config)
//! x <hex name>   the last claim of that name withdrawn: the creation found it taken
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A journal that cannot be read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Reading it failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The journal.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A whole line is not one a writer appends (or names a path outside the log directory).
    #[error("malformed journal {}: line {line:?}", path.display())]
    Malformed {
        /// The journal.
        path: PathBuf,
        /// The line.
        line: String,
    },
}

/// The hidden subdirectory of a log directory that holds the journals.
pub const RUN_DIR: &str = ".ember-run";

/// One rank's journal of what it made in a log directory (see the module docs). Cheap to
/// clone: every writer of the rank, sub-runs' included, appends to the same file.
#[derive(Debug, Clone)]
pub struct Journal {
    root: PathBuf,
    rank: u32,
    /// Whether the journal's directory entry is known durable.
    settled: Arc<AtomicBool>,
}

/// What a journal says a rank made, each name relative to the log directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Made {
    /// Files the rank created.
    pub files: BTreeSet<PathBuf>,
    /// Directories the rank created (none that existed before).
    pub dirs: BTreeSet<PathBuf>,
    /// Files that existed and that the rank rewrote whole.
    pub rewritten: BTreeSet<PathBuf>,
}

impl Journal {
    /// The journal of rank `rank`'s writers in the log directory `root`.
    pub fn new(root: impl Into<PathBuf>, rank: u32) -> Self {
        Self {
            root: root.into(),
            rank,
            settled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The log directory the names are relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of `root`'s journals: the run's bookkeeping, not its log.
    pub fn dir_in(root: &Path) -> PathBuf {
        root.join(RUN_DIR)
    }

    /// Where rank `rank`'s journal of `root` is.
    pub fn path_in(root: &Path, rank: u32) -> PathBuf {
        root.join(RUN_DIR).join(format!("files.rank{rank}"))
    }

    /// Lists the file at `path` (under the root) as the run's, before it is created.
    pub(crate) fn claim_file(&self, path: &Path) -> io::Result<()> {
        self.append('f', path)
    }

    /// Lists the directory at `path` as the run's, before it is created.
    pub(crate) fn claim_dir(&self, path: &Path) -> io::Result<()> {
        self.append('d', path)
    }

    /// Lists the existing file at `path` as one the run rewrites whole.
    pub(crate) fn claim_rewrite(&self, path: &Path) -> io::Result<()> {
        self.append('r', path)
    }

    /// Withdraws the last claim of `path`: its creation found the name taken.
    pub(crate) fn retract(&self, path: &Path) -> io::Result<()> {
        self.append('x', path)
    }

    /// Claims and creates each directory from the root down to `dir` that does not exist yet.
    pub(crate) fn make_dirs(&self, dir: &Path) -> io::Result<()> {
        if dir == self.root {
            return Ok(());
        }
        let relative = self.relative(dir)?;
        let mut path = self.root.clone();
        for part in relative.components() {
            path.push(part);
            if fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            self.claim_dir(&path)?;
            match private_dir().create(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self.retract(&path)?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Makes `path` with `create` (a file or directory that must be new), listed first as
    /// `dir` or file; a creation that fails (the name taken) withdraws the claim.
    pub(crate) fn made<T>(
        journal: Option<&Self>,
        path: &Path,
        dir: bool,
        create: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let Some(journal) = journal else {
            return create();
        };
        match dir {
            true => journal.claim_dir(path)?,
            false => journal.claim_file(path)?,
        }
        create().or_else(|e| {
            journal.retract(path)?;
            Err(e)
        })
    }

    fn relative(&self, path: &Path) -> io::Result<PathBuf> {
        path.strip_prefix(&self.root)
            .ok()
            .filter(|r| is_plain(r))
            .map(Path::to_path_buf)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{} is not inside the run's log directory {}",
                    path.display(),
                    self.root.display()
                ))
            })
    }

    fn append(&self, tag: char, path: &Path) -> io::Result<()> {
        let line = format!(
            "{tag} {}\n",
            hex::encode(self.relative(path)?.to_string_lossy().as_bytes())
        );
        let journal = Self::path_in(&self.root, self.rank);
        let settled = self.settled.load(Ordering::Acquire);
        if !settled {
            crate::options::create_dir_private(&self.root.join(RUN_DIR))?;
        }
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&journal)?;
        file.write_all(line.as_bytes())?;
        file.sync_data()?;
        if !settled {
            // The journal's own entry, and its directory's, must outlive a crash as well.
            sync_dir(&self.root.join(RUN_DIR))?;
            sync_dir(&self.root)?;
            self.settled.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// What rank `rank`'s journal of `root` lists; `None` where there is no journal (a log
    /// written before journals, or by a writer without one).
    pub fn read(root: &Path, rank: u32) -> Result<Option<Made>, JournalError> {
        let path = Self::path_in(root, rank);
        let text = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(JournalError::Io { path, source }),
        };
        let text = String::from_utf8_lossy(&text);
        // A last line without its newline was torn by a kill: its creation never happened.
        let whole = text.rsplit_once('\n').map_or("", |(whole, _)| whole);
        let mut claims: BTreeMap<PathBuf, Vec<char>> = BTreeMap::new();
        for line in whole.lines() {
            let bad = || JournalError::Malformed {
                path: path.clone(),
                line: line.to_owned(),
            };
            let (tag, name) = line.split_once(' ').ok_or_else(bad)?;
            let name = decode_name(name).ok_or_else(bad)?;
            match tag {
                "f" | "d" | "r" => claims.entry(name).or_default().extend(tag.chars()),
                "x" => {
                    claims.entry(name).or_default().pop();
                }
                _ => return Err(bad()),
            }
        }
        let mut made = Made::default();
        for (name, kinds) in claims {
            if kinds.contains(&'f') {
                made.files.insert(name);
            } else if kinds.contains(&'r') {
                made.rewritten.insert(name);
            } else if kinds.contains(&'d') {
                made.dirs.insert(name);
            }
        }
        Ok(Some(made))
    }
}

/// A builder of one new directory, mode 0700 as the log directory's own.
fn private_dir() -> fs::DirBuilder {
    #[allow(unused_mut)]
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
}

/// Whether `relative` is a plain relative path: no root, no `..`, no `.`, not empty. Names read
/// back from a journal or a checkpoint are only ever used so, never to reach outside the log
/// directory.
pub(crate) fn is_plain(relative: &Path) -> bool {
    !relative.as_os_str().is_empty()
        && relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// A hex-encoded name, when it is a plain relative path.
pub(crate) fn decode_name(text: &str) -> Option<PathBuf> {
    let bytes = hex::decode(text).ok()?;
    let path = PathBuf::from(String::from_utf8(bytes).ok()?);
    is_plain(&path).then_some(path)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = (dir, File::open);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_withdrawn_and_a_torn_line_name_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let journal = Journal::new(root, 1);
        assert_eq!(Journal::read(root, 1).unwrap(), None);
        journal.claim_file(&root.join("a")).unwrap();
        journal.claim_file(&root.join("taken")).unwrap();
        journal.retract(&root.join("taken")).unwrap();
        journal.make_dirs(&root.join("sub/deeper")).unwrap();
        // The run's own directory claimed again by a later writer, then found taken: still
        // the run's.
        journal.claim_dir(&root.join("sub")).unwrap();
        journal.retract(&root.join("sub")).unwrap();
        journal.claim_rewrite(&root.join("config")).unwrap();
        let path = Journal::path_in(root, 1);
        let mut torn = fs::read(&path).unwrap();
        torn.extend_from_slice(b"f 6e");
        fs::write(&path, torn).unwrap();
        let made = Journal::read(root, 1).unwrap().unwrap();
        assert_eq!(made.files, BTreeSet::from([PathBuf::from("a")]));
        assert_eq!(
            made.dirs,
            BTreeSet::from([PathBuf::from("sub"), PathBuf::from("sub/deeper")])
        );
        assert_eq!(made.rewritten, BTreeSet::from([PathBuf::from("config")]));
        assert!(root.join("sub/deeper").is_dir());
        assert_eq!(Journal::read(root, 0).unwrap(), None);
    }

    #[test]
    fn a_name_reaching_outside_the_log_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let journal = Journal::new(root.join("log"), 0);
        assert!(journal.claim_file(&root.join("elsewhere")).is_err());
        fs::create_dir_all(root.join("log").join(RUN_DIR)).unwrap();
        fs::write(
            Journal::path_in(&root.join("log"), 0),
            format!("f {}\n", hex::encode(b"../elsewhere")),
        )
        .unwrap();
        assert!(matches!(
            Journal::read(&root.join("log"), 0),
            Err(JournalError::Malformed { .. })
        ));
    }
}
