//! `.npy` files, format version 1.0, little-endian.

use half::bf16;

use crate::tensor::{DType, TensorValue};

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

/// The bytes of a `.npy` file holding `t` (whose bytes match its shape), as `numpy.save` writes
/// it: magic, version 1.0, a header dict padded with spaces to a multiple of 64 bytes and ended
/// by a newline, then the data. bf16 is written as `f32`, which numpy can read.
/// `None` when the header is longer than version 1.0 allows (a rank in the thousands).
pub(crate) fn encode(t: &TensorValue) -> Option<Vec<u8>> {
    let shape = match t.shape() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(t.dtype())
    );
    // magic (6) + version (2) + header length (2) + header + '\n', to a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let header_len = u16::try_from(header.len()).ok()?;
    let data_len = if t.dtype() == DType::BF16 {
        t.bytes().len() * 2
    } else {
        t.bytes().len()
    };
    let mut out = Vec::with_capacity(10 + header.len() + data_len);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    if t.dtype() == DType::BF16 {
        for c in t.bytes().chunks_exact(2) {
            out.extend_from_slice(&bf16::from_le_bytes([c[0], c[1]]).to_f32().to_le_bytes());
        }
    } else {
        out.extend_from_slice(t.bytes());
    }
    Some(out)
}
