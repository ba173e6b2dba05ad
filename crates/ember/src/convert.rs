//! What can be recorded as a tensor or a scalar: ember-pack's values, slices and vectors of
//! numbers, and (feature `burn`) Burn tensors and `TensorData`.

use ember_write::pack::TensorValue;

use crate::SummaryError;

#[cfg(feature = "burn")]
mod burn_values;

/// Something that can become a tensor value: ember-pack's [`TensorValue`], plain slices and
/// vectors of numbers, and with the `burn` feature Burn tensors and `TensorData`.
pub trait ToTensorValue {
    /// The tensor value, or an error for a dtype ember cannot hold (quantized tensors).
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError>;
}

impl ToTensorValue for TensorValue {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        Ok(self)
    }
}

impl<T: ember_write::pack::Element> ToTensorValue for &[T] {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        Ok(TensorValue::from(self))
    }
}

impl<T: ember_write::pack::Element> ToTensorValue for Vec<T> {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        Ok(TensorValue::from(self))
    }
}

/// Something that can be recorded as one scalar: Rust's numbers, and with the `burn` feature a
/// Burn tensor of one element (a loss, say), read back from its device.
pub trait ToScalar {
    /// The value as `f64`, or an error when it is not one number.
    fn to_scalar(self) -> Result<f64, SummaryError>;
}

macro_rules! lossless_scalar {
    ($($t:ty),*) => {$(
        impl ToScalar for $t {
            fn to_scalar(self) -> Result<f64, SummaryError> {
                Ok(f64::from(self))
            }
        }
    )*};
}
lossless_scalar!(f64, f32, i32, u32, i16, u16, i8, u8);

macro_rules! wide_scalar {
    ($($t:ty),*) => {$(
        impl ToScalar for $t {
            // Scalars are stored as f32 by both formats; rounding a wide integer to f64 first
            // loses nothing they keep.
            #[allow(clippy::cast_precision_loss)]
            fn to_scalar(self) -> Result<f64, SummaryError> {
                Ok(self as f64)
            }
        }
    )*};
}
wide_scalar!(i64, u64, usize, isize);

impl ToScalar for bool {
    fn to_scalar(self) -> Result<f64, SummaryError> {
        Ok(if self { 1.0 } else { 0.0 })
    }
}
