//! Tensors as dtype, shape and little-endian bytes.

use std::fmt;

use half::{bf16, f16};

use crate::dtype::DType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type a [`TensorValue`] can be built from: `bool`, the integers, `f16`, `bf16`,
/// `f32` and `f64`. Sealed.
pub trait Element: Copy + sealed::Sealed + Send + Sync + 'static {
    /// Its [`DType`].
    const DTYPE: DType;
    /// Appends its little-endian bytes.
    fn extend_le(values: &[Self], out: &mut Vec<u8>);
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn extend_le(values: &[Self], out: &mut Vec<u8>) {
                // An iterator of fixed-size arrays has an exact length, so `extend` writes
                // straight into the spare capacity: no zeroing first (measured: 7 µs for
                // 100,000 f32 where zeroing and copying took 13).
                out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            }
        }
    )*};
}

element!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f16 => F16, bf16 => BF16, f32 => F32, f64 => F64);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn extend_le(values: &[Self], out: &mut Vec<u8>) {
        out.extend(values.iter().map(|&b| u8::from(b)));
    }
}

/// A dense row-major tensor: dtype, shape and little-endian element bytes.
///
/// Construction does not check that the bytes match the shape; packing does, and rejects the
/// value with [`PackErrorKind::ByteLength`](crate::PackErrorKind::ByteLength) when they do not.
/// [`TensorValue::check`] runs the same test early.
#[derive(Clone, PartialEq)]
pub struct TensorValue {
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl TensorValue {
    /// A tensor from raw little-endian bytes. See [`TensorValue::check`].
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>, bytes: Vec<u8>) -> TensorValue {
        TensorValue {
            dtype,
            shape: shape.into(),
            bytes,
        }
    }

    /// A tensor of `shape` from typed values (copied to little-endian bytes).
    pub fn from_slice<T: Element>(values: &[T], shape: impl Into<Vec<usize>>) -> TensorValue {
        let mut bytes = Vec::with_capacity(std::mem::size_of_val(values));
        T::extend_le(values, &mut bytes);
        TensorValue::new(T::DTYPE, shape, bytes)
    }

    /// A rank-0 tensor holding one value.
    pub fn scalar<T: Element>(value: T) -> TensorValue {
        TensorValue::from_slice(&[value], Vec::new())
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape; empty for a scalar.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The little-endian element bytes, row-major.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Splits into dtype, shape and bytes.
    pub fn into_parts(self) -> (DType, Vec<usize>, Vec<u8>) {
        (self.dtype, self.shape, self.bytes)
    }

    /// The number of elements the shape describes (1 for rank 0, 0 when a dimension is 0), or
    /// `None` when the product overflows `usize`.
    pub fn num_elements(&self) -> Option<usize> {
        // A zero anywhere makes the product 0, however large the dimensions before it.
        if self.shape.contains(&0) {
            return Some(0);
        }
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// Checks that the bytes hold exactly the elements the shape describes.
    pub fn check(&self) -> Result<(), crate::PackErrorKind> {
        let expected = self
            .num_elements()
            .and_then(|n| n.checked_mul(self.dtype.size()));
        match expected {
            Some(expected) if expected == self.bytes.len() => Ok(()),
            expected => Err(crate::PackErrorKind::ByteLength {
                shape: self.shape.clone(),
                dtype: self.dtype,
                expected,
                actual: self.bytes.len(),
            }),
        }
    }

    /// Checks that every dimension fits the `int64` that both formats' shape fields (and numpy's
    /// `intp`) hold; a larger one would be written as a negative size.
    pub(crate) fn check_dims_i64(&self) -> Result<(), crate::PackErrorKind> {
        if self.shape.iter().all(|&d| i64::try_from(d).is_ok()) {
            Ok(())
        } else {
            Err(crate::PackErrorKind::SizeOverflow(
                "a tensor dimension exceeds i64::MAX",
            ))
        }
    }

    /// The number of elements the bytes hold.
    pub(crate) fn element_count(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// Element `i` converted to `f64` (exact for every dtype but the 64-bit integers beyond 2^53).
    /// Panics if `i` is out of range; callers check first.
    pub(crate) fn get_f64(&self, i: usize) -> f64 {
        element_f64(self.dtype, &self.bytes[i * self.dtype.size()..])
    }

    /// All elements converted to `f64`.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.element_count()).map(|i| self.get_f64(i)).collect()
    }
}

/// Bytes of a buffer of `count` items of `size` bytes, or `None` when no buffer can be that
/// large (more than `isize::MAX` bytes): packing checks this before it widens elements, which
/// only a 32-bit target can reach.
pub(crate) fn buffer_len(count: usize, size: usize) -> Option<usize> {
    count
        .checked_mul(size)
        .filter(|&len| isize::try_from(len).is_ok())
}

/// Reads the first element of `bytes` as `dtype`, converted to `f64`. `bytes` holds at least one
/// element.
pub(crate) fn element_f64(dtype: DType, bytes: &[u8]) -> f64 {
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    match dtype {
        DType::Bool => f64::from(u8::from(bytes[0] != 0)),
        DType::I8 => f64::from(i8::from_le_bytes(arr(bytes))),
        DType::I16 => f64::from(i16::from_le_bytes(arr(bytes))),
        DType::I32 => f64::from(i32::from_le_bytes(arr(bytes))),
        DType::I64 => i64::from_le_bytes(arr(bytes)) as f64,
        DType::U8 => f64::from(bytes[0]),
        DType::U16 => f64::from(u16::from_le_bytes(arr(bytes))),
        DType::U32 => f64::from(u32::from_le_bytes(arr(bytes))),
        DType::U64 => u64::from_le_bytes(arr(bytes)) as f64,
        DType::F16 => f16::from_le_bytes(arr(bytes)).to_f64(),
        DType::BF16 => bf16::from_le_bytes(arr(bytes)).to_f64(),
        DType::F32 => f64::from(f32::from_le_bytes(arr(bytes))),
        DType::F64 => f64::from_le_bytes(arr(bytes)),
    }
}

impl fmt::Debug for TensorValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorValue")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &format_args!("[{} bytes]", self.bytes.len()))
            .finish()
    }
}

impl<T: Element> From<&[T]> for TensorValue {
    /// A rank-1 tensor.
    fn from(values: &[T]) -> TensorValue {
        TensorValue::from_slice(values, vec![values.len()])
    }
}

impl<T: Element, const N: usize> From<[T; N]> for TensorValue {
    /// A rank-1 tensor.
    fn from(values: [T; N]) -> TensorValue {
        TensorValue::from_slice(&values, vec![N])
    }
}

impl<T: Element> From<Vec<T>> for TensorValue {
    /// A rank-1 tensor.
    fn from(values: Vec<T>) -> TensorValue {
        let n = values.len();
        TensorValue::from_slice(&values, vec![n])
    }
}
