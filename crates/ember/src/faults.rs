//! What a summary error does to the training that met it: the one place that decides.

use std::collections::HashSet;
use std::mem::Discriminant;

use ember_write::{ErrorPolicy, WriteError};

use crate::SummaryError;

/// Applies a record's [`ErrorPolicy`] to the summary errors a training run meets.
///
/// Under [`ErrorPolicy::Raise`] an error ends training; under any other policy it is counted and
/// training goes on. Logging every failure would flood the log when a disk fills (every value of
/// every step fails alike), so only the first error of each kind is logged.
#[derive(Debug)]
pub(crate) struct SummaryFaults {
    policy: ErrorPolicy,
    logged: HashSet<(Discriminant<SummaryError>, Option<Discriminant<WriteError>>)>,
    count: u64,
}

impl SummaryFaults {
    pub(crate) fn new(policy: ErrorPolicy) -> Self {
        Self {
            policy,
            logged: HashSet::new(),
            count: 0,
        }
    }

    /// Whether `error` ends training. When it does not, it is counted, and logged if it is the
    /// first of its kind. A run in a bucket whose lease another writer took over ends whatever
    /// the policy: the run is the other writer's now.
    pub(crate) fn ends_training(&mut self, error: &SummaryError) -> bool {
        if let SummaryError::Remote(error) = error
            && crate::bucket::lease_lost(error)
        {
            return true;
        }
        if self.policy == ErrorPolicy::Raise {
            return true;
        }
        self.count += 1;
        let write_kind = match error {
            SummaryError::Write(write) => Some(std::mem::discriminant(write)),
            _ => None,
        };
        if self
            .logged
            .insert((std::mem::discriminant(error), write_kind))
        {
            // Records not yet shipped stay in the staging directory and are tried again: a
            // warning, where a lost record is an error.
            let level = match error {
                SummaryError::RemoteShip { .. } => log::Level::Warn,
                _ => log::Level::Error,
            };
            log::log!(
                level,
                "recording summaries: {error}; training goes on (later errors of this kind are \
                 counted, not logged)"
            );
        }
        false
    }

    /// `result` when its error ends training, `Ok` otherwise.
    pub(crate) fn check(&mut self, result: Result<(), SummaryError>) -> Result<(), SummaryError> {
        match result {
            Err(error) if !self.ends_training(&error) => Ok(()),
            other => other,
        }
    }

    /// Errors that training went past.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_ends_training_and_log_counts_every_error() {
        let mut raise = SummaryFaults::new(ErrorPolicy::Raise);
        assert!(raise.check(Err(SummaryError::Closed)).is_err());
        assert_eq!(raise.count(), 0);

        let mut log = SummaryFaults::new(ErrorPolicy::Log);
        for _ in 0..3 {
            assert!(log.check(Err(SummaryError::Closed)).is_ok());
        }
        assert!(
            log.check(Err(SummaryError::Write(WriteError::QueueFull)))
                .is_ok()
        );
        assert!(log.check(Ok(())).is_ok());
        assert_eq!(log.count(), 4);
        assert_eq!(log.logged.len(), 2);
    }
}
