//! [`Summaries`]: every series of one run, by kind and tag, as the format readers fill it.

use std::collections::BTreeMap;

use super::points::{
    AudioPoint, CustomScalarsPoint, HistogramPoint, ImagePoint, PrCurvePoint, ScalarPoint,
    TensorPoint, TextPoint,
};
use super::projector::EmbeddingEntry;

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

/// Appends `point` to the series `tag`.
pub(super) fn push<T>(series: &mut BTreeMap<String, Vec<T>>, tag: String, point: T) {
    series.entry(tag).or_default().push(point);
}
