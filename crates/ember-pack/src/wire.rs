//! Hand-written protobuf encoding for the hot paths (scalars, tensors, the summary event), where
//! building prost messages would copy data twice. `tests/pack/round_trip.rs` proves the bytes equal
//! prost's encoding of the same message.

/// Wire type of varints.
pub(crate) const VARINT: u32 = 0;
/// Wire type of 64-bit fixed values.
pub(crate) const FIXED64: u32 = 1;
/// Wire type of length-delimited values.
pub(crate) const LEN: u32 = 2;
/// Wire type of 32-bit fixed values.
pub(crate) const FIXED32: u32 = 5;

/// Bytes of `v` as a varint.
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends `v` as a varint.
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends a field key.
pub(crate) fn put_key(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
    put_varint(buf, u64::from(field << 3 | wire_type));
}

/// Bytes of a field key.
pub(crate) fn key_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

/// Bytes of a length-delimited field holding `len` bytes.
pub(crate) fn len_field_len(field: u32, len: usize) -> usize {
    key_len(field) + varint_len(len as u64) + len
}

/// Appends the key and length of a length-delimited field; the caller appends the `len` bytes.
pub(crate) fn put_len_prefix(buf: &mut Vec<u8>, field: u32, len: usize) {
    put_key(buf, field, LEN);
    put_varint(buf, len as u64);
}

/// Appends a length-delimited field.
pub(crate) fn put_bytes(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_len_prefix(buf, field, bytes.len());
    buf.extend_from_slice(bytes);
}

/// Appends a varint field.
pub(crate) fn put_varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
    put_key(buf, field, VARINT);
    put_varint(buf, v);
}

/// Bytes of a varint field.
pub(crate) fn varint_field_len(field: u32, v: u64) -> usize {
    key_len(field) + varint_len(v)
}

/// Appends a `double` field.
pub(crate) fn put_f64_field(buf: &mut Vec<u8>, field: u32, v: f64) {
    put_key(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Appends a `float` field.
pub(crate) fn put_f32_field(buf: &mut Vec<u8>, field: u32, v: f32) {
    put_key(buf, field, FIXED32);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_prost() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
            (-1i64) as u64,
        ] {
            let mut ours = Vec::new();
            put_varint(&mut ours, v);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(v, &mut theirs);
            assert_eq!(ours, theirs, "{v}");
            assert_eq!(varint_len(v), theirs.len(), "{v}");
        }
    }
}
