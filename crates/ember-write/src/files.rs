//! The file writers: one per file kind, each owning its current file.
//!
//! [`EventFileWriter`] writes framed records (summary, lineage or explain) to
//! a file it creates on its first record, with create-new semantics and mode
//! 0600, the format's file header first. It keeps the size budget (framing
//! included) with the stop or rotate policy and the free-disk guard.
//! [`ExportWriter`] writes each exported tensor to its own `.npy` file.
//! Both live on the pool thread only.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use ember_pack::{FileKind, Tag};

use crate::error::FileError;
use crate::framing::{self, MAX_RECORD_LEN};
use crate::free_space::FreeSpaceSource;
use crate::naming::{self, Naming};
use crate::options::{Durability, SizePolicy};
use crate::stats::WriterStats;

const BUF_CAPACITY: usize = 256 * 1024;

/// How many names a writer tries when a file of the same name already exists.
const NAME_TRIES: u64 = 64;

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Seconds since the Unix epoch as a float, now.
pub(crate) fn unix_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Settings shared by all writers of a pool.
#[derive(Debug, Clone)]
pub(crate) struct FileSettings {
    pub(crate) log_dir: PathBuf,
    pub(crate) naming: Naming,
    pub(crate) start_secs: u64,
    pub(crate) max_file_size: Option<u64>,
    pub(crate) size_policy: SizePolicy,
    pub(crate) disk_guard_factor: u64,
    pub(crate) free_space: FreeSpaceSource,
    pub(crate) durability: Durability,
    pub(crate) read_only_on_close: bool,
}

/// Creates `path` new (never truncating or appending), mode 0600.
fn create_new(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

/// Makes a finished file read-only (0400), as MindSpore does.
fn seal(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o400))
    }
    #[cfg(not(unix))]
    {
        let mut perm = fs::metadata(path)?.permissions();
        perm.set_readonly(true);
        fs::set_permissions(path, perm)
    }
}

/// Fsyncs a directory so that the entries created in it survive a crash.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// The free-disk guard: free space must be at least `factor` × record size.
///
/// The free figure is queried once per batch ([`DiskGuard::refresh`]) and then
/// decreased by what the writer writes, so the check costs no system call per
/// record; a figure that looks too small is queried again before refusing.
#[derive(Debug)]
pub(crate) struct DiskGuard {
    factor: u64,
    source: FreeSpaceSource,
    estimate: Option<u64>,
    fresh: bool,
}

impl DiskGuard {
    pub(crate) fn new(factor: u64, source: FreeSpaceSource) -> Self {
        Self {
            factor,
            source,
            estimate: None,
            fresh: false,
        }
    }

    /// Forgets the cached free figure; the next check queries it.
    pub(crate) fn refresh(&mut self) {
        self.estimate = None;
        self.fresh = false;
    }

    fn query(&mut self, dir: &Path) {
        self.estimate = match self.source.0.free_bytes(dir) {
            Ok(free) => Some(free),
            Err(e) => {
                log::debug!(
                    "free space of {} unknown ({e}); disk guard skipped",
                    dir.display()
                );
                None
            }
        };
        self.fresh = true;
    }

    /// Refuses a record of `size` bytes for `path` when free space is short.
    pub(crate) fn check(&mut self, dir: &Path, path: &Path, size: u64) -> Result<(), FileError> {
        if self.factor == 0 {
            return Ok(());
        }
        let needed = size.saturating_mul(self.factor);
        if self.estimate.is_none() && !self.fresh {
            self.query(dir);
        }
        let Some(mut free) = self.estimate else {
            return Ok(());
        };
        if free < needed && !self.fresh {
            self.query(dir);
            free = self.estimate.unwrap_or(u64::MAX);
        }
        if free < needed {
            return Err(FileError::DiskSpace {
                path: path.to_path_buf(),
                free,
                record: size,
                factor: self.factor,
            });
        }
        Ok(())
    }

    /// Accounts for `size` bytes just written.
    pub(crate) fn spent(&mut self, size: u64) {
        if let Some(free) = self.estimate.as_mut() {
            *free = free.saturating_sub(size);
        }
    }
}

/// What [`EventFileWriter::prepare`] decided for a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prepared {
    /// The record fits the current (or next) file.
    Ready {
        /// The previous file was closed to make room: tag metadata starts over.
        rotated: bool,
    },
    /// The record is dropped: the file stopped, or the record can never fit.
    Drop,
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    out: BufWriter<File>,
    /// Bytes in the file so far, framing and header included.
    size: u64,
    records: u64,
    /// Bytes were written since the last fsync (the header included).
    unsynced: bool,
}

/// Writes framed records of one [`FileKind`] to its current file.
#[derive(Debug)]
pub(crate) struct EventFileWriter {
    kind: FileKind,
    settings: FileSettings,
    guard: DiskGuard,
    file: Option<OpenFile>,
    last_secs: Option<u64>,
    stopped: bool,
    warned_stop: bool,
    warned_oversize: bool,
    /// Header bytes (unframed) of a new file; empty for none.
    header: HeaderFn,
    header_framed_len: u64,
    /// Tags whose metadata the current file already holds.
    pub(crate) seen_tags: HashSet<Tag>,
    pub(crate) stats: WriterStats,
}

/// Makes the first record of a new file from its wall time; empty for none.
pub(crate) struct HeaderFn(pub(crate) Box<dyn Fn(f64) -> Vec<u8> + Send>);

impl std::fmt::Debug for HeaderFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderFn(..)")
    }
}

impl EventFileWriter {
    /// A writer of `kind` files; `header(wall_time)` gives each new file's first
    /// record (empty for none).
    pub(crate) fn new(kind: FileKind, settings: FileSettings, header: HeaderFn) -> Self {
        // A non-zero wall time: protobuf leaves a zero double out, which
        // would make the sample 9 bytes shorter than real headers.
        let sample = (header.0)(unix_time().max(1.0));
        let header_framed_len = if sample.is_empty() {
            0
        } else {
            framing::framed_len(sample.len())
        };
        let guard = DiskGuard::new(settings.disk_guard_factor, settings.free_space.clone());
        Self {
            kind,
            guard,
            settings,
            file: None,
            last_secs: None,
            stopped: false,
            warned_stop: false,
            warned_oversize: false,
            header,
            header_framed_len,
            seen_tags: HashSet::new(),
            stats: WriterStats::new(kind),
        }
    }

    /// Starts a batch: the disk guard's free figure is queried again.
    pub(crate) fn begin_batch(&mut self) {
        self.guard.refresh();
    }

    /// Decides where a record of `framed` bytes (all its items, framing
    /// included) goes, rotating or stopping the file as the size policy says.
    pub(crate) fn prepare(&mut self, framed: u64) -> Result<Prepared, FileError> {
        if self.stopped {
            return Ok(Prepared::Drop);
        }
        let Some(max) = self.settings.max_file_size else {
            return Ok(Prepared::Ready { rotated: false });
        };
        let fresh_need = self.header_framed_len.saturating_add(framed);
        let (used, has_records) = match &self.file {
            Some(f) => (f.size, f.records > 0),
            None => (0, false),
        };
        let need = if self.file.is_some() {
            framed
        } else {
            fresh_need
        };
        if used.saturating_add(need) <= max {
            return Ok(Prepared::Ready { rotated: false });
        }
        match self.settings.size_policy {
            SizePolicy::Stop => {
                self.stopped = true;
                if !self.warned_stop {
                    self.warned_stop = true;
                    log::warn!(
                        "max file size reached: {} bytes remain in the {} file{}, a record needs {framed}; \
                         the file stops growing and later records of this kind are dropped",
                        max.saturating_sub(used),
                        crate::kind_name(self.kind),
                        self.file
                            .as_ref()
                            .map(|f| format!(" {}", f.path.display()))
                            .unwrap_or_default()
                    );
                }
                Ok(Prepared::Drop)
            }
            SizePolicy::Rotate => {
                if fresh_need > max {
                    if !self.warned_oversize {
                        self.warned_oversize = true;
                        log::warn!(
                            "a {} record of {framed} bytes can never fit a file of at most {max} bytes; \
                             such records are dropped",
                            crate::kind_name(self.kind)
                        );
                    }
                    return Ok(Prepared::Drop);
                }
                if has_records {
                    self.close_file()?;
                    self.seen_tags.clear();
                    Ok(Prepared::Ready { rotated: true })
                } else {
                    Ok(Prepared::Ready { rotated: false })
                }
            }
        }
    }

    /// The next file's creation time: the pool's start for the first file,
    /// later strictly after the previous one so names sort in order.
    fn next_secs(&self) -> u64 {
        match self.last_secs {
            None => self.settings.start_secs,
            Some(prev) => unix_secs().max(prev + 1),
        }
    }

    fn open_file(&mut self) -> Result<&mut OpenFile, FileError> {
        let header = (self.header.0)(unix_time());
        let header = (!header.is_empty()).then(|| framing::frame(&header));
        let mut secs = self.next_secs();
        let mut tries = 0;
        let (path, file) = loop {
            let name = self
                .settings
                .naming
                .file_name(self.kind, secs, naming::next_counter());
            let path = self.settings.log_dir.join(name);
            match create_new(&path) {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries + 1 < NAME_TRIES => {
                    // Another writer took this name in the same second: move on.
                    tries += 1;
                    secs += 1;
                }
                Err(e) => return Err(io_err("create", &path)(e)),
            }
        };
        self.last_secs = Some(secs);
        self.stats.files_created += 1;
        self.stats.path = Some(path.clone());
        let mut open = OpenFile {
            path,
            out: BufWriter::with_capacity(BUF_CAPACITY, file),
            size: 0,
            records: 0,
            unsynced: true,
        };
        if let Some(framed) = header {
            open.out
                .write_all(&framed)
                .map_err(io_err("write", &open.path))?;
            open.size += framed.len() as u64;
            self.stats.bytes_written += framed.len() as u64;
            self.guard.spent(framed.len() as u64);
        }
        Ok(self.file.insert(open))
    }

    /// Appends one record's data, framed; call after [`Self::prepare`].
    pub(crate) fn append(&mut self, data: &[u8]) -> Result<(), FileError> {
        if data.len() as u64 > MAX_RECORD_LEN {
            return Err(FileError::RecordTooLarge {
                len: data.len() as u64,
            });
        }
        let framed_len = framing::framed_len(data.len());
        if self.file.is_none() {
            // The guard sees the header and the first record before the file
            // exists, so a refusal leaves no file behind.
            let dir = &self.settings.log_dir;
            self.guard
                .check(dir, dir, self.header_framed_len + framed_len)?;
            self.open_file()?;
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        self.guard
            .check(&self.settings.log_dir, &file.path, framed_len)?;
        let out = &mut file.out;
        let path = &file.path;
        out.write_all(&framing::header(data.len()))
            .and_then(|()| out.write_all(data))
            .and_then(|()| out.write_all(&framing::masked_crc32c(data).to_le_bytes()))
            .map_err(io_err("write", path))?;
        file.size += framed_len;
        file.records += 1;
        file.unsynced = true;
        self.guard.spent(framed_len);
        self.stats.bytes_written += framed_len;
        Ok(())
    }

    /// Counts one record written (all its items appended).
    pub(crate) fn record_written(&mut self) {
        self.stats.records_written += 1;
    }

    /// Hands buffered bytes to the operating system, and with `sync`, to the disk.
    pub(crate) fn flush(&mut self, sync: bool) -> Result<(), FileError> {
        if let Some(file) = self.file.as_mut() {
            file.out.flush().map_err(io_err("flush", &file.path))?;
            if sync && file.unsynced {
                file.out
                    .get_ref()
                    .sync_data()
                    .map_err(io_err("fsync", &file.path))?;
                sync_dir(&self.settings.log_dir)
                    .map_err(io_err("fsync", &self.settings.log_dir))?;
                file.unsynced = false;
            }
        }
        Ok(())
    }

    /// Flushes, fsyncs and closes the current file (sealing it read-only
    /// when configured); the next record opens a new one.
    pub(crate) fn close_file(&mut self) -> Result<(), FileError> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        let OpenFile { path, out, .. } = file;
        let inner = out.into_inner().map_err(|e| FileError::Io {
            op: "flush",
            path: path.clone(),
            source: e.into_error(),
        })?;
        inner.sync_all().map_err(io_err("fsync", &path))?;
        drop(inner);
        sync_dir(&self.settings.log_dir).map_err(io_err("fsync", &self.settings.log_dir))?;
        if self.settings.read_only_on_close {
            seal(&path).map_err(io_err("make read-only", &path))?;
        }
        Ok(())
    }

    /// The durability the pool's flushes ask for.
    pub(crate) fn sync_on_flush(&self) -> bool {
        self.settings.durability == Durability::Sync
    }
}

/// Writes exported tensors, one `.npy` file each, under `export_<secs>/tensor`.
#[derive(Debug)]
pub(crate) struct ExportWriter {
    settings: FileSettings,
    guard: DiskGuard,
    dir: Option<PathBuf>,
    pub(crate) stats: WriterStats,
}

/// Why one exported tensor was not written although the writer is sound.
#[derive(Debug)]
pub(crate) enum ExportOutcome {
    Written,
    /// The file exists already, or its name is too long: the caller's tags
    /// and steps are at fault, not the disk. Other tensors go on.
    Refused(PathBuf, io::Error),
}

impl ExportWriter {
    pub(crate) fn new(settings: FileSettings) -> Self {
        let guard = DiskGuard::new(settings.disk_guard_factor, settings.free_space.clone());
        Self {
            settings,
            guard,
            dir: None,
            stats: WriterStats::new(FileKind::Export),
        }
    }

    pub(crate) fn begin_batch(&mut self) {
        self.guard.refresh();
    }

    fn dir(&mut self) -> Result<PathBuf, FileError> {
        if let Some(dir) = &self.dir {
            return Ok(dir.clone());
        }
        let dir = self
            .settings
            .log_dir
            .join(naming::export_dir(self.settings.start_secs));
        crate::options::create_dir_private(&dir).map_err(io_err("create directory", &dir))?;
        self.stats.path = Some(dir.clone());
        self.dir = Some(dir.clone());
        Ok(dir)
    }

    /// Writes one exported tensor's bytes as `<tag>_<step>.npy`.
    pub(crate) fn write(
        &mut self,
        tag: &str,
        step: i64,
        bytes: &[u8],
    ) -> Result<ExportOutcome, FileError> {
        let dir = self.dir()?;
        let name = naming::export_file_name(tag, step);
        let path = dir.join(&name);
        if name.len() > naming::MAX_FILE_NAME_LEN {
            return Ok(ExportOutcome::Refused(
                path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("file name of {} bytes is too long", name.len()),
                ),
            ));
        }
        self.guard
            .check(&self.settings.log_dir, &path, bytes.len() as u64)?;
        let mut file = match create_new(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Ok(ExportOutcome::Refused(path, e));
            }
            Err(e) => return Err(io_err("create", &path)(e)),
        };
        file.write_all(bytes).map_err(io_err("write", &path))?;
        if self.settings.durability == Durability::Sync {
            file.sync_all().map_err(io_err("fsync", &path))?;
        }
        drop(file);
        if self.settings.read_only_on_close {
            seal(&path).map_err(io_err("make read-only", &path))?;
        }
        self.guard.spent(bytes.len() as u64);
        self.stats.files_created += 1;
        self.stats.records_written += 1;
        self.stats.bytes_written += bytes.len() as u64;
        Ok(ExportOutcome::Written)
    }

    /// Fsyncs the export directory so its entries survive a crash.
    pub(crate) fn sync(&mut self) -> Result<(), FileError> {
        if let Some(dir) = &self.dir {
            sync_dir(dir).map_err(io_err("fsync", dir))?;
        }
        Ok(())
    }
}
