//! Why a value could not be packed.

use crate::dtype::DType;
use crate::format::{Format, ImageLayout};
use crate::tag::Tag;

/// A value of a record that was not packed; the rest of the record was.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("cannot pack {tag:?}: {kind}")]
pub struct PackError {
    /// The tag of the rejected value.
    pub tag: Tag,
    /// What was wrong with it.
    pub kind: PackErrorKind,
}

/// What was wrong with a value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PackErrorKind {
    /// The bytes of a tensor do not hold the elements its shape describes.
    #[error("{dtype} tensor of shape {shape:?} needs {} bytes, got {actual}", match expected { Some(n) => n.to_string(), None => "more than usize::MAX".to_string() })]
    ByteLength {
        /// The shape.
        shape: Vec<usize>,
        /// The dtype.
        dtype: DType,
        /// Bytes the shape needs; `None` when that overflows.
        expected: Option<usize>,
        /// Bytes present.
        actual: usize,
    },
    /// The format has no place for this dtype in this kind of value.
    #[error("{format:?} cannot hold a {kind} of dtype {dtype}")]
    DType {
        /// The format.
        format: Format,
        /// The value kind (`"tensor"`, `"image"`).
        kind: &'static str,
        /// The dtype.
        dtype: DType,
    },
    /// The format has no place for this kind of value.
    #[error("{format:?} cannot hold {kind} values")]
    Unsupported {
        /// The format.
        format: Format,
        /// The value kind.
        kind: &'static str,
    },
    /// A histogram with no values.
    #[error("histogram has no values")]
    EmptyHistogram,
    /// Precomputed buckets that are out of order, overlap, or hold bad counts.
    #[error("invalid histogram buckets: {0}")]
    InvalidBuckets(&'static str),
    /// Image data whose rank does not match its layout.
    #[error("image data of rank {rank} does not match layout {layout:?} (rank {})", layout.rank())]
    ImageRank {
        /// The rank of the data.
        rank: usize,
        /// The declared layout.
        layout: ImageLayout,
    },
    /// An image channel count the format cannot hold.
    #[error("{format:?} cannot hold images with {channels} channels")]
    ImageChannels {
        /// The format.
        format: Format,
        /// The channel count.
        channels: usize,
    },
    /// An image with a zero dimension, or too large to tile or to encode as PNG.
    #[error("image of size {width}x{height} (batch {batch}) cannot be encoded")]
    ImageSize {
        /// Batch size.
        batch: usize,
        /// Height of one image.
        height: usize,
        /// Width of one image.
        width: usize,
    },
    /// The PNG encoder failed.
    #[error("png encoding failed: {0}")]
    Png(String),
    /// A tensor of so many dimensions that its `.npy` header does not fit format 1.0.
    #[error("tensor of rank {rank} is too large for a .npy 1.0 header")]
    RankTooLarge {
        /// The rank.
        rank: usize,
    },
    /// A size computed from the value (or, for histograms, from the packer's bucket count)
    /// that overflows the integer holding it or exceeds a limit; the message names which.
    #[error("size overflow: {0}")]
    SizeOverflow(&'static str),
    /// An explain record with none of image path, inference, metadata labels or benchmark.
    #[error("explain record sets none of image_path, inference, metadata.label and benchmark")]
    EmptyExplain,
    /// Hyper-parameters the format cannot write as given; the message says why.
    #[error("invalid hparams: {0}")]
    InvalidHParams(&'static str),
    /// A precision-recall curve that cannot be computed or written; the message says why.
    #[error("invalid pr curve: {0}")]
    InvalidPrCurve(&'static str),
    /// The WAV encoder failed.
    #[error("wav encoding failed: {0}")]
    Wav(String),
    /// A sound clip that cannot be encoded as WAV; the message says why.
    #[error("invalid audio: {0}")]
    InvalidAudio(&'static str),
    /// An embedding whose parts do not agree (an empty matrix, labels or thumbnails not one per
    /// point, thumbnails of different sizes, a label holding a tab or line break); the message
    /// says which.
    #[error("invalid embedding: {0}")]
    InvalidEmbedding(String),
    /// A graph the format cannot write as given (MindInsight resolves inputs by node id and
    /// refuses some characters); the message names the node.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
}
