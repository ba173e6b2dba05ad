//! The export writer: each exported tensor in its own `.npy` file under
//! `export_<secs>/tensor` in the log directory.
//!
//! The directory's name is predictable, so another user of a shared machine
//! could plant `export_<secs>` as a symbolic link before the run gets there.
//! Nothing here follows one: the two directories are created and opened
//! relative to their parent's open descriptor with `O_NOFOLLOW |
//! O_DIRECTORY`, and each file is created relative to the `tensor`
//! directory's descriptor with `O_CREAT | O_EXCL | O_NOFOLLOW`. A planted link
//! or file fails the export writer with [`FileError::NotADirectory`]; nothing
//! is written outside the log directory.

use std::io::{self, Write};
use std::path::PathBuf;

use ember_pack::FileKind;

use crate::batch_context::{BatchContext, Fate};
use crate::dir::Dir;
use crate::error::FileError;
use crate::event_file::{FileSettings, io_err, seal};
use crate::journal::Journal;
use crate::naming;
use crate::options::Durability;
use crate::projector::refused;
use crate::stats::WriterStats;

/// Writes exported tensors, one `.npy` file each.
#[derive(Debug)]
pub(crate) struct ExportWriter {
    settings: FileSettings,
    dir: Option<Dir>,
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
        Self {
            settings,
            dir: None,
            stats: WriterStats::new(FileKind::Export),
        }
    }

    /// Creates the export directory on the first tensor.
    fn open_dir(&mut self) -> Result<(), FileError> {
        if self.dir.is_none() {
            let mut dir = Dir::open_root(self.settings.log_dir.clone())?;
            let journal = self.settings.journal.as_ref();
            for part in naming::export_dir(self.settings.start_secs).iter() {
                dir = dir.make_listed_dir(&part.to_string_lossy(), journal)?;
            }
            self.stats.path = Some(dir.path.clone());
            self.dir = Some(dir);
        }
        Ok(())
    }

    /// Writes one exported tensor of record `idx` as `<tag>_<step>.npy`.
    /// An error fails the writer; the tensor is counted as failed.
    pub(crate) fn write(
        &mut self,
        idx: usize,
        tag: &str,
        step: i64,
        bytes: &[u8],
        ctx: &mut BatchContext,
    ) -> Result<ExportOutcome, FileError> {
        let result = self.try_write(idx, tag, step, bytes, ctx);
        if result.is_err() {
            ctx.record_fates.mark(idx, Fate::Failed);
            self.stats.records_failed += 1;
        }
        result
    }

    fn try_write(
        &mut self,
        idx: usize,
        tag: &str,
        step: i64,
        bytes: &[u8],
        ctx: &mut BatchContext,
    ) -> Result<ExportOutcome, FileError> {
        let name = naming::export_file_name(tag, step);
        let sync = self.settings.durability == Durability::Sync;
        let read_only = self.settings.read_only_on_close;
        self.open_dir()?;
        let Some(dir) = &self.dir else {
            return Err(FileError::NotADirectory {
                path: self.settings.log_dir.clone(),
            });
        };
        let stats = &mut self.stats;
        let path = dir.path.join(&name);
        if name.len() > naming::MAX_FILE_NAME_LEN {
            refused(stats, idx, ctx);
            return Ok(ExportOutcome::Refused(
                path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("file name of {} bytes is too long", name.len()),
                ),
            ));
        }
        ctx.guard
            .check(&self.settings.log_dir, &path, bytes.len() as u64)?;
        let journal = self.settings.journal.as_ref();
        let mut file = match Journal::made(journal, &path, false, || dir.create_file(&name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                refused(stats, idx, ctx);
                return Ok(ExportOutcome::Refused(path, e));
            }
            Err(e) => return Err(io_err("create", &path)(e)),
        };
        stats.files_created += 1;
        if let Err(e) = file.write_all(bytes) {
            // A torn `.npy` has a valid header over a short body, which numpy
            // refuses to load: leave no file rather than a broken one.
            drop(file);
            if dir.remove_file(&name).is_ok() {
                stats.files_created -= 1;
            }
            return Err(io_err("write", &path)(e));
        }
        ctx.guard.written(bytes.len() as u64);
        if sync {
            ctx.fsyncs += 1;
            file.sync_all().map_err(io_err("fsync", &path))?;
        }
        if read_only {
            seal(&file).map_err(io_err("make read-only", &path))?;
        }
        stats.records_written += 1;
        stats.bytes_written += bytes.len() as u64;
        Ok(ExportOutcome::Written)
    }

    /// Fsyncs the export directory so its entries survive a crash.
    pub(crate) fn sync(&mut self, ctx: &mut BatchContext) -> Result<(), FileError> {
        if let Some(dir) = &self.dir {
            dir.sync().map_err(io_err("fsync", &dir.path))?;
            ctx.fsyncs += 1;
        }
        Ok(())
    }
}
