//! How an ember error reaches burn-train: burn's `TrainingError` has no variant for ember's
//! errors, so the logger and the strategy both hand over its message.

/// The message of an ember error that burn's `TrainingError` has no variant for.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct EmberFailure(pub(super) String);
