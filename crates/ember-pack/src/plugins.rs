//! Values of TensorBoard's pr_curves, custom_scalars and audio plugins: what they hold and the
//! computations TensorBoard's own summary functions make of raw input.

use crate::error::PackErrorKind;

/// A precision-recall curve at evenly spaced thresholds, in the `pr_curves` plugin's layout:
/// six rows (true positives, false positives, true negatives, false negatives, precision,
/// recall) of one entry per threshold, threshold `i` being `i / (num_thresholds - 1)`.
///
/// Build it from labels and predictions with [`PrCurve::from_predictions`] (TensorBoard's own
/// computation), or from counts computed elsewhere with [`PrCurve::from_counts`]. Every row must
/// have the same length, at least 2.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PrCurve {
    /// True positives per threshold.
    pub true_positives: Vec<f64>,
    /// False positives per threshold.
    pub false_positives: Vec<f64>,
    /// True negatives per threshold.
    pub true_negatives: Vec<f64>,
    /// False negatives per threshold.
    pub false_negatives: Vec<f64>,
    /// Precision per threshold.
    pub precision: Vec<f64>,
    /// Recall per threshold.
    pub recall: Vec<f64>,
}

/// The smallest denominator of precision and recall, as TensorBoard's `pr_curve` summary uses
/// it: an empty count gives a precision or recall of 0, not NaN.
const MINIMUM_COUNT: f64 = 1e-7;

impl PrCurve {
    /// The curve of a binary classifier, computed as TensorBoard's `pr_curve` summary (`pb`)
    /// computes it: a prediction `p` falls in bucket `floor(p · (n − 1))` (in `f32`, the
    /// predictions' dtype); true and false positives at threshold `i` are the labels' counts in
    /// buckets `i` and above; negatives are the totals minus those; precision is
    /// `tp / max(1e-7, tp + fp)` and recall `tp / max(1e-7, tp + fn)`.
    ///
    /// TensorBoard documents predictions in `[0, 1]` and silently drops the others (NaN
    /// included); here they are an error, as is a length mismatch or fewer than 2 thresholds.
    pub fn from_predictions(
        labels: &[bool],
        predictions: &[f32],
        num_thresholds: u32,
    ) -> Result<PrCurve, PackErrorKind> {
        if labels.len() != predictions.len() {
            return Err(PackErrorKind::InvalidPrCurve(
                "labels and predictions differ in length",
            ));
        }
        if num_thresholds < 2 {
            return Err(PackErrorKind::InvalidPrCurve(
                "a curve needs at least 2 thresholds",
            ));
        }
        let n = num_thresholds as usize;
        // One bucket per threshold; u32 thresholds always fit the address space here only when
        // the allocation succeeds, which `try_reserve` reports instead of aborting.
        let mut tp_buckets: Vec<f64> = Vec::new();
        let mut fp_buckets: Vec<f64> = Vec::new();
        tp_buckets
            .try_reserve_exact(n)
            .and_then(|()| fp_buckets.try_reserve_exact(n))
            .map_err(|_| PackErrorKind::SizeOverflow("too many pr curve thresholds"))?;
        tp_buckets.resize(n, 0.0);
        fp_buckets.resize(n, 0.0);
        let scale = (num_thresholds - 1) as f32;
        for (&label, &p) in labels.iter().zip(predictions) {
            if !(0.0..=1.0).contains(&p) {
                return Err(PackErrorKind::InvalidPrCurve(
                    "a prediction is NaN or outside [0, 1]",
                ));
            }
            // p in [0, 1] puts the index in [0, n - 1]; the `min` only guards rounding.
            let index = ((p * scale).floor() as usize).min(n - 1);
            if label {
                tp_buckets[index] += 1.0;
            } else {
                fp_buckets[index] += 1.0;
            }
        }
        let tp = reverse_cumulative_sum(&tp_buckets);
        let fp = reverse_cumulative_sum(&fp_buckets);
        let (all_positive, all_negative) = (tp[0], fp[0]);
        let tn: Vec<f64> = fp.iter().map(|f| all_negative - f).collect();
        let fn_: Vec<f64> = tp.iter().map(|t| all_positive - t).collect();
        let precision = tp
            .iter()
            .zip(&fp)
            .map(|(t, f)| t / (t + f).max(MINIMUM_COUNT))
            .collect();
        let recall = tp
            .iter()
            .zip(&fn_)
            .map(|(t, f)| t / (t + f).max(MINIMUM_COUNT))
            .collect();
        Ok(PrCurve {
            true_positives: tp,
            false_positives: fp,
            true_negatives: tn,
            false_negatives: fn_,
            precision,
            recall,
        })
    }

    /// A curve from counts computed elsewhere (tensorboardX's `add_pr_curve_raw`), one entry
    /// per threshold in each row; the rows must have the same length, at least 2.
    pub fn from_counts(
        true_positives: Vec<f64>,
        false_positives: Vec<f64>,
        true_negatives: Vec<f64>,
        false_negatives: Vec<f64>,
        precision: Vec<f64>,
        recall: Vec<f64>,
    ) -> Result<PrCurve, PackErrorKind> {
        let curve = PrCurve {
            true_positives,
            false_positives,
            true_negatives,
            false_negatives,
            precision,
            recall,
        };
        curve.check()?;
        Ok(curve)
    }

    /// The number of thresholds (the length of each row).
    pub fn num_thresholds(&self) -> usize {
        self.true_positives.len()
    }

    /// The rows in the plugin's order.
    pub fn rows(&self) -> [&[f64]; 6] {
        [
            &self.true_positives,
            &self.false_positives,
            &self.true_negatives,
            &self.false_negatives,
            &self.precision,
            &self.recall,
        ]
    }

    /// The tests packing makes, in O(1): six rows of one length, at least 2, that fits the
    /// plugin's `uint32` threshold count.
    pub(crate) fn check(&self) -> Result<u32, PackErrorKind> {
        let n = self.num_thresholds();
        if self.rows().iter().any(|row| row.len() != n) {
            return Err(PackErrorKind::InvalidPrCurve(
                "the six rows differ in length",
            ));
        }
        if n < 2 {
            return Err(PackErrorKind::InvalidPrCurve(
                "a curve needs at least 2 thresholds",
            ));
        }
        u32::try_from(n).map_err(|_| PackErrorKind::SizeOverflow("too many pr curve thresholds"))
    }
}

/// `out[i] = sum(buckets[i..])`, TensorBoard's `cumsum(buckets[::-1])[::-1]`.
fn reverse_cumulative_sum(buckets: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; buckets.len()];
    let mut sum = 0.0;
    for (o, b) in out.iter_mut().zip(buckets).rev() {
        sum += b;
        *o = sum;
    }
    out
}

/// A sound clip: interleaved `f32` samples in `[-1, 1]` (one per channel per frame), written
/// as 16-bit PCM WAV in the `audio` plugin's layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    /// Interleaved samples; beyond `[-1, 1]` they are clipped, NaN becomes silence.
    pub samples: Vec<f32>,
    /// Frames per second, above 0.
    pub sample_rate: u32,
    /// Channels per frame, above 0; `samples` holds a whole number of frames.
    pub channels: u16,
}

impl Audio {
    /// A mono clip.
    pub fn mono(samples: Vec<f32>, sample_rate: u32) -> Audio {
        Audio {
            samples,
            sample_rate,
            channels: 1,
        }
    }

    /// The tests packing makes, in O(1): a positive rate and channel count, whole frames, and
    /// a data size that fits WAV's 32-bit lengths.
    pub(crate) fn check(&self) -> Result<(), PackErrorKind> {
        if self.sample_rate == 0 {
            return Err(PackErrorKind::InvalidAudio("the sample rate is 0"));
        }
        if self.channels == 0 {
            return Err(PackErrorKind::InvalidAudio("the channel count is 0"));
        }
        if !self
            .samples
            .len()
            .is_multiple_of(usize::from(self.channels))
        {
            return Err(PackErrorKind::InvalidAudio(
                "the samples do not make whole frames",
            ));
        }
        // The RIFF size field counts 36 header bytes plus the data, 2 bytes a sample.
        let fits = self
            .samples
            .len()
            .checked_mul(2)
            .and_then(|n| n.checked_add(36))
            .is_some_and(|n| u32::try_from(n).is_ok());
        if !fits {
            return Err(PackErrorKind::SizeOverflow(
                "audio data exceeds a wav file's 4 GiB",
            ));
        }
        Ok(())
    }
}

/// TensorFlow's `encode_wav` quantization (`wav_io.cc`, `FloatToInt16Sample`): the sample
/// times 32768, rounded half away from zero, clamped to `i16`; NaN, which has no sample,
/// becomes 0.
pub fn pcm16_sample(x: f32) -> i16 {
    if x.is_nan() {
        return 0;
    }
    (x * 32768.0)
        .round()
        .clamp(f32::from(i16::MIN), f32::from(i16::MAX)) as i16
}

/// The layout of TensorBoard's custom scalars dashboard: categories of charts, top to bottom.
/// One per run: TensorBoard reads the first.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct CustomScalarLayout {
    /// The categories, top to bottom.
    pub categories: Vec<Category>,
}

/// A collapsible group of charts.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Category {
    /// The title.
    pub title: String,
    /// The charts, in order.
    pub charts: Vec<Chart>,
    /// Whether the category starts closed.
    pub closed: bool,
}

/// One chart of a [`Category`].
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The title.
    pub title: String,
    /// What it draws.
    pub content: ChartContent,
}

/// What a [`Chart`] draws.
#[derive(Clone, Debug, PartialEq)]
pub enum ChartContent {
    /// One line per scalar tag matching one of these regular expressions (matched from the
    /// start of the tag, across runs).
    Multiline(Vec<String>),
    /// A value between a lower and an upper bound, each an exact scalar tag.
    Margin(Vec<MarginSeries>),
}

/// One series of a margin chart: three exact scalar tags.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MarginSeries {
    /// The value's tag.
    pub value: String,
    /// The lower bound's tag.
    pub lower: String,
    /// The upper bound's tag.
    pub upper: String,
}

impl CustomScalarLayout {
    /// An empty layout.
    pub fn new() -> CustomScalarLayout {
        CustomScalarLayout::default()
    }

    /// Adds a category.
    pub fn category(mut self, category: Category) -> CustomScalarLayout {
        self.categories.push(category);
        self
    }
}

impl Category {
    /// An open category without charts.
    pub fn new(title: impl Into<String>) -> Category {
        Category {
            title: title.into(),
            ..Category::default()
        }
    }

    /// Adds a multiline chart of the tags matching `tag_regexes`.
    pub fn multiline<S: Into<String>>(
        mut self,
        title: impl Into<String>,
        tag_regexes: impl IntoIterator<Item = S>,
    ) -> Category {
        self.charts.push(Chart {
            title: title.into(),
            content: ChartContent::Multiline(tag_regexes.into_iter().map(Into::into).collect()),
        });
        self
    }

    /// Adds a margin chart of `series`.
    pub fn margin(mut self, title: impl Into<String>, series: Vec<MarginSeries>) -> Category {
        self.charts.push(Chart {
            title: title.into(),
            content: ChartContent::Margin(series),
        });
        self
    }
}
