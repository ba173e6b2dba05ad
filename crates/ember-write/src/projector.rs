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

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ember_pack::{FileKind, ProjectorFiles, projector_files};

use crate::batch_context::{BatchContext, Fate};
use crate::dir::{Dir, New};
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
        let embeddings = root.make_listed_dir(EMBEDDINGS_DIR, self.settings.journal.as_ref())?;
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

/// Counts an embedding or an exported tensor refused for its name (too long, or taken).
pub(crate) fn refused(stats: &mut WriterStats, idx: usize, ctx: &mut BatchContext) {
    stats.records_dropped += 1;
    ctx.record_fates.mark(idx, Fate::Dropped);
}
