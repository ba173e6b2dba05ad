//! The projector writer: each embedding in its own directory
//! `embeddings/<percent-encoded tag>_<step>/` of the log directory (`tensors.tsv`,
//! `metadata.tsv`, `sprite.png`), listed in `projector_config.pbtxt` at the log directory's
//! root, where TensorBoard's projector plugin looks for it.
//!
//! As for exports, the names are predictable, so another user of a shared machine could plant
//! a link under one of them. Nothing here follows one: `embeddings` and each embedding's
//! directory are created and opened relative to their parent's open descriptor with
//! `O_NOFOLLOW | O_DIRECTORY`, every file is created relative to its directory's descriptor with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, and the config is re-written whole into a new temporary file
//! of the log directory, then `renameat`-ed over the old one, which replaces a planted link
//! rather than writing through it. A link or file planted at a directory name fails the writer
//! with [`FileError::NotADirectory`]; nothing is written outside the log directory.
//!
//! The config lists every embedding of the run so far (and whatever an earlier run left in
//! it): re-writing it never loses one, and a crash leaves the old config or the new one,
//! never a torn one.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use ember_pack::{FileKind, ProjectorFiles, projector_files};

use crate::batch_context::{BatchContext, Fate};
use crate::error::FileError;
use crate::event_file::{FileSettings, io_err, seal};
use crate::journal::Journal;
use crate::naming;
use crate::options::Durability;
use crate::stats::WriterStats;

/// The directory of embeddings, relative to the log directory.
pub(crate) const EMBEDDINGS_DIR: &str = "embeddings";

/// Writes embeddings and the run's projector config.
#[derive(Debug)]
pub(crate) struct ProjectorWriter {
    settings: FileSettings,
    dirs: Option<Dirs>,
    /// The config's text so far: what an earlier run left, then this run's entries.
    config: String,
    /// Whether the config is listed in the run's journal yet: as made by the run, or as a
    /// file it found and rewrites.
    config_listed: bool,
    /// Whether a config was there when the writer opened the directories.
    config_found: bool,
    pub(crate) stats: WriterStats,
}

/// The log directory and its `embeddings` directory, open.
#[derive(Debug)]
struct Dirs {
    root: Dir,
    embeddings: Dir,
}

/// Why one embedding was not written although the writer is sound.
#[derive(Debug)]
pub(crate) enum ProjectorOutcome {
    Written,
    /// Its directory exists already (the same tag and step twice), or its name is too long.
    Refused(PathBuf, io::Error),
}

impl ProjectorWriter {
    pub(crate) fn new(settings: FileSettings) -> Self {
        Self {
            settings,
            dirs: None,
            config: String::new(),
            config_listed: false,
            config_found: false,
            stats: WriterStats::new(FileKind::Projector),
        }
    }

    /// Opens the directories and reads an existing config on the first embedding.
    fn open_dirs(&mut self) -> Result<(), FileError> {
        if self.dirs.is_some() {
            return Ok(());
        }
        let root = Dir::open_root(self.settings.log_dir.clone())?;
        let config_path = root.path.join(projector_files::CONFIG);
        let (mut config, found) = match root.read_file(projector_files::CONFIG) {
            Ok(text) => (text, true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => (String::new(), false),
            Err(e) => return Err(io_err("read", &config_path)(e)),
        };
        if !config.is_empty() && !config.ends_with('\n') {
            config.push('\n');
        }
        let embeddings_path = root.path.join(EMBEDDINGS_DIR);
        if let Some(journal) = &self.settings.journal
            && std::fs::symlink_metadata(&embeddings_path).is_err()
        {
            journal
                .claim_dir(&embeddings_path)
                .map_err(io_err("list in the run's journal", &embeddings_path))?;
        }
        let embeddings = match root.make_dir(EMBEDDINGS_DIR)? {
            Opened::Dir(dir) => dir,
            Opened::Planted(path) => return Err(FileError::NotADirectory { path }),
        };
        self.stats.path = Some(embeddings.path.clone());
        self.config = config;
        self.config_found = found;
        self.dirs = Some(Dirs { root, embeddings });
        Ok(())
    }

    /// Writes one embedding of record `idx` and re-writes the config. An error fails the
    /// writer; the embedding is counted as failed.
    pub(crate) fn write(
        &mut self,
        idx: usize,
        files: &ProjectorFiles,
        ctx: &mut BatchContext,
    ) -> Result<ProjectorOutcome, FileError> {
        let result = self.try_write(idx, files, ctx);
        if result.is_err() {
            ctx.record_fates.mark(idx, Fate::Failed);
            self.stats.records_failed += 1;
        }
        result
    }

    fn try_write(
        &mut self,
        idx: usize,
        files: &ProjectorFiles,
        ctx: &mut BatchContext,
    ) -> Result<ProjectorOutcome, FileError> {
        self.open_dirs()?;
        let sync = self.settings.durability == Durability::Sync;
        let read_only = self.settings.read_only_on_close;
        let Some(dirs) = &self.dirs else {
            return Err(FileError::NotADirectory {
                path: self.settings.log_dir.clone(),
            });
        };
        let stats = &mut self.stats;
        let name = naming::embedding_dir_name(files.tag.as_str(), files.step);
        let path = dirs.embeddings.path.join(&name);
        if name.len() > naming::MAX_FILE_NAME_LEN {
            refused(stats, idx, ctx);
            return Ok(ProjectorOutcome::Refused(
                path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("directory name of {} bytes is too long", name.len()),
                ),
            ));
        }
        let entry = files.config_entry(&format!("{EMBEDDINGS_DIR}/{name}"));
        let contents = contents_of(files);
        let config_len = (self.config.len() + entry.len()) as u64;
        let total = contents.iter().map(|(_, b)| b.len() as u64).sum::<u64>() + config_len;
        ctx.guard.check(&self.settings.log_dir, &path, total)?;
        let journal = self.settings.journal.as_ref();
        let dir = match make_embedding_dir(&dirs.embeddings, &name, journal)? {
            New::Created(dir) => dir,
            New::Exists => {
                refused(stats, idx, ctx);
                return Ok(ProjectorOutcome::Refused(
                    path,
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "an embedding of this tag and step exists",
                    ),
                ));
            }
        };
        if let Err(e) = write_contents(&dir, &contents, journal, (sync, read_only)) {
            // A half-written embedding is not listed in the config, and is not left behind
            // for a later run to take for a whole one.
            let _ = dirs.embeddings.remove_dir(&name);
            return Err(e);
        }
        stats.files_created += contents.len() as u64;
        if sync {
            ctx.fsyncs += 1;
            dir.sync().map_err(io_err("fsync", &dir.path))?;
        }
        let mut config = self.config.clone();
        config.push_str(&entry);
        let config_path = dirs.root.path.join(projector_files::CONFIG);
        if !self.config_listed {
            list_config(journal, self.config_found, &config_path)?;
            self.config_listed = true;
        }
        dirs.root
            .replace_file(projector_files::CONFIG, config.as_bytes(), read_only)
            .map_err(io_err("replace", &config_path))?;
        ctx.fsyncs += 1;
        self.config = config;
        ctx.guard.written(total);
        stats.records_written += 1;
        stats.bytes_written += total;
        Ok(ProjectorOutcome::Written)
    }

    /// Fsyncs the log and embeddings directories so their entries survive a crash.
    pub(crate) fn sync(&mut self, ctx: &mut BatchContext) -> Result<(), FileError> {
        if let Some(dirs) = &self.dirs {
            for dir in [&dirs.embeddings, &dirs.root] {
                dir.sync().map_err(io_err("fsync", &dir.path))?;
                ctx.fsyncs += 1;
            }
        }
        Ok(())
    }
}

/// An embedding's files and their bytes.
fn contents_of(files: &ProjectorFiles) -> Vec<(&str, &[u8])> {
    [
        Some((projector_files::TENSORS, files.tensors.as_slice())),
        files
            .metadata
            .as_deref()
            .map(|m| (projector_files::METADATA, m)),
        files
            .sprite
            .as_deref()
            .map(|s| (projector_files::SPRITE, s)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Lists the projector config in the run's journal before its first rewrite: as made by the
/// run, or, where the writer `found` one, as rewritten (a rollback removes only the first).
fn list_config(journal: Option<&Journal>, found: bool, path: &Path) -> Result<(), FileError> {
    let Some(journal) = journal else {
        return Ok(());
    };
    match found {
        true => journal.claim_rewrite(path),
        false => journal.claim_file(path),
    }
    .map_err(io_err("list in the run's journal", path))
}

/// Makes the embedding's directory `name`, which must be new, listed in the run's journal
/// first; a name found taken withdraws the claim.
fn make_embedding_dir(
    embeddings: &Dir,
    name: &str,
    journal: Option<&Journal>,
) -> Result<New, FileError> {
    let path = embeddings.path.join(name);
    let listed =
        |result: io::Result<()>| result.map_err(io_err("list in the run's journal", &path));
    if let Some(journal) = journal {
        listed(journal.claim_dir(&path))?;
    }
    let made = embeddings.make_dir_new(name);
    if let Some(journal) = journal
        && !matches!(made, Ok(New::Created(_)))
    {
        listed(journal.retract(&path))?;
    }
    made
}

/// Writes an embedding's files into its new directory, each listed in the run's journal
/// before it is made; on an error the files made are removed again.
fn write_contents(
    dir: &Dir,
    contents: &[(&str, &[u8])],
    journal: Option<&Journal>,
    (sync, read_only): (bool, bool),
) -> Result<(), FileError> {
    let mut created: Vec<&str> = Vec::new();
    for (file, bytes) in contents {
        let file_path = dir.path.join(file);
        let written = Journal::made(journal, &file_path, false, || dir.create_file(file))
            .map_err(io_err("create", &file_path))
            .and_then(|mut f| {
                created.push(file);
                f.write_all(bytes).map_err(io_err("write", &file_path))?;
                if sync {
                    f.sync_all().map_err(io_err("fsync", &file_path))?;
                }
                if read_only {
                    seal(&f).map_err(io_err("make read-only", &file_path))?;
                }
                Ok(())
            });
        if let Err(e) = written {
            for file in &created {
                let _ = dir.remove_file(file);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Counts an embedding refused for its name (too long, or taken).
fn refused(stats: &mut WriterStats, idx: usize, ctx: &mut BatchContext) {
    stats.records_dropped += 1;
    ctx.record_fates.mark(idx, Fate::Dropped);
}

/// What opening a directory that may already exist found.
enum Opened {
    Dir(Dir),
    /// Something not a directory (a link, a file) under the name.
    Planted(PathBuf),
}

/// What creating a directory that must be new found.
enum New {
    Created(Dir),
    /// A directory of that name exists.
    Exists,
}

/// An open directory.
#[derive(Debug)]
struct Dir {
    path: PathBuf,
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
    fn open_root(path: PathBuf) -> Result<Dir, FileError> {
        use rustix::fs::{CWD, Mode, OFlags, openat};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = openat(CWD, &path, flags, Mode::empty())
            .map_err(|e| io_err("open directory", &path)(e.into()))?;
        Ok(Dir { path, fd })
    }

    /// Opens `name` without following a link.
    fn open_dir(&self, name: &str) -> Result<Opened, FileError> {
        use rustix::fs::{Mode, openat};
        let path = self.path.join(name);
        match openat(&self.fd, name, sys::DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Opened::Dir(Dir { path, fd })),
            Err(e) if sys::planted(e) => Ok(Opened::Planted(path)),
            Err(e) => Err(io_err("open directory", &path)(e.into())),
        }
    }

    /// Creates `name` (mode 0700) unless it exists, and opens it.
    fn make_dir(&self, name: &str) -> Result<Opened, FileError> {
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
    fn make_dir_new(&self, name: &str) -> Result<New, FileError> {
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
    fn create_file(&self, name: &str) -> io::Result<File> {
        let fd = rustix::fs::openat(&self.fd, name, sys::NEW_FILE, sys::FILE_MODE)?;
        Ok(File::from(fd))
    }

    /// Reads `name`, never through a link.
    fn read_file(&self, name: &str) -> io::Result<String> {
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
    fn replace_file(&self, name: &str, bytes: &[u8], read_only: bool) -> io::Result<()> {
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

    fn remove_file(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty()).map_err(io::Error::from)
    }

    fn remove_dir(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::REMOVEDIR)
            .map_err(io::Error::from)
    }

    fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(&self.fd).map_err(io::Error::from)
    }
}

/// Without `openat`, paths are checked with `symlink_metadata` before use: a race with a
/// planted link is possible here, which the Unix code above closes.
#[cfg(not(unix))]
impl Dir {
    fn open_root(path: PathBuf) -> Result<Dir, FileError> {
        Ok(Dir { path })
    }

    fn open_dir(&self, name: &str) -> Result<Opened, FileError> {
        let path = self.path.join(name);
        let meta = std::fs::symlink_metadata(&path).map_err(io_err("inspect", &path))?;
        if meta.is_dir() {
            Ok(Opened::Dir(Dir { path }))
        } else {
            Ok(Opened::Planted(path))
        }
    }

    fn make_dir(&self, name: &str) -> Result<Opened, FileError> {
        let path = self.path.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create directory", &path)(e)),
        }
        self.open_dir(name)
    }

    fn make_dir_new(&self, name: &str) -> Result<New, FileError> {
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

    fn create_file(&self, name: &str) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path.join(name))
    }

    fn read_file(&self, name: &str) -> io::Result<String> {
        let path = self.path.join(name);
        if std::fs::symlink_metadata(&path)?.file_type().is_symlink() {
            return Err(io::Error::other("refusing to read through a link"));
        }
        std::fs::read_to_string(path)
    }

    fn replace_file(&self, name: &str, bytes: &[u8], read_only: bool) -> io::Result<()> {
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

    fn remove_file(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.path.join(name))
    }

    fn remove_dir(&self, name: &str) -> io::Result<()> {
        std::fs::remove_dir(self.path.join(name))
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}
