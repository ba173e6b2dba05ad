//! TFRecord framing: the on-disk envelope of every event in a summary file.
//!
//! A record is `u64` little-endian length, the masked CRC-32C of those 8 length
//! bytes, the data, and the masked CRC-32C of the data. TensorBoard, TensorFlow,
//! MindSpore's C++ `EventWriter` and MindInsight all share this layout.

use std::io::{self, IoSlice, Write};

/// Bytes of framing around each record's data: 8 (length) + 4 + 4 (two CRCs).
pub const FRAMING_OVERHEAD: usize = 16;

/// Bytes of a record header: the length and its masked CRC.
pub const HEADER_LEN: usize = 12;

/// The largest data length a record may declare.
///
/// MindSpore's C++ writer converts the length to a C `int`, so records at or
/// above 2 GiB cannot be written by it or read by MindInsight; ember refuses to
/// write them and the reader reports a larger valid-CRC length as impossible.
pub const MAX_RECORD_LEN: u64 = i32::MAX as u64;

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a CRC as TFRecord does: rotate right by 15 bits, then add `0xa282ead8`.
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The masked CRC-32C (Castagnoli) of `data`.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c::crc32c(data))
}

/// The framed size of a record of `data_len` bytes.
pub fn framed_len(data_len: usize) -> u64 {
    data_len as u64 + FRAMING_OVERHEAD as u64
}

/// Encodes the 12-byte header (length and masked length CRC) for `data_len`.
pub fn header(data_len: usize) -> [u8; HEADER_LEN] {
    let len = (data_len as u64).to_le_bytes();
    let mut out = [0u8; HEADER_LEN];
    out[..8].copy_from_slice(&len);
    out[8..].copy_from_slice(&masked_crc32c(&len).to_le_bytes());
    out
}

/// Appends the framed record for `data` to `out`.
pub fn frame_into(out: &mut Vec<u8>, data: &[u8]) {
    out.reserve(data.len() + FRAMING_OVERHEAD);
    out.extend_from_slice(&header(data.len()));
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

/// Returns the framed record for `data`.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + FRAMING_OVERHEAD);
    frame_into(&mut out, data);
    out
}

/// Writes `slices` (`total` bytes) to `out` whole, retrying on interruption: how many bytes
/// went out, and the error that stopped it short.
pub(crate) fn write_vectored_all(
    out: &mut impl Write,
    slices: &mut [IoSlice<'_>],
    total: usize,
) -> (usize, Option<io::Error>) {
    let mut rest = slices;
    let mut written = 0;
    while written < total {
        match out.write_vectored(rest) {
            Ok(0) => return (written, Some(io::Error::from(io::ErrorKind::WriteZero))),
            Ok(n) => {
                written += n;
                IoSlice::advance_slices(&mut rest, n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (written, Some(e)),
        }
    }
    (written, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(spaced: &str) -> Vec<u8> {
        hex::decode(spaced.replace(' ', "")).unwrap()
    }

    #[test]
    fn tensorboard_masked_crc_vector() {
        assert_eq!(masked_crc32c(b"\x1a\x11CRC test, one two"), 0x5794_d08a);
    }

    #[test]
    fn tensorboard_file_version_vector() {
        // Event{wall_time=1599759586.0, file_version="brain.Event:2"}, from
        // tensorboard/data/server/tf_record.rs.
        let mut data = hex("09 00 00 80 38 99 d6 d7 41 1a 0d");
        data.extend_from_slice(b"brain.Event:2");
        assert_eq!(data.len(), 24);
        let framed = frame(&data);
        assert_eq!(&framed[..8], &hex("18 00 00 00 00 00 00 00")[..]);
        assert_eq!(&framed[8..12], &hex("a3 7f 4b 22")[..]);
        assert_eq!(&framed[12..36], &data[..]);
        assert_eq!(&framed[36..], &hex("12 4b 36 ab")[..]);
        assert_eq!(framed.len() as u64, framed_len(data.len()));
    }

    #[test]
    fn mindspore_init_event_vector() {
        // Event{wall_time=1.0, version="MindSpore.Event:1"}, 28 bytes, 44 framed.
        let data = hex("09000000000000f03f 1a11 4d696e6453706f72652e4576656e743a31");
        assert_eq!(data.len(), 28);
        let framed = frame(&data);
        let mut want = hex("1c00000000000000 c8c1951d");
        want.extend_from_slice(&data);
        want.extend_from_slice(&hex("608be477"));
        assert_eq!(framed, want);
    }
}
