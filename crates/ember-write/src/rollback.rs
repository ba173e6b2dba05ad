//! Rolling a log directory back to an earlier moment, for training that resumes from a
//! checkpoint: every reader must then see each step once.
//!
//! A [`LogSnapshot`] is taken once the writers have flushed: the length of every file of the
//! log directory's tree that this process owns (see [`Ownership`]) and the whole text of the
//! projector config, which is rewritten rather than appended to. [`LogSnapshot::restore`]
//! later cuts every file back to its recorded length, removes the files and directories made
//! since, and puts the projector config back. Event files only ever grow by whole records
//! (a record is framed, and a torn tail is cut back by the writer or ignored by readers), so
//! a length taken after a flush is a record boundary, and cutting there leaves whole records.
//!
//! Why lengths and not steps: what a run writes after its last checkpoint may carry the
//! checkpoint's own step (the end of a run records its final metrics at its last step), so
//! only the bytes tell what came after; and every reader honours a shorter file, while
//! TensorBoard's purge events are ignored by some readers and unknown to MindInsight.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

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
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RollbackError + 'a {
    move |source| RollbackError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Which files of a shared log directory are this process's: across ranks that write one
/// directory, each rank owns its own summary files (TensorBoard names carry `.rank<r>`,
/// MindInsight names the rank after the time) and rank 0 owns the rest (exports, projector
/// files, `add_scalars` runs).
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

    /// Whether the file at `relative` (to the log directory) is one ember writes (an event
    /// file, an export, an embedding, the projector config) and this process's.
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

/// Whether ember's writers make files like `relative`: anything else in a log directory is
/// the user's, and never touched.
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

/// What a log directory held at one moment; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSnapshot {
    /// Each owned regular file, relative to the log directory, and its length.
    files: BTreeMap<PathBuf, u64>,
    /// Each directory of the tree, relative to the log directory.
    dirs: BTreeSet<PathBuf>,
    /// The projector config's text, when there was one.
    projector_config: Option<Vec<u8>>,
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
}

impl LogSnapshot {
    /// Records `log_dir`'s tree as it is now, leaving out `exclude` (directories or files,
    /// relative to `log_dir`: the checkpoints themselves) and what `ownership` says is another
    /// process's. Nothing is fsynced here: call [`sync`](Self::sync) before anything that
    /// relies on the lengths is made durable (a checkpoint), from whichever thread may wait
    /// for the disk.
    pub fn take(
        log_dir: &Path,
        exclude: &[PathBuf],
        ownership: Ownership,
    ) -> Result<Self, RollbackError> {
        let mut snapshot = Self::default();
        let mut pending = vec![PathBuf::new()];
        while let Some(relative) = pending.pop() {
            let dir = log_dir.join(&relative);
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound && relative.as_os_str().is_empty() =>
                {
                    return Ok(snapshot);
                }
                Err(e) => return Err(io_err("list", &dir)(e)),
            };
            for entry in entries {
                let entry = entry.map_err(io_err("list", &dir))?;
                let path = relative.join(entry.file_name());
                if exclude.contains(&path) {
                    continue;
                }
                let kind = entry.file_type().map_err(io_err("inspect", &dir))?;
                if kind.is_dir() {
                    snapshot.dirs.insert(path.clone());
                    pending.push(path);
                } else if kind.is_file() && ownership.owns(&path) {
                    let full = log_dir.join(&path);
                    if path.as_os_str() == PROJECTOR_CONFIG {
                        snapshot.projector_config =
                            Some(fs::read(&full).map_err(io_err("read", &full))?);
                        continue;
                    }
                    let len = entry.metadata().map_err(io_err("inspect", &full))?.len();
                    snapshot.files.insert(path, len);
                }
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

    /// Rolls `log_dir` back to this snapshot: files longer than recorded are cut back, owned
    /// files and directories not recorded are removed (those in `keep`, relative to
    /// `log_dir`, and those under `exclude` are left alone: the files of a writer already
    /// started, and the checkpoints), and the projector config is put back as it was. Every
    /// directory changed is fsynced.
    pub fn restore(
        &self,
        log_dir: &Path,
        exclude: &[PathBuf],
        keep: &[PathBuf],
        ownership: Ownership,
    ) -> Result<Restored, RollbackError> {
        let mut restored = Restored::default();
        let mut changed_dirs: BTreeSet<PathBuf> = BTreeSet::new();
        let mut found_dirs = Vec::new();
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
                let path = relative.join(entry.file_name());
                if exclude.contains(&path) || keep.contains(&path) {
                    continue;
                }
                let full = log_dir.join(&path);
                let kind = entry.file_type().map_err(io_err("inspect", &full))?;
                if kind.is_dir() {
                    found_dirs.push(path.clone());
                    pending.push(path);
                    continue;
                }
                if !ownership.owns(&path) {
                    continue;
                }
                if path.as_os_str() == PROJECTOR_CONFIG {
                    continue;
                }
                match self.files.get(&path) {
                    Some(&len) => {
                        let now = entry.metadata().map_err(io_err("inspect", &full))?.len();
                        if now > len {
                            truncate(&full, len)?;
                            restored.truncated.push(path);
                        } else if now < len {
                            restored.shorter.push(path);
                        }
                    }
                    None => {
                        fs::remove_file(&full).map_err(io_err("remove", &full))?;
                        changed_dirs.insert(relative.clone());
                        restored.removed.push(path);
                    }
                }
            }
        }
        self.restore_projector_config(log_dir, ownership, &mut restored, &mut changed_dirs)?;
        // Deepest first, so that a new directory's new subdirectories go before it.
        found_dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in found_dirs {
            if self.dirs.contains(&dir) || ownership.rank != 0 {
                continue;
            }
            let full = log_dir.join(&dir);
            match fs::remove_dir(&full) {
                Ok(()) => {
                    changed_dirs.insert(dir.parent().map(Path::to_path_buf).unwrap_or_default());
                    restored.removed.push(dir);
                }
                // Something not ours is in it: leave it.
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
        Ok(restored)
    }

    fn restore_projector_config(
        &self,
        log_dir: &Path,
        ownership: Ownership,
        restored: &mut Restored,
        changed_dirs: &mut BTreeSet<PathBuf>,
    ) -> Result<(), RollbackError> {
        // Another rank's config (rank 0's, in a shared directory): never this rank's to touch.
        if !ownership.owns(Path::new(PROJECTOR_CONFIG)) {
            return Ok(());
        }
        let path = log_dir.join(PROJECTOR_CONFIG);
        let now = match fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        if now == self.projector_config {
            return Ok(());
        }
        match &self.projector_config {
            None => {
                fs::remove_file(&path).map_err(io_err("remove", &path))?;
                restored.removed.push(PROJECTOR_CONFIG.into());
            }
            Some(bytes) => {
                crate::durable::replace(&path, bytes).map_err(io_err("replace", &path))?;
                restored.truncated.push(PROJECTOR_CONFIG.into());
            }
        }
        changed_dirs.insert(PathBuf::new());
        Ok(())
    }

    /// The snapshot as text, one entry a line (paths hex-encoded, so any name survives).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for dir in &self.dirs {
            out.push_str(&format!("d {}\n", hex(dir.to_string_lossy().as_bytes())));
        }
        for (file, len) in &self.files {
            out.push_str(&format!(
                "f {len} {}\n",
                hex(file.to_string_lossy().as_bytes())
            ));
        }
        if let Some(config) = &self.projector_config {
            out.push_str(&format!("p {}\n", hex(config)));
        }
        out
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub fn decode(text: &str) -> Result<Self, RollbackError> {
        let mut snapshot = Self::default();
        let bad = |line: &str| RollbackError::Malformed(format!("line {line:?}"));
        let path = |h: &str, line: &str| -> Result<PathBuf, RollbackError> {
            let bytes = unhex(h).ok_or_else(|| bad(line))?;
            String::from_utf8(bytes)
                .map(PathBuf::from)
                .map_err(|_| bad(line))
        };
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["d", dir] => {
                    snapshot.dirs.insert(path(dir, line)?);
                }
                ["f", len, file] => {
                    let len = len.parse().map_err(|_| bad(line))?;
                    snapshot.files.insert(path(file, line)?, len);
                }
                ["p", config] => {
                    snapshot.projector_config = Some(unhex(config).ok_or_else(|| bad(line))?)
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
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync", dir))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn write(path: &Path, bytes: &[u8]) {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn restore_cuts_back_removes_and_puts_the_config_back() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            &root.join("events.out.tfevents.0000000001.h.1.0"),
            b"0123456789",
        );
        write(&root.join("export_1/a.npy"), b"abc");
        write(
            &root.join(PROJECTOR_CONFIG),
            b"embeddings { tensor_name: \"a\" }\n",
        );
        write(&root.join("checkpoints/ckpt-1.ember"), b"ckpt");
        write(&root.join("notes.txt"), b"mine");
        let exclude = vec![PathBuf::from("checkpoints")];
        let snapshot = LogSnapshot::take(root, &exclude, Ownership::ALONE).unwrap();
        let decoded = LogSnapshot::decode(&snapshot.encode()).unwrap();
        assert_eq!(decoded, snapshot);

        // What a run writes after the snapshot, then dies.
        fs::OpenOptions::new()
            .append(true)
            .open(root.join("events.out.tfevents.0000000001.h.1.0"))
            .unwrap()
            .write_all(b"later")
            .unwrap();
        write(
            &root.join("events.out.tfevents.0000000002.h.1.0"),
            b"new file",
        );
        write(&root.join("export_1/b.npy"), b"def");
        write(&root.join("embeddings/x_3/tensors.tsv"), b"1\t2\n");
        write(
            &root.join(PROJECTOR_CONFIG),
            b"embeddings { tensor_name: \"b\" }\n",
        );
        write(&root.join("checkpoints/ckpt-2.ember"), b"ckpt");
        // A writer started before the rollback keeps its file.
        write(
            &root.join("events.out.tfevents.0000000003.h.2.0"),
            b"resumed",
        );
        let keep = vec![PathBuf::from("events.out.tfevents.0000000003.h.2.0")];

        let restored = decoded
            .restore(root, &exclude, &keep, Ownership::ALONE)
            .unwrap();
        assert_eq!(
            fs::read(root.join("events.out.tfevents.0000000001.h.1.0")).unwrap(),
            b"0123456789"
        );
        assert!(!root.join("events.out.tfevents.0000000002.h.1.0").exists());
        assert!(!root.join("export_1/b.npy").exists());
        assert_eq!(fs::read(root.join("export_1/a.npy")).unwrap(), b"abc");
        assert!(!root.join("embeddings").exists());
        assert_eq!(
            fs::read(root.join(PROJECTOR_CONFIG)).unwrap(),
            b"embeddings { tensor_name: \"a\" }\n"
        );
        assert!(root.join("checkpoints/ckpt-2.ember").exists());
        // Not a file ember writes: never touched, even when added later.
        write(&root.join("notes.txt"), b"mine, longer");
        LogSnapshot::default()
            .restore(root, &exclude, &keep, Ownership::ALONE)
            .unwrap();
        assert_eq!(fs::read(root.join("notes.txt")).unwrap(), b"mine, longer");
        assert!(!root.join("events.out.tfevents.0000000001.h.1.0").exists());
        assert!(root.join("events.out.tfevents.0000000003.h.2.0").exists());
        assert_eq!(restored.truncated.len(), 2, "{restored:?}");
        assert!(restored.shorter.is_empty());
    }

    #[test]
    fn each_rank_owns_its_own_summary_files() {
        let rank = |r| Ownership {
            rank: r,
            world_size: 2,
        };
        let tb1 = Path::new("events.out.tfevents.0000000001.h.7.0.rank1");
        let ms0 = Path::new("events.out.events.summary.1.0.h_MS");
        let ms1 = Path::new("events.out.events.summary.1.1.h_MS");
        assert!(rank(1).owns(tb1) && !rank(0).owns(tb1));
        assert!(rank(0).owns(ms0) && !rank(1).owns(ms0));
        assert!(rank(1).owns(ms1) && !rank(0).owns(ms1));
        assert!(rank(0).owns(Path::new("export_1/a.npy")));
        assert!(!rank(1).owns(Path::new("export_1/a.npy")));
        assert!(Ownership::ALONE.owns(tb1));
        // A rank-tagged suffix and hosts that look like rank tags.
        let tb1 = Path::new("events.out.tfevents.0000000001.h.7.0.rank1.v2");
        assert!(rank(1).owns(tb1) && !rank(0).owns(tb1));
        for name in [
            "events.out.tfevents.0000000001.rank3.cluster.7.0.rank0",
            "events.out.tfevents.0000000001.rank1.7.0.rank0",
            "events.out.tfevents.0000000001.a.12.34.rank1.7.0.rank0",
        ] {
            let ranks: Vec<u32> = (0..4).filter(|&r| rank(r).owns(Path::new(name))).collect();
            assert!(ranks.is_empty() || ranks == [0], "{name}: {ranks:?}");
            let owner = |r: u32| Ownership {
                rank: r,
                world_size: 4,
            };
            assert!(owner(0).owns(Path::new(name)), "{name}");
            assert!(!owner(1).owns(Path::new(name)) && !owner(3).owns(Path::new(name)));
        }
        let ms = Path::new("events.out.events.summary.1.1.rank0.cluster_MS");
        assert!(rank(1).owns(ms) && !rank(0).owns(ms));
    }

    #[test]
    fn a_rank_other_than_0_leaves_the_shared_projector_config_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let config = root.join(PROJECTOR_CONFIG);
        let rank1 = Ownership {
            rank: 1,
            world_size: 2,
        };
        // Rank 1 took its snapshot before rank 0 wrote the config: it must not remove it.
        let snapshot = LogSnapshot::take(root, &[], rank1).unwrap();
        write(&config, b"embeddings { tensor_name: \"a\" }");
        snapshot.restore(root, &[], &[], rank1).unwrap();
        assert_eq!(
            fs::read(&config).unwrap(),
            b"embeddings { tensor_name: \"a\" }"
        );
        // Rank 0's own rollback does remove it.
        LogSnapshot::default()
            .restore(
                root,
                &[],
                &[],
                Ownership {
                    rank: 0,
                    world_size: 2,
                },
            )
            .unwrap();
        assert!(!config.exists());
    }

    #[test]
    fn a_malformed_snapshot_is_an_error() {
        assert!(LogSnapshot::decode("f x 00\n").is_err());
        assert!(LogSnapshot::decode("q\n").is_err());
        assert!(LogSnapshot::decode("f 1 0\n").is_err());
    }
}
