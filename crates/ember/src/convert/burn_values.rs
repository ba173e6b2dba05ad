//! Burn tensors and `TensorData` as tensor values and scalars.

use burn::tensor::{DType as BurnDType, Int, Tensor, TensorData};
use ember_write::pack::{DType, TensorValue};

use super::{ToScalar, ToTensorValue};
use crate::SummaryError;

impl ToTensorValue for TensorData {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        (&self).to_tensor_value()
    }
}

impl ToTensorValue for &TensorData {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        let shape: Vec<usize> = self.shape().iter().copied().collect();
        let raw = |dtype: DType| TensorValue::new(dtype, shape.clone(), self.as_bytes().to_vec());
        let value = match self.dtype() {
            BurnDType::F64 => raw(DType::F64),
            BurnDType::F32 | BurnDType::Flex32 => raw(DType::F32),
            BurnDType::F16 => raw(DType::F16),
            BurnDType::BF16 => raw(DType::BF16),
            BurnDType::I64 => raw(DType::I64),
            BurnDType::I32 => raw(DType::I32),
            BurnDType::I16 => raw(DType::I16),
            BurnDType::I8 => raw(DType::I8),
            BurnDType::U64 => raw(DType::U64),
            BurnDType::U32 => raw(DType::U32),
            BurnDType::U16 => raw(DType::U16),
            BurnDType::U8 => raw(DType::U8),
            BurnDType::Bool(_) => {
                let values: Vec<bool> = self.iter::<bool>().collect();
                TensorValue::from_slice(&values, shape)
            }
            other => {
                return Err(SummaryError::UnsupportedDType(format!("{other:?}")));
            }
        };
        Ok(value)
    }
}

impl<const D: usize> ToTensorValue for Tensor<D> {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        self.into_data().to_tensor_value()
    }
}

impl<const D: usize> ToTensorValue for &Tensor<D> {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        self.to_data().to_tensor_value()
    }
}

impl<const D: usize> ToTensorValue for Tensor<D, Int> {
    fn to_tensor_value(self) -> Result<TensorValue, SummaryError> {
        self.into_data().to_tensor_value()
    }
}

/// A one-element tensor's value; anything else is [`SummaryError::NotAScalar`].
fn one_element(value: TensorValue) -> Result<f64, SummaryError> {
    let shape = value.shape().to_vec();
    match value.to_f64_vec().as_slice() {
        [x] => Ok(*x),
        _ => Err(SummaryError::NotAScalar { shape }),
    }
}

impl<const D: usize> ToScalar for Tensor<D> {
    fn to_scalar(self) -> Result<f64, SummaryError> {
        one_element(self.to_tensor_value()?)
    }
}

impl<const D: usize> ToScalar for &Tensor<D> {
    fn to_scalar(self) -> Result<f64, SummaryError> {
        one_element(self.to_tensor_value()?)
    }
}

impl<const D: usize> ToScalar for Tensor<D, Int> {
    fn to_scalar(self) -> Result<f64, SummaryError> {
        one_element(self.to_tensor_value()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    #[test]
    fn a_float_tensor_keeps_its_shape_and_values() {
        let tensor = Tensor::<2>::from_data([[1.0f32, -2.0], [0.5, 4.0]], &Device::flex());
        let value = tensor.to_tensor_value().unwrap();
        assert_eq!(value.shape(), &[2, 2]);
        assert_eq!(value.to_f64_vec(), [1.0, -2.0, 0.5, 4.0]);
    }

    #[test]
    fn an_int_tensor_keeps_its_values() {
        let tensor = Tensor::<1, Int>::from_data([3i64, -7, 11], &Device::flex());
        let value = tensor.to_tensor_value().unwrap();
        assert_eq!(value.shape(), &[3]);
        assert_eq!(value.to_f64_vec(), [3.0, -7.0, 11.0]);
    }

    #[test]
    fn a_one_element_tensor_is_a_scalar_and_a_longer_one_is_not() {
        let loss = Tensor::<1>::from_data([0.25f32], &Device::flex());
        assert_eq!(loss.to_scalar().unwrap(), 0.25);
        let two = Tensor::<1>::from_data([1.0f32, 2.0], &Device::flex());
        assert!(matches!(
            two.to_scalar(),
            Err(SummaryError::NotAScalar { shape }) if shape == [2]
        ));
    }

    #[test]
    fn tensor_data_of_f64_is_taken_as_it_is() {
        let data = TensorData::new(vec![0.25f64, 8.0], [2]);
        let value = data.to_tensor_value().unwrap();
        assert_eq!(value.dtype(), DType::F64);
        assert_eq!(value.to_f64_vec(), [0.25, 8.0]);
    }
}
