//! The small enumerations that say what is packed and how: the [`Format`], the [`FileKind`] a
//! packed item goes to, the [`HistogramRule`] and the [`ImageLayout`]. They sit at the bottom of
//! the crate, below the errors that name them.

/// The event format to pack for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// TensorBoard's `tensorboard.Event` (`brain.Event:2`).
    #[default]
    TensorBoard,
    /// MindSpore's `mindspore.irpb.Event` (`MindSpore.Event:1`), as MindInsight reads it.
    MindInsight,
}

/// Which file a packed item belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// The summary (event) file: scalars, tensors, histograms, images, text, hparams, graphs.
    Summary,
    /// MindSpore's `_lineage` file of `LineageEvent`s.
    Lineage,
    /// MindSpore's `_explain` file.
    Explain,
    /// One `.npy` file per exported tensor.
    Export,
    /// TensorBoard's projector: one directory of files per embedding, listed in the run's
    /// `projector_config.pbtxt`.
    Projector,
}

/// How TensorBoard histograms are bucketed. MindInsight always uses MindSpore's own rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistogramRule {
    /// This many equal-width buckets over the finite values' range, as TensorBoard's own
    /// summary ops do (30 by default). At most [`HistogramRule::MAX_EQUAL_WIDTH`]; with more,
    /// raw histograms are rejected with [`PackErrorKind::SizeOverflow`](crate::PackErrorKind::SizeOverflow).
    EqualWidth(u32),
    /// TensorFlow's exponential buckets (`1e-12·1.1^i` both signs), empty runs collapsed.
    Exponential,
}

impl HistogramRule {
    /// The largest equal-width bucket count: every histogram allocates and writes that many
    /// buckets, whatever its values.
    pub const MAX_EQUAL_WIDTH: u32 = 1 << 16;
}

impl Default for HistogramRule {
    fn default() -> HistogramRule {
        HistogramRule::EqualWidth(30)
    }
}

/// The order of the axes of image data: `N` batch, `C` channels, `H` height, `W` width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ImageLayout {
    /// A batch, channels first (MindSpore's only layout).
    #[default]
    Nchw,
    /// A batch, channels last.
    Nhwc,
    /// One image, channels first.
    Chw,
    /// One image, channels last.
    Hwc,
}

impl ImageLayout {
    /// The rank the layout needs.
    pub fn rank(self) -> usize {
        match self {
            ImageLayout::Nchw | ImageLayout::Nhwc => 4,
            ImageLayout::Chw | ImageLayout::Hwc => 3,
        }
    }
}
