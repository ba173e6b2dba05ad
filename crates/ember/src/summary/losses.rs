//! What a record's log lost: the write errors its writers kept, and from which step the log
//! is not whole.

use ember_write::{WriteError, WriterPool};

use super::record::SummaryRecord;

impl SummaryRecord {
    /// Takes the write errors kept so far (under [`ErrorPolicy::Log`](crate::ErrorPolicy::Log),
    /// every error; under [`ErrorPolicy::Raise`](crate::ErrorPolicy::Raise), those not yet
    /// returned), oldest first, at most [`MAX_KEPT_ERRORS`](ember_write::MAX_KEPT_ERRORS) of
    /// them.
    pub fn take_errors(&self) -> Vec<WriteError> {
        self.pool
            .iter()
            .chain(self.children.values())
            .flat_map(WriterPool::take_errors)
            .collect()
    }

    /// The smallest step of a record this record's log lost (a full queue, a writer's size cap,
    /// a failed writer: a full disk), of any sub-run: from there on the log is not whole.
    /// `None` while nothing was lost.
    pub fn first_lost_step(&self) -> Option<i64> {
        self.pool
            .iter()
            .chain(self.children.values())
            .filter_map(WriterPool::first_lost_step)
            .min()
    }
}
