//! Reading event files back: the checking record reader, and typed series of what a run wrote.
//!
//! [`Summaries::read_dir`] reads every summary file directly in one run directory, TensorBoard
//! (`*tfevents*`) and MindInsight (`*.out.events.summary.*`, lineage and explain files left
//! out) alike, in name order (the order both readers use), and returns each tag's series of
//! values, with the run's projector config. The per-kind functions ([`scalars`],
//! [`histograms`], [`images`], [`texts`], [`tensors`], [`pr_curves`], [`audio`],
//! [`custom_scalars`], [`embeddings`]) read the same and keep one kind.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let mut summary = ember::SummaryRecord::new(dir.path())?;
//! summary.add_scalar("loss", 0.5, 1)?;
//! summary.add_scalar("loss", 0.25, 2)?;
//! summary.close()?;
//! let loss = &ember::read::scalars(dir.path())?["loss"];
//! assert_eq!(loss.iter().map(|p| (p.step, p.value)).collect::<Vec<_>>(), [(1, 0.5), (2, 0.25)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A truncated tail (a file still being written, or cut by a crash) ends a file's series
//! without an error; corruption, an undecodable record, a PR curve, audio clip or layout whose
//! bytes are not its plugin's layout, or a projector config that is not protobuf's text format
//! is a [`ReadError`]. A file an embedding names that is missing is no error: it is listed in
//! the entry's [`problems`](EmbeddingEntry::problems). Values of kinds without a
//! series here (hparams, graphs, lineage) are skipped. Scalars come back as the `f32` both
//! formats store, widened to `f64`.
//!
//! PR curves, audio, custom scalars and the projector are TensorBoard's alone: MindInsight has
//! no such dashboards and ember refuses them in its format, so a MindInsight run has none.
//!
//! The modules, bottom up, none importing one above it: `error` and `points` (the value types),
//! `plugins` (decoding one plugin value), `pbtxt` and `projector` (the projector config),
//! `summaries` (the series of a run), `tensorboard` and `mindinsight` (one event of each format
//! into them), `download` (an object-store run made local) and `run_dir` (a run directory's
//! files, read in order); this one only names what is public.

mod download;
mod error;
mod mindinsight;
mod pbtxt;
mod plugins;
mod points;
mod projector;
mod run_dir;
mod summaries;
mod tensorboard;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;

pub use download::download;
pub use ember_write::framing;
pub use ember_write::reader::*;
pub use error::ReadError;

pub use plugins::{
    ValueProblem, decode_audio, decode_custom_scalars, decode_pr_curve, decode_wav,
    pr_curve_thresholds,
};
pub use points::{
    AudioClip, AudioPoint, CustomScalarsPoint, HistogramPoint, ImagePoint, PrCurvePoint,
    ScalarPoint, TensorPoint, TextPoint,
};
pub use projector::{EmbeddingEntry, EmbeddingFile, EmbeddingProblem, SpriteEntry};
pub use summaries::Summaries;

/// Reads every scalar series of the run in `dir`.
pub fn scalars(dir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<ScalarPoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.scalars)
}

/// Reads every histogram series of the run in `dir`.
pub fn histograms(
    dir: impl AsRef<Path>,
) -> Result<BTreeMap<String, Vec<HistogramPoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.histograms)
}

/// Reads every image series of the run in `dir`.
pub fn images(dir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<ImagePoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.images)
}

/// Reads every text series of the run in `dir`.
pub fn texts(dir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<TextPoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.texts)
}

/// Reads every tensor series of the run in `dir`.
pub fn tensors(dir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<TensorPoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.tensors)
}

/// Reads every PR curve series of the run in `dir`.
pub fn pr_curves(dir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<PrCurvePoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.pr_curves)
}

/// Reads every audio series of the run in `dir`.
pub fn audio(dir: impl AsRef<Path>) -> Result<BTreeMap<String, Vec<AudioPoint>>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.audio)
}

/// Reads the custom scalars layouts of the run in `dir`, in record order.
pub fn custom_scalars(dir: impl AsRef<Path>) -> Result<Vec<CustomScalarsPoint>, ReadError> {
    Summaries::read_dir(dir).map(|s| s.custom_scalars)
}

/// Reads the embeddings the projector config of the run in `dir` lists, each with its files
/// checked ([`EmbeddingEntry::problems`]); none when there is no config.
pub fn embeddings(dir: impl AsRef<Path>) -> Result<Vec<EmbeddingEntry>, ReadError> {
    let dir = dir.as_ref();
    match dir.to_str().filter(|d| ember_write::is_remote(d)) {
        Some(_) => Summaries::read_dir(dir).map(|s| s.embeddings),
        None => projector::read_config(dir),
    }
}
