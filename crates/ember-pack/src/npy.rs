//! `.npy` files, format version 1.0, little-endian.

use std::fmt::{self, Write};

use half::bf16;

use crate::dtype::DType;
use crate::error::PackErrorKind;
use crate::tensor::{TensorValue, buffer_len};

/// numpy's `descr` for a dtype. bf16 has none and is widened to `<f4`.
fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "|b1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::BF16 | DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

/// Magic and version 1.0.
const MAGIC: &[u8; 8] = b"\x93NUMPY\x01\x00";

/// Bytes before the header: magic, version and the `u16` header length.
const PREAMBLE: usize = MAGIC.len() + 2;

/// The header dict, as `numpy.save` writes it.
fn write_dict(out: &mut impl Write, t: &TensorValue) -> fmt::Result {
    write!(
        out,
        "{{'descr': '{}', 'fortran_order': False, 'shape': (",
        descr(t.dtype())
    )?;
    match t.shape() {
        [] => {}
        [d] => write!(out, "{d},")?,
        [first, rest @ ..] => {
            write!(out, "{first}")?;
            for d in rest {
                write!(out, ", {d}")?;
            }
        }
    }
    out.write_str("), }")
}

/// Counts what [`write_dict`] writes, and gives up past what a 1.0 header can hold, so that
/// checking a tensor of huge rank stops early.
struct Counter(usize);

impl Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        if self.0 > usize::from(u16::MAX) {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// Sizes of the `.npy` file of a checked tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// The header: dict, space padding and newline.
    header_len: u16,
    /// The whole file.
    file_len: usize,
}

/// Checks that `t` can be written as a `.npy` 1.0 file: bytes matching the shape, dimensions
/// numpy can hold, a header within the `u16` length of version 1.0 (a rank in the thousands
/// exceeds it) and a file size a buffer can have.
pub(crate) fn check(t: &TensorValue) -> Result<Layout, PackErrorKind> {
    t.check()?;
    t.check_dims_i64()?;
    let rank_error = || PackErrorKind::RankTooLarge {
        rank: t.shape().len(),
    };
    let mut dict = Counter(0);
    write_dict(&mut dict, t).map_err(|_| rank_error())?;
    // Preamble + dict + '\n', padded with spaces to a multiple of 64.
    let unpadded = PREAMBLE + dict.0 + 1;
    let header_len = unpadded.next_multiple_of(64) - PREAMBLE;
    let header_len = u16::try_from(header_len).map_err(|_| rank_error())?;
    let data_len = if t.dtype() == DType::BF16 {
        buffer_len(t.element_count(), 4)
    } else {
        Some(t.bytes().len())
    };
    let file_len = data_len
        .and_then(|d| d.checked_add(PREAMBLE + usize::from(header_len)))
        .filter(|&len| isize::try_from(len).is_ok())
        .ok_or(PackErrorKind::SizeOverflow(
            "the .npy file exceeds isize::MAX bytes",
        ))?;
    Ok(Layout {
        header_len,
        file_len,
    })
}

/// The bytes of the `.npy` file of `t`, checked by [`check`], as `numpy.save` writes it: magic,
/// version 1.0, a header dict padded with spaces to a multiple of 64 bytes and ended by a
/// newline, then the data. bf16 is written as `f32`, which numpy can read.
pub(crate) fn encode(t: &TensorValue, layout: Layout) -> Vec<u8> {
    let mut header = String::with_capacity(usize::from(layout.header_len));
    // Writing to a `String` cannot fail.
    let _ = write_dict(&mut header, t);
    let pad = usize::from(layout.header_len) - header.len() - 1;
    header.extend(std::iter::repeat_n(' ', pad));
    header.push('\n');
    let mut out = Vec::with_capacity(layout.file_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&layout.header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    if t.dtype() == DType::BF16 {
        for c in t.bytes().chunks_exact(2) {
            out.extend_from_slice(&bf16::from_le_bytes([c[0], c[1]]).to_f32().to_le_bytes());
        }
    } else {
        out.extend_from_slice(t.bytes());
    }
    out
}
