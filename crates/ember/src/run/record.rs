//! A run's record, `run.json` beside its checkpoints: its id, and the command line it was
//! started with where a command started it (`ember train`'s flags, parsed again by `--resume`).
//! Written once a run is admitted, before its first checkpoint; kept by every start after it.
//!
//! ```text
//! {"id":"<32 hexadecimal digits>","command":["--epochs","3","--logdir","runs/r"]}
//! ```
//!
//! A run of an ember from before the record has `command.json` instead: its command as a JSON
//! list, and no id (its checkpoints name none either).

use super::identity::RunId;
use super::place::Place;
use crate::checkpoint::CheckpointError;

/// The file of the record, in the checkpoint directory.
pub const RECORD_FILE: &str = "run.json";

/// What an ember from before [`RECORD_FILE`] kept instead: the command alone.
pub const LEGACY_COMMAND_FILE: &str = "command.json";

/// A run's record (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's id; `None` for a run of an ember from before ids.
    pub id: Option<RunId>,
    /// The command line's arguments the run was started with, where a command started it.
    pub command: Option<Vec<String>>,
}

impl RunRecord {
    /// The record in the checkpoint directory `checkpoints` (local or a URL); `None` where
    /// there is none. A record that does not read back is an error naming the file.
    pub fn read(checkpoints: &std::path::Path) -> Result<Option<Self>, CheckpointError> {
        Self::read_at(&Place::at(checkpoints))
    }

    pub(crate) fn read_at(place: &Place) -> Result<Option<Self>, CheckpointError> {
        if let Some(bytes) = place.read(RECORD_FILE)? {
            return Self::decode(&bytes)
                .map(Some)
                .ok_or_else(|| malformed(place, RECORD_FILE));
        }
        let Some(bytes) = place.read(LEGACY_COMMAND_FILE)? else {
            return Ok(None);
        };
        let command = serde_json::from_slice::<Vec<String>>(&bytes)
            .map_err(|_| malformed(place, LEGACY_COMMAND_FILE))?;
        Ok(Some(Self {
            id: None,
            command: Some(command),
        }))
    }

    /// Writes the record into `place`, whole; the legacy file, now said by the record, goes.
    pub(crate) fn write_at(&self, place: &Place) -> Result<(), CheckpointError> {
        place.write(RECORD_FILE, &self.encode())?;
        place.remove(LEGACY_COMMAND_FILE)
    }

    fn encode(&self) -> Vec<u8> {
        let mut object = serde_json::Map::new();
        if let Some(id) = &self.id {
            object.insert("id".into(), id.as_str().into());
        }
        if let Some(command) = &self.command {
            object.insert("command".into(), command.clone().into());
        }
        serde_json::Value::Object(object).to_string().into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let object = value.as_object()?;
        let id = match object.get("id") {
            Some(id) => Some(RunId::parse(id.as_str()?)?),
            None => None,
        };
        let command = match object.get("command") {
            Some(command) => Some(serde_json::from_value(command.clone()).ok()?),
            None => None,
        };
        Some(Self { id, command })
    }
}

fn malformed(place: &Place, name: &str) -> CheckpointError {
    CheckpointError::Damaged {
        path: place.path().join(name),
        reason: "not a run record ember writes".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_legacy_command_is_a_record_without_an_id() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::at(dir.path());
        assert_eq!(RunRecord::read_at(&place).unwrap(), None);
        std::fs::write(dir.path().join(LEGACY_COMMAND_FILE), r#"["--epochs","3"]"#).unwrap();
        let legacy = RunRecord::read_at(&place).unwrap().unwrap();
        assert_eq!(legacy.id, None);
        assert_eq!(
            legacy.command.as_deref(),
            Some(&["--epochs".to_owned(), "3".into()][..])
        );
        let record = RunRecord {
            id: Some(RunId::new()),
            command: legacy.command,
        };
        record.write_at(&place).unwrap();
        assert!(!dir.path().join(LEGACY_COMMAND_FILE).exists());
        assert_eq!(RunRecord::read_at(&place).unwrap(), Some(record));
        std::fs::write(dir.path().join(RECORD_FILE), "[1, 2]").unwrap();
        let error = RunRecord::read_at(&place).unwrap_err().to_string();
        assert!(error.contains(RECORD_FILE), "{error}");
    }
}
