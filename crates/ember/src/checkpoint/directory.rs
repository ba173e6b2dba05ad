//! A directory of checkpoints: named by sequence, written durably, pruned only once the new
//! one is on the disk, the newest whole one found (with every rank's part, for a job), or why
//! there is none. The directory may be a local one or, with the `object-store` feature, a
//! prefix of an object store (`s3://bucket/run/checkpoints`): there a checkpoint is one object,
//! written by one PUT, so whole or absent, and the newest whole one is found by listing.

use std::path::{Path, PathBuf};

use ember_write::durable;

use super::error::CheckpointError;
use super::file::Checkpoint;
use super::meta::Fields;
use crate::run::place::Place;

pub(super) const PREFIX: &str = "ckpt-";
pub(super) const SUFFIX: &str = ".ember";
/// How temporary files of ember before they were named by their writer ended.
const LEGACY_TMP: &str = ".tmp";

/// A checkpoint read back, with where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file.
    pub path: PathBuf,
    /// Its sequence number.
    pub seq: u64,
    /// Its contents.
    pub checkpoint: Checkpoint,
    /// The other ranks' parts of it (rank, part), read with it to tell it whole.
    pub parts: Vec<(usize, Checkpoint)>,
    /// Newer checkpoint files that were passed over, and why.
    pub skipped: Vec<(PathBuf, String)>,
    /// How long finding and reading it took.
    pub(crate) read: std::time::Duration,
}

impl Loaded {
    /// The fields of its `meta` section (none where it has none that reads).
    pub(crate) fn meta(&self) -> Fields<'_> {
        Fields::of(&self.checkpoint)
    }

    /// Rank `rank`'s part, read with the checkpoint.
    pub(crate) fn part(&self, rank: usize) -> Option<&Checkpoint> {
        self.parts
            .iter()
            .find(|(of, _)| *of == rank)
            .map(|(_, part)| part)
    }

    /// The path of rank `rank`'s part.
    pub(crate) fn part_path(&self, rank: usize) -> PathBuf {
        self.path
            .parent()
            .unwrap_or(Path::new("."))
            .join(part_name(self.seq, rank))
    }
}

/// A directory of checkpoints; see the module docs.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    place: Place,
    keep: usize,
}

impl Checkpoints {
    /// The checkpoints in `dir`, keeping the newest `keep` (at least 1) when writing. A URL
    /// (`s3://…`, with the `object-store` feature) names a prefix of an object store; one this
    /// build cannot open is an error at the first use.
    pub fn new(dir: impl Into<PathBuf>, keep: usize) -> Self {
        Self::at(Place::at(dir), keep)
    }

    pub(crate) fn at(place: Place, keep: usize) -> Self {
        Self {
            place,
            keep: keep.max(1),
        }
    }

    /// These checkpoints, written only while `log`'s writer holds its run in a bucket: each
    /// write and removal asks its claim first, and none replaces what another writer put there
    /// since (see `ember_write::remote::Bucket::fenced_by`); once the lease is lost,
    /// `CheckpointError::Leased` with `RemoteError::LeaseLost`. Unchanged for a local directory
    /// (its lock fences it) or a log that holds no lease.
    pub fn fenced_by(self, log: Option<&crate::SummaryRecord>) -> Self {
        match log {
            Some(log) => Self::at(self.place.fenced_by(log), self.keep),
            None => self,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        self.place.path()
    }

    /// Its place.
    pub(crate) fn place(&self) -> &Place {
        &self.place
    }

    /// Whether the directory is a URL.
    pub fn is_remote(&self) -> bool {
        self.place.remote()
    }

    /// The file `name`'s bytes; `Err` with the reason when it cannot be read.
    fn read_file(&self, name: &str) -> Result<Vec<u8>, String> {
        match self.place.read(name) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err("no such file".to_owned()),
            Err(error) => Err(error.to_string()),
        }
    }

    /// Writes `checkpoint` as the file `name`, durably (see [`Place`]).
    pub(crate) fn write_file(
        &self,
        name: &str,
        checkpoint: &Checkpoint,
    ) -> Result<PathBuf, CheckpointError> {
        self.place
            .write_with(name, |out| checkpoint.write_to(out))?;
        Ok(self.dir().join(name))
    }

    /// The checkpoint files, newest first, with their sequence numbers.
    pub fn list(&self) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
        let mut found: Vec<(u64, PathBuf)> = self
            .place
            .names()?
            .into_iter()
            .filter_map(|name| Some((seq_of(&name)?, self.dir().join(name))))
            .collect();
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
        self.dir().join(part_name(seq, rank))
    }

    /// Writes rank `rank`'s part of checkpoint `seq`, durably.
    pub(crate) fn write_part(
        &self,
        seq: u64,
        rank: usize,
        part: &Checkpoint,
    ) -> Result<PathBuf, CheckpointError> {
        self.write_file(&part_name(seq, rank), part)
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

    /// The newest whole checkpoint, or every file passed over and why. A checkpoint that names
    /// the ranks of the job that took it is whole with their parts (a job may go on with
    /// other ranks); one that does not, with those of a job of `ranks`.
    pub(crate) fn newest_whole(
        &self,
        ranks: usize,
    ) -> Result<Result<Loaded, Vec<(PathBuf, String)>>, CheckpointError> {
        let started = std::time::Instant::now();
        let mut skipped = Vec::new();
        for (seq, path) in self.list()? {
            let name = format!("{PREFIX}{seq:012}{SUFFIX}");
            let whole = self.read_file(&name).and_then(|bytes| {
                let checkpoint = Checkpoint::decode(&bytes)?;
                let taken = Fields::of(&checkpoint).usize("ranks").unwrap_or(ranks);
                let mut parts = Vec::new();
                for rank in 1..taken {
                    let path = self.part_path(seq, rank);
                    let of_part = |e: String| format!("rank {rank}'s part {}: {e}", path.display());
                    let bytes = self.read_file(&part_name(seq, rank)).map_err(of_part)?;
                    let part = Checkpoint::decode(&bytes).map_err(of_part)?;
                    same_step(&checkpoint, &part).map_err(of_part)?;
                    parts.push((rank, part));
                }
                Ok((checkpoint, parts))
            });
            match whole {
                Ok((checkpoint, parts)) => {
                    return Ok(Ok(Loaded {
                        path,
                        seq,
                        checkpoint,
                        parts,
                        skipped,
                        read: started.elapsed(),
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
    pub(crate) fn nothing_to_resume(&self, passed_over: Vec<(PathBuf, String)>) -> CheckpointError {
        let why = if !self.is_remote() && !self.dir().is_dir() {
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
            dir: self.dir().to_path_buf(),
            why,
            passed_over,
        }
    }

    /// Removes every checkpoint of the directory, whole or not, with the ranks' parts: a run
    /// restarted from its beginning must not find them on its next resume.
    pub fn remove_all(&self) -> Result<(), CheckpointError> {
        for name in self.place.names()? {
            if (name.starts_with(PREFIX) && name.ends_with(SUFFIX)) || is_stale_temporary(&name) {
                self.place.remove(&name)?;
            }
        }
        if self.is_remote() || !self.dir().is_dir() {
            return Ok(());
        }
        durable::sync_dir(self.dir()).map_err(|source| CheckpointError::Io {
            op: "fsync",
            path: self.dir().to_path_buf(),
            source,
        })
    }

    /// The sequence number the next checkpoint gets: past every file there, whole or not.
    pub fn next_seq(&self) -> Result<u64, CheckpointError> {
        Ok(self.list()?.first().map_or(1, |(seq, _)| seq + 1))
    }

    /// Removes what a write killed part way left: the temporary files of checkpoint writers
    /// that have ended, or of this process (a bucket has none). Another live writer's are
    /// left alone: they are its to rename or remove (another rank writing its part, or a
    /// writer whose directory lock was lost).
    pub fn clean(&self) -> Result<(), CheckpointError> {
        if self.is_remote() {
            return Ok(());
        }
        for name in self.place.names()? {
            if is_stale_temporary(&name) {
                self.place.remove(&name)?;
            }
        }
        Ok(())
    }

    /// Writes `checkpoint` as number `seq`, durably (see the module docs), then removes the
    /// oldest beyond the number to keep. Returns its path.
    pub fn write(&self, seq: u64, checkpoint: &Checkpoint) -> Result<PathBuf, CheckpointError> {
        let name = format!("{PREFIX}{seq:012}{SUFFIX}");
        let path = loop {
            match self.write_file(&name, checkpoint) {
                Ok(path) => break path,
                // A full disk: the oldest kept checkpoint makes room for the new one, the
                // newest always kept until the new one is on the disk.
                Err(error)
                    if no_room(&error) && self.prune(self.list()?.len().saturating_sub(1))? > 0 =>
                {
                    log::warn!(
                        "no room for checkpoint {seq} in {}: removed the oldest kept one",
                        self.dir().display()
                    );
                }
                Err(error) => return Err(error),
            }
        };
        // The new checkpoint is durable: an old one that cannot be removed is the disk's
        // clutter, not this checkpoint's failure; the next write tries again.
        if let Err(error) = self.prune(self.keep) {
            log::warn!(
                "removing checkpoints older than the newest {}: {error}",
                self.keep
            );
        }
        Ok(path)
    }

    /// Removes the checkpoints (and their parts) beyond the newest `keep`; how many it removed.
    pub(crate) fn prune(&self, keep: usize) -> Result<usize, CheckpointError> {
        let old = self
            .list()?
            .into_iter()
            .skip(keep.max(1))
            .collect::<Vec<_>>();
        for (old_seq, old) in &old {
            let name = old
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.place.remove(&name)?;
            self.remove_parts(*old_seq)?;
        }
        Ok(old.len())
    }

    /// Removes the other ranks' parts of checkpoint `seq`.
    fn remove_parts(&self, seq: u64) -> Result<(), CheckpointError> {
        let prefix = format!("{PREFIX}{seq:012}.rank");
        for name in self.place.names()? {
            if name.starts_with(&prefix) {
                self.place.remove(&name)?;
            }
        }
        Ok(())
    }
}

/// Whether `error` is a write the file system had no room for (a full disk, a quota).
pub(crate) fn no_room(error: &CheckpointError) -> bool {
    match error {
        CheckpointError::Io { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        ),
        _ => false,
    }
}

/// The sequence number of a checkpoint file's name (`ckpt-<seq>.ember`), or `None` for any
/// other name (a part, a temporary file, another file).
pub(crate) fn seq_of(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse::<u64>()
        .ok()
}

/// The section a job's checkpoint and each rank's part carry alike, naming the job's step.
pub(crate) const JOB_STAMP: &str = "job_step";

/// A part counts toward a checkpoint only when both are of the job's same step (both stamped, or
/// neither, as written before the stamp).
fn same_step(checkpoint: &Checkpoint, part: &Checkpoint) -> Result<(), String> {
    fn stamp(c: &Checkpoint) -> Option<std::borrow::Cow<'_, str>> {
        c.section(JOB_STAMP).map(String::from_utf8_lossy)
    }
    match (stamp(checkpoint), stamp(part)) {
        (ours, theirs) if ours == theirs => Ok(()),
        (ours, theirs) => Err(format!(
            "it is of another step ({}) than the checkpoint ({})",
            theirs.as_deref().unwrap_or("unstamped"),
            ours.as_deref().unwrap_or("unstamped")
        )),
    }
}

/// The name of rank `rank`'s part of checkpoint `seq`.
fn part_name(seq: u64, rank: usize) -> String {
    format!("{PREFIX}{seq:012}.rank{rank}{SUFFIX}")
}

/// Whether `name` is a checkpoint's temporary file that no live writer is writing: a dead
/// writer's or this process's (see [`durable::is_stale_temporary`]), or one of the fixed name
/// older ember wrote.
fn is_stale_temporary(name: &str) -> bool {
    let checkpoints = |file: &str| file.starts_with(PREFIX) && file.ends_with(SUFFIX);
    match durable::temporary_of(name) {
        Some((file, _)) => checkpoints(file) && durable::is_stale_temporary(name),
        None => name.strip_suffix(LEGACY_TMP).is_some_and(checkpoints),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::file::{read, write_durably};
    use super::*;

    fn sample(n: u8) -> Checkpoint {
        Checkpoint::new()
            .with("meta", format!("n={n}").into_bytes())
            .with("model", vec![n; 100])
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

    /// A part of another step than its checkpoint (the numbers of a job's ranks gone apart)
    /// does not make it whole; unstamped ones, as written before the stamp, still count.
    #[test]
    fn a_part_of_another_step_does_not_make_a_checkpoint_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(dir.path(), 3);
        let stamped = |steps: u32| sample(0).with(JOB_STAMP, format!("steps={steps}").into_bytes());
        let part = |seq: u64, part: &Checkpoint| {
            write_durably(dir.path(), "x", part).unwrap();
            fs::rename(dir.path().join("x"), store.part_path(seq, 1)).unwrap();
        };
        part(1, &sample(1));
        store.write(1, &sample(1)).unwrap();
        part(2, &stamped(20));
        store.write(2, &stamped(20)).unwrap();
        part(3, &stamped(40));
        store.write(3, &stamped(30)).unwrap();
        let loaded = store.latest_of_job(2).unwrap().unwrap();
        assert_eq!(loaded.seq, 2);
        assert!(
            loaded.skipped[0]
                .1
                .contains("another step (steps=40) than the checkpoint (steps=30)"),
            "{:?}",
            loaded.skipped
        );
        fs::remove_file(store.part_path(2, 1)).unwrap();
        part(2, &sample(2));
        assert_eq!(store.latest_of_job(2).unwrap().unwrap().seq, 1);
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

    #[cfg(unix)]
    #[test]
    fn cleaning_removes_dead_writers_temporaries_and_never_a_live_one_s() {
        let dir = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(dir.path(), 2);
        store.write(1, &sample(1)).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let live = std::os::unix::process::parent_id();
        let me = std::process::id();
        let names = [
            format!(".ckpt-000000000002.ember.{dead}.0.tmp"),
            format!(".ckpt-000000000002.rank1.ember.{live}.4.tmp"),
            format!(".ckpt-000000000002.ember.{me}.7.tmp"),
            format!(".model.bpk.{dead}.0.tmp"),
        ];
        for name in &names {
            fs::write(dir.path().join(name), b"half").unwrap();
        }
        store.clean().unwrap();
        let left = |name: &String| dir.path().join(name).exists();
        // The dead writer's and this process's own go; the live rank's, and a file that is
        // not a checkpoint's, stay.
        assert_eq!(
            names.iter().map(left).collect::<Vec<_>>(),
            [false, true, false, true]
        );
        assert_eq!(store.latest().unwrap().unwrap().seq, 1);
        // A new checkpoint's write goes through a name no other writer uses.
        store.write(2, &sample(2)).unwrap();
        assert!(left(&names[1]));
    }
}
