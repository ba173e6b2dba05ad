//! [`SummaryTap`]: the handle model code records through from inside a step, as MindSpore's
//! summary operators do; values are checked where they are added ([`checked`]).

use std::sync::{Arc, Mutex, PoisonError};

use ember_write::pack::{Packer, Tag, Value};

#[cfg(doc)]
use super::plugin::Mode;
use crate::SummaryError;

/// A clonable handle for model code to record values from inside a step, as MindSpore's summary
/// operators do. What it collects is added to the next [`record`](crate::SummaryRecord::record) in
/// [`Mode::Train`] and dropped in [`Mode::Eval`].
#[derive(Debug, Clone)]
pub struct SummaryTap {
    values: Arc<Mutex<Vec<(Tag, Value)>>>,
    packer: Arc<Packer>,
}

impl SummaryTap {
    pub(super) fn new(packer: Arc<Packer>) -> Self {
        Self {
            values: Arc::default(),
            packer,
        }
    }

    /// Adds a value for the next record. An invalid tag or value is refused here, alone: the
    /// step's other values are still recorded.
    pub fn add(&self, tag: &str, value: impl Into<Value>) -> Result<(), SummaryError> {
        let (tag, value) = checked(&self.packer, tag, value.into())?;
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((tag, value));
        Ok(())
    }

    pub(super) fn take(&self) -> Vec<(Tag, Value)> {
        std::mem::take(&mut *self.values.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Checks `tag` and `value` as packing will, so that a bad one is refused where it is added.
pub(super) fn checked(
    packer: &Packer,
    tag: &str,
    value: Value,
) -> Result<(Tag, Value), SummaryError> {
    let tag = Tag::new(tag)?;
    packer.check(&tag, &value)?;
    Ok((tag, value))
}
