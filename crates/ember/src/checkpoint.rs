//! Checkpoint files and the directory that keeps them: what lets a killed run start again
//! where it was.
//!
//! A checkpoint is one file of named sections (the trainer's progress, the model, optimizer
//! and scheduler records, the log directory's snapshot) followed by the CRC-32C of every byte
//! before it, so that a torn or damaged file is told from a whole one by reading it alone:
//!
//! ```text
//! "EMBERCKP" | version u32 | sections u32 | { name_len u16 | name | len u64 | bytes }* | crc32c u32
//! ```
//!
//! (integers little-endian). [`Checkpoints::write`] makes one durable the way a file system
//! allows: written whole under a temporary name, fsynced, renamed to `ckpt-<seq>.ember`, and
//! the directory fsynced ([`ember_write::durable`]); only then are the oldest beyond the
//! number to keep removed (a removal that fails is logged: the new checkpoint stands), so the
//! directory never holds only torn checkpoints. [`Checkpoints::latest`] takes the newest whole
//! one and says why it passed over any newer.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ember_write::{LogSnapshot, Ownership, durable};

use crate::SummaryRecord;

const MAGIC: &[u8; 8] = b"EMBERCKP";
const VERSION: u32 = 1;
const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".ember";
const TMP: &str = ".tmp";

/// What can go wrong writing or reading checkpoints, or resuming from one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
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
    /// A checkpoint file is torn or damaged.
    #[error("checkpoint {} is not whole: {reason}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A section is missing or cannot be read.
    #[error("checkpoint {} has no readable `{section}` section: {reason}", path.display())]
    Section {
        /// The file.
        path: PathBuf,
        /// The section's name.
        section: String,
        /// Why.
        reason: String,
    },
    /// Burn could not turn a model, optimizer or scheduler into bytes, or back.
    #[error("cannot {what}: {reason}")]
    Record {
        /// What was being done.
        what: &'static str,
        /// Burn's error.
        reason: String,
    },
    /// The checkpoint was taken by a run that cannot be continued by this one.
    #[error("cannot resume from {}: {reason}", path.display())]
    Mismatch {
        /// The checkpoint.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// A resume found nothing to go on from: the directory is missing or holds no whole
    /// checkpoint of this job. Nothing was changed; starting the run over is a choice of its
    /// own ([`Trainer::start_over`](crate::Trainer::start_over)).
    #[error("no checkpoint to resume from in {}: {why}", dir.display())]
    NothingToResume {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Why: the directory is missing, empty, or each checkpoint in it was passed over (and
        /// why).
        why: String,
        /// Every checkpoint file found, and why it was passed over; empty when there was none.
        passed_over: Vec<(PathBuf, String)>,
    },
    /// Another run holds the checkpoint directory.
    #[error(transparent)]
    Locked(#[from] ember_write::LockError),
    /// The log directory could not be rolled back to the checkpoint.
    #[error("cannot roll the log directory back to the checkpoint: {0}")]
    Rollback(#[from] ember_write::RollbackError),
    /// The thread writing checkpoints stopped.
    #[error("the checkpoint writer thread panicked")]
    WriterPanicked,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A checkpoint's contents: named byte sections, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    sections: Vec<(String, Vec<u8>)>,
}

impl Checkpoint {
    /// An empty checkpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the section `name`.
    pub fn with(mut self, name: &str, bytes: Vec<u8>) -> Self {
        self.sections.retain(|(n, _)| n != name);
        self.sections.push((name.to_owned(), bytes));
        self
    }

    /// The section `name`'s bytes.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    }

    /// The whole file: sections framed, then the checksum.
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self
            .sections
            .iter()
            .map(|(n, b)| 10 + n.len() + b.len())
            .sum();
        let mut out = Vec::with_capacity(20 + size);
        self.write_to(&mut out)
            .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
        out
    }

    /// Writes [`encode`](Self::encode)'s bytes to `out` without gathering them first: a
    /// checkpoint may hold a model of hundreds of megabytes.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let mut crc = 0u32;
        let mut put = |bytes: &[u8]| -> io::Result<()> {
            crc = crc32c::crc32c_append(crc, bytes);
            out.write_all(bytes)
        };
        put(MAGIC)?;
        put(&VERSION.to_le_bytes())?;
        put(&(self.sections.len() as u32).to_le_bytes())?;
        for (name, bytes) in &self.sections {
            put(&(name.len() as u16).to_le_bytes())?;
            put(name.as_bytes())?;
            put(&(bytes.len() as u64).to_le_bytes())?;
            put(bytes)?;
        }
        out.write_all(&crc.to_le_bytes())
    }

    /// Reads what [`encode`](Self::encode) wrote; `Err` says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or("shorter than a checksum")?;
        let (body, crc) = bytes.split_at(body_len);
        let stored = u32::from_le_bytes(crc.try_into().map_err(|_| "no checksum")?);
        if crc32c::crc32c(body) != stored {
            return Err(format!(
                "checksum mismatch over {body_len} bytes (torn or damaged)"
            ));
        }
        let mut at = body;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if at.len() < n {
                return Err("truncated section".into());
            }
            let (head, rest) = at.split_at(n);
            at = rest;
            Ok(head)
        };
        if take(8)? != MAGIC {
            return Err("not an ember checkpoint".into());
        }
        let version = u32::from_le_bytes(take(4)?.try_into().map_err(|_| "bad version")?);
        if version != VERSION {
            return Err(format!("version {version}, this ember reads {VERSION}"));
        }
        let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| "bad count")?);
        let mut sections = Vec::new();
        for _ in 0..count {
            let name_len = u16::from_le_bytes(take(2)?.try_into().map_err(|_| "bad name")?);
            let name = String::from_utf8(take(usize::from(name_len))?.to_vec())
                .map_err(|_| "a section name is not UTF-8")?;
            let len = u64::from_le_bytes(take(8)?.try_into().map_err(|_| "bad length")?);
            let len = usize::try_from(len).map_err(|_| "a section too large")?;
            if sections.iter().any(|(n, _)| *n == name) {
                return Err(format!("section `{name}` twice"));
            }
            sections.push((name, take(len)?.to_vec()));
        }
        if !at.is_empty() {
            return Err(format!("{} bytes after the last section", at.len()));
        }
        Ok(Self { sections })
    }
}

/// A checkpoint read back, with where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file.
    pub path: PathBuf,
    /// Its sequence number.
    pub seq: u64,
    /// Its contents.
    pub checkpoint: Checkpoint,
    /// Newer checkpoint files that were passed over, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// A directory of checkpoints; see the module docs.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    dir: PathBuf,
    keep: usize,
}

impl Checkpoints {
    /// The checkpoints in `dir`, keeping the newest `keep` (at least 1) when writing.
    pub fn new(dir: impl Into<PathBuf>, keep: usize) -> Self {
        Self {
            dir: dir.into(),
            keep: keep.max(1),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The checkpoint files, newest first, with their sequence numbers.
    pub fn list(&self) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(Vec::new());
            }
            Err(e) => return Err(io_err("list", &self.dir)(e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(seq) = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.strip_suffix(SUFFIX))
                .and_then(|seq| seq.parse::<u64>().ok())
            {
                found.push((seq, entry.path()));
            }
        }
        found.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
        Ok(found)
    }

    /// The newest whole checkpoint, `None` when there is none; every newer file passed over
    /// is logged with its reason and listed in [`Loaded::skipped`].
    pub fn latest(&self) -> Result<Option<Loaded>, CheckpointError> {
        self.latest_of_job(1)
    }

    /// The file of rank `rank`'s part of checkpoint `seq`, in a job of several ranks: its own
    /// log's snapshot and position, beside rank 0's checkpoint.
    pub fn part_path(&self, seq: u64, rank: usize) -> PathBuf {
        self.dir
            .join(format!("{PREFIX}{seq:012}.rank{rank}{SUFFIX}"))
    }

    /// [`latest`](Self::latest) for a job of `ranks` ranks: a checkpoint counts only when
    /// the part of every other rank is there and whole too.
    pub fn latest_of_job(&self, ranks: usize) -> Result<Option<Loaded>, CheckpointError> {
        Ok(self.newest_whole(ranks)?.ok())
    }

    /// The checkpoint a resume of a job of `ranks` ranks goes on from: the newest whole one,
    /// or [`CheckpointError::NothingToResume`] saying why there is none.
    pub fn to_resume(&self, ranks: usize) -> Result<Loaded, CheckpointError> {
        self.newest_whole(ranks)?
            .map_err(|passed_over| self.nothing_to_resume(passed_over))
    }

    /// The newest whole checkpoint, or every file passed over and why.
    fn newest_whole(
        &self,
        ranks: usize,
    ) -> Result<Result<Loaded, Vec<(PathBuf, String)>>, CheckpointError> {
        let mut skipped = Vec::new();
        for (seq, path) in self.list()? {
            let bytes = fs::read(&path).map_err(io_err("read", &path))?;
            let whole = Checkpoint::decode(&bytes).and_then(|checkpoint| {
                for rank in 1..ranks {
                    let part = self.part_path(seq, rank);
                    let bytes = fs::read(&part)
                        .map_err(|e| format!("rank {rank}'s part {}: {e}", part.display()))?;
                    Checkpoint::decode(&bytes)
                        .map_err(|e| format!("rank {rank}'s part {}: {e}", part.display()))?;
                }
                Ok(checkpoint)
            });
            match whole {
                Ok(checkpoint) => {
                    return Ok(Ok(Loaded {
                        path,
                        seq,
                        checkpoint,
                        skipped,
                    }));
                }
                Err(reason) => {
                    log::warn!(
                        "passing over checkpoint {}: {reason}; trying the one before",
                        path.display()
                    );
                    skipped.push((path, reason));
                }
            }
        }
        Ok(Err(skipped))
    }

    /// The error a resume gives when no checkpoint is whole, saying why: no directory, no
    /// checkpoint file, or each file passed over and why.
    fn nothing_to_resume(&self, passed_over: Vec<(PathBuf, String)>) -> CheckpointError {
        let why = if !self.dir.is_dir() {
            "the directory does not exist (moved, removed, or not mounted)".to_owned()
        } else if passed_over.is_empty() {
            "it holds no checkpoint file".to_owned()
        } else {
            passed_over
                .iter()
                .map(|(path, reason)| {
                    let name = path.file_name().unwrap_or(path.as_os_str());
                    format!("{} passed over: {reason}", name.to_string_lossy())
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        CheckpointError::NothingToResume {
            dir: self.dir.clone(),
            why,
            passed_over,
        }
    }

    /// Removes every checkpoint of the directory, whole or not, with the ranks' parts: a run
    /// started over from its beginning must not find them on its next resume.
    pub fn remove_all(&self) -> Result<(), CheckpointError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("list", &self.dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(PREFIX) && (name.ends_with(SUFFIX) || name.ends_with(TMP)) {
                let path = entry.path();
                match fs::remove_file(&path) {
                    // Every rank of a job starting over removes them: another was first.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    removed => removed.map_err(io_err("remove", &path))?,
                }
            }
        }
        sync_dir(&self.dir)
    }

    /// The sequence number the next checkpoint gets: past every file there, whole or not.
    pub fn next_seq(&self) -> Result<u64, CheckpointError> {
        Ok(self.list()?.first().map_or(1, |(seq, _)| seq + 1))
    }

    /// Removes what a write killed part way left: temporary files.
    pub fn clean(&self) -> Result<(), CheckpointError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("list", &self.dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(PREFIX) && name.ends_with(TMP) {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_err("remove", &path))?;
            }
        }
        Ok(())
    }

    /// Writes `checkpoint` as number `seq`, durably (see the module docs), then removes the
    /// oldest beyond the number to keep. Returns its path.
    pub fn write(&self, seq: u64, checkpoint: &Checkpoint) -> Result<PathBuf, CheckpointError> {
        let path = write_durably(&self.dir, &format!("{PREFIX}{seq:012}{SUFFIX}"), checkpoint)?;
        // The new checkpoint is durable: an old one that cannot be removed is the disk's
        // clutter, not this checkpoint's failure; the next write tries again.
        if let Err(error) = self.prune() {
            log::warn!(
                "removing checkpoints older than the newest {}: {error}",
                self.keep
            );
        }
        Ok(path)
    }

    /// Removes the checkpoints (and their parts) beyond the newest `keep`.
    fn prune(&self) -> Result<(), CheckpointError> {
        for (old_seq, old) in self.list()?.into_iter().skip(self.keep) {
            fs::remove_file(&old).map_err(io_err("remove", &old))?;
            self.remove_parts(old_seq)?;
        }
        Ok(())
    }

    /// Removes the other ranks' parts of checkpoint `seq`.
    fn remove_parts(&self, seq: u64) -> Result<(), CheckpointError> {
        let prefix = format!("{PREFIX}{seq:012}.rank");
        for entry in fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))? {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_err("remove", &path))?;
            }
        }
        Ok(())
    }
}

/// Writes `checkpoint` as `dir/name` so that a crash leaves the old file or the new one,
/// whole, and the new one survives the machine going down: through
/// [`ember_write::durable`] (a temporary `name.tmp` made new, fsynced, renamed, the directory
/// fsynced), the directory made first when missing, with its parent fsynced.
pub fn write_durably(
    dir: &Path,
    name: &str,
    checkpoint: &Checkpoint,
) -> Result<PathBuf, CheckpointError> {
    durable::create_dir(dir).map_err(io_err("create", dir))?;
    let path = dir.join(name);
    durable::replace_with(&path, |tmp| {
        let file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
        let mut buffered = std::io::BufWriter::with_capacity(1 << 20, file);
        checkpoint.write_to(&mut buffered)?;
        buffered.flush()
    })
    .map_err(io_err("write", &path))?;
    Ok(path)
}

/// Reads the checkpoint file at `path`, refusing a torn or damaged one.
pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = fs::read(path).map_err(io_err("read", path))?;
    Checkpoint::decode(&bytes).map_err(|reason| CheckpointError::Damaged {
        path: path.to_path_buf(),
        reason,
    })
}

fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    durable::sync_dir(dir).map_err(io_err("fsync", dir))
}

/// Where the run's log directory is, to snapshot and roll back.
#[derive(Debug, Clone)]
pub(crate) struct LogPlace {
    pub(crate) dir: PathBuf,
    /// The checkpoint directory, relative to the log directory, when it is inside it.
    pub(crate) exclude: Vec<PathBuf>,
    pub(crate) ownership: Ownership,
}

impl LogPlace {
    pub(crate) fn of(summary: &SummaryRecord, checkpoints: &Path) -> Self {
        let dir = summary.log_dir().to_path_buf();
        let exclude = relative_to(checkpoints, &dir).into_iter().collect();
        Self {
            dir,
            exclude,
            ownership: summary.ownership(),
        }
    }

    /// Rolls the log back to `snapshot`, leaving the files `summary` has made already.
    pub(crate) fn roll_back(
        &self,
        snapshot: &LogSnapshot,
        summary: &SummaryRecord,
    ) -> Result<(), CheckpointError> {
        let keep: Vec<PathBuf> = summary
            .stats()
            .map(|stats| {
                stats
                    .writers
                    .iter()
                    .filter_map(|w| w.path.as_deref())
                    .filter_map(|p| relative_to(p, &self.dir))
                    .collect()
            })
            .unwrap_or_default();
        let restored = snapshot.restore(&self.dir, &self.exclude, &keep, self.ownership)?;
        for path in &restored.shorter {
            log::warn!(
                "{} is shorter than when the checkpoint was taken (the machine went down before \
                 its bytes reached the disk): its last records are lost",
                self.dir.join(path).display()
            );
        }
        Ok(())
    }
}

fn relative_to(path: &Path, base: &Path) -> Option<PathBuf> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    absolute(path)
        .strip_prefix(absolute(base))
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many crafted files the property test reads: `EMBER_FUZZ_CASES`, or a CI-sized
    /// default. `EMBER_FUZZ_CASES=1000000 cargo test --release -p ember --lib crafted` is the
    /// long run.
    fn fuzz_cases() -> usize {
        std::env::var("EMBER_FUZZ_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(20_000)
    }

    /// xorshift64*: a seeded stream, so that a failing case can be replayed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// A whole file's body with its checksum made right again, so that the parser, not only
    /// the checksum, meets what was done to it.
    fn rechecksummed(mut body: Vec<u8>) -> Vec<u8> {
        let crc = crc32c::crc32c(&body);
        body.extend(crc.to_le_bytes());
        body
    }

    #[test]
    fn crafted_checkpoint_files_are_refused_or_read_never_a_panic() {
        let whole = Checkpoint::new()
            .with("meta", b"epoch=2\nepoch_done=false".to_vec())
            .with("model", vec![7; 64])
            .with("optimizer", vec![1; 16])
            .encode();
        let body = &whole[..whole.len() - 4];
        let mut rng = Rng(0x5eed_c0de);
        let (mut refused, mut read) = (0usize, 0usize);
        for case in 0..fuzz_cases() {
            let mut bytes = body.to_vec();
            for _ in 0..=rng.below(3) {
                let at = rng.below(bytes.len());
                match rng.below(6) {
                    // A length or count field set to something large, or zero.
                    0 => {
                        let end = (at + 8).min(bytes.len());
                        let value = [0, u64::MAX, u64::from(u32::MAX), rng.next()][rng.below(4)];
                        bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
                    }
                    1 => bytes[at] ^= 1 << rng.below(8),
                    2 => bytes.truncate(at),
                    3 => {
                        let extra = rng.below(32);
                        bytes.extend((0..extra).map(|_| rng.next() as u8));
                    }
                    4 => bytes[at] = rng.next() as u8,
                    _ => {
                        let from = rng.below(bytes.len());
                        let len = rng.below(16).min(bytes.len() - from.max(at));
                        bytes.copy_within(from..from + len, at);
                    }
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let file = if rng.below(8) == 0 {
                bytes
            } else {
                rechecksummed(bytes)
            };
            match std::panic::catch_unwind(|| Checkpoint::decode(&file)) {
                Ok(Ok(checkpoint)) => {
                    read += 1;
                    // Whatever reads back writes out to the same bytes.
                    assert_eq!(checkpoint.encode(), file, "case {case}");
                }
                Ok(Err(_)) => refused += 1,
                Err(_) => panic!("case {case} panicked on {file:?}"),
            }
        }
        assert!(refused > 0 && read > 0, "{refused} refused, {read} read");
    }

    fn sample(n: u8) -> Checkpoint {
        Checkpoint::new()
            .with("meta", format!("n={n}").into_bytes())
            .with("model", vec![n; 100])
    }

    #[test]
    fn the_file_layout_is_the_documented_one() {
        let bytes = Checkpoint::new().with("ab", vec![7, 8]).encode();
        let mut expected = b"EMBERCKP".to_vec();
        expected.extend([
            1, 0, 0, 0, 1, 0, 0, 0, 2, 0, b'a', b'b', 2, 0, 0, 0, 0, 0, 0, 0, 7, 8,
        ]);
        let crc = crc32c::crc32c(&expected);
        expected.extend(crc.to_le_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(
            Checkpoint::decode(&bytes).unwrap().section("ab"),
            Some(&[7u8, 8][..])
        );
    }

    #[test]
    fn every_torn_or_flipped_file_is_refused() {
        let bytes = sample(3).encode();
        for cut in 0..bytes.len() {
            assert!(Checkpoint::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert!(Checkpoint::decode(&flipped).is_err(), "flip at {at}");
        }
    }

    #[test]
    fn a_job_s_checkpoint_counts_only_with_every_rank_s_part() {
        let dir = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(dir.path(), 2);
        for seq in 1..=2u64 {
            write_durably(dir.path(), "x", &sample(0)).unwrap();
            fs::rename(dir.path().join("x"), store.part_path(seq, 1)).unwrap();
            store.write(seq, &sample(seq as u8)).unwrap();
        }
        // Rank 1's part of the newest is torn: the one before is the job's newest.
        let part = store.part_path(2, 1);
        let bytes = fs::read(&part).unwrap();
        fs::write(&part, &bytes[..bytes.len() - 1]).unwrap();
        let loaded = store.latest_of_job(2).unwrap().unwrap();
        assert_eq!(loaded.seq, 1);
        assert!(
            loaded.skipped[0].1.contains("rank 1's part"),
            "{:?}",
            loaded.skipped
        );
        assert_eq!(store.latest().unwrap().unwrap().seq, 2);
        // Pruning takes the parts with their checkpoint.
        store.write(3, &sample(3)).unwrap();
        assert!(!store.part_path(1, 1).exists());
        assert!(store.part_path(2, 1).exists());
    }

    #[test]
    fn a_checkpoint_is_kept_when_an_old_one_cannot_be_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(dir.path(), 1);
        // An old "checkpoint" that unlink cannot remove, whoever runs the test.
        fs::create_dir(dir.path().join("ckpt-000000000001.ember")).unwrap();
        let path = store.write(2, &sample(2)).unwrap();
        assert_eq!(read(&path).unwrap(), sample(2));
        assert_eq!(store.latest().unwrap().unwrap().seq, 2);
    }

    #[test]
    fn the_newest_whole_checkpoint_wins_and_old_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(dir.path().join("ckpts"), 2);
        assert!(store.latest().unwrap().is_none());
        for n in 1..=3u8 {
            store.write(u64::from(n), &sample(n)).unwrap();
        }
        let names: Vec<u64> = store.list().unwrap().into_iter().map(|(s, _)| s).collect();
        assert_eq!(names, [3, 2]);
        // A torn newest one (a kill during a write that got as far as the rename cannot
        // happen, but a damaged disk can) is passed over, with its reason.
        let newest = store.list().unwrap()[0].1.clone();
        let bytes = fs::read(&newest).unwrap();
        fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
        fs::write(store.dir().join("ckpt-000000000004.ember.tmp"), b"half").unwrap();
        let loaded = store.latest().unwrap().unwrap();
        assert_eq!(loaded.seq, 2);
        assert_eq!(loaded.checkpoint, sample(2));
        assert_eq!(loaded.skipped.len(), 1);
        assert!(
            loaded.skipped[0].1.contains("checksum"),
            "{:?}",
            loaded.skipped
        );
        assert_eq!(store.next_seq().unwrap(), 4);
        store.clean().unwrap();
        assert!(!store.dir().join("ckpt-000000000004.ember.tmp").exists());
    }
}
