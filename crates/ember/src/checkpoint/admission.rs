//! Admission: whether a run may begin in a directory fresh, resume there, or start it over —
//! decided in one place, for `ember train`, the [`Trainer`](crate::Trainer) and every rank,
//! before anything is written.
//!
//! [`Admission::admit`] refuses:
//! - a directory another process is writing (its log or checkpoint directory's lock is held,
//!   or, for a bucket run, its lease: see `ember_write::remote::LeaseTiming`), naming that
//!   process;
//! - a fresh run, whatever its flags (with no checkpoints of its own too), where another run
//!   left checkpoints or, in a log directory checked for it, event files of its own naming;
//! - a resume with no whole checkpoint to go on from;
//! - a resume of a run that has finished: its newest whole checkpoint was taken at the end of
//!   its last epoch (the Trainer takes one at every epoch's end, so that checkpoint is how a
//!   finished run is told, with no marker to write or lose);
//! - a resume whose recorded settings (the batch size, …) differ from what its checkpoint
//!   holds, naming both values.
//!
//! Starting a run over is always admitted once no one else writes it: it discards what the
//! run wrote, and needs neither its checkpoints nor its recorded command.

use std::path::{Path, PathBuf};

use ember_write::{DirLock, LockError, Ownership};

use super::directory::{Checkpoints, Loaded};
use super::error::CheckpointError;

/// How a run asks to begin in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// A new run: the directory must hold no other run's checkpoints or log.
    Fresh,
    /// The run going on from its newest whole checkpoint.
    Resume,
    /// The run trained again from its first step, what it wrote discarded.
    Restart,
}

/// How the run a checkpoint was taken by cut its data: into a shard a rank and a slice a
/// device of the job that began it. A run that goes on on other devices or ranks keeps both
/// cuts, and counts its steps by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataLayout {
    /// The devices a rank the job began with: the slices of each rank's shard.
    pub devices: usize,
    /// The ranks the job began with: the shards of the data.
    pub data_ranks: usize,
}

impl DataLayout {
    /// The layout a checkpoint's `meta` records; `None` where it records none (a checkpoint
    /// of another trainer).
    fn of(loaded: &Loaded) -> Option<Self> {
        let number = |key: &str| meta_field(loaded, key)?.parse::<usize>().ok();
        let devices = number("devices")?;
        let data_ranks = number("data_ranks").or_else(|| number("ranks"))?;
        Some(Self {
            devices,
            data_ranks,
        })
    }
}

/// What a run claims, to be admitted or refused by [`admit`](Self::admit).
#[derive(Debug, Clone)]
pub struct Admission {
    begin: Begin,
    log_dir: Option<PathBuf>,
    checkpoint_dir: Option<PathBuf>,
    rank: u32,
    world_size: usize,
    epochs: Option<usize>,
    /// (name, value, whether the value is a rank's share, which a job of other ranks counts
    /// otherwise).
    settings: Vec<(String, usize, bool)>,
}

impl Admission {
    /// A claim to begin a run as `begin`, rank 0 of one, with nothing to check yet.
    pub fn new(begin: Begin) -> Self {
        Self {
            begin,
            log_dir: None,
            checkpoint_dir: None,
            rank: 0,
            world_size: 1,
            epochs: None,
            settings: Vec::new(),
        }
    }

    /// The run's log directory, not yet opened by this process: refused while another process
    /// writes it, and for a fresh run when it holds event files this rank would write.
    pub fn log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self
    }

    /// Where the run's checkpoints are (or would be, for a run that writes none).
    pub fn checkpoint_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.checkpoint_dir = Some(dir.into());
        self
    }

    /// This process's rank in a job of `world_size` ranks.
    pub fn rank(mut self, rank: u32, world_size: usize) -> Self {
        self.rank = rank;
        self.world_size = world_size.max(1);
        self
    }

    /// The epochs the run trains: a resume from a checkpoint at the end of the last is
    /// refused, the run having finished.
    pub fn epochs(mut self, epochs: usize) -> Self {
        self.epochs = Some(epochs);
        self
    }

    /// A setting the run was recorded with, that a resumed checkpoint must hold the same
    /// (`batch_size`: the examples of a worker's first batch, as the Trainer counts them).
    pub fn setting(mut self, name: &str, value: usize) -> Self {
        self.settings.push((name.to_owned(), value, false));
        self
    }

    /// A setting that counts this rank's share of the job (`train_examples`: the examples of
    /// an epoch on rank 0), compared only with a checkpoint of a job of as many ranks: a job
    /// resumed with fewer ranks runs the shares of several.
    pub fn rank_setting(mut self, name: &str, value: usize) -> Self {
        self.settings.push((name.to_owned(), value, true));
        self
    }

    /// Admits the run, or says why not; reads only, writes nothing. A resume admitted returns
    /// the [`DataLayout`] its checkpoint records, where it records one.
    pub fn admit(&self) -> Result<Option<DataLayout>, CheckpointError> {
        #[cfg(feature = "object-store")]
        if let Some(url) = self.log_dir.as_ref().and_then(|dir| dir.to_str()) {
            check_lease(url, self.rank)?;
        }
        for dir in self.log_dir.iter().chain(&self.checkpoint_dir) {
            if let Some(holder) = live_holder(dir, self.rank) {
                return Err(LockError::Held {
                    dir: dir.clone(),
                    holder,
                }
                .into());
            }
        }
        match self.begin {
            Begin::Fresh => self.admit_fresh().map(|()| None),
            Begin::Resume => self.admit_resume(),
            Begin::Restart => Ok(None),
        }
    }

    fn admit_fresh(&self) -> Result<(), CheckpointError> {
        if let Some(dir) = &self.checkpoint_dir
            && let Some((_, newest)) = Checkpoints::new(dir, 1).list()?.into_iter().next()
        {
            return Err(CheckpointError::AnotherRun {
                dir: dir.clone(),
                found: newest,
            });
        }
        let Some(dir) = self.log_dir.as_ref().filter(|dir| !is_remote(dir)) else {
            return Ok(());
        };
        match another_runs_event_file(dir, self.rank, self.world_size)? {
            Some(found) => Err(CheckpointError::AnotherRun {
                dir: dir.clone(),
                found,
            }),
            None => Ok(()),
        }
    }

    fn admit_resume(&self) -> Result<Option<DataLayout>, CheckpointError> {
        let Some(dir) = &self.checkpoint_dir else {
            return Ok(None);
        };
        let store = Checkpoints::new(dir, 1);
        let loaded = store.to_resume(self.world_size).map_err(|error| {
            // A job of more ranks than took the checkpoints finds none whole (the new ranks'
            // parts never existed): name the difference rather than each missing part.
            match store.latest_of_job(1).ok().flatten() {
                Some(taken) => match meta_field(&taken, "ranks").map(str::to_owned) {
                    Some(ranks) if ranks != self.world_size.to_string() => {
                        CheckpointError::Mismatch {
                            path: taken.path,
                            reason: format!(
                                "it was taken by a job of {ranks} rank(s), this one has {}",
                                self.world_size
                            ),
                        }
                    }
                    _ => error,
                },
                None => error,
            }
        })?;
        let field = |key: &str| meta_field(&loaded, key);
        // A job goes on with as many ranks as began it, or with fewer that divide them.
        let number = |key: &str| field(key).and_then(|n| n.parse::<usize>().ok());
        if let Some(ranks) = number("ranks")
            && !number("data_ranks")
                .unwrap_or(ranks)
                .is_multiple_of(self.world_size.max(1))
        {
            return Err(CheckpointError::Mismatch {
                path: loaded.path,
                reason: format!(
                    "it was taken by a job of {ranks} rank(s), this one has {}; a job goes on \
                     with as many ranks as began it, or with fewer that divide them",
                    self.world_size
                ),
            });
        }
        if let Some(epochs) = self.epochs
            && field("epoch_done") == Some("true")
            && field("epoch")
                .and_then(|e| e.parse::<usize>().ok())
                .is_some_and(|epoch| epoch == epochs)
        {
            return Err(CheckpointError::Finished {
                dir: dir.clone(),
                epochs,
                checkpoint: loaded.path,
            });
        }
        let same_ranks = number("ranks").is_none_or(|ranks| ranks == self.world_size);
        for (setting, recorded, per_rank) in &self.settings {
            if *per_rank && !same_ranks {
                continue;
            }
            let held = field(setting).and_then(|value| value.parse::<usize>().ok());
            if let Some(held) = held.filter(|held| held != recorded) {
                return Err(CheckpointError::SettingChanged {
                    checkpoint: loaded.path,
                    setting: setting.clone(),
                    recorded: *recorded,
                    held,
                });
            }
        }
        Ok(DataLayout::of(&loaded))
    }
}

/// The value of `key` in the checkpoint's `meta` section (`key=value` lines).
fn meta_field<'a>(loaded: &'a Loaded, key: &str) -> Option<&'a str> {
    std::str::from_utf8(loaded.checkpoint.section("meta")?)
        .ok()?
        .lines()
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, value)| value)
}

/// Whether the run whose checkpoints are in `dir` has trained all its `epochs`: its newest
/// whole checkpoint is at the end of the last. `false` without a whole checkpoint.
pub fn finished(dir: &Path, epochs: usize) -> Result<bool, CheckpointError> {
    match Admission::new(Begin::Resume)
        .checkpoint_dir(dir)
        .epochs(epochs)
        .admit_resume()
    {
        Err(CheckpointError::Finished { .. }) => Ok(true),
        Ok(_) | Err(CheckpointError::NothingToResume { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// How a run that goes on "if there is anything to go on from" begins with its checkpoints in
/// `dir`, in a job of `world_size` ranks: [`Begin::Resume`] from the newest whole checkpoint,
/// [`Begin::Fresh`] where there is no checkpoint file, [`Begin::Restart`] where there are files
/// but none whole (the run stopped while writing its first). A checkpoint taken by a job of
/// another rank count is refused, naming both, rather than started over. Reads only; whether
/// the run there is the caller's is the checkpoint's identity's to say when it is loaded.
pub fn begin_if_any(dir: &Path, world_size: usize) -> Result<Begin, CheckpointError> {
    let resume = Admission::new(Begin::Resume)
        .checkpoint_dir(dir)
        .rank(0, world_size);
    match resume.admit_resume() {
        Ok(_) => Ok(Begin::Resume),
        Err(CheckpointError::NothingToResume { .. }) => {
            if Checkpoints::new(dir, 1).list()?.is_empty() {
                Ok(Begin::Fresh)
            } else {
                Ok(Begin::Restart)
            }
        }
        Err(error) => Err(error),
    }
}

fn is_remote(dir: &Path) -> bool {
    dir.to_str().is_some_and(ember_write::is_remote)
}

/// Refuses a bucket run (`url`) whose lease of `rank` another process holds, waiting at most
/// the lease's stale time to tell a live holder from a dead one; a local directory passes.
#[cfg(feature = "object-store")]
fn check_lease(url: &str, rank: u32) -> Result<(), CheckpointError> {
    if !ember_write::is_remote(url) {
        return Ok(());
    }
    let timing = ember_write::remote::LeaseTiming::default();
    Ok(ember_write::remote::check_lease(url, rank, timing)?)
}

/// The pid (when readable) of the process holding `dir` for `rank`; a bucket's lease is
/// `check_lease`'s.
fn live_holder(dir: &Path, rank: u32) -> Option<Option<u32>> {
    if is_remote(dir) {
        return None;
    }
    DirLock::holder(dir, rank)
}

/// An event file (or another file ember's writers name) at the top of `dir` that this rank's
/// record would write: the log of a run before this one. Other ranks' files and the user's
/// own are not another run's.
fn another_runs_event_file(
    dir: &Path,
    rank: u32,
    world_size: usize,
) -> Result<Option<PathBuf>, CheckpointError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // Nothing there yet (or a path that cannot be one): making it is the record's to fail.
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(source) => {
            return Err(CheckpointError::Io {
                op: "list",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let ownership = Ownership {
        rank,
        world_size: u32::try_from(world_size).unwrap_or(u32::MAX),
    };
    Ok(entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .map(|entry| PathBuf::from(entry.file_name()))
        .filter(|name| ownership.owns(name))
        // An event file names the other run best.
        .min_by_key(|name| ember_write::naming::name_secs(&name.to_string_lossy()).is_none())
        .map(|name| dir.join(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;

    fn checkpoint_at(dir: &Path, meta: &str) {
        Checkpoints::new(dir, 3)
            .write(1, &Checkpoint::new().with("meta", meta.as_bytes().to_vec()))
            .unwrap();
    }

    #[test]
    fn a_fresh_run_is_refused_where_another_run_left_checkpoints_or_events() {
        let root = tempfile::tempdir().unwrap();
        let checkpoints = root.path().join("checkpoints");
        let fresh = || {
            Admission::new(Begin::Fresh)
                .log_dir(root.path())
                .checkpoint_dir(&checkpoints)
                .admit()
        };
        std::fs::write(root.path().join("notes.txt"), "the user's").unwrap();
        fresh().unwrap();
        std::fs::write(
            root.path().join("events.out.tfevents.1700000000.host.1.0"),
            b"",
        )
        .unwrap();
        let error = fresh().unwrap_err().to_string();
        assert!(
            error.contains("of another run") && error.contains("tfevents"),
            "{error}"
        );
        std::fs::remove_file(root.path().join("events.out.tfevents.1700000000.host.1.0")).unwrap();
        checkpoint_at(&checkpoints, "epoch=1");
        assert!(matches!(
            fresh().unwrap_err(),
            CheckpointError::AnotherRun { .. }
        ));
    }

    /// A resume admitted says how the run cut its data, so that a run going on on other
    /// devices or ranks counts its steps as the run did.
    #[test]
    fn a_resume_admitted_returns_the_devices_and_ranks_the_run_began_with() {
        let root = tempfile::tempdir().unwrap();
        let resume = || {
            Admission::new(Begin::Resume)
                .checkpoint_dir(root.path())
                .rank(0, 1)
                .admit()
        };
        // A job of 2 ranks on 1 device each, gone on as 1 rank: it keeps the 2 ranks' shards.
        checkpoint_at(root.path(), "epoch=1\ndevices=1\nranks=1\ndata_ranks=2");
        let layout = DataLayout {
            devices: 1,
            data_ranks: 2,
        };
        assert_eq!(resume().unwrap(), Some(layout));
        // Before data_ranks was recorded, the ranks were the shards.
        checkpoint_at(root.path(), "epoch=1\ndevices=2\nranks=1");
        let layout = DataLayout {
            devices: 2,
            data_ranks: 1,
        };
        assert_eq!(resume().unwrap(), Some(layout));
        checkpoint_at(root.path(), "epoch=1");
        assert_eq!(resume().unwrap(), None);
        let fresh = Admission::new(Begin::Restart).checkpoint_dir(root.path());
        assert_eq!(fresh.admit().unwrap(), None);
    }

    #[test]
    fn a_resume_is_refused_when_finished_or_when_a_setting_changed() {
        let root = tempfile::tempdir().unwrap();
        checkpoint_at(root.path(), "epoch=2\nepoch_done=true\nbatch_size=32");
        let resume = |epochs, batch| {
            Admission::new(Begin::Resume)
                .checkpoint_dir(root.path())
                .epochs(epochs)
                .setting("batch_size", batch)
                .admit()
        };
        assert!(matches!(
            resume(2, 32).unwrap_err(),
            CheckpointError::Finished { epochs: 2, .. }
        ));
        assert!(finished(root.path(), 2).unwrap());
        assert!(!finished(root.path(), 3).unwrap());
        resume(3, 32).unwrap();
        let error = resume(3, 75).unwrap_err().to_string();
        assert!(error.contains("batch_size") && error.contains("75") && error.contains("32"));
        assert!(!finished(&root.path().join("none"), 2).unwrap());
    }

    #[test]
    fn resume_if_any_begins_by_what_the_directory_holds() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("checkpoints");
        assert_eq!(begin_if_any(&dir, 1).unwrap(), Begin::Fresh);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ckpt-000000000001.ember"), b"torn").unwrap();
        assert_eq!(begin_if_any(&dir, 1).unwrap(), Begin::Restart);
        checkpoint_at(&dir, "epoch=1\nranks=1");
        assert_eq!(begin_if_any(&dir, 1).unwrap(), Begin::Resume);
        // A job of more ranks than began it is refused: named, not started over.
        let error = begin_if_any(&dir, 2).unwrap_err().to_string();
        assert!(error.contains("1 rank(s), this one has 2"), "{error}");
        // A job of fewer ranks that divide them goes on, once the checkpoint is whole with the
        // part of every rank that took it.
        checkpoint_at(&dir, "epoch=1\nranks=2");
        assert_eq!(begin_if_any(&dir, 1).unwrap(), Begin::Restart);
        let part = Checkpoint::new().with("meta", b"rank=1".to_vec());
        Checkpoints::new(&dir, 3).write_part(1, 1, &part).unwrap();
        assert_eq!(begin_if_any(&dir, 1).unwrap(), Begin::Resume);
    }

    /// Every file under `dir` and its bytes (the lock files aside: taking a lock writes one).
    fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with(ember_write::lock::LOCKS) {
                    found.extend(files(&path));
                }
            } else {
                found.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
        found.sort();
        found
    }

    #[test]
    fn the_trainer_is_refused_by_the_same_admission() {
        use burn::optim::SgdConfig;
        use burn::tensor::Device;
        use ember_tests::{Mlp, regression_loader};

        use crate::{CheckpointConfig, TrainError, Trainer, TrainerConfig};

        let device = Device::flex().autodiff();
        let root = tempfile::tempdir().unwrap();
        let checkpoints = root.path().join("checkpoints");
        let fit = |begin: Begin| {
            let mut trainer = Trainer::new(
                vec![device.clone(), device.clone()],
                SgdConfig::new().init(),
                0.05,
                TrainerConfig {
                    epochs: 2,
                    histogram_every: None,
                    checkpoints: Some(CheckpointConfig::new(&checkpoints, 2)),
                    ..TrainerConfig::default()
                },
            );
            trainer = match begin {
                Begin::Fresh => trainer,
                Begin::Resume => trainer.resume_from(&checkpoints),
                Begin::Restart => trainer.start_over(&checkpoints),
            };
            let loader = regression_loader(1, 64, 8, &device);
            trainer.fit(Mlp::new(4, &device), loader, None, None)
        };
        let refusal = |begin: Begin| match fit(begin) {
            Err(TrainError::Checkpoint(error)) => error,
            other => panic!("{begin:?} was not refused: {:?}", other.map(|(_, r)| r)),
        };
        let admission = |begin| {
            Admission::new(begin)
                .checkpoint_dir(&checkpoints)
                .admit()
                .unwrap_err()
                .to_string()
        };
        fit(Begin::Fresh).unwrap();
        let finished = files(&checkpoints);

        // A fresh run where another run left its checkpoints: refused as the one admission
        // refuses it, the first run's files as they were.
        let error = refusal(Begin::Fresh);
        assert!(
            matches!(error, CheckpointError::AnotherRun { .. }),
            "{error}"
        );
        assert_eq!(error.to_string(), admission(Begin::Fresh));
        assert!(files(&checkpoints) == finished);

        // A directory another writer holds, even to start over.
        let held = DirLock::acquire(&checkpoints, 0).unwrap();
        let error = refusal(Begin::Restart);
        assert!(matches!(error, CheckpointError::Locked(_)), "{error}");
        assert_eq!(error.to_string(), admission(Begin::Restart));
        drop(held);
        assert!(files(&checkpoints) == finished);

        let (_, report) = fit(Begin::Restart).unwrap();
        assert_eq!(report.steps, 8);
    }

    /// Before: a bucket run was never locked, and a second `--resume` of a live one was let in.
    #[cfg(feature = "object-store")]
    #[test]
    fn a_bucket_run_another_process_writes_is_refused_naming_it_until_it_closes() {
        use ember_write::remote::RemoteError;
        let bucket = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(bucket.path().join("run")).unwrap();
        let url = format!("file://{}/run", bucket.path().display());
        let mut record = crate::SummaryRecord::builder(&url).build().unwrap();
        record.add_scalar("loss", 1.0, 1).unwrap();
        let admitted = Admission::new(Begin::Restart).log_dir(&url).admit();
        assert!(
            matches!(
                &admitted,
                Err(CheckpointError::Leased(RemoteError::Leased { pid, .. }))
                    if *pid == std::process::id()
            ),
            "{admitted:?}"
        );
        let message = admitted.unwrap_err().to_string();
        assert!(message.contains(&format!("is in use by process {}", std::process::id())));
        let second = crate::SummaryRecord::builder(&url).build();
        assert!(second.is_err(), "a second record of a leased run");
        record.close().unwrap();
        Admission::new(Begin::Restart)
            .log_dir(&url)
            .admit()
            .unwrap();
        let read = crate::read::scalars(&url).unwrap();
        assert_eq!(read["loss"].len(), 1);
    }
}
