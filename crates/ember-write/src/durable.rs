//! Replacing a file so that a crash at any moment leaves the old file or the new one, whole,
//! and a finished replace survives the machine going down: the one way ember writes files that
//! are rewritten whole (checkpoints, the projector config, a run's command line and model).
//!
//! The new bytes go to `<name>.tmp` beside the file (made new, any stale one removed first),
//! which is fsynced, renamed over the file, and then the directory is fsynced, since the
//! rename lives in the directory: without that last step a crash can bring back the old file,
//! or none. [`create_dir`] likewise fsyncs the parent of a directory it makes.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

/// The temporary file [`replace_with`] writes `path`'s new bytes to.
pub fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces `path` with what `write` puts in the file at the path it is given (a new, empty
/// temporary file's path), atomically and durably; see the module docs. The directory must
/// exist. On an error the old file is left as it was, and the temporary file removed.
pub fn replace_with(path: &Path, write: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    let tmp = temporary_path(path);
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
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() && !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(parent) => at = parent,
            None => break,
        }
    }
    fs::create_dir_all(dir)?;
    for made in missing.iter().rev() {
        let parent = made
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
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

    #[test]
    fn a_replace_leaves_the_new_bytes_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deeper").join("command.json");
        create_dir(path.parent().unwrap()).unwrap();
        replace(&path, b"old").unwrap();
        // A crash mid-write left a stale temporary file: it is replaced, not appended to.
        fs::write(temporary_path(&path), b"half of something").unwrap();
        replace(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert!(!temporary_path(&path).exists());
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
        assert!(!temporary_path(&path).exists());
    }
}
