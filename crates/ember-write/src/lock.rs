//! One writer per directory: an advisory lock a process holds on a log or checkpoint directory
//! for as long as it writes there, so that a second run (or a resume) on a live directory is
//! refused at once instead of rolling back or appending under the first.
//!
//! The lock is the operating system's (`flock` on Unix, through [`File::try_lock`]) on a file
//! named after the writer's rank, `.ember-locks/rank<r>.lock`: ranks that share a directory each
//! lock their own. It sits in a hidden subdirectory, so that whoever lists the directory's
//! files (a script gathering event files, TensorBoard, MindInsight) meets only the run's. The
//! OS drops it when the process ends, however it ends, so `kill -9` leaves no stale lock
//! behind; the file stays (removing it would let two processes lock two different files of one
//! name) and holds the pid of its last holder, which is what a refused writer names. Where the
//! file system has no such locks (some network mounts), the directory is written unlocked, with
//! a warning.
//!
//! A lock on a file is a lock on a name, and names can be taken away: a clean-up script or
//! `git clean -fdx` that deletes `.ember-locks` would let a second writer lock a new file of
//! the same name. So rank 0 (one per directory: the other ranks share it) also locks the
//! directory itself, an `flock` on an open handle of it, which no deletion of a file inside
//! reaches; a writer it refuses names its holder from the kernel's table of locks (Linux's
//! `/proc/locks`) when the lock file is gone. Where a directory cannot be locked so (Windows, where a directory cannot be opened
//! as a file; NFS, which emulates `flock` with byte-range locks that need a writable file) only
//! the lock file keeps others out. Whatever is held, [`DirLock::check`], called by the
//! writer at every checkpoint and before its model is saved, compares the directory and the
//! lock file it holds with what their paths name now: a lock file deleted while the directory
//! is locked is made again (so that refused writers can name the holder again); a directory
//! deleted and made again, or moved, or a lost lock file with no directory lock behind it, is
//! [`LockError::Lost`], and the writer stops rather than write into what may be another run's
//! directory.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::options::create_dir_private;

/// The subdirectory of a locked directory that holds its lock files.
pub const LOCKS: &str = ".ember-locks";

/// Why a directory could not be locked, or is no longer.
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
    /// The directory or its lock file was taken away while this writer held the lock (see the
    /// module docs): another writer may be in it now.
    #[error("{} is no longer this writer's: {why}; stopped so as not to write into another run's directory", dir.display())]
    Lost {
        /// The directory.
        dir: PathBuf,
        /// What changed.
        why: String,
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

/// A file's device and inode: what a path named when it was opened.
type Identity = Option<(u64, u64)>;

/// A held lock on a directory (see the module docs); released when dropped.
#[derive(Debug)]
pub struct DirLock {
    /// `None` where the file system has no locks.
    file: Option<File>,
    path: PathBuf,
    dir: PathBuf,
    rank: u32,
    /// The directory itself, locked (rank 0 only, where the file system allows).
    dir_handle: Option<File>,
    /// What `dir` named when it was locked.
    dir_identity: Identity,
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
        create_dir_private(dir).map_err(|source| LockError::Io {
            op: "create",
            path: dir.to_path_buf(),
            source,
        })?;
        // The directory first: with its lock files deleted, this is what still refuses.
        let dir_handle = match rank {
            0 => lock_dir_itself(dir)?,
            _ => None,
        };
        let dir_identity = identity_of_path(dir);
        let Some(file) = lock_file(dir, rank)? else {
            return Ok(Self {
                file: None,
                path: Self::path(dir, rank),
                dir: dir.to_path_buf(),
                rank,
                dir_handle: None,
                dir_identity,
            });
        };
        Ok(Self {
            file: Some(file),
            path: Self::path(dir, rank),
            dir: dir.to_path_buf(),
            rank,
            dir_handle,
            dir_identity,
        })
    }

    /// Who holds rank `rank`'s lock on `dir` now, without taking it or writing anything:
    /// `Some(holder pid, when readable)` while a writer holds it, `None` when it is free (or
    /// was never made).
    pub fn holder(dir: &Path, rank: u32) -> Option<Option<u32>> {
        let own = || read_pid_at(&Self::path(dir, rank));
        if let Ok(mut file) = File::open(Self::path(dir, rank))
            && let Err(TryLockError::WouldBlock) = past_forks(own, || file.try_lock_shared())
        {
            return Some(read_pid(&mut file));
        }
        if rank != 0 {
            return None;
        }
        let handle = File::open(dir).ok()?;
        match past_forks(own, || handle.try_lock_shared()) {
            Err(TryLockError::WouldBlock) => Some(directory_holder(dir)),
            _ => None,
        }
    }

    /// Whether this writer still holds the directory it locked (see the module docs): `Ok`
    /// when it does, having made its lock file again when that alone was deleted while the
    /// directory itself stayed locked; [`LockError::Lost`] when the directory was deleted,
    /// replaced or moved, or the lock file was lost with nothing else keeping others out.
    pub fn check(&mut self) -> Result<(), LockError> {
        self.check_by(stat)
    }

    /// [`check`](Self::check), with `stat` telling what a path names now. A `stat` that fails
    /// for another reason than the path naming nothing (a directory made unreadable, an
    /// overloaded network mount) tells nothing of deletion: the locks this writer holds on its
    /// open handles keep others out all the same, so it goes on, saying so.
    fn check_by(&mut self, stat: impl Fn(&Path) -> io::Result<Identity>) -> Result<(), LockError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let lost = |why: &str| LockError::Lost {
            dir: self.dir.clone(),
            why: why.to_owned(),
        };
        let unknown = |path: &Path, error: io::Error| {
            log::warn!(
                "cannot tell whether {} is still this writer's ({error}); its lock is held, going on",
                path.display()
            );
            Ok(())
        };
        let dir_now = match stat(&self.dir) {
            Ok(identity) => identity,
            Err(error) => return unknown(&self.dir, error),
        };
        let dir_held = match &self.dir_handle {
            Some(handle) => handle.metadata().ok().and_then(|m| identity(&m)),
            None => self.dir_identity,
        };
        if dir_held.is_some() && dir_now != dir_held {
            return Err(lost("the directory was deleted, replaced or moved"));
        }
        let file_held = file.metadata().ok().and_then(|m| identity(&m));
        let file_now = match stat(&self.path) {
            Ok(identity) => identity,
            Err(error) => return unknown(&self.path, error),
        };
        if file_held.is_none() || file_now == file_held {
            return Ok(());
        }
        if self.dir_handle.is_none() {
            return Err(lost("its lock file was deleted or replaced"));
        }
        match lock_file(&self.dir, self.rank) {
            Ok(Some(file)) => {
                log::warn!(
                    "{} was deleted while this run held it; made again",
                    self.path.display()
                );
                self.file = Some(file);
                Ok(())
            }
            _ => Err(lost(
                "its lock file was deleted and is held by another writer",
            )),
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

    /// Whether the directory itself is locked, besides its lock file (see the module docs).
    pub fn holds_directory(&self) -> bool {
        self.dir_handle.is_some()
    }
}

/// How long a lock this process held last may still look held after it let it go: a child
/// another thread is spawning shares every open file description of the process, locked ones
/// included, from its fork until its exec closes them (they are close-on-exec).
const FORK_WINDOW: std::time::Duration = std::time::Duration::from_millis(250);

/// `try_lock` once, or, while it finds the lock held and `holder` names this process (which
/// may have let it go a moment ago), again until [`FORK_WINDOW`] has passed.
fn past_forks(
    holder: impl Fn() -> Option<u32>,
    mut try_lock: impl FnMut() -> Result<(), TryLockError>,
) -> Result<(), TryLockError> {
    let deadline = std::time::Instant::now() + FORK_WINDOW;
    loop {
        match try_lock() {
            Err(TryLockError::WouldBlock)
                if holder() == Some(std::process::id()) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            result => return result,
        }
    }
}

/// Locks the directory `dir` itself; `None` where this file system cannot (see the module
/// docs), [`LockError::Held`] when another writer has.
fn lock_dir_itself(dir: &Path) -> Result<Option<File>, LockError> {
    let Ok(handle) = File::open(dir) else {
        return Ok(None);
    };
    match past_forks(|| read_pid_at(&DirLock::path(dir, 0)), || handle.try_lock()) {
        Ok(()) => Ok(Some(handle)),
        Err(TryLockError::WouldBlock) => Err(LockError::Held {
            dir: dir.to_path_buf(),
            holder: directory_holder(dir),
        }),
        Err(TryLockError::Error(error)) => {
            log::debug!("{} cannot be locked itself ({error})", dir.display());
            Ok(None)
        }
    }
}

/// Opens, locks and writes this process's pid into rank `rank`'s lock file of `dir`; `None`
/// where the file system has no locks.
fn lock_file(dir: &Path, rank: u32) -> Result<Option<File>, LockError> {
    let locks = DirLock::locks_dir(dir);
    create_dir_private(&locks).map_err(|source| LockError::Io {
        op: "create",
        path: locks.clone(),
        source,
    })?;
    let path = DirLock::path(dir, rank);
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
    match past_forks(|| read_pid_at(&path), || file.try_lock()) {
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
            return Ok(None);
        }
        Err(TryLockError::Error(error)) => return Err(io_err("lock")(error)),
    }
    file.set_len(0).map_err(io_err("write"))?;
    file.seek(SeekFrom::Start(0))
        .and_then(|_| writeln!(file, "{}", std::process::id()))
        .map_err(io_err("write"))?;
    Ok(Some(file))
}

/// The pid of the writer holding `dir` itself: from rank 0's lock file, or, with that deleted,
/// from the kernel's table of locks (Linux's `/proc/locks`, which names each `flock`'s process).
fn directory_holder(dir: &Path) -> Option<u32> {
    read_pid_at(&DirLock::path(dir, 0)).or_else(|| flock_holder(identity_of_path(dir)?))
}

/// The process holding an `flock` on the file `(device, inode)`, as `/proc/locks` lists it:
/// `1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF` (waiters' lines start
/// `->`), the device's numbers in hex.
fn flock_holder((device, inode): (u64, u64)) -> Option<u32> {
    let major = ((device >> 8) & 0xfff) | ((device >> 32) & !0xfff);
    let minor = (device & 0xff) | ((device >> 12) & !0xff);
    let wanted = format!("{major:02x}:{minor:02x}:{inode}");
    let table = fs::read_to_string("/proc/locks").ok()?;
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, file, ..] if *file == wanted => pid.parse().ok(),
            _ => None,
        }
    })
}

fn read_pid_at(path: &Path) -> Option<u32> {
    read_pid(&mut File::open(path).ok()?)
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn identity_of_path(path: &Path) -> Identity {
    crate::durable::identity(path)
}

/// What `path` names now: `None` where it names nothing; an error where that cannot be told.
fn stat(path: &Path) -> io::Result<Identity> {
    match fs::metadata(path) {
        Ok(metadata) => Ok(identity(&metadata)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

#[cfg(unix)]
fn identity(metadata: &fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    Some((metadata.dev(), metadata.ino()))
}

/// Elsewhere a file's identity is not at hand: nothing is compared.
#[cfg(not(unix))]
fn identity(_: &fs::Metadata) -> Identity {
    None
}

fn unsupported(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Unsupported || error.raw_os_error() == Some(37 /* ENOLCK */)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that nobody holds rank 0's lock on `run` (a lock this process let go a moment
    /// ago is waited for: see [`past_forks`]).
    fn assert_released(run: &Path) {
        assert_eq!(DirLock::holder(run, 0), None);
    }

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
        assert_released(&run);
        let again = DirLock::acquire(&run, 0).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.file()).unwrap(),
            format!("{me}\n")
        );
    }
    #[test]
    fn deleted_lock_files_keep_a_second_writer_out_and_are_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let mut first = DirLock::acquire(&run, 0).unwrap();
        assert!(first.holds_directory());
        // A clean-up script (or `git clean -fdx`) deletes the lock files mid-run.
        fs::remove_dir_all(DirLock::locks_dir(&run)).unwrap();
        let me = std::process::id();
        // Where the kernel's lock table is at hand the holder is still named.
        let named = cfg!(target_os = "linux").then_some(me);
        assert_eq!(DirLock::holder(&run, 0), Some(named));
        match DirLock::acquire(&run, 0) {
            Err(LockError::Held { holder, .. }) => assert_eq!(holder, named),
            other => panic!("a second writer got {other:?}"),
        }
        // The holder's next check makes its lock file again.
        first.check().unwrap();
        assert_eq!(DirLock::holder(&run, 0), Some(Some(me)));
        match DirLock::acquire(&run, 0) {
            Err(LockError::Held { holder, .. }) => assert_eq!(holder, Some(me)),
            other => panic!("a second writer got {other:?}"),
        }
        drop(first);
        assert_released(&run);
        DirLock::acquire(&run, 0).unwrap();
    }

    #[test]
    fn a_directory_deleted_and_made_again_is_no_longer_the_writer_s() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let mut lock = DirLock::acquire(&run, 0).unwrap();
        lock.check().unwrap();
        fs::remove_dir_all(&run).unwrap();
        fs::create_dir(&run).unwrap();
        let error = lock.check().unwrap_err();
        assert!(matches!(error, LockError::Lost { .. }), "{error:?}");
        assert!(
            error.to_string().contains("deleted, replaced or moved"),
            "{error}"
        );
        // The new directory is free for a writer of its own.
        DirLock::acquire(&run, 0).unwrap();
    }

    /// Issue 52: `.ember-locks` made unreadable while a run held it stopped the run as if its
    /// lock file had been deleted and taken by another writer: a failed `stat` read as a
    /// deletion.
    #[cfg(unix)]
    #[test]
    fn a_lock_file_that_cannot_be_looked_at_is_not_taken_for_a_deleted_one() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let mut lock = DirLock::acquire(&run, 0).unwrap();
        let locks = DirLock::locks_dir(&run);
        let denied = |path: &Path| {
            if path.starts_with(&locks) {
                Err(io::Error::from(io::ErrorKind::PermissionDenied))
            } else {
                stat(path)
            }
        };
        lock.check_by(denied).unwrap();
        // Nobody else got in meanwhile, and a deletion is still told for what it is.
        assert_eq!(DirLock::holder(&run, 0), Some(Some(std::process::id())));
        fs::remove_dir_all(&run).unwrap();
        fs::create_dir(&run).unwrap();
        assert!(matches!(lock.check_by(denied), Err(LockError::Lost { .. })));
        // Really unreadable, where this process is not the superuser (who reads it anyway).
        let mut lock = DirLock::acquire(&dir.path().join("other"), 0).unwrap();
        let locks = DirLock::locks_dir(&dir.path().join("other"));
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&locks, fs::Permissions::from_mode(0o000)).unwrap();
        let checked = lock.check();
        fs::set_permissions(&locks, fs::Permissions::from_mode(0o700)).unwrap();
        checked.unwrap();
    }

    #[test]
    fn a_rank_without_the_directory_lock_stops_when_its_lock_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let mut rank1 = DirLock::acquire(&run, 1).unwrap();
        assert!(!rank1.holds_directory());
        fs::remove_dir_all(DirLock::locks_dir(&run)).unwrap();
        // Another writer of rank 1 is let in by the new file...
        let _second = DirLock::acquire(&run, 1).unwrap();
        // ...and the first learns of it at its next check.
        let error = rank1.check().unwrap_err();
        assert!(matches!(error, LockError::Lost { .. }), "{error:?}");
    }

    /// A child being spawned by another thread holds a lock this process let go until it
    /// execs: another open description of the lock file, held for 50 ms, stands for it. The
    /// lock is taken once it is let go; one that names another process is refused at once.
    #[test]
    fn a_lock_this_process_let_go_a_moment_ago_is_taken_once_free() {
        let run = tempfile::tempdir().unwrap();
        drop(DirLock::acquire(run.path(), 1).unwrap());
        let child = File::open(DirLock::path(run.path(), 1)).unwrap();
        child.lock().unwrap();
        let lets_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(child);
        });
        let lock = DirLock::acquire(run.path(), 1).expect("taken once the child let go");
        lets_go.join().unwrap();
        drop(lock);

        let other = OpenOptions::new()
            .write(true)
            .open(DirLock::path(run.path(), 1))
            .unwrap();
        other.lock().unwrap();
        fs::write(DirLock::path(run.path(), 1), "1\n").unwrap();
        let started = std::time::Instant::now();
        match DirLock::acquire(run.path(), 1) {
            Err(LockError::Held { holder, .. }) => assert_eq!(holder, Some(1)),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < FORK_WINDOW, "{:?}", started.elapsed());
    }
}
