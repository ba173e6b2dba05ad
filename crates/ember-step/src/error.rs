//! What can go wrong in a step, always naming the device.

use std::fmt;
use std::time::Duration;

/// A batch source's error, boxed so sources of any error type fit one pool.
pub type SourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// One or more devices failed this step; every one of them is listed.
    #[error(transparent)]
    Devices(DeviceFailures),
    /// The pool was shut down and runs no more steps.
    #[error("device pool is shut down")]
    ShutDown,
    /// The pool abandoned more hung workers than its limit allows and runs no more steps.
    ///
    /// Each abandoned worker may still be running, holding a model clone and device memory.
    #[error(
        "device pool gave up: {abandoned} hung workers abandoned, more than its limit of {limit}"
    )]
    TooManyAbandonedWorkers {
        /// Workers abandoned after a step timeout, over the pool's life.
        abandoned: usize,
        /// How many the pool was allowed to abandon and replace.
        limit: usize,
    },
    /// The model and the sources disagree: the pool has one worker per device and needs one
    /// source per worker.
    #[error("expected {expected} batch sources, one per device, got {got}")]
    SourceCount {
        /// Devices in the pool.
        expected: usize,
        /// Sources given.
        got: usize,
    },
}

impl StepError {
    /// The failed devices, if this is a device failure.
    pub fn failures(&self) -> &[DeviceFailure] {
        match self {
            StepError::Devices(failures) => failures.as_slice(),
            _ => &[],
        }
    }
}

/// How one device failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum FailureKind {
    /// The device's batch source returned an error; no batch was sent to its worker.
    Source(SourceError),
    /// The step (or the fork onto the device) panicked; the panic message.
    Panicked(String),
    /// The worker did not answer within the pool's step timeout, counted from when it was sent
    /// its batch.
    TimedOut(Duration),
    /// The worker thread is gone (it died outside a step, or could not be started).
    WorkerGone,
}

/// One failed device: its public index in the pool's device list and how it failed.
#[derive(Debug)]
pub struct DeviceFailure {
    /// The device's index in the list the pool was created with.
    pub device: usize,
    /// What went wrong.
    pub kind: FailureKind,
}

impl fmt::Display for DeviceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let device = self.device;
        match &self.kind {
            FailureKind::Source(error) => {
                write!(f, "device {device}: batch source failed: {error}")
            }
            FailureKind::Panicked(message) => {
                write!(f, "device {device}: step panicked: {message}")
            }
            FailureKind::TimedOut(limit) => {
                write!(f, "device {device}: step timed out after {limit:?}")
            }
            FailureKind::WorkerGone => write!(f, "device {device}: worker thread is gone"),
        }
    }
}

/// Every device that failed in one step, in device order. Never empty.
///
/// `Display` gives one line for one failure and a list for several.
#[derive(Debug)]
pub struct DeviceFailures(Vec<DeviceFailure>);

impl DeviceFailures {
    /// Collects failures, sorting them by device. `None` if there are none.
    pub fn new(mut failures: Vec<DeviceFailure>) -> Option<Self> {
        if failures.is_empty() {
            return None;
        }
        failures.sort_by_key(|failure| failure.device);
        Some(Self(failures))
    }

    /// The failures, in device order.
    pub fn as_slice(&self) -> &[DeviceFailure] {
        &self.0
    }

    /// The failures, in device order.
    pub fn into_vec(self) -> Vec<DeviceFailure> {
        self.0
    }
}

impl fmt::Display for DeviceFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            several => {
                write!(f, "{} devices failed:", several.len())?;
                for failure in several {
                    write!(f, "\n  {failure}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DeviceFailures {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.0.as_slice() {
            [
                DeviceFailure {
                    kind: FailureKind::Source(error),
                    ..
                },
            ] => Some(error.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(device: usize, kind: FailureKind) -> DeviceFailure {
        DeviceFailure { device, kind }
    }

    #[test]
    fn one_failure_is_one_line() {
        let failures =
            DeviceFailures::new(vec![failure(1, FailureKind::Panicked("boom".into()))]).unwrap();
        assert_eq!(
            StepError::Devices(failures).to_string(),
            "device 1: step panicked: boom"
        );
    }

    #[test]
    fn several_failures_are_a_list_in_device_order() {
        let failures = DeviceFailures::new(vec![
            failure(3, FailureKind::WorkerGone),
            failure(0, FailureKind::TimedOut(Duration::from_millis(250))),
            failure(2, FailureKind::Source("file is gone".into())),
        ])
        .unwrap();
        assert_eq!(
            failures.to_string(),
            "3 devices failed:\n  \
             device 0: step timed out after 250ms\n  \
             device 2: batch source failed: file is gone\n  \
             device 3: worker thread is gone"
        );
    }

    #[test]
    fn no_failures_is_no_error() {
        assert!(DeviceFailures::new(Vec::new()).is_none());
    }
}
