//! Replacing a file so that a crash at any moment leaves the old file or the new one, whole,
//! and a finished replace survives the machine going down: the one way ember writes files that
//! are rewritten whole (checkpoints, the projector config, a run's command line and model).
//!
//! The new bytes go to a temporary file beside the file (made new), which is fsynced, renamed
//! over the file, and then the directory is fsynced, since the rename lives in the directory:
//! without that last step a crash can bring back the old file, or none. [`create_dir`] likewise
//! fsyncs the parent of a directory it makes.
//!
//! The temporary file's name is the writer's own, `.<name>.<pid>.<n>.tmp` ([`temporary_path`]):
//! hidden, so that readers listing the directory pass it by, and unique to the process and the
//! write, so that two writers of one file (which the directory lock should prevent, but a lock
//! can be lost) never write into, remove or rename each other's half-written bytes. What a
//! killed writer left is found by [`is_stale_temporary`], which tells a dead writer's (or this
//! process's own) from a live one's.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Temporary files this process has named, for the next name's counter.
static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// A new temporary file name for writing `path`'s new bytes, beside it: hidden, with this
/// process's id and a counter (see the module docs).
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let n = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// The file a temporary file name of [`temporary_path`] is for, and its writer's process id;
/// `None` for any other name.
pub fn temporary_of(temporary: &str) -> Option<(&str, u32)> {
    let inner = temporary.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, n) = inner.rsplit_once('.')?;
    let (name, pid) = rest.rsplit_once('.')?;
    n.parse::<u64>().ok()?;
    Some((name, pid.parse().ok()?))
}

/// Whether `temporary` is a temporary file name of [`temporary_path`] whose writer can no
/// longer be writing it: this process's own, or one of a process that has ended. Another live
/// writer's, or one whose writer cannot be told (no `/proc` to look in), is not stale.
pub fn is_stale_temporary(temporary: &str) -> bool {
    temporary_of(temporary).is_some_and(|(_, pid)| pid == std::process::id() || has_ended(pid))
}

/// Whether process `pid` has ended, where `/proc` can tell; `false` where it cannot.
fn has_ended(pid: u32) -> bool {
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Replaces `path` with what `write` puts in the file at the path it is given (a new, empty
/// temporary file's path), atomically and durably; see the module docs. The directory must
/// exist. On an error the old file is left as it was, and the temporary file removed.
pub fn replace_with(path: &Path, write: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    let tmp = temporary_path(path);
    // Left by a killed process that had this pid before.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = write(&tmp)
        .and_then(|()| File::open(&tmp)?.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// [`replace_with`] for bytes at hand.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_with(path, |tmp| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)?;
        io::Write::write_all(&mut file, bytes)
    })
}

/// Creates `dir` and any missing parent, and fsyncs the parent of each one made, so that a
/// directory a durable file is about to be written into is itself on the disk.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    create_dir_with(dir, |dir| fs::create_dir_all(dir))
}

/// [`create_dir`] with `create` making `dir` and its missing parents (with a mode of its
/// choosing, say).
pub(crate) fn create_dir_with(
    dir: &Path,
    create: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() && !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(parent) => at = parent,
            None => break,
        }
    }
    create(dir)?;
    for made in missing.iter().rev() {
        let parent = made
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}

/// The device and inode `path` names now (`None` where it names nothing, or off Unix): equal
/// for two paths, or one path at two moments, only when they name the same file or directory.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Fsyncs a directory, making the names in it (a rename, a new file) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_replace_leaves_the_new_bytes_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deeper").join("command.json");
        create_dir(path.parent().unwrap()).unwrap();
        replace(&path, b"old").unwrap();
        replace(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(names_in(path.parent().unwrap()), ["command.json"]);
    }

    #[test]
    fn each_write_has_a_hidden_temporary_name_of_its_own() {
        let path = Path::new("run").join("model.bpk");
        let (one, two) = (temporary_path(&path), temporary_path(&path));
        assert_ne!(one, two);
        for tmp in [&one, &two] {
            assert_eq!(tmp.parent(), path.parent());
            let name = tmp.file_name().unwrap().to_str().unwrap();
            assert!(name.starts_with(".model.bpk."), "{name}");
            assert_eq!(temporary_of(name), Some(("model.bpk", std::process::id())));
        }
        assert_eq!(temporary_of("model.bpk.tmp"), None);
        assert_eq!(temporary_of(".model.bpk.x.1.tmp"), None);
    }

    #[cfg(unix)]
    #[test]
    fn only_a_dead_writer_s_or_this_process_s_temporary_is_stale() {
        let mine = temporary_path(Path::new("ckpt-000000000001.ember"));
        assert!(is_stale_temporary(mine.to_str().unwrap()));
        // A live writer: this test's parent process.
        let live = format!(
            ".ckpt-000000000001.ember.{}.0.tmp",
            std::os::unix::process::parent_id()
        );
        assert!(!is_stale_temporary(&live));
        // A writer that has ended: a child process waited for.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(is_stale_temporary(&format!(".model.bpk.{dead}.3.tmp")));
        assert!(!is_stale_temporary("model.bpk"));
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bpk");
        replace(&path, b"trained").unwrap();
        let failed = replace_with(&path, |tmp| {
            fs::write(tmp, b"part")?;
            Err(io::Error::other("disk full"))
        });
        assert_eq!(failed.unwrap_err().to_string(), "disk full");
        assert_eq!(fs::read(&path).unwrap(), b"trained");
        assert_eq!(names_in(dir.path()), ["model.bpk"]);
    }
}
