//! [`SummaryRecord::start_session`]: the `SessionLog` START by which TensorBoard's loaders tell
//! a resumed run from the run it goes on from.

use ember_write::pack::{Format, Record, Tag, Value};

use super::record::{SESSION_TAG, SummaryRecord, wall_time};
use crate::SummaryError;

impl SummaryRecord {
    /// Starts the run's session at `step`, or starts it again there in a resumed run: a
    /// TensorBoard `SessionLog` START event, before anything recorded after this call, in this
    /// record's file and in every [`add_scalars`](Self::add_scalars) run's, the runs made
    /// later included.
    ///
    /// TensorBoard's Python loaders (with `purge_orphaned_data`, their default) forget every
    /// value of the run at `step` or later when they read a START that is not the run's first:
    /// a resumed run that starts its session at the first step it writes again shows each step
    /// once in a TensorBoard left running across the kill. Since the first START a loader reads
    /// only begins the session, a run starts it at its first step as well. Nothing is written
    /// for MindInsight, which has no such event.
    pub fn start_session(&mut self, step: i64) -> Result<(), SummaryError> {
        self.ensure_open()?;
        if self.child_options.pack.format == Format::MindInsight {
            return Ok(());
        }
        self.session_start = Some(step);
        let record = session_record(step, self.wall_time)?;
        let mut first_error = None;
        for child in self.children.values() {
            if let Err(error) = child.write(record.clone()) {
                first_error.get_or_insert(SummaryError::from(error));
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => self.submit(record),
        }
    }

    /// The step [`start_session`](Self::start_session) last started the session at; `None`
    /// before it is called (and always for MindInsight).
    pub fn session_start(&self) -> Option<i64> {
        self.session_start
    }
}

/// The record of a session start at `step`, at `at` (the clock's when `None`).
fn session_record(step: i64, at: Option<f64>) -> Result<Record, SummaryError> {
    let tag = Tag::new(SESSION_TAG)?;
    Ok(Record::new(step, at.unwrap_or_else(wall_time)).with(tag, Value::SessionStart))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use ember_write::RecordReader;
    use ember_write::pack::proto::tensorboard::{Event, event::What, session_log::SessionStatus};
    use prost::Message;

    use super::*;

    /// The step of every event of the files under `dir` (not below), `None` for a session
    /// start's: in file order, after each file's version event.
    fn steps(dir: &Path) -> Vec<(Option<i64>, i64)> {
        let mut out = Vec::new();
        for file in ember_tests::event_files(dir) {
            for record in RecordReader::open(&file).unwrap() {
                let event = Event::decode(record.unwrap().data.as_slice()).unwrap();
                match event.what {
                    Some(What::SessionLog(log)) => {
                        assert_eq!(log.status, SessionStatus::Start as i32);
                        out.push((None, event.step));
                    }
                    Some(What::Summary(_)) => out.push((Some(event.step), event.step)),
                    _ => {}
                }
            }
        }
        out
    }

    #[test]
    fn a_session_start_comes_first_in_the_record_and_in_every_sub_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut summary = SummaryRecord::new(dir.path()).unwrap();
        summary.add_scalars("loss", &[("a", 1.0)], 4).unwrap();
        summary.add_scalar("x", 1.0, 5).unwrap();
        summary.start_session(6).unwrap();
        summary.add_scalar("x", 2.0, 6).unwrap();
        // A sub-run made after the start begins with it too.
        summary
            .add_scalars("loss", &[("a", 2.0), ("b", 3.0)], 6)
            .unwrap();
        summary.close().unwrap();
        assert_eq!(steps(dir.path()), [(Some(5), 5), (None, 6), (Some(6), 6)]);
        assert_eq!(
            steps(&dir.path().join("loss_a")),
            [(Some(4), 4), (None, 6), (Some(6), 6)]
        );
        assert_eq!(steps(&dir.path().join("loss_b")), [(None, 6), (Some(6), 6)]);
        // ember's reader counts no session start as a value.
        let read = crate::read::scalars(dir.path()).unwrap();
        assert_eq!(read.keys().collect::<Vec<_>>(), ["x"]);
    }

    #[test]
    fn mindinsight_has_no_session_start_and_gets_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut summary = SummaryRecord::builder(dir.path())
            .format(Format::MindInsight)
            .build()
            .unwrap();
        summary.start_session(3).unwrap();
        summary.add_scalar("x", 1.0, 3).unwrap();
        summary.close().unwrap();
        assert!(summary.take_errors().is_empty());
        let read = crate::read::scalars(dir.path()).unwrap();
        assert_eq!(read["x"].len(), 1);
    }
}
