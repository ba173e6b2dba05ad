//! Where a run's summary log is, to snapshot at a checkpoint and roll back to on resume.

use std::path::{Path, PathBuf};

use ember_write::{LogSnapshot, Ownership};

use super::CheckpointError;
use crate::SummaryRecord;

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
