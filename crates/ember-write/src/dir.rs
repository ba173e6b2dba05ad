//! A directory opened once and written through its descriptor (`openat` and friends with
//! `O_NOFOLLOW`), so that a link planted under a predictable name by another user of the
//! machine is never followed: what the projector and export writers create their files in.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use crate::error::FileError;
use crate::event_file::{io_err, seal};
use crate::journal::Journal;

/// What opening a directory that may already exist found.
pub(crate) enum Opened {
    Dir(Dir),
    /// Something not a directory (a link, a file) under the name.
    Planted(PathBuf),
}

/// What creating a directory that must be new found.
pub(crate) enum New {
    Created(Dir),
    /// A directory of that name exists.
    Exists,
}

/// An open directory.
#[derive(Debug)]
pub(crate) struct Dir {
    pub(crate) path: PathBuf,
    #[cfg(unix)]
    fd: rustix::fd::OwnedFd,
}

#[cfg(unix)]
mod sys {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;

    pub(super) const DIR_FLAGS: OFlags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::CLOEXEC)
        .union(OFlags::NOFOLLOW);
    pub(super) const NEW_FILE: OFlags = OFlags::WRONLY
        .union(OFlags::CREATE)
        .union(OFlags::EXCL)
        .union(OFlags::NOFOLLOW)
        .union(OFlags::CLOEXEC);
    pub(super) const FILE_MODE: Mode = Mode::RUSR.union(Mode::WUSR);

    /// Whether `openat` failed because the name is a link or not a directory.
    pub(super) fn planted(e: Errno) -> bool {
        e == Errno::LOOP || e == Errno::NOTDIR
    }
}

#[cfg(unix)]
impl Dir {
    /// Opens the log directory itself (the caller's, which may be a link).
    pub(crate) fn open_root(path: PathBuf) -> Result<Dir, FileError> {
        use rustix::fs::{CWD, Mode, OFlags, openat};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = openat(CWD, &path, flags, Mode::empty())
            .map_err(|e| io_err("open directory", &path)(e.into()))?;
        Ok(Dir { path, fd })
    }

    /// Opens `name` without following a link.
    pub(crate) fn open_dir(&self, name: &str) -> Result<Opened, FileError> {
        use rustix::fs::{Mode, openat};
        let path = self.path.join(name);
        match openat(&self.fd, name, sys::DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Opened::Dir(Dir { path, fd })),
            Err(e) if sys::planted(e) => Ok(Opened::Planted(path)),
            Err(e) => Err(io_err("open directory", &path)(e.into())),
        }
    }

    /// Creates `name` (mode 0700) unless it exists, and opens it.
    pub(crate) fn make_dir(&self, name: &str) -> Result<Opened, FileError> {
        use rustix::fs::{Mode, mkdirat};
        match mkdirat(&self.fd, name, Mode::RWXU) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::EXIST => {}
            Err(e) => return Err(io_err("create directory", &self.path.join(name))(e.into())),
        }
        self.open_dir(name)
    }

    /// Creates `name` (mode 0700), which must be new, and opens it; a real directory of that
    /// name is [`New::Exists`], anything else planted there [`FileError::NotADirectory`].
    pub(crate) fn make_dir_new(&self, name: &str) -> Result<New, FileError> {
        use rustix::fs::{Mode, mkdirat};
        let exists = match mkdirat(&self.fd, name, Mode::RWXU) {
            Ok(()) => false,
            Err(e) if e == rustix::io::Errno::EXIST => true,
            Err(e) => return Err(io_err("create directory", &self.path.join(name))(e.into())),
        };
        match self.open_dir(name)? {
            Opened::Dir(_) if exists => Ok(New::Exists),
            Opened::Dir(dir) => Ok(New::Created(dir)),
            Opened::Planted(path) => Err(FileError::NotADirectory { path }),
        }
    }

    /// Creates `name` new in the directory, mode 0600.
    pub(crate) fn create_file(&self, name: &str) -> io::Result<File> {
        let fd = rustix::fs::openat(&self.fd, name, sys::NEW_FILE, sys::FILE_MODE)?;
        Ok(File::from(fd))
    }

    /// Reads `name`, never through a link.
    pub(crate) fn read_file(&self, name: &str) -> io::Result<String> {
        use rustix::fs::{Mode, OFlags, openat};
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut text = String::new();
        File::from(openat(&self.fd, name, flags, Mode::empty())?).read_to_string(&mut text)?;
        Ok(text)
    }

    /// Replaces `name` with `bytes`: written to a new temporary file, fsynced, then renamed
    /// over `name` and the directory fsynced, so a reader (or a crash) sees the old file or the
    /// new one, whole. (What [`crate::durable::replace`] does, through the directory's
    /// descriptor, so that no planted link is followed.)
    pub(crate) fn replace_file(&self, name: &str, bytes: &[u8], read_only: bool) -> io::Result<()> {
        use rustix::fs::{AtFlags, renameat, unlinkat};
        let tmp = format!(".{name}.{}.tmp", std::process::id());
        // A temporary file left by a crash of this pid's predecessor; unlinking removes a
        // planted link itself, never its target.
        match unlinkat(&self.fd, tmp.as_str(), AtFlags::empty()) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::NOENT => {}
            Err(e) => return Err(e.into()),
        }
        let mut file = self.create_file(&tmp)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| if read_only { seal(&file) } else { Ok(()) })
            .and_then(|()| renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(Into::into))
            // The rename is the directory's: durable only once the directory is fsynced.
            .and_then(|()| self.sync());
        if written.is_err() {
            let _ = unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }

    pub(crate) fn remove_file(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty()).map_err(io::Error::from)
    }

    pub(crate) fn remove_dir(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::REMOVEDIR)
            .map_err(io::Error::from)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(io::Error::from)
    }
}

/// Without `openat`, paths are checked with `symlink_metadata` before use: a race with a
/// planted link is possible here, which the Unix code above closes.
#[cfg(not(unix))]
impl Dir {
    pub(crate) fn open_root(path: PathBuf) -> Result<Dir, FileError> {
        Ok(Dir { path })
    }

    pub(crate) fn open_dir(&self, name: &str) -> Result<Opened, FileError> {
        let path = self.path.join(name);
        let meta = std::fs::symlink_metadata(&path).map_err(io_err("inspect", &path))?;
        if meta.is_dir() {
            Ok(Opened::Dir(Dir { path }))
        } else {
            Ok(Opened::Planted(path))
        }
    }

    pub(crate) fn make_dir(&self, name: &str) -> Result<Opened, FileError> {
        let path = self.path.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create directory", &path)(e)),
        }
        self.open_dir(name)
    }

    pub(crate) fn make_dir_new(&self, name: &str) -> Result<New, FileError> {
        let path = self.path.join(name);
        let exists = match std::fs::create_dir(&path) {
            Ok(()) => false,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => true,
            Err(e) => return Err(io_err("create directory", &path)(e)),
        };
        match self.open_dir(name)? {
            Opened::Dir(_) if exists => Ok(New::Exists),
            Opened::Dir(dir) => Ok(New::Created(dir)),
            Opened::Planted(path) => Err(FileError::NotADirectory { path }),
        }
    }

    pub(crate) fn create_file(&self, name: &str) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path.join(name))
    }

    pub(crate) fn read_file(&self, name: &str) -> io::Result<String> {
        let path = self.path.join(name);
        if std::fs::symlink_metadata(&path)?.file_type().is_symlink() {
            return Err(io::Error::other("refusing to read through a link"));
        }
        std::fs::read_to_string(path)
    }

    pub(crate) fn replace_file(&self, name: &str, bytes: &[u8], read_only: bool) -> io::Result<()> {
        let tmp = format!(".{name}.{}.tmp", std::process::id());
        let _ = std::fs::remove_file(self.path.join(&tmp));
        let mut file = self.create_file(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        if read_only {
            seal(&file)?;
        }
        drop(file);
        std::fs::rename(self.path.join(&tmp), self.path.join(name))
    }

    pub(crate) fn remove_file(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.path.join(name))
    }

    pub(crate) fn remove_dir(&self, name: &str) -> io::Result<()> {
        std::fs::remove_dir(self.path.join(name))
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

impl Dir {
    /// Creates `name` (mode 0700) unless it exists, listed in the run's journal first when the
    /// run makes it, and opens it; a link or file planted there is
    /// [`FileError::NotADirectory`].
    pub(crate) fn make_listed_dir(
        &self,
        name: &str,
        journal: Option<&Journal>,
    ) -> Result<Dir, FileError> {
        let path = self.path.join(name);
        // A name that exists already (the run's own directory, or a planted one) is not
        // listed: opening it tells which.
        if let Some(journal) = journal
            && std::fs::symlink_metadata(&path).is_err()
        {
            journal
                .claim_dir(&path)
                .map_err(io_err("list in the run's journal", &path))?;
        }
        match self.make_dir(name)? {
            Opened::Dir(dir) => Ok(dir),
            Opened::Planted(path) => Err(FileError::NotADirectory { path }),
        }
    }
}
