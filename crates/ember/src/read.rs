//! Reading event files back: the checking record reader, and typed series of what a run wrote.
//!
//! [`Summaries::read_dir`] reads every summary file directly in one run directory, TensorBoard
//! (`*tfevents*`) and MindInsight (`*.out.events.summary.*`, lineage and explain files left
//! out) alike, in name order (the order both readers use), and returns each tag's series of
//! values. The per-kind functions ([`scalars`], [`histograms`], [`images`], [`texts`],
//! [`tensors`]) read the same and keep one kind.
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
//! without an error; corruption or an undecodable record is a [`ReadError`]. Values of kinds
//! without a series here (hparams, graphs, lineage) are skipped. Scalars come back as the `f32`
//! both formats store, widened to `f64`.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

pub use ember_write::framing;
use ember_write::pack::proto::{mindspore as msp, tensorboard as tbp};
use ember_write::pack::{DType, TensorValue};
pub use ember_write::reader::*;
use prost::Message;

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

/// One scalar value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalarPoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The value (stored as `f32` by both formats).
    pub value: f64,
}

/// One histogram: its statistics and buckets as `(left, right, count)`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// Smallest finite value.
    pub min: f64,
    /// Largest finite value.
    pub max: f64,
    /// Number of values counted in the buckets.
    pub count: f64,
    /// Sum of the finite values.
    pub sum: f64,
    /// The buckets; TensorBoard stores right edges only, so each left edge is the previous
    /// bucket's right edge (the first one's is `min`).
    pub buckets: Vec<(f64, f64, f64)>,
}

/// One image (one PNG; a batch was tiled into it when written).
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Channels: 1 gray, 3 RGB, 4 RGBA.
    pub channels: u32,
    /// The PNG bytes.
    pub png: Vec<u8>,
}

impl ImagePoint {
    /// From either format's `Image` message (the same fields under other names).
    fn new(
        (step, wall_time): (i64, f64),
        (width, height, colorspace): (i32, i32, i32),
        png: Vec<u8>,
    ) -> Self {
        let dimension = |n: i32| u32::try_from(n).unwrap_or(0);
        Self {
            step,
            wall_time,
            width: dimension(width),
            height: dimension(height),
            channels: dimension(colorspace),
            png,
        }
    }
}

/// One text value.
#[derive(Debug, Clone, PartialEq)]
pub struct TextPoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The text.
    pub text: String,
}

/// One tensor value. MindInsight files hold every element as `f32`, so their tensors come back
/// as `f32` whatever was recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The tensor.
    pub value: TensorValue,
}

/// Every series of one run directory, by kind and tag, each in file and record order.
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
    /// its own), in name order. `dir` may be an object-store URL (with the `object-store`
    /// feature): its objects are downloaded and read the same way.
    pub fn read_dir(dir: impl AsRef<Path>) -> Result<Summaries, ReadError> {
        let dir = dir.as_ref();
        if let Some(url) = dir.to_str().filter(|d| ember_write::is_remote(d)) {
            // An object-store run: its objects, downloaded whole, read as a directory.
            let local = std::env::temp_dir().join(format!(
                "ember-read-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            download(url, &local)?;
            let read = Self::read_dir(&local);
            let _ = fs::remove_dir_all(&local);
            return read;
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
                self.add_tensorboard(event, &mut plugins);
            } else {
                let event = msp::Event::decode(record.data.as_slice()).map_err(decode)?;
                self.add_mindinsight(event);
            }
        }
        Ok(())
    }

    fn add_tensorboard(&mut self, event: tbp::Event, plugins: &mut HashMap<String, String>) {
        use tbp::summary::value::Value as V;
        let Some(tbp::event::What::Summary(summary)) = event.what else {
            return;
        };
        let (step, wall_time) = (event.step, event.wall_time);
        for value in summary.value {
            let plugin = match value.metadata.and_then(|m| m.plugin_data) {
                Some(data) => {
                    plugins.insert(value.tag.clone(), data.plugin_name.clone());
                    data.plugin_name
                }
                None => plugins.get(&value.tag).cloned().unwrap_or_default(),
            };
            let tag = value.tag;
            match value.value {
                Some(V::SimpleValue(x)) => push(
                    &mut self.scalars,
                    tag,
                    ScalarPoint {
                        step,
                        wall_time,
                        value: f64::from(x),
                    },
                ),
                Some(V::Histo(h)) => {
                    let mut left = h.min;
                    let buckets = h
                        .bucket_limit
                        .iter()
                        .zip(&h.bucket)
                        .map(|(&right, &count)| {
                            let bucket = (left, right, count);
                            left = right;
                            bucket
                        })
                        .collect();
                    push(
                        &mut self.histograms,
                        tag,
                        HistogramPoint {
                            step,
                            wall_time,
                            min: h.min,
                            max: h.max,
                            count: h.num,
                            sum: h.sum,
                            buckets,
                        },
                    );
                }
                Some(V::Image(image)) => push(
                    &mut self.images,
                    tag,
                    ImagePoint::new(
                        (step, wall_time),
                        (image.width, image.height, image.colorspace),
                        image.encoded_image_string,
                    ),
                ),
                Some(V::Tensor(tensor)) if plugin == "text" => {
                    if let Some(text) = tensor.string_val.first() {
                        push(
                            &mut self.texts,
                            tag,
                            TextPoint {
                                step,
                                wall_time,
                                text: String::from_utf8_lossy(text).into_owned(),
                            },
                        );
                    }
                }
                Some(V::Tensor(tensor)) if plugin == "tensor" || plugin.is_empty() => {
                    if let Some(value) = tensorboard_tensor(&tensor) {
                        push(
                            &mut self.tensors,
                            tag,
                            TensorPoint {
                                step,
                                wall_time,
                                value,
                            },
                        );
                    }
                }
                _ => {}
            }
        }
    }

    fn add_mindinsight(&mut self, event: msp::Event) {
        use msp::summary::value::Value as V;
        let Some(msp::event::What::Summary(summary)) = event.what else {
            return;
        };
        let (step, wall_time) = (event.step.unwrap_or(0), event.wall_time);
        for value in summary.value {
            let tag = value.tag;
            match value.value {
                Some(V::ScalarValue(x)) => push(
                    &mut self.scalars,
                    tag,
                    ScalarPoint {
                        step,
                        wall_time,
                        value: f64::from(x),
                    },
                ),
                Some(V::Histogram(h)) => push(
                    &mut self.histograms,
                    tag,
                    HistogramPoint {
                        step,
                        wall_time,
                        min: h.min.unwrap_or(f64::NAN),
                        max: h.max.unwrap_or(f64::NAN),
                        count: h.buckets.iter().map(|b| b.count as f64).sum(),
                        sum: h.sum.unwrap_or(0.0),
                        buckets: h
                            .buckets
                            .iter()
                            .map(|b| (b.left, b.left + b.width, b.count as f64))
                            .collect(),
                    },
                ),
                Some(V::Image(image)) => push(
                    &mut self.images,
                    tag,
                    ImagePoint::new(
                        (step, wall_time),
                        (image.width, image.height, image.colorspace),
                        image.encoded_image,
                    ),
                ),
                Some(V::Tensor(tensor)) => {
                    let shape: Option<Vec<usize>> = tensor
                        .dims
                        .iter()
                        .map(|&d| usize::try_from(d).ok())
                        .collect();
                    if let Some(shape) = shape
                        && shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
                            == Some(tensor.float_data.len())
                    {
                        push(
                            &mut self.tensors,
                            tag,
                            TensorPoint {
                                step,
                                wall_time,
                                value: TensorValue::from_slice(&tensor.float_data, shape),
                            },
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

fn push<T>(series: &mut BTreeMap<String, Vec<T>>, tag: String, point: T) {
    series.entry(tag).or_default().push(point);
}

/// A TensorBoard tensor as ember's value, when its dtype is one ember has and its bytes (or
/// typed values) match its shape.
fn tensorboard_tensor(tensor: &tbp::TensorProto) -> Option<TensorValue> {
    use tbp::DataType as T;
    let shape: Vec<usize> = tensor
        .tensor_shape
        .as_ref()
        .map(|s| s.dim.iter().map(|d| usize::try_from(d.size).ok()).collect())
        .unwrap_or(Some(Vec::new()))?;
    let dtype = match T::try_from(tensor.dtype).ok()? {
        T::DtBool => DType::Bool,
        T::DtInt8 => DType::I8,
        T::DtInt16 => DType::I16,
        T::DtInt32 => DType::I32,
        T::DtInt64 => DType::I64,
        T::DtUint8 => DType::U8,
        T::DtUint16 => DType::U16,
        T::DtUint32 => DType::U32,
        T::DtUint64 => DType::U64,
        T::DtHalf => DType::F16,
        T::DtBfloat16 => DType::BF16,
        T::DtFloat => DType::F32,
        T::DtDouble => DType::F64,
        _ => return None,
    };
    let bytes = if !tensor.tensor_content.is_empty() {
        tensor.tensor_content.clone()
    } else if dtype == DType::F32 {
        tensor
            .float_val
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect()
    } else if dtype == DType::F64 {
        tensor
            .double_val
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect()
    } else {
        return None;
    };
    let value = TensorValue::new(dtype, shape, bytes);
    value.check().is_ok().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SummaryRecord;
    use ember_write::pack::{Format, ImageLayout};

    fn write_every_kind(format: Format) -> (tempfile::TempDir, Summaries) {
        let dir = tempfile::tempdir().unwrap();
        let mut summary = SummaryRecord::builder(dir.path())
            .format(format)
            .build()
            .unwrap();
        for step in 0..3 {
            summary
                .add_scalar("loss", 1.0 / (step as f64 + 1.0), step)
                .unwrap();
        }
        summary
            .add_histogram("w", vec![0.0f32, 1.0, 1.0, 2.0, 3.0], 3)
            .unwrap();
        summary
            .add_image(
                "img",
                TensorValue::from_slice(&[0u8; 3 * 2 * 4], vec![3, 2, 4]),
                ImageLayout::Chw,
                3,
            )
            .unwrap();
        summary
            .add_tensor("t", TensorValue::from_slice(&[1.5f32, -2.0], vec![2, 1]), 4)
            .unwrap();
        if format == Format::TensorBoard {
            summary.add_text("note", "hello", 5).unwrap();
        }
        summary.close().unwrap();
        let read = Summaries::read_dir(dir.path()).unwrap();
        (dir, read)
    }

    #[test]
    fn every_kind_comes_back_in_both_formats() {
        for format in [Format::TensorBoard, Format::MindInsight] {
            let (_dir, read) = write_every_kind(format);
            let loss: Vec<(i64, f64)> = read.scalars["loss"]
                .iter()
                .map(|p| (p.step, p.value))
                .collect();
            assert_eq!(
                loss,
                [(0, 1.0), (1, 0.5), (2, f64::from(1.0f32 / 3.0))],
                "{format:?}"
            );
            let h = &read.histograms["w"][0];
            assert_eq!(
                (h.step, h.min, h.max, h.count),
                (3, 0.0, 3.0, 5.0),
                "{format:?}"
            );
            assert_eq!(h.buckets.iter().map(|b| b.2).sum::<f64>(), 5.0);
            let img = &read.images["img"][0];
            assert_eq!((img.width, img.height), (4, 2), "{format:?}");
            assert!(img.png.starts_with(b"\x89PNG"));
            let t = &read.tensors["t"][0];
            assert_eq!((t.step, t.value.shape()), (4, &[2usize, 1][..]));
            assert_eq!(t.value.to_f64_vec(), [1.5, -2.0]);
            if format == Format::TensorBoard {
                assert_eq!(read.texts["note"][0].text, "hello");
            }
        }
    }

    #[test]
    fn a_truncated_tail_ends_the_series_and_corruption_is_an_error() {
        let (dir, _) = write_every_kind(Format::TensorBoard);
        let file = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("tfevents"))
            .unwrap();
        let mut bytes = fs::read(&file).unwrap();
        let mut perms = fs::metadata(&file).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&file, perms).unwrap();
        fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
        let read = Summaries::read_dir(dir.path()).unwrap();
        assert_eq!(read.scalars["loss"].len(), 3);
        assert!(
            !read.texts.contains_key("note"),
            "the torn last record is not read"
        );
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        fs::write(&file, &bytes).unwrap();
        assert!(matches!(
            Summaries::read_dir(dir.path()),
            Err(ReadError::Corrupt { .. }) | Err(ReadError::Decode { .. })
        ));
    }
}
