//! Rolling a log directory back to an earlier moment, for training that resumes from a
//! checkpoint: every reader must then see each step once, and nothing the run did not write
//! is touched.
//!
//! What is the run's is what its writers listed, by exact name, in their [`Journal`] before
//! creating it (event files of the run and its sub-runs, exports, embeddings, the projector
//! config, and the directories they made). No file name is trusted: another tool's event file
//! in a subdirectory, a copy of the run's own file, an empty directory are the user's, and
//! stay byte for byte as they are; those named like event files are listed in
//! [`Restored::left`], for a warning.
//!
//! A [`LogSnapshot`] is taken once the writers have flushed: the length of every file the
//! journal lists, every directory it lists, and the whole text of the projector config, which
//! is rewritten rather than appended to. [`LogSnapshot::restore`] later cuts each listed file
//! back to its recorded length, removes the listed files made since and the listed directories
//! made since when they are empty, and puts the projector config back. Event files only ever
//! grow by whole records (a record is framed, and a torn tail is cut back by the writer or
//! ignored by readers), so a length taken after a flush is a record boundary, and cutting there
//! leaves whole records.
//!
//! A snapshot written before journals (a checkpoint of an older ember, which chose its files
//! by name) still decodes: its restore cuts back the files it lists and removes nothing, since
//! nothing proves that a file made since is the run's.
//!
//! Why lengths and not steps: what a run writes after its last checkpoint may carry the
//! checkpoint's own step (the end of a run records its final metrics at its last step), so
//! only the bytes tell what came after; and every reader honours a shorter file, while
//! TensorBoard's purge events are ignored by some readers and unknown to MindInsight.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use crate::journal::{Journal, Made, decode_name};

/// The projector config, rewritten whole at each embedding: its text is kept, not its length.
const PROJECTOR_CONFIG: &str = "projector_config.pbtxt";

/// A rollback that could not be done; the log directory may be partly rolled back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RollbackError {
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
    /// The encoded snapshot is not one [`LogSnapshot::encode`] wrote.
    #[error("malformed log snapshot: {0}")]
    Malformed(String),
    /// The run's journal of what it made cannot be read back.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RollbackError + 'a {
    move |source| RollbackError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Which rank of a log directory's writers this process is. In a local directory each rank
/// rolls back what its own [`Journal`] lists, and only rank 0 the shared projector config. In
/// a bucket, which has no journal, files are still told by name: each rank owns its own
/// summary files (TensorBoard names carry `.rank<r>`, MindInsight names the rank after the
/// time) and rank 0 owns the rest (exports, projector files, `add_scalars` runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// This process's rank.
    pub rank: u32,
    /// How many ranks write the directory.
    pub world_size: u32,
}

impl Ownership {
    /// The only process writing its directory.
    pub const ALONE: Self = Self {
        rank: 0,
        world_size: 1,
    };

    /// Whether the file at `relative` (to the log directory) is named like one ember writes
    /// (an event file, an export, an embedding, the projector config) and this process's: a
    /// bucket's rollback goes by this; a local one by the journal.
    pub fn owns(&self, relative: &Path) -> bool {
        if !written_by_ember(relative) {
            return false;
        }
        if self.world_size <= 1 {
            return true;
        }
        let name = relative
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match rank_of(&name) {
            Some(rank) => rank == self.rank,
            None => self.rank == 0,
        }
    }
}

/// Whether ember's writers make files named like `relative`.
fn written_by_ember(relative: &Path) -> bool {
    let name = relative
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::naming::name_secs(&name).is_some()
        || first.starts_with("export_")
        || first == "embeddings"
        || name == PROJECTOR_CONFIG
}

/// The rank an event file's name gives: TensorBoard's `.rank<r>` segment after the pid and
/// counter, or the field after the time in MindInsight's `…out.events.summary.<secs>.<rank>.<host>…`.
/// Host names keep their dots, so a segment is a rank only where the layout puts one: in
/// `events.out.tfevents.<secs>.rank3.cluster.<pid>.<counter>` the host is not rank 3.
fn rank_of(name: &str) -> Option<u32> {
    let segments: Vec<&str> = name.split('.').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(tfevents) = segments.iter().position(|s| *s == "tfevents") {
        // secs, at least one host segment, pid, counter, then the rank: the last segment so
        // placed (a host's own `rank<d>` segments come before its pid and counter).
        let first = tfevents + 5;
        return (first..segments.len()).rev().find_map(|at| {
            let rank = segments[at].strip_prefix("rank").filter(|r| digits(r))?;
            (digits(segments[at - 1]) && digits(segments[at - 2]))
                .then(|| rank.parse().ok())
                .flatten()
        });
    }
    let at = segments.windows(5).position(|w| {
        w[0] == "out" && w[1] == "events" && w[2] == "summary" && digits(w[3]) && digits(w[4])
    })?;
    segments[at + 4].parse().ok()
}

/// The first line of a snapshot that [`LogSnapshot::encode`] writes: its files are the
/// journal's. A snapshot without it was written before journals.
const VERSION_LINE: &str = "v 2";

/// What a log directory held at one moment; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSnapshot {
    /// Each file of the run's, relative to the log directory, and its length.
    files: BTreeMap<PathBuf, u64>,
    /// Each directory the run made, relative to the log directory.
    dirs: BTreeSet<PathBuf>,
    /// The projector config's text, when there was one.
    projector_config: Option<Vec<u8>>,
    /// Decoded from a snapshot written before journals, whose files were chosen by name.
    legacy: bool,
}

/// What [`LogSnapshot::restore`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files cut back to their recorded length.
    pub truncated: Vec<PathBuf>,
    /// Files and directories made after the snapshot, removed.
    pub removed: Vec<PathBuf>,
    /// Files shorter than recorded (bytes lost to a crash of the machine before they reached
    /// the disk); left as they are.
    pub shorter: Vec<PathBuf>,
    /// Files named like event files that the run did not write (another tool's, a copy),
    /// left as they are: a reader of the directory may show their steps beside the run's.
    pub left: Vec<PathBuf>,
}

/// Whether `path` lies at or under one of `roots`.
fn under(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

/// `relative`'s metadata, not following a link, and only where every directory on the way
/// is a real one: a link planted in the path is never followed out of the log directory.
fn inspect(log_dir: &Path, relative: &Path) -> Result<Option<fs::Metadata>, RollbackError> {
    let mut path = log_dir.to_path_buf();
    let parts: Vec<_> = relative.components().collect();
    for (at, part) in parts.iter().enumerate() {
        path.push(part);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("inspect", &path)(e)),
        };
        if at + 1 == parts.len() {
            return Ok(Some(meta));
        }
        if !meta.is_dir() {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Every file under `log_dir` named like an event file, relative to it, outside `exclude` and
/// the hidden bookkeeping directories; links are not followed.
fn event_like(log_dir: &Path, exclude: &[PathBuf]) -> Result<Vec<PathBuf>, RollbackError> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let dir = log_dir.join(&relative);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("list", &dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err("list", &dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = relative.join(&name);
            if name.starts_with('.') || under(&path, exclude) {
                continue;
            }
            let kind = entry.file_type().map_err(io_err("inspect", &dir))?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() && crate::naming::name_secs(&name).is_some() {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

impl LogSnapshot {
    /// Records the run's files in `log_dir` as they are now: those `ownership`'s rank listed in
    /// its [`Journal`], less those under `exclude` (relative to `log_dir`: the checkpoints
    /// themselves). Nothing is fsynced here: call [`sync`](Self::sync) before anything that
    /// relies on the lengths is made durable (a checkpoint), from whichever thread may wait
    /// for the disk.
    pub fn take(
        log_dir: &Path,
        exclude: &[PathBuf],
        ownership: Ownership,
    ) -> Result<Self, RollbackError> {
        let mut snapshot = Self::default();
        let made = Journal::read(log_dir, ownership.rank)?.unwrap_or_default();
        for file in &made.files {
            if under(file, exclude) || file.as_os_str() == PROJECTOR_CONFIG {
                continue;
            }
            if let Some(meta) = inspect(log_dir, file)?.filter(fs::Metadata::is_file) {
                snapshot.files.insert(file.clone(), meta.len());
            }
        }
        for dir in &made.dirs {
            if !under(dir, exclude) && inspect(log_dir, dir)?.is_some_and(|m| m.is_dir()) {
                snapshot.dirs.insert(dir.clone());
            }
        }
        // Kept whoever made it: the run rewrites a config it found, and puts it back as it was.
        if ownership.owns(Path::new(PROJECTOR_CONFIG)) {
            let path = log_dir.join(PROJECTOR_CONFIG);
            if inspect(log_dir, Path::new(PROJECTOR_CONFIG))?.is_some_and(|m| m.is_file()) {
                snapshot.projector_config = Some(fs::read(&path).map_err(io_err("read", &path))?);
            }
        }
        Ok(snapshot)
    }

    /// Fsyncs every file recorded and every directory, so that the bytes the lengths count are
    /// on the disk.
    pub fn sync(&self, log_dir: &Path) -> Result<(), RollbackError> {
        for relative in self.files.keys() {
            let full = log_dir.join(relative);
            match File::open(&full) {
                Ok(file) => file.sync_all().map_err(io_err("fsync", &full))?,
                // Removed since (a finished embedding's temporary file): nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("open", &full)(e)),
            }
        }
        for dir in std::iter::once(&PathBuf::new()).chain(&self.dirs) {
            let full = log_dir.join(dir);
            if full.is_dir() {
                sync_dir(&full)?;
            }
        }
        Ok(())
    }

    /// The files recorded, relative to the log directory, with their lengths.
    pub fn files(&self) -> impl Iterator<Item = (&Path, u64)> {
        self.files.iter().map(|(p, l)| (p.as_path(), *l))
    }

    /// Whether this snapshot was written before journals (see the module docs): its restore
    /// removes nothing.
    pub fn is_legacy(&self) -> bool {
        self.legacy
    }

    /// Rolls `log_dir` back to this snapshot, touching only the run's files (those
    /// `ownership`'s rank listed in its [`Journal`], and those the snapshot records): files
    /// longer than recorded are cut back, files made since are removed, directories made since
    /// are removed when empty, and the projector config is put back as it was. Those in `keep`
    /// (relative to `log_dir`: the files of a writer already started) and under `exclude` (the
    /// checkpoints) are left alone. Every directory changed is fsynced.
    pub fn restore(
        &self,
        log_dir: &Path,
        exclude: &[PathBuf],
        keep: &[PathBuf],
        ownership: Ownership,
    ) -> Result<Restored, RollbackError> {
        let made = match self.legacy {
            // Only what the snapshot names is known to be the run's: nothing is removed.
            true => Made::default(),
            false => Journal::read(log_dir, ownership.rank)?.unwrap_or_default(),
        };
        let left_alone = |path: &Path| under(path, exclude) || under(path, keep);
        let mut restored = Restored::default();
        let mut changed_dirs: BTreeSet<PathBuf> = BTreeSet::new();
        let names: BTreeSet<&PathBuf> = made.files.iter().chain(self.files.keys()).collect();
        for name in names {
            if left_alone(name) || name.as_os_str() == PROJECTOR_CONFIG {
                continue;
            }
            self.restore_file(log_dir, name, &mut restored, &mut changed_dirs)?;
        }
        if !left_alone(Path::new(PROJECTOR_CONFIG)) {
            self.restore_projector_config(log_dir, &made, ownership, &mut restored)?;
            changed_dirs.insert(PathBuf::new());
        }
        let mut dirs: Vec<&PathBuf> = made
            .dirs
            .iter()
            .filter(|dir| !self.dirs.contains(*dir) && !left_alone(dir))
            .collect();
        // Deepest first, so that a new directory's new subdirectories go before it.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            if !inspect(log_dir, dir)?.is_some_and(|m| m.is_dir()) {
                continue;
            }
            let full = log_dir.join(dir);
            match fs::remove_dir(&full) {
                Ok(()) => {
                    changed_dirs.insert(dir.parent().map(Path::to_path_buf).unwrap_or_default());
                    restored.removed.push(dir.clone());
                }
                // Something not the run's is in it: leave it.
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {}
                Err(e) => return Err(io_err("remove", &full)(e)),
            }
        }
        for dir in changed_dirs {
            let full = log_dir.join(&dir);
            if full.is_dir() {
                sync_dir(&full)?;
            }
        }
        let runs: BTreeSet<&PathBuf> = made.files.iter().chain(self.files.keys()).collect();
        // Another rank's files beside this one's are that rank's to roll back, not strangers.
        restored.left = event_like(log_dir, exclude)?
            .into_iter()
            .filter(|file| !runs.contains(file) && !under(file, keep) && ownership.owns(file))
            .collect();
        Ok(restored)
    }

    /// Cuts the run's file `name` back to its recorded length, or removes it when the snapshot
    /// does not record it. A name now held by a link or a directory is not the run's file.
    fn restore_file(
        &self,
        log_dir: &Path,
        name: &Path,
        restored: &mut Restored,
        changed_dirs: &mut BTreeSet<PathBuf>,
    ) -> Result<(), RollbackError> {
        let Some(meta) = inspect(log_dir, name)?.filter(fs::Metadata::is_file) else {
            return Ok(());
        };
        let full = log_dir.join(name);
        match self.files.get(name) {
            Some(&len) if meta.len() > len => {
                truncate(&full, len)?;
                restored.truncated.push(name.to_path_buf());
            }
            Some(&len) if meta.len() < len => restored.shorter.push(name.to_path_buf()),
            Some(_) => {}
            None => {
                fs::remove_file(&full).map_err(io_err("remove", &full))?;
                changed_dirs.insert(name.parent().map(Path::to_path_buf).unwrap_or_default());
                restored.removed.push(name.to_path_buf());
            }
        }
        Ok(())
    }

    /// Puts the projector config back, when the run wrote it: the text recorded, or no config
    /// where the run created it after the snapshot. A legacy snapshot's config was the run's by
    /// its name, and is put back, never removed.
    fn restore_projector_config(
        &self,
        log_dir: &Path,
        made: &Made,
        ownership: Ownership,
        restored: &mut Restored,
    ) -> Result<(), RollbackError> {
        let name = Path::new(PROJECTOR_CONFIG);
        let created = made.files.contains(name);
        let written = created || made.rewritten.contains(name) || self.legacy;
        // Another rank's config (rank 0's, in a shared directory): never this rank's to touch.
        if !written || !ownership.owns(name) {
            return Ok(());
        }
        let path = log_dir.join(PROJECTOR_CONFIG);
        let now = match inspect(log_dir, name)? {
            Some(meta) if meta.is_file() => Some(fs::read(&path).map_err(io_err("read", &path))?),
            Some(_) => return Ok(()),
            None => None,
        };
        if now == self.projector_config {
            return Ok(());
        }
        match &self.projector_config {
            None if created && !self.legacy => {
                fs::remove_file(&path).map_err(io_err("remove", &path))?;
                restored.removed.push(PROJECTOR_CONFIG.into());
            }
            None => {}
            Some(bytes) => {
                crate::durable::replace(&path, bytes).map_err(io_err("replace", &path))?;
                restored.truncated.push(PROJECTOR_CONFIG.into());
            }
        }
        Ok(())
    }

    /// The snapshot as text: a version line, then one entry a line (paths hex-encoded, so any
    /// name survives).
    pub fn encode(&self) -> String {
        let mut out = format!("{VERSION_LINE}\n");
        for dir in &self.dirs {
            out.push_str(&format!(
                "d {}\n",
                hex::encode(dir.to_string_lossy().as_bytes())
            ));
        }
        for (file, len) in &self.files {
            out.push_str(&format!(
                "f {len} {}\n",
                hex::encode(file.to_string_lossy().as_bytes())
            ));
        }
        if let Some(config) = &self.projector_config {
            out.push_str(&format!("p {}\n", hex::encode(config)));
        }
        out
    }

    /// Reads what [`encode`](Self::encode) wrote, or what it wrote before journals (no version
    /// line: a [legacy](Self::is_legacy) snapshot). A name that is not a plain relative path
    /// (`..`, a root) is malformed: nothing outside the log directory is ever touched.
    pub fn decode(text: &str) -> Result<Self, RollbackError> {
        let mut lines = text.lines().peekable();
        let legacy = lines.peek() != Some(&VERSION_LINE);
        if !legacy {
            lines.next();
        }
        let mut snapshot = Self {
            legacy,
            ..Self::default()
        };
        let bad = |line: &str| RollbackError::Malformed(format!("line {line:?}"));
        for line in lines {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["d", dir] => {
                    snapshot
                        .dirs
                        .insert(decode_name(dir).ok_or_else(|| bad(line))?);
                }
                ["f", len, file] => {
                    let len = len.parse().map_err(|_| bad(line))?;
                    let file = decode_name(file).ok_or_else(|| bad(line))?;
                    snapshot.files.insert(file, len);
                }
                ["p", config] => {
                    snapshot.projector_config =
                        Some(hex::decode(config).ok().ok_or_else(|| bad(line))?)
                }
                _ => return Err(bad(line)),
            }
        }
        Ok(snapshot)
    }
}

/// Cuts `path` back to `len` bytes and fsyncs it; a file sealed read-only on close is made
/// writable for that and sealed again.
fn truncate(path: &Path, len: u64) -> Result<(), RollbackError> {
    let open = || OpenOptions::new().write(true).open(path);
    let (file, sealed) = match open() {
        Ok(file) => (file, None),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let permissions = fs::metadata(path)
                .map_err(io_err("inspect", path))?
                .permissions();
            let mut writable = permissions.clone();
            #[allow(clippy::permissions_set_readonly_false)]
            writable.set_readonly(false);
            fs::set_permissions(path, writable).map_err(io_err("make writable", path))?;
            (open().map_err(io_err("open", path))?, Some(permissions))
        }
        Err(e) => return Err(io_err("open", path)(e)),
    };
    file.set_len(len).map_err(io_err("truncate", path))?;
    file.sync_all().map_err(io_err("fsync", path))?;
    if let Some(permissions) = sealed {
        fs::set_permissions(path, permissions).map_err(io_err("make read-only", path))?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), RollbackError> {
    crate::journal::sync_dir(dir).map_err(io_err("fsync", dir))
}

#[cfg(test)]
mod tests;
