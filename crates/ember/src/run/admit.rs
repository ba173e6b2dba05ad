//! Opening a run: admitted or refused before anything is written (see the `run` module docs),
//! then claimed and recorded.

use std::path::{Path, PathBuf};

use ember_write::{DirLock, Journal, Ownership};

use super::identity::RunId;
use super::model::{self, INTERRUPTED_MODEL_FILE, MODEL_FILE, MODEL_RECORD};
use super::place::Place;
use super::record::{LEGACY_COMMAND_FILE, RECORD_FILE, RunRecord};
use super::{Begin, Run, RunBuilder};
use crate::checkpoint::meta::Fields;
use crate::checkpoint::{CheckpointError, Checkpoints, Loaded};

/// The longest name a run writes beside its checkpoints: a rank's part's temporary file,
/// `.ckpt-<12 digits>.rank<rank>.ember.<pid>.<count>.tmp`, with room for large numbers.
const LONGEST_NAME: usize = 64;

/// The longest path the system opens (Linux's `PATH_MAX`, with its terminating zero).
const PATH_MAX: usize = 4095;

/// The longest file name (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// What admission found: the run's places, its record, how it begins, the checkpoint a resume
/// goes on from and its id.
struct Admitted {
    checkpoints: Place,
    dir: Option<Place>,
    record: Option<RunRecord>,
    begin: Begin,
    newest: Option<Loaded>,
    id: Option<RunId>,
}

impl RunBuilder {
    /// Opens the run: admits it or says why not, having changed nothing; then takes its
    /// checkpoint directory's lock and, on rank 0, writes its record where it has none (a fresh
    /// run, a run whose record was lost). See the module docs for what is refused.
    pub fn open(self) -> Result<Run, CheckpointError> {
        let Admitted {
            checkpoints,
            dir,
            record,
            begin,
            newest,
            id,
        } = self.admitted()?;
        let lock = match checkpoints.remote() {
            false if self.writes_checkpoints || begin != Begin::Fresh => {
                Some(DirLock::acquire(checkpoints.path(), self.rank)?)
            }
            _ => None,
        };
        let recorded = record.as_ref().and_then(|r| r.command.clone());
        let command = recorded.clone().or(self.command.clone());
        let unrecorded = record.is_none() || (recorded.is_none() && command.is_some());
        if self.rank == 0 && unrecorded && (self.writes_checkpoints || begin != Begin::Fresh) {
            let record = RunRecord {
                id: id.clone(),
                command: command.clone(),
            };
            record.write_at(&checkpoints)?;
        }
        Ok(Run {
            checkpoints,
            dir,
            rank: self.rank,
            world: self.world,
            begin,
            id,
            settings: self.settings,
            format: self.format,
            newest,
            lock,
        })
    }

    /// Whether [`open`](Self::open) would admit the run: `Ok` or the refusal, reading only.
    pub fn admit(&self) -> Result<Begin, CheckpointError> {
        self.admitted().map(|admitted| admitted.begin)
    }

    /// Admits the run, reading only (see the module docs for what is refused).
    fn admitted(&self) -> Result<Admitted, CheckpointError> {
        let checkpoints = Place::at(&self.checkpoints);
        let dir = self.dir.as_ref().map(Place::at);
        self.refuse_holders(dir.as_ref(), &checkpoints)?;
        refuse_long_paths(&checkpoints)?;
        let record = RunRecord::read_at(&checkpoints)?;
        let store = Checkpoints::at(checkpoints.clone(), 1);
        let (begin, newest) = self.settle(&store, record.as_ref())?;
        let taken_by = match &newest {
            Some(loaded) => loaded
                .meta()
                .run()
                .map_err(|reason| bad_meta(loaded, reason))?,
            None => None,
        };
        let id = match &record {
            Some(record) => record.id.clone(),
            // A record lost (or a run's first start): the run is its checkpoint's, else new.
            None => taken_by.or_else(|| (self.rank == 0).then(RunId::new)),
        };
        match (&begin, &newest) {
            (Begin::Resume, Some(loaded)) => {
                let recorded = record.as_ref().map(|_| id.as_ref());
                self.admit_resume(loaded, recorded, dir.as_ref())?;
            }
            (Begin::Fresh, _) => self.refuse_occupied(&store, dir.as_ref())?,
            (Begin::Restart, _) if record.is_none() => refuse_foreign_model(dir.as_ref())?,
            _ => {}
        }
        Ok(Admitted {
            checkpoints,
            dir,
            record,
            begin,
            newest,
            id,
        })
    }

    /// Refuses a run directory or checkpoint directory another process writes, naming it. A
    /// bucket run's one claim is its lease, on the run's prefix.
    fn refuse_holders(
        &self,
        dir: Option<&Place>,
        checkpoints: &Place,
    ) -> Result<(), CheckpointError> {
        if let Some(dir) = dir {
            dir.refuse_holder(self.rank)?;
        }
        if !checkpoints.remote() {
            checkpoints.refuse_holder(self.rank)?;
        }
        Ok(())
    }

    /// How the run begins, settled, with the checkpoint a resume goes on from, read once.
    fn settle(
        &self,
        store: &Checkpoints,
        record: Option<&RunRecord>,
    ) -> Result<(Begin, Option<Loaded>), CheckpointError> {
        match self.begin {
            Begin::Fresh => Ok((Begin::Fresh, None)),
            Begin::Restart => Ok((Begin::Restart, None)),
            Begin::Resume => {
                let loaded = store
                    .to_resume(self.world)
                    .map_err(|error| self.more_ranks(store, error))?;
                Ok((Begin::Resume, Some(loaded)))
            }
            Begin::ResumeIfAny => match store.newest_whole(self.world)? {
                Ok(loaded) => Ok((Begin::Resume, Some(loaded))),
                // The run's record, or checkpoint files none of which is whole: this run,
                // stopped before its first whole checkpoint, its files its own to discard.
                Err(_) if record.is_some() || !store.list()?.is_empty() => {
                    Ok((Begin::Restart, None))
                }
                Err(_) => Ok((Begin::Fresh, None)),
            },
        }
    }

    /// A job of more ranks than took the checkpoints finds none whole (the new ranks' parts
    /// never existed): the difference named rather than each missing part.
    fn more_ranks(&self, store: &Checkpoints, error: CheckpointError) -> CheckpointError {
        let Some(taken) = store.latest_of_job(1).ok().flatten() else {
            return error;
        };
        match taken.meta().usize("ranks") {
            Ok(ranks) if ranks != self.world => CheckpointError::Mismatch {
                path: taken.path,
                reason: format!(
                    "it was taken by a job of {ranks} rank(s), this one has {}",
                    self.world
                ),
            },
            _ => error,
        }
    }

    /// Admits a resume from `loaded`, the record's run being `recorded` (`None`: no record; a
    /// record of an ember from before ids holds `Some(None)`).
    fn admit_resume(
        &self,
        loaded: &Loaded,
        recorded: Option<Option<&RunId>>,
        dir: Option<&Place>,
    ) -> Result<(), CheckpointError> {
        let meta = loaded.meta();
        let taken_by = meta.run().map_err(|reason| bad_meta(loaded, reason))?;
        if let (Some(theirs), Some(ours)) = (&taken_by, recorded)
            && Some(theirs) != ours
        {
            return Err(CheckpointError::OtherRun {
                checkpoint: loaded.path.clone(),
                taken_by: theirs.to_string(),
                this_run: ours.map_or_else(
                    || "one of an ember without run ids".into(),
                    ToString::to_string,
                ),
            });
        }
        self.admit_ranks(loaded, &meta)?;
        self.admit_unfinished(loaded, &meta, dir, taken_by.as_ref().or(recorded.flatten()))?;
        self.admit_settings(loaded, &meta, taken_by.is_some())
    }

    /// A job goes on with as many ranks as began it, or with fewer that divide them.
    fn admit_ranks(&self, loaded: &Loaded, meta: &Fields) -> Result<(), CheckpointError> {
        let Ok(ranks) = meta.usize("ranks") else {
            return Ok(());
        };
        if meta
            .usize("data_ranks")
            .unwrap_or(ranks)
            .is_multiple_of(self.world)
        {
            return Ok(());
        }
        Err(CheckpointError::Mismatch {
            path: loaded.path.clone(),
            reason: format!(
                "it was taken by a job of {ranks} rank(s), this one has {}; a job goes on with \
                 as many ranks as began it, or with fewer that divide them",
                self.world
            ),
        })
    }

    /// The settings, format and counts the checkpoint was taken with are the run's. A
    /// checkpoint of an ember from before run ids (`identified` false) records no settings.
    fn admit_settings(
        &self,
        loaded: &Loaded,
        meta: &Fields,
        identified: bool,
    ) -> Result<(), CheckpointError> {
        let mut differences = Vec::new();
        if identified {
            let settings = meta.settings().map_err(|reason| bad_meta(loaded, reason))?;
            differences = settings.differences(&self.settings);
        }
        if let (Ok(theirs), Some(ours)) = (meta.text("format"), self.format)
            && theirs != super::format_name(ours)
        {
            differences.push(format!(
                "format: {theirs} there, {} here",
                super::format_name(ours)
            ));
        }
        let same_ranks = meta.usize("ranks").is_ok_and(|ranks| ranks == self.world)
            || meta.text("ranks").is_err();
        for (name, given, per_rank) in &self.counts {
            if *per_rank && !same_ranks {
                continue;
            }
            if let Ok(held) = meta.usize(name)
                && held != *given
            {
                differences.push(format!("{name}: {held} there, {given} here"));
            }
        }
        // A setting the Trainer also counts (the batch, the data's size) is named once.
        let mut seen = std::collections::BTreeSet::new();
        differences.retain(|difference| seen.insert(difference.clone()));
        if differences.is_empty() {
            return Ok(());
        }
        Err(CheckpointError::SettingsDiffer {
            checkpoint: loaded.path.clone(),
            differences,
        })
    }

    /// Refuses a resume of a run that has finished: its checkpoint is at the end of its last
    /// epoch and its final model is in its directory. One whose model was never saved (killed
    /// between its last checkpoint and the model) is admitted, to finish from it.
    fn admit_unfinished(
        &self,
        loaded: &Loaded,
        meta: &Fields,
        dir: Option<&Place>,
        run: Option<&RunId>,
    ) -> Result<(), CheckpointError> {
        let Some(epochs) = self.epochs else {
            return Ok(());
        };
        let at_end = meta.text("epoch_done") == Ok("true") && meta.usize("epoch") == Ok(epochs);
        if !at_end {
            return Ok(());
        }
        let steps = meta
            .usize("steps")
            .map_err(|reason| bad_meta(loaded, reason))?;
        let saved = match dir {
            Some(dir) => model::holds_final_model(dir, run, steps)?,
            None => true,
        };
        if !saved {
            log::warn!(
                "the run has trained all its {epochs} epoch(s) but its model was not saved: \
                 finishing it from {}",
                loaded.path.display()
            );
            return Ok(());
        }
        Err(CheckpointError::Finished {
            dir: self.checkpoints.clone(),
            epochs,
            checkpoint: loaded.path.clone(),
        })
    }

    /// Refuses a fresh run where a name it writes is taken: in the checkpoint directory, a
    /// checkpoint or a run's record; in the run directory, a model, a run's record or checkpoint
    /// (it is another run's checkpoint directory), an event file this rank would write, this
    /// rank's journal. Names another rank writes are left to it.
    fn refuse_occupied(
        &self,
        store: &Checkpoints,
        dir: Option<&Place>,
    ) -> Result<(), CheckpointError> {
        if let Some((_, newest)) = store.list()?.into_iter().next() {
            return Err(CheckpointError::AnotherRun {
                dir: self.checkpoints.clone(),
                found: newest,
            });
        }
        let records = [RECORD_FILE, LEGACY_COMMAND_FILE];
        if let Some(found) = first_named(store.place(), &records, self.rank)? {
            return Err(CheckpointError::AnotherRun {
                dir: self.checkpoints.clone(),
                found,
            });
        }
        let Some(dir) = dir else {
            return Ok(());
        };
        let names = dir.names()?;
        let ownership = Ownership {
            rank: self.rank,
            world_size: u32::try_from(self.world).unwrap_or(u32::MAX),
        };
        let another_run = names.iter().find(|name| {
            crate::checkpoint::seq_of(name).is_some()
                || (self.rank == 0 && records.contains(&name.as_str()))
        });
        // An event file names the other run best.
        let event_file = names
            .iter()
            .filter(|name| ownership.owns(Path::new(name)))
            .min_by_key(|name| ember_write::naming::name_secs(name).is_none());
        if let Some(found) = event_file.or(another_run) {
            return Err(CheckpointError::AnotherRun {
                dir: dir.path().to_path_buf(),
                found: dir.path().join(found),
            });
        }
        let models = [MODEL_FILE, MODEL_RECORD, INTERRUPTED_MODEL_FILE];
        if let Some(found) = first_named(dir, &models, self.rank)? {
            return Err(CheckpointError::Occupied { found });
        }
        let journal = Journal::path_in(dir.path(), self.rank);
        if !dir.remote() && journal.exists() {
            return Err(CheckpointError::AnotherRun {
                dir: dir.path().to_path_buf(),
                found: journal,
            });
        }
        Ok(())
    }
}

/// A run restarted without its record cannot tell its model from another program's by its
/// record: a model without the record ember writes beside it is refused, never replaced.
fn refuse_foreign_model(dir: Option<&Place>) -> Result<(), CheckpointError> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let names = dir.names()?;
    if names.iter().any(|n| n == MODEL_FILE) && !names.iter().any(|n| n == MODEL_RECORD) {
        return Err(CheckpointError::Occupied {
            found: dir.path().join(MODEL_FILE),
        });
    }
    Ok(())
}

/// The first of `names` present in `place` (rank 0's names: other ranks write none of them).
fn first_named(
    place: &Place,
    names: &[&str],
    rank: u32,
) -> Result<Option<PathBuf>, CheckpointError> {
    if rank != 0 {
        return Ok(None);
    }
    let present = place.names()?;
    Ok(names
        .iter()
        .find(|name| present.iter().any(|p| p == *name))
        .map(|name| place.path().join(name)))
}

/// Refuses, before anything is written, a checkpoint directory whose files' paths the system
/// could not open: the first checkpoint would fail after training began.
fn refuse_long_paths(checkpoints: &Place) -> Result<(), CheckpointError> {
    if checkpoints.remote() {
        return Ok(());
    }
    let path =
        std::path::absolute(checkpoints.path()).unwrap_or_else(|_| checkpoints.path().into());
    let too_long = |why: String| CheckpointError::PathTooLong {
        path: checkpoints.path().to_path_buf(),
        why,
    };
    let length = path.as_os_str().len() + 1 + LONGEST_NAME;
    if length > PATH_MAX {
        return Err(too_long(format!(
            "its files' paths would be {length} bytes long, past the {PATH_MAX} the system opens"
        )));
    }
    if let Some(name) = path
        .components()
        .map(|c| c.as_os_str())
        .find(|name| name.len() > NAME_MAX)
    {
        return Err(too_long(format!(
            "`{}…` is a name of {} bytes, past the {NAME_MAX} a file system takes",
            name.to_string_lossy().chars().take(16).collect::<String>(),
            name.len()
        )));
    }
    Ok(())
}

fn bad_meta(loaded: &Loaded, reason: String) -> CheckpointError {
    CheckpointError::Section {
        path: loaded.path.clone(),
        section: "meta".into(),
        reason,
    }
}
