//! A run's model files, in its directory. `model.bpk` (Burn's burnpack of the parameters) is
//! the trained model and nothing else: only a run that has trained to its end writes it, and
//! `model.json` beside it says which run and at which step, so that "the run has finished" is
//! said only where the model on disk is this run's final one. A run stopped before its end
//! (a signal, a scheduler's time limit) writes its model as `model.interrupted.bpk` instead: a
//! run without checkpoints would otherwise lose what it trained, and under its own name no one
//! takes it for the trained model; the run's next end removes it.
//!
//! The trained model is written before its record, each whole: a kill between the two leaves a
//! model without its record, which counts as no final model, and the run's next start finishes
//! from its final checkpoint again, training nothing.

use super::identity::RunId;
use super::place::Place;
use crate::checkpoint::CheckpointError;

/// The trained model.
pub const MODEL_FILE: &str = "model.bpk";

/// Which run's final model [`MODEL_FILE`] is, and at which step.
pub const MODEL_RECORD: &str = "model.json";

/// The model of a run stopped before its end.
pub const INTERRUPTED_MODEL_FILE: &str = "model.interrupted.bpk";

/// What [`MODEL_RECORD`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelRecord {
    pub(crate) run: Option<RunId>,
    pub(crate) steps: usize,
}

impl ModelRecord {
    /// The record in `dir`; `None` where there is none or it does not read back (then no final
    /// model is known to be there).
    pub(crate) fn read(dir: &Place) -> Result<Option<Self>, CheckpointError> {
        let Some(bytes) = dir.read(MODEL_RECORD)? else {
            return Ok(None);
        };
        let value: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
        Ok(value.and_then(|value| {
            let steps = usize::try_from(value.get("steps")?.as_u64()?).ok()?;
            let run = match value.get("run") {
                Some(id) => Some(RunId::parse(id.as_str()?)?),
                None => None,
            };
            Some(Self { run, steps })
        }))
    }

    fn encode(&self) -> Vec<u8> {
        let mut object = serde_json::Map::new();
        if let Some(run) = &self.run {
            object.insert("run".into(), run.as_str().into());
        }
        object.insert("steps".into(), self.steps.into());
        serde_json::Value::Object(object).to_string().into_bytes()
    }
}

/// Whether `dir` holds the final model of run `run` (`None`: a run without an id) trained to
/// step `steps`: the model and its record, naming both.
pub(crate) fn holds_final_model(
    dir: &Place,
    run: Option<&RunId>,
    steps: usize,
) -> Result<bool, CheckpointError> {
    let record = ModelRecord::read(dir)?;
    let ours = record.is_some_and(|r| r.run.as_ref() == run && r.steps == steps);
    Ok(ours && dir.names()?.iter().any(|name| name == MODEL_FILE))
}

/// Writes `bytes` as the trained model of run `run` at step `steps` (see the module docs), and
/// removes an interrupted model of the run's.
pub(crate) fn write_final(
    dir: &Place,
    run: Option<&RunId>,
    steps: usize,
    bytes: &[u8],
) -> Result<(), CheckpointError> {
    dir.write(MODEL_FILE, bytes)?;
    let record = ModelRecord {
        run: run.cloned(),
        steps,
    };
    dir.write(MODEL_RECORD, &record.encode())?;
    dir.remove(INTERRUPTED_MODEL_FILE)
}

/// Removes the run's model files from `dir`: the record first, so that a kill between leaves a
/// model no one takes for the run's final one.
pub(crate) fn remove_all(dir: &Place) -> Result<(), CheckpointError> {
    for name in [MODEL_RECORD, MODEL_FILE, INTERRUPTED_MODEL_FILE] {
        dir.remove(name)?;
    }
    Ok(())
}

/// Writes `bytes` as the model of a run stopped before its end.
pub(crate) fn write_interrupted(dir: &Place, bytes: &[u8]) -> Result<(), CheckpointError> {
    dir.write(INTERRUPTED_MODEL_FILE, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_model_with_its_record_is_a_run_s_final_model() {
        let dir = tempfile::tempdir().unwrap();
        let place = Place::at(dir.path());
        let (run, other) = (RunId::new(), RunId::new());
        assert!(!holds_final_model(&place, Some(&run), 12).unwrap());
        write_interrupted(&place, b"half").unwrap();
        assert!(!holds_final_model(&place, Some(&run), 12).unwrap());
        // A model whose record was never written (a kill between the two) is not final.
        place.write(MODEL_FILE, b"trained").unwrap();
        assert!(!holds_final_model(&place, Some(&run), 12).unwrap());
        write_final(&place, Some(&run), 12, b"trained").unwrap();
        assert!(holds_final_model(&place, Some(&run), 12).unwrap());
        assert!(!holds_final_model(&place, Some(&other), 12).unwrap());
        assert!(!holds_final_model(&place, Some(&run), 13).unwrap());
        assert!(!dir.path().join(INTERRUPTED_MODEL_FILE).exists());
        std::fs::remove_file(dir.path().join(MODEL_FILE)).unwrap();
        assert!(!holds_final_model(&place, Some(&run), 12).unwrap());
    }
}
