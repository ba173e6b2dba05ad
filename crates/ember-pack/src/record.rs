//! A record: the values of one step, the unit MindSpore packs.

use crate::tag::{Tag, TagError};
use crate::value::Value;

/// The step, the wall time and the values added for that step.
///
/// The wall time is always finite: [`Record::new`] replaces NaN and ±Inf by `0.0`, because
/// TensorBoard's data server gives up a whole file on a NaN wall time.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    step: i64,
    wall_time: f64,
    values: Vec<(Tag, Value)>,
}

/// `wall_time`, or `0.0` when it is not finite.
pub(crate) fn finite_wall_time(wall_time: f64) -> f64 {
    if wall_time.is_finite() {
        wall_time
    } else {
        0.0
    }
}

impl Record {
    /// An empty record. A non-finite `wall_time` (seconds since the Unix epoch) becomes `0.0`.
    pub fn new(step: i64, wall_time: f64) -> Record {
        Record {
            step,
            wall_time: finite_wall_time(wall_time),
            values: Vec::new(),
        }
    }

    /// Adds a value under `tag`.
    pub fn add(&mut self, tag: Tag, value: impl Into<Value>) -> &mut Record {
        self.values.push((tag, value.into()));
        self
    }

    /// Adds a value under a tag given as a string, validating it.
    pub fn try_add(&mut self, tag: &str, value: impl Into<Value>) -> Result<&mut Record, TagError> {
        let tag = Tag::new(tag)?;
        Ok(self.add(tag, value))
    }

    /// Builder form of [`Record::add`].
    pub fn with(mut self, tag: Tag, value: impl Into<Value>) -> Record {
        self.add(tag, value);
        self
    }

    /// The step.
    pub fn step(&self) -> i64 {
        self.step
    }

    /// The wall time in seconds since the Unix epoch; always finite.
    pub fn wall_time(&self) -> f64 {
        self.wall_time
    }

    /// Changes the wall time (a non-finite one becomes `0.0`).
    pub fn set_wall_time(&mut self, wall_time: f64) {
        self.wall_time = finite_wall_time(wall_time);
    }

    /// The values in the order they were added.
    pub fn values(&self) -> &[(Tag, Value)] {
        &self.values
    }

    /// The values, mutably (to filter or reorder them).
    pub fn values_mut(&mut self) -> &mut Vec<(Tag, Value)> {
        &mut self.values
    }

    /// Whether the record holds no value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }
}
