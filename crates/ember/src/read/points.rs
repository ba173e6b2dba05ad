//! The value types of the reader's series: one point per recorded value, with its step and
//! wall time.

use ember_write::pack::{CustomScalarLayout, PrCurve, TensorValue};

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
    pub(super) fn new(
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

/// One precision-recall curve. The rows are the `f32` TensorBoard stores, widened to `f64`.
///
/// TensorBoard's PR curves dashboard leaves out the trailing thresholds where no example is
/// predicted positive (true plus false positives of 0); they are all here.
#[derive(Debug, Clone, PartialEq)]
pub struct PrCurvePoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The threshold of each column, `i / (n - 1)` for `n` thresholds ([`pr_curve_thresholds`]).
    ///
    /// [`pr_curve_thresholds`]: super::pr_curve_thresholds
    pub thresholds: Vec<f64>,
    /// Counts, precision and recall per threshold.
    pub curve: PrCurve,
}

/// One sound clip as its WAV file holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioClip {
    /// Frames per second.
    pub sample_rate: u32,
    /// Channels per frame.
    pub channels: u16,
    /// Interleaved samples scaled to `[-1, 1)`: a 16-bit sample `s` is `s / 32768`, so a clip
    /// ember wrote reads back as its input quantized by [`pcm16_sample`].
    ///
    /// [`pcm16_sample`]: ember_write::pack::pcm16_sample
    pub samples: Vec<f32>,
    /// The WAV file, as stored.
    pub wav: Vec<u8>,
    /// The clip's label (markdown; ember writes none).
    pub label: String,
}

/// One audio clip at one step. A TensorBoard value may hold several clips (ember writes one):
/// each comes as a point of its own, in order, with the same step.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioPoint {
    /// The step it was recorded at.
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The clip.
    pub clip: AudioClip,
}

/// One custom scalars layout (under the plugin's fixed tag, `custom_scalars__config__`).
#[derive(Debug, Clone, PartialEq)]
pub struct CustomScalarsPoint {
    /// The step it was recorded at (ember writes 0).
    pub step: i64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The dashboard's categories and charts.
    pub layout: CustomScalarLayout,
}
