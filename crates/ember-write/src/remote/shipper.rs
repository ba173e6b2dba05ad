//! The mirror's thread: what of the staging directory goes to the store, when, and as which
//! objects.
//!
//! - An event file (summary, lineage, explain) grows by appended records: each pass ships its
//!   new whole records as the next segment object, keeps the shipped state beside the files,
//!   and then frees the shipped bytes on the local disk (a hole punched in the file, its
//!   length kept), so the staging directory holds on disk about what is not shipped yet.
//! - Any other file (an exported `.npy`, the projector's config and tensors) is shipped whole,
//!   under its own name, when it changed: at once on an explicit ship (the pool has flushed, so
//!   it is whole), and on a timed pass once it has stayed the same since the previous pass. The
//!   projector's files are replaced by a rename, whole at any moment; an export is written once.
//! - Every upload of a leased mirror asks its claim first, and a file shipped whole replaces
//!   only the version it read then (see `lease`'s fencing rule): once the lease is lost the
//!   mirror uploads nothing more, and its staging's state goes, so that nothing ships it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use super::claim::{Claim, Unfenced, put_fenced};
use super::cut::{Cut, Cuts, ShippedCut};
use super::markers::{marked_file, marker_of};
use super::messages::{CLOSE_PATIENCE, MirrorStats, Request};
use super::staged::{PROJECTOR_CONFIG, Staged, staged_files};
use super::staging::STATE_FILE;
use super::store::RemoteError;
use crate::framing::{HEADER_LEN, masked_crc32c};

mod names;

/// The most bytes of records one segment object holds: far under the 5 GiB a single PUT may
/// carry on S3, and what the shipper holds in memory at once.
pub(super) const MAX_SEGMENT: usize = 64 << 20;

/// How often the backlog is measured between passes, so that a caller over the budget sees it
/// within this long.
const MEASURE_EVERY: Duration = Duration::from_millis(250);

/// A file shipped whole: its length and modification time.
type Version = (u64, Option<SystemTime>);

/// The mirror's thread.
pub(super) struct Shipper {
    pub(super) store: Box<dyn ObjectStore>,
    pub(super) prefix: ObjectPath,
    pub(super) staging: PathBuf,
    /// The log directory's URL, kept with the progress for a writer that may be killed.
    pub(super) url: String,
    /// For each event file (relative name): bytes shipped, segments shipped.
    pub(super) shipped: BTreeMap<String, (u64, u64)>,
    /// For each event file this mirror shipped segments of, where each segment ends, in order
    /// (from its first segment on: a mirror of a killed writer's staging has none).
    pub(super) segment_ends: BTreeMap<String, Vec<u64>>,
    /// The cuts taken and not yet shipped: no segment crosses one (see [`super::cut`]).
    pub(super) cuts: Arc<std::sync::Mutex<Cuts>>,
    /// For each other file: the version shipped, and the version seen at the last pass.
    pub(super) whole: BTreeMap<String, (Option<Version>, Version)>,
    /// For each staged event file and export directory (a top-level name), the name its
    /// objects have in the store: its own, or, where another writer had taken that, the first
    /// later second free (see [`Shipper::claim`]).
    pub(super) claimed: BTreeMap<String, String>,
    /// The files this mirror has marked as its writers' in the store (see [`super::markers`]).
    pub(super) marked: BTreeSet<String>,
    pub(super) stats: Arc<std::sync::Mutex<MirrorStats>>,
    /// Bytes written to the staging directory and not in the store yet, as last measured.
    pub(super) backlog: Arc<AtomicU64>,
    /// This writer's claim on the run, which every upload asks first, when the mirror holds
    /// the run's lease.
    pub(super) claim: Option<Claim>,
    /// The thread that renews the lease; dropped, it releases it.
    pub(super) lease: Option<super::lease::Keeper>,
    /// The shipped state last kept in the staging directory, encoded.
    pub(super) kept_state: Option<String>,
    /// Where a test kills this thread.
    pub(super) kill: KillSwitch,
}

/// Where a test kills the mirror's thread as SIGKILL would, nothing after it running: after a
/// given number of the steps that change the store or the staging directory (an upload, a
/// write of the shipped state, a freeing of shipped bytes). Outside tests it does nothing.
#[derive(Debug, Default)]
pub(super) struct KillSwitch {
    #[cfg(test)]
    steps_left: Option<usize>,
}

impl KillSwitch {
    /// Kills the thread after `steps` steps.
    #[cfg(test)]
    pub(super) fn after(steps: usize) -> Self {
        Self {
            steps_left: Some(steps),
        }
    }

    /// One step done.
    fn step(&mut self) {
        #[cfg(test)]
        if let Some(left) = self.steps_left.as_mut() {
            if *left == 0 {
                // No panic hook, no message: the thread just ends, as a killed one does.
                std::panic::resume_unwind(Box::new("killed by a test"));
            }
            *left -= 1;
        }
    }
}

impl Shipper {
    pub(super) fn run(
        mut self,
        runtime: tokio::runtime::Runtime,
        rx: Receiver<Request>,
        interval: Duration,
    ) -> MirrorStats {
        let mut next_pass = Instant::now() + interval;
        loop {
            let wait = next_pass
                .saturating_duration_since(Instant::now())
                .min(MEASURE_EVERY);
            match rx.recv_timeout(wait) {
                Ok(Request::Ship(ack)) => {
                    let result = runtime.block_on(self.ship_all(true));
                    let _ = ack.send(result);
                }
                Ok(Request::ShipTo(id, ack)) => {
                    // Shipped while the cut is still open, so that this pass's segment stops
                    // at it too: records written after the cut would otherwise share it.
                    let shipped = runtime.block_on(self.ship_all(true));
                    let result = match Cuts::lock(&self.cuts).close(id) {
                        Some(cut) => shipped.and_then(|()| self.shipped_cut(cut)),
                        None => Err(format!("no cut numbered {id} is open")),
                    };
                    let _ = ack.send(result);
                }
                Ok(Request::Forget(id)) => drop(Cuts::lock(&self.cuts).close(id)),
                Ok(Request::Close(ack)) => {
                    // The last records have nowhere else to go: a store that is down gets a
                    // while to come back before the close gives up on them (a lost lease
                    // does not come back).
                    let deadline = Instant::now() + CLOSE_PATIENCE;
                    let result = loop {
                        match runtime.block_on(self.ship_all(true)) {
                            Err(error) if Instant::now() < deadline && !self.lost() => {
                                log::warn!(
                                    "ember-write: shipping the last records: {error}; trying again"
                                );
                                std::thread::sleep(Duration::from_secs(1));
                            }
                            result => break result,
                        }
                    };
                    drop(self.lease.take());
                    let _ = ack.send(result);
                    break;
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() >= next_pass => {
                    next_pass = Instant::now() + interval;
                    if let Err(error) = runtime.block_on(self.ship_all(false)) {
                        log::warn!(
                            "ember-write: shipping to the object store: {error}; trying again"
                        );
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.measure(),
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = runtime.block_on(self.ship_all(true));
                    drop(self.lease.take());
                    break;
                }
            }
        }
        *self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ships what is new in every file of the staging directory; `settled` when the pool has
    /// just flushed, so that every file is whole.
    async fn ship_all(&mut self, settled: bool) -> Result<(), String> {
        self.fence()?;
        let files = self.staged()?;
        let mut first_error = None;
        for file in &files {
            let shipped = if file.event_file {
                self.ship_records(file).await
            } else {
                self.ship_whole(file, settled).await
            };
            if let Err(error) = shipped {
                self.count(|s| s.failed_uploads += 1);
                first_error.get_or_insert(error);
            }
        }
        self.publish_backlog(&files);
        if let Err(error) = self.keep_state() {
            first_error.get_or_insert(error);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Keeps what was shipped beside the files, durably, where it changed: what a killed
    /// writer's staging still needs is what `ember push` ships, from there. It must never say
    /// less than the bytes freed ([`free_shipped`]): shipped again, they would be zeros.
    fn keep_state(&mut self) -> Result<(), String> {
        if self.lost() {
            return Ok(());
        }
        let state = super::staging::ShipState {
            url: self.url.clone(),
            shipped: self.shipped.clone(),
            claimed: self.claimed.clone(),
        };
        let encoded = state.encode();
        if self.kept_state.as_ref() == Some(&encoded) {
            return Ok(());
        }
        state.write(&self.staging).map_err(|error| {
            format!(
                "keeping what was shipped in {}: {error}",
                self.staging.display()
            )
        })?;
        self.kept_state = Some(encoded);
        self.kill.step();
        Ok(())
    }

    fn lost(&self) -> bool {
        self.claim.as_ref().is_some_and(Claim::is_lost)
    }

    /// Refuses the next upload unless this writer holds the run's lease now (see `lease`'s
    /// fencing rule). Once it is lost, the staging's state goes too: what the staging holds
    /// was written after the new holder's checkpoint, and `ember push` leaves a staging
    /// directory without a state alone.
    fn fence(&mut self) -> Result<(), String> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        claim.check().map_err(|error| {
            if matches!(error, RemoteError::LeaseLost { .. }) && self.kept_state.take().is_some() {
                let _ = fs::remove_file(self.staging.join(STATE_FILE));
            }
            error.to_string()
        })
    }

    /// Ships the event file's new whole records as its next segments, each of at most
    /// [`MAX_SEGMENT`] bytes (a record larger than that alone): a backlog of any size goes as
    /// PUTs the store takes, read a segment at a time.
    async fn ship_records(&mut self, file: &Staged) -> Result<(), String> {
        loop {
            let (from, segment) = self.shipped.get(&file.relative).copied().unwrap_or((0, 0));
            // The file's length and the nearest cut are read together (see `super::cut`).
            let until = {
                let cuts = Cuts::lock(&self.cuts);
                let len = fs::metadata(&file.path).map_or(0, |meta| meta.len());
                cuts.bound(&file.relative, from)
                    .map_or(len, |cut| cut.min(len))
            };
            let max = usize::try_from(until.saturating_sub(from))
                .unwrap_or(usize::MAX)
                .min(MAX_SEGMENT);
            if max == 0 {
                return Ok(());
            }
            let bytes = read_segment(&file.path, from, max)
                .map_err(|e| format!("reading {}: {e}", file.path.display()))?;
            let whole = whole_records(&bytes);
            if whole == 0 {
                return match bytes.get(..HEADER_LEN) {
                    Some(header) if record_len(header).is_none() => Err(format!(
                        "{} holds no record at byte {from} (its header's checksum is wrong): \
                         nothing from there is shipped",
                        file.path.display()
                    )),
                    _ => Ok(()),
                };
            }
            let payload = bytes[..whole].to_vec();
            if segment == 0 {
                let relative = file.relative.clone();
                let first = self.after_the_run_s(&relative).await?;
                self.claim(
                    (&relative, first),
                    |name| format!("{name}.00000001"),
                    &payload,
                )
                .await?;
            } else {
                let name = self.claimed_name(&file.relative);
                let relative = format!("{name}.{:08}", segment + 1);
                self.mark(&relative).await?;
                let object = self.object(&relative);
                self.fence()?;
                self.store
                    .put(&object, payload.into())
                    .await
                    .map_err(|e| format!("uploading {object}: {e}"))?;
            }
            self.kill.step();
            self.shipped
                .insert(file.relative.clone(), (from + whole as u64, segment + 1));
            let ends = self.segment_ends.entry(file.relative.clone()).or_default();
            if ends.len() as u64 == segment {
                ends.push(from + whole as u64);
            }
            // Said first, freed then: a kill between the two costs a segment shipped again,
            // with the same records first, in place of the one in the store.
            self.keep_state()?;
            free_shipped(&file.path, from, whole as u64);
            self.kill.step();
            self.count(|s| {
                s.segments += 1;
                s.bytes += whole as u64;
            });
        }
    }

    /// Ships a file that is not an event file whole, when it changed and is whole.
    async fn ship_whole(&mut self, file: &Staged, settled: bool) -> Result<(), String> {
        let Some(now) = version(&file.path) else {
            return Ok(());
        };
        let (shipped, seen) = self
            .whole
            .get(&file.relative)
            .copied()
            .unwrap_or((None, now));
        let stable = settled || (seen == now && self.whole.contains_key(&file.relative));
        self.whole.insert(file.relative.clone(), (shipped, now));
        if shipped == Some(now) || !stable {
            return Ok(());
        }
        let bytes =
            fs::read(&file.path).map_err(|e| format!("reading {}: {e}", file.path.display()))?;
        let len = bytes.len() as u64;
        // An export directory is claimed by its first file, as an event file by its first
        // segment; the projector's files are the log directory's own, replaced in place.
        let top = file
            .relative
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let unclaimed_export = top.starts_with("export_") && !self.claimed.contains_key(&top);
        if unclaimed_export {
            let rest = file.relative[top.len()..].to_owned();
            self.claim((&top, top.clone()), |name| format!("{name}{rest}"), &bytes)
                .await?;
        } else {
            let relative = self.object_relative(&file.relative);
            self.mark(&relative).await?;
            let object = self.object(&relative);
            self.replace(&object, bytes).await?;
        }
        self.kill.step();
        self.whole.insert(file.relative.clone(), (Some(now), now));
        self.count(|s| {
            s.objects += 1;
            s.bytes += len;
        });
        Ok(())
    }

    /// Marks the file the object `relative` is part of as this run's, before the object is
    /// put (see [`super::markers`]); once a file for this mirror.
    async fn mark(&mut self, relative: &str) -> Result<(), String> {
        let file = marked_file(relative);
        if self.marked.contains(&file) {
            return Ok(());
        }
        let marker = self.object(&marker_of(relative));
        self.fence()?;
        self.store
            .put(&marker, Vec::new().into())
            .await
            .map_err(|e| format!("uploading {marker}: {e}"))?;
        self.marked.insert(file);
        Ok(())
    }

    /// Writes `bytes` as `object`, whole, replacing only what this writer read of it: fenced
    /// by the claim where the mirror holds the run's lease.
    async fn replace(&mut self, object: &ObjectPath, bytes: Vec<u8>) -> Result<(), String> {
        let Some(claim) = self.claim.clone() else {
            return self
                .store
                .put(object, bytes.into())
                .await
                .map(drop)
                .map_err(|e| format!("uploading {object}: {e}"));
        };
        self.fence()?;
        let check = || claim.check();
        match put_fenced(self.store.as_ref(), object, bytes.into(), &check).await {
            Ok(()) => Ok(()),
            // Said through the fence, which lets the staging go once the lease is lost.
            Err(Unfenced::Refused(error)) => self.fence().and(Err(error.to_string())),
            Err(Unfenced::Changed) => Err(format!(
                "{object} changed while this writer replaced it (another writer's now): not \
                 replaced"
            )),
            Err(Unfenced::Store(e)) => Err(format!("uploading {object}: {e}")),
        }
    }

    /// The objects that hold the log up to `cut`, which every file of it has been shipped
    /// past: each event file's segments before the cut's length (none crosses it), and every
    /// other file then there, under the names claimed for them.
    fn shipped_cut(&self, cut: Cut) -> Result<ShippedCut, String> {
        let mut shipped = ShippedCut {
            projector_config: cut.projector_config,
            ..ShippedCut::default()
        };
        for (relative, len) in cut.events {
            if len == 0 {
                continue;
            }
            let ends = self
                .segment_ends
                .get(&relative)
                .map_or(&[][..], Vec::as_slice);
            let count = ends.iter().take_while(|&&end| end <= len).count();
            if count == 0 || ends[count - 1] != len {
                return Err(format!(
                    "{relative} is not shipped up to the checkpoint's {len} bytes as segments \
                     of its own"
                ));
            }
            let name = self.claimed_name(&relative);
            let mut start = 0;
            for (index, &end) in ends[..count].iter().enumerate() {
                shipped
                    .objects
                    .insert(format!("{name}.{:08}", index + 1), end - start);
                start = end;
            }
        }
        for (relative, len) in cut.whole {
            if !matches!(self.whole.get(&relative), Some((Some(_), _))) {
                return Err(format!("{relative} is not shipped yet"));
            }
            if relative != PROJECTOR_CONFIG {
                shipped.objects.insert(self.object_relative(&relative), len);
            }
        }
        Ok(shipped)
    }

    /// Every regular file of the staging directory: see [`staged_files`].
    fn staged(&self) -> Result<Vec<Staged>, String> {
        staged_files(&self.staging)
    }

    /// Measures the backlog between passes.
    fn measure(&self) {
        if let Ok(files) = self.staged() {
            self.publish_backlog(&files);
        }
    }

    fn publish_backlog(&self, files: &[Staged]) {
        let backlog: u64 = files
            .iter()
            .map(|file| {
                let Some((len, modified)) = version(&file.path) else {
                    return 0;
                };
                if file.event_file {
                    let shipped = self.shipped.get(&file.relative).map_or(0, |s| s.0);
                    len.saturating_sub(shipped)
                } else {
                    match self.whole.get(&file.relative) {
                        Some((Some(shipped), _)) if *shipped == (len, modified) => 0,
                        _ => len,
                    }
                }
            })
            .sum();
        self.backlog.store(backlog, Ordering::Relaxed);
        self.count(|s| s.backlog_bytes = backlog);
    }

    fn count(&self, f: impl FnOnce(&mut MirrorStats)) {
        f(&mut self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

fn version(path: &Path) -> Option<Version> {
    let meta = fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()))
}

/// Up to `max` bytes of `path` from `from`, or, where the first record there is larger than
/// `max`, that record whole.
pub(super) fn read_segment(path: &Path, from: u64, max: usize) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    (&mut file).take(max as u64).read_to_end(&mut bytes)?;
    let first_len = bytes.get(..HEADER_LEN).and_then(record_len);
    if let (0, Some(len)) = (whole_records(&bytes), first_len) {
        let record = len.saturating_add(16);
        if record > bytes.len() as u64 {
            file.seek(SeekFrom::Start(from))?;
            bytes.clear();
            file.take(record).read_to_end(&mut bytes)?;
        }
    }
    Ok(bytes)
}

/// Gives the disk blocks of bytes already in the store back, keeping the file's length (and
/// so the writer's offsets): a long run's staging directory holds what is not shipped, not the
/// whole log. Where the file system cannot punch holes, the bytes stay until the close.
#[cfg(target_os = "linux")]
fn free_shipped(path: &Path, from: u64, len: u64) {
    use rustix::fs::{FallocateFlags, fallocate};
    if let Ok(file) = fs::OpenOptions::new().write(true).open(path) {
        let _ = fallocate(
            &file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            from,
            len,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn free_shipped(_path: &Path, _from: u64, _len: u64) {}

/// How many leading bytes of `bytes` are whole framed records: each is a length (8 bytes), its
/// CRC (4), the data and its CRC (4). A record still being written is left for later, and so
/// is anything from a header whose CRC is wrong on (zeros, where bytes were freed).
pub(super) fn whole_records(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    while bytes.len() - at >= HEADER_LEN {
        let Some(len) = record_len(&bytes[at..at + HEADER_LEN]) else {
            break;
        };
        let Ok(len) = usize::try_from(len) else {
            break;
        };
        let Some(end) = at.checked_add(16).and_then(|n| n.checked_add(len)) else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        at = end;
    }
    at
}

/// The data length a record header (its first [`HEADER_LEN`] bytes) declares, when its CRC
/// holds.
fn record_len(header: &[u8]) -> Option<u64> {
    let mut len = [0u8; 8];
    len.copy_from_slice(header.get(..8)?);
    let mut crc = [0u8; 4];
    crc.copy_from_slice(header.get(8..HEADER_LEN)?);
    (masked_crc32c(&len) == u32::from_le_bytes(crc)).then_some(u64::from_le_bytes(len))
}
