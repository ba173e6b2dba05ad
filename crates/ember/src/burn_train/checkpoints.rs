//! Resuming a burn-train run with [`SummaryLogger`]: burn checkpoints at epoch ends and
//! resumes from one (`SupervisedTraining::checkpoint(n)`), but what the logger wrote after that
//! checkpoint, and the logger's own counts, are ember's to roll back.
//!
//! After each split's epoch summary, once the record is flushed, a logger made
//! [`checkpointed`](SummaryLogger::checkpointed) keeps a small file in its checkpoint directory
//! (`ember-log-epoch-<epoch>-<split>.ember`, written durably, as a Trainer checkpoint is):
//! the log's snapshot and the logger's counts. burn's strategies flush their event processor
//! before they checkpoint (ember's [`PoolStrategy`](crate::burn_train::PoolStrategy) too), so when burn's
//! checkpoint of epoch `n` exists, the logger's snapshot after epoch `n`'s last split does.
//! [`resume_from`](SummaryLogger::resume_from) rolls the log back to it and takes its counts,
//! so the resumed run's values land where an uninterrupted run's would, each once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::train::metric::store::Split;

use super::SummaryLogger;
use super::split_prefix;
use crate::checkpoint::log_place::Snapshot;
use crate::checkpoint::{self, Checkpoint, CheckpointError, LogPlace};

const PREFIX: &str = "ember-log-epoch-";
const SUFFIX: &str = ".ember";

fn file_name(epoch: usize, split: &str) -> String {
    format!("{PREFIX}{epoch:06}-{split}{SUFFIX}")
}

impl SummaryLogger {
    /// Keeps, in `dir`, what [`resume_from`](Self::resume_from) needs to go on from any of
    /// burn's epoch checkpoints: see the module docs of `burn_train::resume`. burn's own
    /// checkpoint directory (`<artifact dir>/checkpoint` with `with_default_checkpointers`) is
    /// a good place. A snapshot that cannot be written is a logger failure, counted in
    /// [`errors`](Self::errors); training goes on.
    pub fn checkpointed(mut self, dir: impl Into<PathBuf>) -> Self {
        self.checkpoints = Some(dir.into());
        self
    }

    /// Goes on from burn's checkpoint of `epoch` (the number given to
    /// `SupervisedTraining::checkpoint`): rolls the record's log directory back to what it held
    /// after that epoch (every file cut back to its length then, files made since removed),
    /// and continues the logger's counts from there, so every value of the resumed epochs is
    /// written once, at the step an uninterrupted run would have used. Keeps checkpointing in
    /// `dir`. Fails when `dir` has no snapshot of `epoch` (made by a logger
    /// [`checkpointed`](Self::checkpointed) there), or when the rollback fails.
    ///
    /// Epoch 0 is the start: the log directory loses every file the run's writers made in it,
    /// as their journal lists them, and nothing else (a run killed before its first epoch
    /// ended, started again).
    pub fn resume_from(
        mut self,
        dir: impl Into<PathBuf>,
        epoch: usize,
    ) -> Result<Self, CheckpointError> {
        let dir = dir.into();
        if epoch == 0 {
            if let Some(record) = self.lock() {
                let place = LogPlace::of(&record, &dir);
                place.roll_back(&Snapshot::empty(&place)?, &record)?;
            }
            self.checkpoints = Some(dir);
            return Ok(self);
        }
        let path = ["valid", "train"]
            .iter()
            .map(|split| dir.join(file_name(epoch, split)))
            .find(|path| path.is_file())
            .ok_or_else(|| CheckpointError::Mismatch {
                path: dir.clone(),
                reason: format!(
                    "it holds no log snapshot of epoch {epoch}: the logger was not checkpointed \
                     there, or the run was killed before the epoch ended"
                ),
            })?;
        let saved = checkpoint::read(&path)?;
        let section = |name: &str| -> Result<&str, CheckpointError> {
            saved
                .section(name)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| CheckpointError::Section {
                    path: path.clone(),
                    section: name.into(),
                    reason: "missing or not UTF-8".into(),
                })
        };
        let (iteration, steps) =
            decode_counts(section("meta")?).map_err(|reason| CheckpointError::Section {
                path: path.clone(),
                section: "meta".into(),
                reason,
            })?;
        let snapshot = Snapshot::decode(section("log")?)?;
        {
            let Some(record) = self.lock() else {
                return Err(CheckpointError::Mismatch {
                    path,
                    reason: "the summary record's lock is poisoned".into(),
                });
            };
            LogPlace::of(&record, &dir).roll_back(&snapshot, &record)?;
        }
        self.iteration = iteration;
        self.steps = steps;
        self.checkpoints = Some(dir);
        Ok(self)
    }

    /// Keeps the log's snapshot and the counts after `split`'s summary of `epoch`, when
    /// checkpointed.
    pub(crate) fn keep_snapshot(&mut self, epoch: usize, split: &Split) {
        let Some(dir) = self.checkpoints.clone() else {
            return;
        };
        let result = self.snapshot(&dir).and_then(|saved| {
            let split = split_prefix(split).replace('/', "_");
            checkpoint::write_durably(&dir, &file_name(epoch, &split), &saved)
        });
        if let Err(error) = result {
            let message = format!("keeping the log's snapshot of epoch {epoch}: {error}");
            log::error!("summary logger: {message}");
            self.errors.keep(message);
        }
    }

    fn snapshot(&self, dir: &Path) -> Result<Checkpoint, CheckpointError> {
        let place = match self.lock() {
            Some(record) => LogPlace::of(&record, dir),
            None => {
                return Err(CheckpointError::Mismatch {
                    path: dir.to_path_buf(),
                    reason: "the summary record's lock is poisoned".into(),
                });
            }
        };
        let snapshot = place.take()?;
        snapshot.sync(&place)?;
        Ok(Checkpoint::new()
            .with(
                "meta",
                encode_counts(self.iteration, &self.steps).into_bytes(),
            )
            .with("log", snapshot.encode().into_bytes()))
    }
}

/// `iteration=<n>` then `steps=<split>\t<metric>\t<n>` lines.
fn encode_counts(iteration: i64, steps: &HashMap<(String, String), i64>) -> String {
    let mut lines = vec![format!("iteration={iteration}")];
    let mut steps: Vec<_> = steps.iter().collect();
    steps.sort();
    for ((split, metric), count) in steps {
        lines.push(format!("steps={split}\t{metric}\t{count}"));
    }
    lines.join("\n")
}

type Counts = (i64, HashMap<(String, String), i64>);

fn decode_counts(text: &str) -> Result<Counts, String> {
    let mut iteration = None;
    let mut steps = HashMap::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("iteration=") {
            iteration = Some(n.parse().map_err(|_| format!("`{line}`"))?);
        } else if let Some(rest) = line.strip_prefix("steps=") {
            let fields: Vec<&str> = rest.split('\t').collect();
            let [split, metric, count] = fields.as_slice() else {
                return Err(format!("`{line}`"));
            };
            let count = count.parse().map_err(|_| format!("`{line}`"))?;
            steps.insert(((*split).to_owned(), (*metric).to_owned()), count);
        } else {
            return Err(format!("`{line}`"));
        }
    }
    Ok((iteration.ok_or("no iteration")?, steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_back() {
        let mut steps = HashMap::new();
        steps.insert(("train".to_owned(), "loss".to_owned()), 17);
        steps.insert(("test/a b".to_owned(), "learning_rate".to_owned()), 3);
        let text = encode_counts(42, &steps);
        assert_eq!(decode_counts(&text).unwrap(), (42, steps));
        assert!(decode_counts("iteration=x").is_err());
        assert!(decode_counts("steps=a\tb").is_err());
        assert!(decode_counts("").is_err());
    }
}
