//! One value of TensorBoard's pr_curves, audio and custom_scalars plugins, decoded from the
//! tensor it is stored in. Public for tools that walk records themselves (`ember inspect`).

use ember_write::pack::proto::tensorboard as tbp;
use ember_write::pack::{
    Category, Chart, ChartContent, CustomScalarLayout, DType, MarginSeries, PrCurve, TensorValue,
};
use prost::Message;

use super::points::AudioClip;

/// Why a plugin's value does not decode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValueProblem {
    /// The tensor's type or shape is not what the plugin stores.
    #[error("a {plugin} value is {expected}, not a {dtype} tensor of shape {shape:?}")]
    WrongTensor {
        /// The plugin.
        plugin: &'static str,
        /// What it stores.
        expected: &'static str,
        /// The tensor's `DataType` name.
        dtype: &'static str,
        /// The tensor's shape.
        shape: Vec<i64>,
    },
    /// A clip is not a WAV file.
    #[error("the clip is not a wav file: {0}")]
    Wav(#[source] hound::Error),
    /// The custom scalars layout is not a `Layout` message.
    #[error("the custom scalars layout does not decode: {0}")]
    Layout(#[source] prost::DecodeError),
}

/// The tensor's dimensions, `[]` for a scalar.
fn dims(tensor: &tbp::TensorProto) -> Vec<i64> {
    tensor
        .tensor_shape
        .as_ref()
        .map(|s| s.dim.iter().map(|d| d.size).collect())
        .unwrap_or_default()
}

fn layout_problem(
    plugin: &'static str,
    expected: &'static str,
    tensor: &tbp::TensorProto,
) -> ValueProblem {
    ValueProblem::WrongTensor {
        plugin,
        expected,
        dtype: tbp::DataType::try_from(tensor.dtype).map_or("unknown", |d| d.as_str_name()),
        shape: dims(tensor),
    }
}

/// The `n` thresholds of a PR curve, `i / (n - 1)`: the pr_curves plugin's, where a prediction
/// at or above a threshold counts as positive. Computed as numpy's `linspace(0, 1, n)`, which
/// TensorBoard's dashboard uses (`i · (1 / (n − 1))`, the last exactly 1), so that they equal
/// the dashboard's bit for bit.
pub fn pr_curve_thresholds(n: usize) -> Vec<f64> {
    let step = 1.0 / n.saturating_sub(1).max(1) as f64;
    let mut thresholds: Vec<f64> = (0..n).map(|i| i as f64 * step).collect();
    if let Some(last) = thresholds.last_mut().filter(|_| n > 1) {
        *last = 1.0;
    }
    thresholds
}

/// A PR curve from its `[6, n]` float tensor (`n` ≥ 2): true positives, false positives, true
/// negatives, false negatives, precision, recall, one column per threshold.
pub fn decode_pr_curve(tensor: &tbp::TensorProto) -> Result<PrCurve, ValueProblem> {
    const EXPECTED: &str = "a [6, n] float tensor (n of at least 2) whose values fill it";
    let problem = || layout_problem("pr_curves", EXPECTED, tensor);
    let value = tensor_value(tensor).ok_or_else(problem)?;
    let &[6, n] = value.shape() else {
        return Err(problem());
    };
    if n < 2 || !matches!(value.dtype(), DType::F32 | DType::F64) {
        return Err(problem());
    }
    let values = value.to_f64_vec();
    let mut rows = values.chunks_exact(n).map(<[f64]>::to_vec);
    let mut row = || rows.next().unwrap_or_default();
    Ok(PrCurve {
        true_positives: row(),
        false_positives: row(),
        true_negatives: row(),
        false_negatives: row(),
        precision: row(),
        recall: row(),
    })
}

/// The clips of an audio value: a `[k, 2]` string tensor of (WAV file, label) rows, as
/// TensorBoard's summaries write it, or `[k]` of WAV files alone.
pub fn decode_audio(tensor: &tbp::TensorProto) -> Result<Vec<AudioClip>, ValueProblem> {
    const EXPECTED: &str = "a [k, 2] string tensor of (wav, label) rows, or [k] of wav files";
    let problem = || layout_problem("audio", EXPECTED, tensor);
    if tensor.dtype != tbp::DataType::DtString as i32 {
        return Err(problem());
    }
    let strings = &tensor.string_val;
    let columns = match dims(tensor)[..] {
        [k, 2] if usize::try_from(k).ok().and_then(|k| k.checked_mul(2)) == Some(strings.len()) => {
            2
        }
        [k] if usize::try_from(k).ok() == Some(strings.len()) => 1,
        _ => return Err(problem()),
    };
    strings
        .chunks_exact(columns)
        .map(|row| {
            let label = row.get(1).map(|l| String::from_utf8_lossy(l).into_owned());
            decode_wav(row[0].clone(), label.unwrap_or_default())
        })
        .collect()
}

/// A clip from its WAV file, with its label: integer samples scaled by `2^(bits - 1)`, float
/// ones as they are. TensorFlow 1's audio summaries hold the file in the value itself.
pub fn decode_wav(wav: Vec<u8>, label: String) -> Result<AudioClip, ValueProblem> {
    let reader =
        hound::WavReader::new(std::io::Cursor::new(wav.as_slice())).map_err(ValueProblem::Wav)?;
    let spec = reader.spec();
    let samples = match spec.sample_format {
        hound::SampleFormat::Int => {
            // 2^(bits - 1) is exact in f32 for every width WAV allows (up to 32 bits).
            let scale = 2f32.powi(i32::from(spec.bits_per_sample) - 1);
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|s| s as f32 / scale))
                .collect::<Result<Vec<f32>, _>>()
        }
        hound::SampleFormat::Float => reader.into_samples::<f32>().collect(),
    }
    .map_err(ValueProblem::Wav)?;
    Ok(AudioClip {
        sample_rate: spec.sample_rate,
        channels: spec.channels,
        samples,
        wav,
        label,
    })
}

/// The custom scalars layout of its rank-0 string tensor (the serialized `Layout`).
pub fn decode_custom_scalars(
    tensor: &tbp::TensorProto,
) -> Result<CustomScalarLayout, ValueProblem> {
    let serialized = match (&tensor.string_val[..], dims(tensor).is_empty()) {
        ([serialized], true) if tensor.dtype == tbp::DataType::DtString as i32 => serialized,
        _ => {
            return Err(layout_problem(
                "custom_scalars",
                "a rank-0 string tensor",
                tensor,
            ));
        }
    };
    let layout = tbp::Layout::decode(serialized.as_slice()).map_err(ValueProblem::Layout)?;
    Ok(CustomScalarLayout {
        categories: layout
            .category
            .into_iter()
            .map(|c| Category {
                title: c.title,
                closed: c.closed,
                charts: c.chart.into_iter().map(chart).collect(),
            })
            .collect(),
    })
}

fn chart(chart: tbp::Chart) -> Chart {
    use tbp::chart::Content;
    let content = match chart.content {
        Some(Content::Margin(margin)) => ChartContent::Margin(
            margin
                .series
                .into_iter()
                .map(|s| MarginSeries {
                    value: s.value,
                    lower: s.lower,
                    upper: s.upper,
                })
                .collect(),
        ),
        Some(Content::Multiline(multiline)) => ChartContent::Multiline(multiline.tag),
        // A chart without content draws what a multiline chart of no tags draws: nothing.
        None => ChartContent::Multiline(Vec::new()),
    };
    Chart {
        title: chart.title,
        content,
    }
}

/// A TensorBoard tensor as ember's value, when its dtype is one ember has and its bytes (or
/// typed values) match its shape.
pub(super) fn tensor_value(tensor: &tbp::TensorProto) -> Option<TensorValue> {
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
