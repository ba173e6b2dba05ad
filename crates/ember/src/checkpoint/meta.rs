//! A checkpoint's `meta` section, read in one place: `key=value` lines, the field that is wrong
//! named. What the run that took it was (its id, settings, format, devices and ranks) and where it
//! was are all read through [`Fields`]; the Trainer's position and counters are written and
//! decoded beside it (`trainer/checkpointing/meta.rs`) over the same fields.

use super::file::Checkpoint;
use crate::run::{RunId, Settings};

/// The meta section's fields.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fields<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    /// The fields of `text`'s lines.
    pub(crate) fn parse(text: &'a str) -> Self {
        Self {
            pairs: text.lines().filter_map(|l| l.split_once('=')).collect(),
        }
    }

    /// The fields of `checkpoint`'s meta section; none where it has none, or one that is not
    /// text.
    pub(crate) fn of(checkpoint: &'a Checkpoint) -> Self {
        checkpoint
            .section("meta")
            .and_then(|meta| std::str::from_utf8(meta).ok())
            .map(Self::parse)
            .unwrap_or_default()
    }

    pub(crate) fn text(&self, key: &str) -> Result<&'a str, String> {
        self.pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("no `{key}`"))
    }

    pub(crate) fn all(&self, key: &str) -> impl Iterator<Item = &'a str> + '_ {
        let key = key.to_owned();
        self.pairs
            .iter()
            .filter(move |(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    pub(crate) fn usize(&self, key: &str) -> Result<usize, String> {
        let text = self.text(key)?;
        text.parse().map_err(|_| format!("`{key}={text}`"))
    }

    pub(crate) fn opt_usize(&self, key: &str) -> Result<Option<usize>, String> {
        match self.text(key)? {
            "-" => Ok(None),
            _ => self.usize(key).map(Some),
        }
    }

    pub(crate) fn float(&self, key: &str) -> Result<f64, String> {
        parse_float(self.text(key)?).ok_or_else(|| format!("`{key}`"))
    }

    pub(crate) fn opt_float(&self, key: &str) -> Result<Option<f64>, String> {
        parse_opt_float(self.text(key)?).ok_or_else(|| format!("`{key}`"))
    }

    /// The run that took the checkpoint: `Ok(None)` for a checkpoint of an ember from before
    /// run ids.
    pub(crate) fn run(&self) -> Result<Option<RunId>, String> {
        match self.text("run") {
            Ok(text) => RunId::parse(text)
                .map(Some)
                .ok_or_else(|| format!("`run={text}`")),
            Err(_) => Ok(None),
        }
    }

    /// The settings the run that took the checkpoint was opened with.
    pub(crate) fn settings(&self) -> Result<Settings, String> {
        Settings::from_meta(self.all("setting"))
    }
}

pub(crate) fn parse_float(text: &str) -> Option<f64> {
    u64::from_str_radix(text, 16).ok().map(f64::from_bits)
}

pub(crate) fn parse_opt_float(text: &str) -> Option<Option<f64>> {
    match text {
        "-" => Some(None),
        _ => parse_float(text).map(Some),
    }
}
