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
}

/// The record of a session start at `step`, at `at` (the clock's when `None`).
fn session_record(step: i64, at: Option<f64>) -> Result<Record, SummaryError> {
    let tag = Tag::new(SESSION_TAG)?;
    Ok(Record::new(step, at.unwrap_or_else(wall_time)).with(tag, Value::SessionStart))
}
