//! Each TensorBoard plugin's `SummaryMetadata`, built once per packer, and the `Summary.Value`
//! a prost-built payload goes out in.

use prost::Message;

use crate::dtype::DType;
use crate::packed::Part;
use crate::proto::tensorboard as tbp;

/// Serialized `SummaryMetadata` of each plugin, built once per packer.
#[derive(Debug)]
pub(crate) struct Metadata {
    pub(super) scalars: Vec<u8>,
    pub(super) histograms: Vec<u8>,
    pub(super) images: Vec<u8>,
    pub(super) text: Vec<u8>,
    pub(super) tensor: Vec<u8>,
    pub(super) audio: Vec<u8>,
    pub(super) custom_scalars: Vec<u8>,
}

/// `SummaryMetadata` for `plugin` with serialized `content` and `data_class`.
pub(crate) fn metadata(
    plugin: &str,
    content: Vec<u8>,
    data_class: tbp::DataClass,
) -> tbp::SummaryMetadata {
    tbp::SummaryMetadata {
        plugin_data: Some(tbp::summary_metadata::PluginData {
            plugin_name: plugin.to_string(),
            content,
        }),
        data_class: data_class as i32,
        ..Default::default()
    }
}

impl Metadata {
    pub(crate) fn new() -> Metadata {
        use tbp::DataClass::{BlobSequence, Scalar, Tensor};
        Metadata {
            scalars: metadata(
                "scalars",
                tbp::ScalarPluginData::default().encode_to_vec(),
                Scalar,
            )
            .encode_to_vec(),
            histograms: metadata(
                "histograms",
                tbp::HistogramPluginData::default().encode_to_vec(),
                Tensor,
            )
            .encode_to_vec(),
            images: metadata(
                "images",
                tbp::ImagePluginData::default().encode_to_vec(),
                BlobSequence,
            )
            .encode_to_vec(),
            text: metadata(
                "text",
                tbp::TextPluginData::default().encode_to_vec(),
                Tensor,
            )
            .encode_to_vec(),
            // No TensorBoard plugin shows general tensors; the explicit data class makes
            // TensorBoard's data server keep them rather than drop an unknown plugin.
            tensor: metadata("tensor", Vec::new(), Tensor).encode_to_vec(),
            // `audio/metadata.py`: version 0, WAV, and no data class, as TensorBoard's own
            // audio summaries: its loaders then migrate the [k, 2] (clip, label) tensor to the
            // [k] blob sequence they serve. With the class set they skip that step and serve
            // each (clip, label) row as one blob, which is no WAV.
            audio: metadata(
                "audio",
                tbp::AudioPluginData {
                    version: 0,
                    encoding: tbp::audio_plugin_data::Encoding::Wav as i32,
                }
                .encode_to_vec(),
                tbp::DataClass::Unknown,
            )
            .encode_to_vec(),
            // `custom_scalar/summary.py` writes an empty content; the plugin reads the layout
            // through the data provider's tensors.
            custom_scalars: metadata("custom_scalars", Vec::new(), Tensor).encode_to_vec(),
        }
    }
}

/// TensorFlow's `DataType` of a dtype.
pub(crate) fn data_type(dtype: DType) -> tbp::DataType {
    use tbp::DataType as T;
    match dtype {
        DType::Bool => T::DtBool,
        DType::I8 => T::DtInt8,
        DType::I16 => T::DtInt16,
        DType::I32 => T::DtInt32,
        DType::I64 => T::DtInt64,
        DType::U8 => T::DtUint8,
        DType::U16 => T::DtUint16,
        DType::U32 => T::DtUint32,
        DType::U64 => T::DtUint64,
        DType::F16 => T::DtHalf,
        DType::BF16 => T::DtBfloat16,
        DType::F32 => T::DtFloat,
        DType::F64 => T::DtDouble,
    }
}

/// A `Summary.Value` with a prost-built payload.
pub(super) fn encoded_value(
    tag: &str,
    metadata: Option<tbp::SummaryMetadata>,
    v: tbp::summary::value::Value,
) -> Part<'static> {
    Part::Encoded(
        tbp::summary::Value {
            tag: tag.to_string(),
            node_name: String::new(),
            metadata,
            value: Some(v),
        }
        .encode_to_vec(),
    )
}

pub(super) fn decoded_metadata(bytes: &[u8], include: bool) -> Option<tbp::SummaryMetadata> {
    // Decoding our own bytes cannot fail; an empty default would only drop the metadata.
    include.then(|| tbp::SummaryMetadata::decode(bytes).unwrap_or_default())
}
