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
//! The modules, bottom up: `points` (the value types), `plugins` (decoding one plugin value),
//! `pbtxt` and `projector` (the projector config), `tensorboard` and `mindinsight` (one event
//! of each format into [`Summaries`]), and this one (files, directories, errors).

mod mindinsight;
mod pbtxt;
mod plugins;
mod points;
mod projector;
mod tensorboard;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

pub use ember_write::framing;
use ember_write::pack::proto::{mindspore as msp, tensorboard as tbp};
pub use ember_write::reader::*;
use prost::Message;

pub use plugins::{
    ValueProblem, decode_audio, decode_custom_scalars, decode_pr_curve, decode_wav,
    pr_curve_thresholds,
};
pub use points::{
    AudioClip, AudioPoint, CustomScalarsPoint, HistogramPoint, ImagePoint, PrCurvePoint,
    ScalarPoint, TensorPoint, TextPoint,
};
pub use projector::{EmbeddingEntry, EmbeddingFile, EmbeddingProblem, SpriteEntry};

/// Why a run directory could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Listing the directory or opening a file failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A record is damaged (not a truncated tail).
    #[error("{}: {problem}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the reader found, with its offset.
        problem: ReadProblem,
    },
    /// A whole record is not an event of its format.
    #[error("{}: the record at byte {offset} is not an event: {source}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The record's offset.
        offset: u64,
        /// The decoder's error.
        source: prost::DecodeError,
    },
    /// A PR curve, audio clip or custom scalars layout does not hold its plugin's layout.
    #[error("{}: the value {tag:?} in the record at byte {offset}: {source}", path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// The record's offset.
        offset: u64,
        /// The value's tag.
        tag: String,
        /// What is wrong with it (boxed: a WAV error is large, and rare).
        source: Box<ValueProblem>,
    },
    /// The run's `projector_config.pbtxt` is not a protobuf text-format `ProjectorConfig`.
    #[error("{}, line {line}: {problem}", path.display())]
    ProjectorConfig {
        /// The config file.
        path: PathBuf,
        /// The line the problem is on, from 1.
        line: usize,
        /// What the parser expected.
        problem: &'static str,
    },
    /// An object-store log directory could not be read (or this build has no `object-store`
    /// feature).
    #[error("cannot read {url}: {message}")]
    Remote {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
}

/// [`download`] into a new private temporary directory (mode 0700, a random name) that is
/// removed when the result is dropped.
#[cfg(feature = "object-store")]
pub fn download_private(url: &str) -> Result<ember_write::remote::Downloaded, ReadError> {
    ember_write::remote::download_private(url).map_err(|e| ReadError::Remote {
        url: url.to_owned(),
        message: e.to_string(),
    })
}

/// Downloads the objects of the object-store log directory `url` (`s3://…`, `gs://…`, …) into
/// the local directory `into`, segments and all, so that [`Summaries::read_dir`] and any
/// reader of local directories read it; returns how many objects there were. Needs the
/// `object-store` feature.
pub fn download(url: &str, into: &Path) -> Result<usize, ReadError> {
    #[cfg(feature = "object-store")]
    return ember_write::remote::download(url, into).map_err(|e| ReadError::Remote {
        url: url.to_owned(),
        message: e.to_string(),
    });
    #[cfg(not(feature = "object-store"))]
    {
        let _ = into;
        Err(ReadError::Remote {
            url: url.to_owned(),
            message: "this ember was built without the `object-store` feature".into(),
        })
    }
}

/// Every series of one run directory, by kind and tag, each in file and record order, and the
/// embeddings its projector config lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summaries {
    /// Scalars by tag.
    pub scalars: BTreeMap<String, Vec<ScalarPoint>>,
    /// Histograms by tag.
    pub histograms: BTreeMap<String, Vec<HistogramPoint>>,
    /// Images by tag.
    pub images: BTreeMap<String, Vec<ImagePoint>>,
    /// Texts by tag.
    pub texts: BTreeMap<String, Vec<TextPoint>>,
    /// Tensors by tag.
    pub tensors: BTreeMap<String, Vec<TensorPoint>>,
    /// PR curves by tag (TensorBoard only).
    pub pr_curves: BTreeMap<String, Vec<PrCurvePoint>>,
    /// Audio clips by tag, one point per clip (TensorBoard only).
    pub audio: BTreeMap<String, Vec<AudioPoint>>,
    /// The custom scalars layouts, in record order; TensorBoard's dashboard shows the first
    /// (TensorBoard only).
    pub custom_scalars: Vec<CustomScalarsPoint>,
    /// The entries of the run's `projector_config.pbtxt`, in its order, each with its files
    /// checked; empty without a config (TensorBoard only).
    pub embeddings: Vec<EmbeddingEntry>,
}

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

/// Which format a file name says a summary file is in, if it is one.
fn summary_format(name: &str) -> Option<bool> {
    if name.contains("tfevents") {
        Some(true)
    } else if name.contains(".out.events.summary.")
        && !name.ends_with("_lineage")
        && !name.ends_with("_explain")
    {
        Some(false)
    } else {
        None
    }
}

impl Summaries {
    /// Reads the summary files directly in `dir` (not in its subdirectories: each is a run of
    /// its own), in name order, and its projector config. `dir` may be an object-store URL
    /// (with the `object-store` feature): its objects are downloaded and read the same way.
    pub fn read_dir(dir: impl AsRef<Path>) -> Result<Summaries, ReadError> {
        let dir = dir.as_ref();
        if let Some(url) = dir.to_str().filter(|d| ember_write::is_remote(d)) {
            // An object-store run: its objects, downloaded whole into a private directory,
            // read as a directory.
            #[cfg(feature = "object-store")]
            {
                let local = download_private(url)?;
                return Self::read_dir(local.path());
            }
            #[cfg(not(feature = "object-store"))]
            {
                download(url, Path::new(""))?;
                return Err(ReadError::Remote {
                    url: url.to_owned(),
                    message: "this ember was built without the `object-store` feature".into(),
                });
            }
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ReadError::Io { path, source }
        };
        let mut files = Vec::new();
        for entry in fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = fs::metadata(entry.path()).is_ok_and(|m| m.is_file());
            if let (true, Some(tensorboard)) = (is_file, summary_format(&name)) {
                files.push((name, entry.path(), tensorboard));
            }
        }
        files.sort();
        let mut out = Summaries::default();
        for (_, path, tensorboard) in files {
            out.read_file(&path, tensorboard)?;
        }
        out.embeddings = projector::read_config(dir)?;
        Ok(out)
    }

    fn read_file(&mut self, path: &Path, tensorboard: bool) -> Result<(), ReadError> {
        let reader = RecordReader::open(path).map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // TensorBoard puts a tag's plugin in the metadata of its first value in a file only.
        let mut plugins: HashMap<String, String> = HashMap::new();
        for item in reader {
            let record = match item {
                Ok(record) => record,
                Err(problem) if problem.is_truncated_tail() => break,
                Err(problem) => {
                    return Err(ReadError::Corrupt {
                        path: path.to_path_buf(),
                        problem,
                    });
                }
            };
            let decode = |source| ReadError::Decode {
                path: path.to_path_buf(),
                offset: record.offset,
                source,
            };
            if tensorboard {
                let event = tbp::Event::decode(record.data.as_slice()).map_err(decode)?;
                self.add_tensorboard(event, &mut plugins)
                    .map_err(|(tag, source)| ReadError::Value {
                        path: path.to_path_buf(),
                        offset: record.offset,
                        tag,
                        source: Box::new(source),
                    })?;
            } else {
                let event = msp::Event::decode(record.data.as_slice()).map_err(decode)?;
                self.add_mindinsight(event);
            }
        }
        Ok(())
    }
}

fn push<T>(series: &mut BTreeMap<String, Vec<T>>, tag: String, point: T) {
    series.entry(tag).or_default().push(point);
}
