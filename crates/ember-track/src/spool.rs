//! The spool: every entity the sink is to send, on disk before it is sent.
//!
//! `<run dir>/.ember-mlflow/` holds `run` (the MLflow run and experiment ids), `spool.jsonl`
//! (one entity a line, as `runs/log-batch` takes it: `{"m": metric}`, `{"p": param}`,
//! `{"t": tag}`; or a file to upload, `{"a": {"path", "name"}}`) and `sent` (the length of `spool.jsonl` the server has acknowledged). A line
//! is sent only once it is synced; `sent` is advice: a line sent again after a crash is one
//! the server already holds, with the same timestamp, which its primary key makes a no-op.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::TrackError;

/// The spool's directory in a run's directory.
pub(crate) const DIR: &str = ".ember-mlflow";

/// What an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Metric,
    Param,
    Tag,
    /// A file to upload as an artifact: `{"path": local path, "name": artifact path}`.
    Artifact,
}

impl Kind {
    fn letter(self) -> &'static str {
        match self {
            Kind::Metric => "m",
            Kind::Param => "p",
            Kind::Tag => "t",
            Kind::Artifact => "a",
        }
    }
}

/// A metric's point, as the skip rule and the lag read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Point {
    pub(crate) key: String,
    pub(crate) step: i64,
    /// Milliseconds since the Unix epoch.
    pub(crate) timestamp: i64,
}

/// One entity: its JSON object as `runs/log-batch` takes it, serialized once, when it is made
/// (the spool's line and every request reuse those bytes).
#[derive(Debug, Clone)]
pub(crate) struct Entity {
    pub(crate) kind: Kind,
    pub(crate) json: String,
    /// A metric's point; `None` for the other kinds.
    pub(crate) point: Option<Point>,
}

impl Entity {
    /// A metric: `value` as MLflow's JSON takes a double (a number, or `"NaN"`, `"Infinity"`,
    /// `"-Infinity"`).
    pub(crate) fn metric(key: &str, value: f64, timestamp: i64, step: i64) -> Self {
        let value = match value {
            x if x.is_nan() => "\"NaN\"".to_owned(),
            x if x == f64::INFINITY => "\"Infinity\"".to_owned(),
            x if x == f64::NEG_INFINITY => "\"-Infinity\"".to_owned(),
            x => serde_json::to_string(&x).unwrap_or_default(),
        };
        let quoted = serde_json::to_string(key).unwrap_or_default();
        Entity {
            kind: Kind::Metric,
            json: format!(
                r#"{{"key":{quoted},"value":{value},"timestamp":{timestamp},"step":{step}}}"#
            ),
            point: Some(Point {
                key: key.to_owned(),
                step,
                timestamp,
            }),
        }
    }

    /// A param (`Kind::Param`) or a tag (`Kind::Tag`).
    pub(crate) fn pair(kind: Kind, key: &str, value: &str) -> Self {
        Self::other(kind, json!({"key": key, "value": value}))
    }

    /// A file to upload as the run's artifact `name`.
    pub(crate) fn artifact(path: &Path, name: &str) -> Self {
        let path = path.to_string_lossy();
        Self::other(Kind::Artifact, json!({"path": path, "name": name}))
    }

    fn other(kind: Kind, object: Value) -> Self {
        Entity {
            kind,
            json: object.to_string(),
            point: None,
        }
    }

    /// Its key (an artifact's name), as a count of what was dropped names it.
    pub(crate) fn name(&self) -> String {
        if let Some(point) = &self.point {
            return point.key.clone();
        }
        let object: Value = serde_json::from_str(&self.json).unwrap_or_default();
        let name = match self.kind {
            Kind::Artifact => &object["name"],
            _ => &object["key"],
        };
        name.as_str().unwrap_or_default().to_owned()
    }

    /// Appends its spool line (`{"m":{…}}` and a newline) to `buffer`.
    fn write_line(&self, buffer: &mut String) {
        for part in ["{\"", self.kind.letter(), "\":", &self.json, "}\n"] {
            buffer.push_str(part);
        }
    }

    fn parse(line: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(line).ok()?;
        let (letter, object) = value.as_object()?.iter().next()?;
        let kind = [Kind::Metric, Kind::Param, Kind::Tag, Kind::Artifact]
            .into_iter()
            .find(|kind| kind.letter() == letter)?;
        let point = match kind {
            Kind::Metric => Some(Point {
                key: object["key"].as_str()?.to_owned(),
                step: object["step"].as_i64()?,
                timestamp: object["timestamp"].as_i64()?,
            }),
            _ => None,
        };
        // The object's bytes as written (`{"m":` … `}`), so that a resend is the same request.
        let json = line
            .trim_end()
            .strip_prefix(&format!("{{\"{letter}\":"))
            .and_then(|rest| rest.strip_suffix('}'))
            .map_or_else(|| object.to_string(), str::to_owned);
        Some(Entity { kind, json, point })
    }

    /// Bytes the entity takes in a request.
    pub(crate) fn size(&self) -> usize {
        self.json.len() + 1
    }
}

/// The MLflow run a spool is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunIds {
    pub(crate) run_id: String,
    pub(crate) experiment_id: String,
}

pub(crate) struct Spool {
    dir: PathBuf,
    file: File,
    /// Bytes of `spool.jsonl` written and synced.
    synced: u64,
    /// Lines written, not yet synced.
    buffer: String,
    /// Entities synced or buffered, not acknowledged, each with the spool's length after it.
    pending: VecDeque<(u64, Entity)>,
    /// Bytes of `spool.jsonl` the server has acknowledged.
    acked: u64,
    /// Per metric key, the greatest step earlier starts of the run spooled.
    earlier: HashMap<String, i64>,
}

impl Spool {
    /// The spool of the run in `run_dir` an earlier start left, with its run: its synced
    /// lines not yet acknowledged pending again. `None` where there is none.
    pub(crate) fn reopen(run_dir: &Path) -> Result<Option<(Self, RunIds)>, TrackError> {
        let dir = run_dir.join(DIR);
        let run_path = dir.join("run");
        let text = match std::fs::read_to_string(&run_path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(TrackError::spool(&run_path)(e)),
        };
        let ids: Value = serde_json::from_str(&text).map_err(|e| {
            TrackError::spool(&run_path)(io::Error::new(io::ErrorKind::InvalidData, e))
        })?;
        let (Some(run_id), Some(experiment_id)) =
            (ids["run_id"].as_str(), ids["experiment_id"].as_str())
        else {
            let error = io::Error::new(io::ErrorKind::InvalidData, "no run_id or experiment_id");
            return Err(TrackError::spool(&run_path)(error));
        };
        let ids = RunIds {
            run_id: run_id.to_owned(),
            experiment_id: experiment_id.to_owned(),
        };
        let sent = std::fs::read_to_string(dir.join("sent"))
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let path = dir.join("spool.jsonl");
        let mut spool = Self::open_file(&dir)?;
        let reader = BufReader::new(File::open(&path).map_err(TrackError::spool(&path))?);
        let mut at = 0u64;
        for line in reader.split(b'\n') {
            let line = line.map_err(TrackError::spool(&path))?;
            let Some(entity) = std::str::from_utf8(&line).ok().and_then(Entity::parse) else {
                // A line torn by a crash ends what was written whole.
                break;
            };
            at += line.len() as u64 + 1;
            if let Some(point) = &entity.point {
                let greatest = spool.earlier.entry(point.key.clone()).or_insert(point.step);
                *greatest = (*greatest).max(point.step);
            }
            if at > sent {
                spool.pending.push_back((at, entity));
            }
        }
        // What follows the last whole line goes; new lines start on a line of their own.
        spool.file.set_len(at).map_err(TrackError::spool(&path))?;
        spool.synced = at;
        spool.acked = sent.min(at);
        Ok(Some((spool, ids)))
    }

    /// A new spool for the run `ids` in `run_dir`, replacing any an earlier run left.
    pub(crate) fn create(run_dir: &Path, ids: &RunIds) -> Result<Self, TrackError> {
        let dir = run_dir.join(DIR);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(TrackError::spool(&dir)(e)),
        }
        std::fs::create_dir_all(&dir).map_err(TrackError::spool(&dir))?;
        let run_path = dir.join("run");
        let text = json!({"run_id": ids.run_id, "experiment_id": ids.experiment_id}).to_string();
        write_synced(&run_path, text.as_bytes()).map_err(TrackError::spool(&run_path))?;
        Self::open_file(&dir)
    }

    fn open_file(dir: &Path) -> Result<Self, TrackError> {
        let path = dir.join("spool.jsonl");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(TrackError::spool(&path))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
            synced: 0,
            buffer: String::new(),
            pending: VecDeque::new(),
            acked: 0,
            earlier: HashMap::new(),
        })
    }

    /// Whether an earlier start of the run spooled `key` at `step` or later.
    pub(crate) fn spooled_before(&self, key: &str, step: i64) -> bool {
        self.earlier
            .get(key)
            .is_some_and(|greatest| step <= *greatest)
    }

    /// Bytes spooled and not acknowledged.
    pub(crate) fn unacknowledged(&self) -> u64 {
        self.synced + self.buffer.len() as u64 - self.acked
    }

    /// Adds `entity`, to be sent once synced.
    pub(crate) fn push(&mut self, entity: Entity) {
        entity.write_line(&mut self.buffer);
        let end = self.synced + self.buffer.len() as u64;
        self.pending.push_back((end, entity));
    }

    /// Writes the buffered lines and syncs them: from now on they survive a crash.
    pub(crate) fn sync(&mut self) -> Result<(), TrackError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let path = self.dir.join("spool.jsonl");
        self.file
            .write_all(self.buffer.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(TrackError::spool(&path))?;
        self.synced += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// The synced entities not yet acknowledged, oldest first.
    pub(crate) fn sendable(&self) -> impl Iterator<Item = &(u64, Entity)> {
        self.pending
            .iter()
            .take_while(|(end, _)| *end <= self.synced)
    }

    /// Whether nothing is left to send.
    pub(crate) fn is_drained(&self) -> bool {
        self.pending.is_empty()
    }

    /// The server holds every entity up to `end`.
    pub(crate) fn acknowledged(&mut self, end: u64) -> Result<(), TrackError> {
        while self.pending.front().is_some_and(|(at, _)| *at <= end) {
            self.pending.pop_front();
        }
        self.acked = end;
        let path = self.dir.join("sent");
        let tmp = self.dir.join("sent.tmp");
        std::fs::write(&tmp, end.to_string())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(TrackError::spool(&path))
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(key: &str, step: i64) -> Entity {
        Entity::metric(key, 1.5, 7, step)
    }

    #[test]
    fn an_entity_is_the_json_mlflow_takes_and_reads_back_as_it_was() {
        let metric = Entity::metric("train/\"loss\"", 0.25, 1_700_000_000_123, 42);
        let object: Value = serde_json::from_str(&metric.json).unwrap();
        let expected = json!({"key": "train/\"loss\"", "value": 0.25,
                              "timestamp": 1_700_000_000_123_i64, "step": 42});
        assert_eq!(object, expected);
        for (x, shown) in [(f64::NAN, "NaN"), (f64::INFINITY, "Infinity")] {
            let odd: Value = serde_json::from_str(&Entity::metric("k", x, 0, 0).json).unwrap();
            assert_eq!(odd["value"], shown);
        }
        let line = |entity: &Entity| {
            let mut line = String::new();
            entity.write_line(&mut line);
            line
        };
        let again = Entity::parse(line(&metric).trim_end()).unwrap();
        assert_eq!(
            (again.kind, &again.json, &again.point),
            (Kind::Metric, &metric.json, &metric.point)
        );
        let tag = Entity::pair(Kind::Tag, "ember.version", "0.1");
        assert_eq!(tag.name(), "ember.version");
        let file = Entity::artifact(Path::new("/run/model.bpk"), "model/model.bpk");
        assert_eq!(
            Entity::parse(&line(&file)).unwrap().name(),
            "model/model.bpk"
        );
    }

    #[test]
    fn a_reopened_spool_sends_what_was_not_acknowledged_and_knows_what_was_spooled() {
        let dir = tempfile::tempdir().unwrap();
        let ids = RunIds {
            run_id: "r".into(),
            experiment_id: "0".into(),
        };
        let mut spool = Spool::create(dir.path(), &ids).unwrap();
        for step in 1..=3 {
            spool.push(metric("loss", step));
        }
        assert_eq!(
            spool.sendable().count(),
            0,
            "nothing is sent before it is synced"
        );
        spool.sync().unwrap();
        let first = spool.sendable().next().unwrap().0;
        spool.acknowledged(first).unwrap();
        spool.push(metric("loss", 4));
        drop(spool);
        // A torn last line, as a crash mid-write leaves.
        let path = dir.path().join(DIR).join("spool.jsonl");
        let mut torn = OpenOptions::new().append(true).open(&path).unwrap();
        torn.write_all(b"{\"m\":{\"key\":\"lo").unwrap();

        let (mut again, found) = Spool::reopen(dir.path()).unwrap().unwrap();
        assert_eq!(found, ids);
        let steps: Vec<i64> = again
            .sendable()
            .map(|(_, e)| e.point.as_ref().map_or(-1, |point| point.step))
            .collect();
        assert_eq!(steps, [2, 3], "the unsynced step 4 was never spooled");
        assert!(again.spooled_before("loss", 3) && !again.spooled_before("loss", 4));
        again.push(metric("loss", 4));
        again.sync().unwrap();
        let (reread, _) = Spool::reopen(dir.path()).unwrap().unwrap();
        assert_eq!(
            reread.sendable().count(),
            3,
            "the torn line was cut, step 4 follows"
        );
    }
}
