//! How both passes read their input: a tensor's elements as `f32` or `f64` words, in tasks of
//! a fixed size that run on the caller's rayon pool when the input is large.

use std::borrow::Cow;

use crate::dtype::DType;
use crate::tensor::TensorValue;

/// Elements per block of the statistics pass; its per-block reduction order is part of the
/// result (the sums' rounding), so it stays fixed.
pub(super) const CHUNK: usize = 1024;

/// Elements per task when a large input is split across threads. Fixed, so the result (the
/// sums' rounding) does not depend on how many threads there are.
pub(super) const TASK: usize = 16 * CHUNK;

/// Inputs with at least this many elements are split into tasks of [`TASK`] elements that run
/// on the rayon pool the caller is running on (the writer's pack threads), if any.
const PARALLEL_MIN: usize = 2 * TASK;

/// `f` over the tasks of `elems`, in order; in parallel when `elems` is large and the caller
/// runs on a rayon pool's thread (never on rayon's global pool from outside it).
pub(super) fn per_task<T: Sync, R: Send>(
    elems: &[T],
    f: impl Fn(&[T]) -> R + Sync + Send,
) -> Vec<R> {
    use rayon::prelude::*;
    if elems.len() >= PARALLEL_MIN
        && rayon::current_thread_index().is_some()
        && rayon::current_num_threads() > 1
    {
        elems.par_chunks(TASK).map(f).collect()
    } else {
        elems.chunks(TASK).map(f).collect()
    }
}

/// The elements of a tensor as little-endian `f32` or `f64` words: `f32`/`f64` data borrowed as
/// is, every other dtype converted (exactly, see [`crate::tensor::element_f64`]) to `f64` first.
pub(super) enum Elems<'a> {
    F32(&'a [[u8; 4]]),
    F64(Cow<'a, [[u8; 8]]>),
}

impl Elems<'_> {
    pub(super) fn of(t: &TensorValue) -> Elems<'_> {
        let bytes = t.bytes();
        match t.dtype() {
            DType::F32 => Elems::F32(bytes.as_chunks::<4>().0),
            DType::F64 => Elems::F64(Cow::Borrowed(bytes.as_chunks::<8>().0)),
            dtype => {
                let size = dtype.size();
                Elems::F64(Cow::Owned(
                    bytes
                        .chunks_exact(size)
                        .map(|c| crate::tensor::element_f64(dtype, c).to_le_bytes())
                        .collect(),
                ))
            }
        }
    }
}

/// An `f32` element, widened exactly.
#[inline(always)]
pub(super) fn f32_le(b: [u8; 4]) -> f64 {
    f64::from(f32::from_le_bytes(b))
}

/// An `f64` element.
#[inline(always)]
pub(super) fn f64_le(b: [u8; 8]) -> f64 {
    f64::from_le_bytes(b)
}
