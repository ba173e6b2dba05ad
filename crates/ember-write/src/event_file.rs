//! The event file writer: one per event file kind (summary, lineage,
//! explain), owning its current file.
//!
//! [`EventFileWriter`] writes framed events to a file it creates on its first
//! event, with create-new semantics and mode 0600, the format's file header
//! first. It keeps the size budget (framing included) with the stop or rotate
//! policy and checks the free-disk guard before each event.
//!
//! It buffers events itself rather than through a `BufWriter`, remembering
//! which record of the batch each buffered event belongs to, so that it knows
//! exactly which events reached the file when a `write(2)` fails part way
//! (a full disk): those count as written, the rest as failed, and the file is
//! cut back to its last whole event. Small events are framed into one buffer;
//! a large one is kept as the packer made it and written from there, between
//! its framing, by the same `writev(2)`, so its bytes are not copied again. The
//! pool thread hands every buffer to the operating system at the end of each
//! batch. It lives on the pool thread only.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use ember_pack::FileKind;

use crate::batch_context::{BatchContext, Fate};
use crate::error::{FileError, kind_name};
use crate::framing::{self, MAX_RECORD_LEN, write_vectored_all};
use crate::journal::Journal;
use crate::naming::{self, Naming, unix_secs, unix_time};
use crate::options::{Durability, SizePolicy};
use crate::stats::WriterStats;

/// Buffered bytes past which a writer hands its buffer to the operating
/// system before the batch ends.
const BUF_CAPACITY: usize = 256 * 1024;

/// Events at least this large are written from their own buffer rather than
/// copied into the writer's: a copy of a large event costs as much as a good
/// part of its `write(2)`, while an event this size amortizes a slice of its
/// own in the `writev(2)`.
pub(crate) const HOLD_MIN: usize = 64 * 1024;

/// How many names a writer tries when a file of the same name already exists.
const NAME_TRIES: u64 = 64;

/// Settings shared by all writers of a pool.
#[derive(Debug, Clone)]
pub(crate) struct FileSettings {
    pub(crate) log_dir: PathBuf,
    pub(crate) naming: Naming,
    pub(crate) start_secs: u64,
    pub(crate) max_file_size: Option<u64>,
    pub(crate) size_policy: SizePolicy,
    pub(crate) durability: Durability,
    pub(crate) read_only_on_close: bool,
    /// Where the files and directories made are listed before they are made.
    pub(crate) journal: Option<Journal>,
}

/// Creates `path` new (never truncating or appending, never following a
/// symbolic link: `O_CREAT | O_EXCL` fails on one), mode 0600.
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

/// Makes a finished file read-only (0400), as MindSpore does; through the
/// open file, so no path is resolved again.
pub(crate) fn seal(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o400))
    }
    #[cfg(not(unix))]
    {
        let mut perm = file.metadata()?.permissions();
        perm.set_readonly(true);
        file.set_permissions(perm)
    }
}

/// Fsyncs a directory so that the entries created in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
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

pub(crate) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Bytes handed to the operating system after which their writeback to the
/// disk is started, without waiting for it.
const WRITEBACK_EVERY: u64 = 4 * 1024 * 1024;

/// Starts the disk's writeback of what `file` has handed to the operating
/// system since the last start, once that is [`WRITEBACK_EVERY`] bytes.
///
/// Every byte written is fsynced later (by the timed flush or at close). Left
/// to then, an fsync after a burst of large events waits for all of them,
/// while the disk sat idle as they were written: 400 MB of tensors took
/// 0.23 s to write and fsync on the development machine, 0.16 s with
/// writeback started every 4 MiB (1,000 writes of 400 kB, ext4).
///
/// On Linux, `POSIX_FADV_DONTNEED` over dirty pages starts their writeback
/// without waiting for it (`WB_SYNC_NONE`), as `sync_file_range(2)` with
/// `SYNC_FILE_RANGE_WRITE` does (PostgreSQL falls back on it for the same
/// purpose), and is in `rustix`'s safe API; the pages it would drop from the
/// cache are only those already clean. Advice only, so a failure is ignored:
/// the fsync still comes.
fn start_writeback(file: &mut OpenFile) {
    let len = file.on_disk - file.writeback_from;
    if len < WRITEBACK_EVERY {
        return;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::num::NonZeroU64;
        let _ = rustix::fs::fadvise(
            &file.file,
            file.writeback_from,
            NonZeroU64::new(len),
            rustix::fs::Advice::DontNeed,
        );
    }
    file.writeback_from = file.on_disk;
}

/// What [`EventFileWriter::prepare`] decided for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prepared {
    /// The event fits the current (or next) file.
    Ready {
        /// The previous file was closed to make room.
        rotated: bool,
    },
    /// The event is dropped: the file stopped, or the event can never fit.
    Drop,
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    file: File,
    /// Bytes in the file so far, buffered ones included.
    size: u64,
    /// Bytes handed to the operating system.
    on_disk: u64,
    /// Events in the file so far, buffered ones included.
    events: u64,
    /// Bytes reached the file since the last fsync.
    unsynced: bool,
    /// Where the bytes start whose writeback to the disk has not been started.
    writeback_from: u64,
    /// Small events, framed.
    buf: Vec<u8>,
    /// Large events, in the order they come among the bytes of `buf`.
    held: Vec<Held>,
    /// Bytes buffered in all: `buf` and the held events with their framing.
    /// Offsets below count in this stream, `buf` with the held events in it.
    pending: usize,
    /// The framed header's length while it is buffered, else 0.
    header_in_buf: usize,
    /// For each buffered event: its record's index in the batch and the
    /// offset where it ends.
    buffered: Vec<(usize, usize)>,
}

/// One unframed event on its way to a file, with the masked CRC-32C of its
/// bytes when it was computed already (on a pack thread, for a large event:
/// the pool thread that writes it then only hands it to the system).
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) data: Vec<u8>,
    pub(crate) crc: Option<u32>,
}

impl From<Vec<u8>> for Event {
    fn from(data: Vec<u8>) -> Self {
        Self { data, crc: None }
    }
}

/// A large event buffered as the packer made it, with its framing.
#[derive(Debug)]
struct Held {
    /// The length of `buf` when it came: it goes after those bytes.
    after: usize,
    header: [u8; framing::HEADER_LEN],
    data: Vec<u8>,
    crc: [u8; 4],
}

/// Writes framed events of one [`FileKind`] to its current file.
#[derive(Debug)]
pub(crate) struct EventFileWriter {
    kind: FileKind,
    settings: FileSettings,
    file: Option<OpenFile>,
    last_secs: Option<u64>,
    stopped: bool,
    warned_stop: bool,
    warned_oversize: bool,
    /// Header bytes (unframed) of a new file; empty for none.
    header: HeaderFn,
    header_framed_len: u64,
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
        Self {
            kind,
            settings,
            file: None,
            last_secs: None,
            stopped: false,
            warned_stop: false,
            warned_oversize: false,
            header,
            header_framed_len,
            stats: WriterStats::new(kind),
        }
    }

    /// Decides where an event of `framed` bytes goes (all the events of one
    /// record, framing included), rotating or stopping the file as the size
    /// policy says.
    pub(crate) fn prepare(
        &mut self,
        framed: u64,
        ctx: &mut BatchContext,
    ) -> Result<Prepared, FileError> {
        if self.stopped {
            return Ok(Prepared::Drop);
        }
        let Some(max) = self.settings.max_file_size else {
            return Ok(Prepared::Ready { rotated: false });
        };
        let fresh_need = self.header_framed_len.saturating_add(framed);
        let (used, has_events) = match &self.file {
            Some(f) => (f.size, f.events > 0),
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
                        kind_name(self.kind),
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
                            kind_name(self.kind)
                        );
                    }
                    return Ok(Prepared::Drop);
                }
                if has_events {
                    self.close_file(ctx)?;
                    Ok(Prepared::Ready { rotated: true })
                } else {
                    Ok(Prepared::Ready { rotated: false })
                }
            }
        }
    }

    /// The next file's creation time: the pool's start for the first file,
    /// later strictly after the previous one so names sort in order.
    /// A first file is also named after every file of its kind already in the log directory
    /// (a run resumed in the same second as the one it continues), since readers take a
    /// directory's files in name order.
    fn next_secs(&self) -> u64 {
        match self.last_secs {
            None => match naming::newest_secs(&self.settings.log_dir, self.kind) {
                Some(newest) => self.settings.start_secs.max(newest + 1),
                None => self.settings.start_secs,
            },
            Some(prev) => unix_secs().max(prev + 1),
        }
    }

    fn open_file(&mut self, ctx: &mut BatchContext) -> Result<&mut OpenFile, FileError> {
        let header = (self.header.0)(unix_time());
        let mut secs = self.next_secs();
        let mut tries = 0;
        let (path, file) = loop {
            let name = self
                .settings
                .naming
                .file_name(self.kind, secs, naming::next_counter());
            let path = self.settings.log_dir.join(name);
            let journal = self.settings.journal.as_ref();
            match Journal::made(journal, &path, false, || create_new(&path)) {
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
            file,
            size: 0,
            on_disk: 0,
            events: 0,
            unsynced: true,
            writeback_from: 0,
            buf: Vec::with_capacity(BUF_CAPACITY),
            held: Vec::new(),
            pending: 0,
            header_in_buf: 0,
            buffered: Vec::new(),
        };
        if !header.is_empty() {
            framing::frame_into(&mut open.buf, &header);
            open.pending = open.buf.len();
            open.header_in_buf = open.buf.len();
            open.size = open.buf.len() as u64;
            ctx.guard.buffered(open.size);
        }
        Ok(self.file.insert(open))
    }

    /// Buffers one event of record `idx` of the batch, framed. It reaches the
    /// file when the buffer is full or the batch ends.
    fn append(
        &mut self,
        idx: usize,
        event: Event,
        ctx: &mut BatchContext,
    ) -> Result<(), FileError> {
        let Event { data, crc } = event;
        if data.len() as u64 > MAX_RECORD_LEN {
            return Err(FileError::RecordTooLarge {
                len: data.len() as u64,
            });
        }
        let framed_len = framing::framed_len(data.len());
        if self.file.is_none() {
            // The guard sees the header and the first event before the file
            // exists, so a refusal leaves no file behind.
            let dir = &self.settings.log_dir;
            ctx.guard
                .check(dir, dir, self.header_framed_len + framed_len)?;
            self.open_file(ctx)?;
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        ctx.guard
            .check(&self.settings.log_dir, &file.path, framed_len)?;
        if data.len() >= HOLD_MIN {
            file.held.push(Held {
                after: file.buf.len(),
                header: framing::header(data.len()),
                crc: crc
                    .unwrap_or_else(|| framing::masked_crc32c(&data))
                    .to_le_bytes(),
                data,
            });
        } else {
            framing::frame_into(&mut file.buf, &data);
        }
        file.pending += framed_len as usize;
        file.buffered.push((idx, file.pending));
        file.size += framed_len;
        file.events += 1;
        ctx.guard.buffered(framed_len);
        Ok(())
    }

    /// Appends every event of record `idx` (call after [`Self::prepare`]),
    /// then hands the buffer to the operating system if it is full. On an
    /// error the events not buffered are counted as failed, and those that
    /// were buffered are settled by [`Self::write_out`].
    pub(crate) fn append_all(
        &mut self,
        idx: usize,
        events: Vec<Event>,
        ctx: &mut BatchContext,
    ) -> Result<(), FileError> {
        let count = events.len();
        for (i, data) in events.into_iter().enumerate() {
            if let Err(e) = self.append(idx, data, ctx) {
                self.lost(idx, count - i, ctx);
                return Err(e);
            }
        }
        if self
            .file
            .as_ref()
            .is_some_and(|f| f.pending >= BUF_CAPACITY)
        {
            self.write_out(ctx)?;
        }
        Ok(())
    }

    /// Writes the events of record `idx` as the size policy allows, counting
    /// each as dropped or failed when it does not reach the buffer.
    pub(crate) fn write_events(
        &mut self,
        idx: usize,
        events: Vec<Event>,
        ctx: &mut BatchContext,
    ) -> Result<(), FileError> {
        let total = events
            .iter()
            .map(|e| framing::framed_len(e.data.len()))
            .sum();
        match self.prepare(total, ctx) {
            Ok(Prepared::Drop) => {
                self.dropped(idx, events.len(), ctx);
                Ok(())
            }
            Ok(Prepared::Ready { .. }) => self.append_all(idx, events, ctx),
            Err(e) => {
                self.lost(idx, events.len(), ctx);
                Err(e)
            }
        }
    }

    /// Counts `events` events of record `idx` lost to a failure.
    pub(crate) fn lost(&mut self, idx: usize, events: usize, ctx: &mut BatchContext) {
        self.stats.records_failed += events as u64;
        ctx.record_fates.mark(idx, Fate::Failed);
    }

    /// Hands the buffer to the operating system. When a write fails part way,
    /// the events that reached the file whole count as written, the file is
    /// cut back to the end of the last of them, and the rest are failed.
    pub(crate) fn write_out(&mut self, ctx: &mut BatchContext) -> Result<(), FileError> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let total = file.pending;
        if total == 0 {
            return Ok(());
        }
        // `buf` cut at each held event, the held events between their framing.
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(1 + 4 * file.held.len());
        let mut from = 0;
        for held in &file.held {
            slices.push(IoSlice::new(&file.buf[from..held.after]));
            slices.push(IoSlice::new(&held.header));
            slices.push(IoSlice::new(&held.data));
            slices.push(IoSlice::new(&held.crc));
            from = held.after;
        }
        slices.push(IoSlice::new(&file.buf[from..]));
        slices.retain(|s| !s.is_empty());
        let (written, failure) = write_vectored_all(&mut file.file, &mut slices, total);
        drop(slices);
        ctx.guard.drained(total as u64);
        let whole = file
            .buffered
            .iter()
            .take_while(|&&(_, end)| end <= written)
            .count();
        // Bytes of whole events (and of the header, which precedes them).
        let kept = match failure {
            None => written,
            Some(_) => match file.buffered[..whole].last() {
                Some(&(_, end)) => end,
                None if written >= file.header_in_buf => file.header_in_buf,
                None => 0,
            },
        };
        file.header_in_buf = 0;
        for &(idx, _) in &file.buffered[whole..] {
            ctx.record_fates.mark(idx, Fate::Failed);
        }
        self.stats.records_written += whole as u64;
        self.stats.records_failed += (file.buffered.len() - whole) as u64;
        self.stats.bytes_written += kept as u64;
        file.buffered.clear();
        file.buf.clear();
        for held in file.held.drain(..) {
            ctx.spare.keep(held.data);
        }
        file.pending = 0;
        if kept > 0 {
            file.unsynced = true;
        }
        let Some(error) = failure else {
            file.on_disk += written as u64;
            start_writeback(file);
            return Ok(());
        };
        if kept < written {
            // Best effort: a torn event at the end would read as a truncated
            // tail anyway, but a clean end is better.
            let _ = file.file.set_len(file.on_disk + kept as u64);
        }
        file.on_disk += kept as u64;
        file.size = file.on_disk;
        Err(io_err("write", &file.path)(error))
    }

    /// Hands buffered bytes to the operating system, and with `sync`, to the disk.
    pub(crate) fn flush(&mut self, sync: bool, ctx: &mut BatchContext) -> Result<(), FileError> {
        self.write_out(ctx)?;
        if let Some(file) = self.file.as_mut()
            && sync
            && file.unsynced
        {
            file.file.sync_data().map_err(io_err("fsync", &file.path))?;
            sync_dir(&self.settings.log_dir).map_err(io_err("fsync", &self.settings.log_dir))?;
            ctx.fsyncs += 2;
            file.unsynced = false;
        }
        Ok(())
    }

    /// Whether bytes reached the file since its last fsync.
    pub(crate) fn unsynced(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.unsynced)
    }

    /// Writes out, fsyncs and closes the current file (sealing it read-only
    /// when configured); the next event opens a new one.
    pub(crate) fn close_file(&mut self, ctx: &mut BatchContext) -> Result<(), FileError> {
        let written = self.write_out(ctx);
        let Some(file) = self.file.take() else {
            return written;
        };
        written?;
        file.file.sync_all().map_err(io_err("fsync", &file.path))?;
        ctx.fsyncs += 1;
        if self.settings.read_only_on_close {
            seal(&file.file).map_err(io_err("make read-only", &file.path))?;
        }
        drop(file.file);
        sync_dir(&self.settings.log_dir).map_err(io_err("fsync", &self.settings.log_dir))?;
        ctx.fsyncs += 1;
        Ok(())
    }

    /// Counts `events` events of record `idx` dropped by the size policy.
    pub(crate) fn dropped(&mut self, idx: usize, events: usize, ctx: &mut BatchContext) {
        self.stats.records_dropped += events as u64;
        ctx.record_fates.mark(idx, Fate::Dropped);
    }
}
