//! One writer per directory: an advisory lock a process holds on a log or checkpoint directory
//! for as long as it writes there, so that a second run (or a resume) on a live directory is
//! refused at once instead of rolling back or appending under the first.
//!
//! The lock is the operating system's (`flock` on Unix, through [`File::try_lock`]) on a file
//! named after the writer's rank, `.ember-locks/rank<r>.lock`: ranks that share a directory each
//! lock their own. It sits in a hidden subdirectory, so that whoever lists the directory's
//! files (a script gathering event files, TensorBoard, MindInsight) meets only the run's. The OS drops it when the process ends, however it ends, so `kill -9` leaves
//! no stale lock behind; the file stays (removing it would let two processes lock two
//! different files of one name) and holds the pid of its last holder, which is what a refused
//! writer names. Where the file system has no such locks (some network mounts), the
//! directory is written unlocked, with a warning.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::options::create_dir_private;

/// The subdirectory of a locked directory that holds its lock files.
pub const LOCKS: &str = ".ember-locks";

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process (or another writer of this one) holds the lock.
    #[error("{} is in use by {}: one writer per directory; wait for it to end or choose another directory", dir.display(), holder_text(*holder))]
    Held {
        /// The directory.
        dir: PathBuf,
        /// The holder's process id, when it could be read.
        holder: Option<u32>,
    },
    /// A file system operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
}

fn holder_text(holder: Option<u32>) -> String {
    match holder {
        Some(pid) => format!("process {pid}"),
        None => "another process".into(),
    }
}

/// A held lock on a directory (see the module docs); released when dropped.
#[derive(Debug)]
pub struct DirLock {
    /// `None` where the file system has no locks.
    file: Option<File>,
    path: PathBuf,
}

impl DirLock {
    /// The lock file of rank `rank` in `dir`.
    pub fn path(dir: &Path, rank: u32) -> PathBuf {
        Self::locks_dir(dir).join(format!("rank{rank}.lock"))
    }

    /// The subdirectory of `dir` that holds its lock files.
    pub fn locks_dir(dir: &Path) -> PathBuf {
        dir.join(LOCKS)
    }

    /// Locks `dir` for rank `rank` (creating the directory, mode 0700, when missing), or says
    /// who holds it.
    pub fn acquire(dir: &Path, rank: u32) -> Result<Self, LockError> {
        let locks = Self::locks_dir(dir);
        create_dir_private(&locks).map_err(|source| LockError::Io {
            op: "create",
            path: locks.clone(),
            source,
        })?;
        let path = Self::path(dir, rank);
        let io_err = |op| {
            let path = path.clone();
            move |source| LockError::Io { op, path, source }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    holder: read_pid(&mut file),
                });
            }
            Err(TryLockError::Error(error)) if unsupported(&error) => {
                log::warn!(
                    "{} cannot be locked ({error}): nothing keeps a second writer out of it",
                    dir.display()
                );
                return Ok(Self { file: None, path });
            }
            Err(TryLockError::Error(error)) => return Err(io_err("lock")(error)),
        }
        file.set_len(0).map_err(io_err("write"))?;
        file.seek(SeekFrom::Start(0))
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(io_err("write"))?;
        Ok(Self {
            file: Some(file),
            path,
        })
    }

    /// Who holds rank `rank`'s lock on `dir` now, without taking it or writing anything:
    /// `Some(holder pid, when readable)` while a writer holds it, `None` when it is free (or
    /// was never made).
    pub fn holder(dir: &Path, rank: u32) -> Option<Option<u32>> {
        let mut file = File::open(Self::path(dir, rank)).ok()?;
        match file.try_lock_shared() {
            Ok(()) => None,
            Err(TryLockError::WouldBlock) => Some(read_pid(&mut file)),
            Err(TryLockError::Error(_)) => None,
        }
    }

    /// The lock file.
    pub fn file(&self) -> &Path {
        &self.path
    }

    /// Whether the directory is really locked (`false` where the file system has no locks).
    pub fn is_held(&self) -> bool {
        self.file.is_some()
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn unsupported(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Unsupported || error.raw_os_error() == Some(37 /* ENOLCK */)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_with_the_holder_s_pid_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        assert_eq!(DirLock::holder(&run, 0), None);
        let first = DirLock::acquire(&run, 0).unwrap();
        assert!(first.is_held());
        let me = std::process::id();
        assert_eq!(DirLock::holder(&run, 0), Some(Some(me)));
        match DirLock::acquire(&run, 0) {
            Err(LockError::Held { holder, .. }) => assert_eq!(holder, Some(me)),
            other => panic!("a second writer got {other:?}"),
        }
        let message = DirLock::acquire(&run, 0).unwrap_err().to_string();
        assert!(message.contains(&format!("process {me}")), "{message}");
        // Another rank locks a file of its own.
        let _rank1 = DirLock::acquire(&run, 1).unwrap();
        drop(first);
        assert_eq!(DirLock::holder(&run, 0), None);
        let again = DirLock::acquire(&run, 0).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.file()).unwrap(),
            format!("{me}\n")
        );
    }
}
