//! A checking reader for TFRecord-framed files.
//!
//! [`RecordReader`] iterates the records of a file, a byte slice or any
//! [`Read`], verifying both CRCs of each one. It yields `Ok(`[`RawRecord`]`)`
//! for every whole, valid record and a typed [`ReadProblem`] for anything else,
//! always with the byte offset where the problem starts:
//!
//! - a record cut short by the end of input is a [`ReadProblem::Truncated`]
//!   tail: normal for a file still being written or left by a crash, and always
//!   the last item;
//! - a length whose CRC does not match, or a CRC-valid length above
//!   [`MAX_RECORD_LEN`], is corruption: the reader then scans forward byte by
//!   byte for the next position where a CRC-valid header starts, reports how
//!   many bytes it skipped, and goes on from there;
//! - a data CRC mismatch under a valid header skips exactly that record.
//!
//! The reader never panics and never allocates more than the input actually
//! holds, whatever the bytes say.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::framing::{HEADER_LEN, MAX_RECORD_LEN, masked_crc32c};

const CHUNK: usize = 64 * 1024;

/// One whole record whose two CRCs were verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Byte offset of the record's header in the input.
    pub offset: u64,
    /// The record's data (for event files, one serialized `Event`).
    pub data: Vec<u8>,
}

/// Something other than a whole, valid record, found at a byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadProblem {
    /// The input ends inside a record: the tail of a file still being written,
    /// or torn by a crash. Always the last item yielded.
    #[error("truncated record at byte {offset}: {available} of {needed} bytes present")]
    Truncated {
        /// Offset of the record's first byte.
        offset: u64,
        /// Bytes present from `offset` to the end of input.
        available: u64,
        /// Bytes needed to complete the header, or the whole record once the
        /// header is known.
        needed: u64,
    },
    /// The length CRC does not match: the header is corrupt. `skipped` bytes
    /// from `offset` were passed over until the next CRC-valid header or the end.
    #[error(
        "corrupt record header at byte {offset} (length crc mismatch), skipped {skipped} bytes"
    )]
    BadLengthCrc {
        /// Offset of the corrupt header.
        offset: u64,
        /// Bytes skipped from `offset` to resynchronise.
        skipped: u64,
    },
    /// The length CRC matches but the length is larger than any record may be.
    #[error("impossible record length {len} at byte {offset}, skipped {skipped} bytes")]
    ImpossibleLength {
        /// Offset of the header.
        offset: u64,
        /// The declared data length.
        len: u64,
        /// Bytes skipped from `offset` to resynchronise.
        skipped: u64,
    },
    /// The header is valid but the data CRC does not match; the record was skipped.
    #[error("corrupt record data at byte {offset} ({len} bytes, data crc mismatch)")]
    BadDataCrc {
        /// Offset of the record's header.
        offset: u64,
        /// The record's data length.
        len: u64,
    },
    /// Reading the input failed; iteration stops.
    #[error("read error at byte {offset}: {source}")]
    Io {
        /// Offset the reader had reached.
        offset: u64,
        /// The underlying error.
        source: io::Error,
    },
}

impl ReadProblem {
    /// The byte offset where the problem starts.
    pub fn offset(&self) -> u64 {
        match self {
            ReadProblem::Truncated { offset, .. }
            | ReadProblem::BadLengthCrc { offset, .. }
            | ReadProblem::ImpossibleLength { offset, .. }
            | ReadProblem::BadDataCrc { offset, .. }
            | ReadProblem::Io { offset, .. } => *offset,
        }
    }

    /// True for a truncated tail, the normal state of a file being written.
    pub fn is_truncated_tail(&self) -> bool {
        matches!(self, ReadProblem::Truncated { .. })
    }
}

/// Iterates the records of a TFRecord-framed input; see the module docs.
#[derive(Debug)]
pub struct RecordReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Index in `buf` of the next unread byte.
    start: usize,
    /// Input offset of `buf[0]`.
    buf_offset: u64,
    eof: bool,
    done: bool,
    max_len: u64,
}

impl RecordReader<File> {
    /// Opens the file at `path` for reading.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        File::open(path).map(Self::new)
    }
}

impl<'a> RecordReader<&'a [u8]> {
    /// Reads records from a byte slice.
    pub fn from_slice(bytes: &'a [u8]) -> Self {
        Self::new(bytes)
    }
}

impl<R: Read> RecordReader<R> {
    /// Reads records from any [`Read`]; it does its own buffering.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            start: 0,
            buf_offset: 0,
            eof: false,
            done: false,
            max_len: MAX_RECORD_LEN,
        }
    }

    /// Sets the largest data length accepted as possible (default
    /// [`MAX_RECORD_LEN`]); larger CRC-valid lengths are reported as
    /// [`ReadProblem::ImpossibleLength`].
    pub fn with_max_record_len(mut self, max_len: u64) -> Self {
        self.max_len = max_len;
        self
    }

    /// The input offset of the next byte to be examined.
    pub fn offset(&self) -> u64 {
        self.buf_offset + self.start as u64
    }

    fn available(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Buffers until `n` bytes are available from `start` or the input ends;
    /// returns the number available.
    fn fill(&mut self, n: usize) -> io::Result<usize> {
        while self.available() < n && !self.eof {
            if self.start > 0 && (self.start >= CHUNK || self.start * 2 >= self.buf.len()) {
                self.buf.drain(..self.start);
                self.buf_offset += self.start as u64;
                self.start = 0;
            }
            let old = self.buf.len();
            self.buf.resize(old + CHUNK, 0);
            match self.inner.read(&mut self.buf[old..]) {
                Ok(0) => {
                    self.buf.truncate(old);
                    self.eof = true;
                }
                Ok(k) => self.buf.truncate(old + k),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.buf.truncate(old),
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        }
        Ok(self.available())
    }

    /// Parses a header at `start`, if 12 bytes are buffered there: `Some(len)`
    /// when its CRC is valid.
    fn header_at_start(&self) -> Option<u64> {
        let h = self.buf.get(self.start..self.start + HEADER_LEN)?;
        let (len_bytes, crc_bytes) = h.split_at(8);
        let crc = u32::from_le_bytes(crc_bytes.try_into().ok()?);
        if masked_crc32c(len_bytes) != crc {
            return None;
        }
        Some(u64::from_le_bytes(len_bytes.try_into().ok()?))
    }

    /// Advances one byte at a time past a damaged header at `from` until a
    /// CRC-valid header with a possible length starts, or the input ends;
    /// returns the bytes skipped.
    fn resync(&mut self, from: u64) -> Result<u64, ReadProblem> {
        self.start += 1;
        loop {
            let avail = self
                .fill(HEADER_LEN)
                .map_err(|source| self.io_problem(source))?;
            if avail < HEADER_LEN {
                // Nothing after this can be a record: skip to the end.
                self.start = self.buf.len();
                self.done = true;
                return Ok(self.offset() - from);
            }
            if matches!(self.header_at_start(), Some(len) if len <= self.max_len) {
                return Ok(self.offset() - from);
            }
            self.start += 1;
        }
    }

    fn io_problem(&mut self, source: io::Error) -> ReadProblem {
        self.done = true;
        ReadProblem::Io {
            offset: self.offset(),
            source,
        }
    }

    /// Ends the reading at a record cut short: `available` bytes of the `needed`.
    fn truncated(&mut self, offset: u64, available: u64, needed: u64) -> ReadProblem {
        self.done = true;
        ReadProblem::Truncated {
            offset,
            available,
            needed,
        }
    }

    fn next_item(&mut self) -> Option<Result<RawRecord, ReadProblem>> {
        if self.done {
            return None;
        }
        let offset = self.offset();
        let avail = match self.fill(HEADER_LEN) {
            Ok(a) => a,
            Err(source) => return Some(Err(self.io_problem(source))),
        };
        if avail == 0 {
            self.done = true;
            return None;
        }
        if avail < HEADER_LEN {
            return Some(Err(self.truncated(offset, avail as u64, HEADER_LEN as u64)));
        }
        let Some(len) = self.header_at_start() else {
            return Some(
                self.resync(offset)
                    .map(|skipped| Err(ReadProblem::BadLengthCrc { offset, skipped }))
                    .unwrap_or_else(Err),
            );
        };
        if len > self.max_len {
            return Some(
                self.resync(offset)
                    .map(|skipped| {
                        Err(ReadProblem::ImpossibleLength {
                            offset,
                            len,
                            skipped,
                        })
                    })
                    .unwrap_or_else(Err),
            );
        }
        // The cap is the caller's, so any length may pass it: a record whose
        // size does not fit in memory's address space cannot be in the input.
        let Some((data_len, total)) = usize::try_from(len)
            .ok()
            .and_then(|n| Some((n, n.checked_add(HEADER_LEN + 4)?)))
        else {
            let needed = len.saturating_add((HEADER_LEN + 4) as u64);
            return Some(Err(self.truncated(offset, self.available() as u64, needed)));
        };
        let avail = match self.fill(total) {
            Ok(a) => a,
            Err(source) => return Some(Err(self.io_problem(source))),
        };
        if avail < total {
            return Some(Err(self.truncated(offset, avail as u64, total as u64)));
        }
        let data_start = self.start + HEADER_LEN;
        let data = &self.buf[data_start..data_start + data_len];
        let crc_bytes = &self.buf[data_start + data_len..data_start + data_len + 4];
        let want = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        let ok = masked_crc32c(data) == want;
        let item = if ok {
            Ok(RawRecord {
                offset,
                data: data.to_vec(),
            })
        } else {
            Err(ReadProblem::BadDataCrc { offset, len })
        };
        self.start += total;
        Some(item)
    }
}

impl<R: Read> Iterator for RecordReader<R> {
    type Item = Result<RawRecord, ReadProblem>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_item()
    }
}

/// What a whole input holds: its valid records and every problem met.
#[derive(Debug, Default)]
pub struct Scan {
    /// Whole, CRC-valid records in input order.
    pub records: Vec<RawRecord>,
    /// Problems in input order; a truncated tail, if any, is last.
    pub problems: Vec<ReadProblem>,
}

impl Scan {
    /// Reads every record of `reader`.
    pub fn read<R: Read>(reader: RecordReader<R>) -> Self {
        let mut scan = Scan::default();
        for item in reader {
            match item {
                Ok(r) => scan.records.push(r),
                Err(p) => scan.problems.push(p),
            }
        }
        scan
    }

    /// Reads every record of the file at `path`.
    pub fn file(path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self::read(RecordReader::open(path)?))
    }

    /// Reads every record of `bytes`.
    pub fn slice(bytes: &[u8]) -> Self {
        Self::read(RecordReader::from_slice(bytes))
    }

    /// True when there are no problems other than, at most, a truncated tail.
    pub fn is_clean(&self) -> bool {
        self.problems.iter().all(ReadProblem::is_truncated_tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::frame;

    fn file_of(records: &[&[u8]]) -> Vec<u8> {
        records.iter().flat_map(|r| frame(r)).collect()
    }

    #[test]
    fn reads_records_with_offsets() {
        let bytes = file_of(&[b"a", b"", b"hello world"]);
        let scan = Scan::slice(&bytes);
        assert!(scan.problems.is_empty());
        let got: Vec<_> = scan
            .records
            .iter()
            .map(|r| (r.offset, r.data.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, b"a".to_vec()),
                (17, Vec::new()),
                (33, b"hello world".to_vec())
            ]
        );
    }

    #[test]
    fn a_huge_declared_length_under_an_unlimited_cap_is_a_truncated_tail() {
        // A CRC-valid header declaring u64::MAX bytes: with the cap lifted,
        // the size arithmetic overflowed and panicked.
        for len in [u64::MAX, u64::MAX - 15, u64::MAX / 2] {
            let mut input = frame(b"ok");
            let len_bytes = len.to_le_bytes();
            input.extend_from_slice(&len_bytes);
            input.extend_from_slice(&masked_crc32c(&len_bytes).to_le_bytes());
            input.extend_from_slice(b"some bytes");
            let items: Vec<_> = RecordReader::from_slice(&input)
                .with_max_record_len(u64::MAX)
                .collect();
            assert_eq!(items.len(), 2, "len {len}");
            assert_eq!(items[0].as_ref().unwrap().data, b"ok");
            let problem = items[1].as_ref().unwrap_err();
            assert!(problem.is_truncated_tail(), "{problem}");
            assert_eq!(problem.offset(), 18);
        }
    }

    #[test]
    fn truncated_tail_is_last_and_typed() {
        let bytes = file_of(&[b"first", b"second"]);
        for cut in 1..21 {
            let scan = Scan::slice(&bytes[..bytes.len() - cut]);
            assert_eq!(scan.records.len(), 1, "cut {cut}");
            assert_eq!(scan.problems.len(), 1);
            let p = &scan.problems[0];
            assert!(p.is_truncated_tail(), "{p}");
            assert_eq!(p.offset(), 21);
        }
    }

    #[test]
    fn bad_data_crc_skips_one_record() {
        let mut bytes = file_of(&[b"one", b"two", b"three"]);
        bytes[19 + 12] ^= 0x40; // data of "two"
        let scan = Scan::slice(&bytes);
        assert_eq!(scan.records.len(), 2);
        assert_eq!(scan.records[1].data, b"three");
        assert!(matches!(
            scan.problems[..],
            [ReadProblem::BadDataCrc { offset: 19, len: 3 }]
        ));
    }

    #[test]
    fn bad_length_crc_resyncs_to_next_record() {
        let mut bytes = file_of(&[b"one", b"two", b"three"]);
        bytes[19] ^= 0x01; // length of "two"
        let scan = Scan::slice(&bytes);
        let data: Vec<_> = scan.records.iter().map(|r| r.data.clone()).collect();
        assert_eq!(data, vec![b"one".to_vec(), b"three".to_vec()]);
        assert!(matches!(
            scan.problems[..],
            [ReadProblem::BadLengthCrc {
                offset: 19,
                skipped: 19
            }]
        ));
        assert!(!scan.is_clean());
    }

    #[test]
    fn impossible_length_is_corruption() {
        let mut bytes = file_of(&[b"one"]);
        let len = (MAX_RECORD_LEN + 1).to_le_bytes();
        let mut huge = len.to_vec();
        huge.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        bytes.extend_from_slice(&huge);
        bytes.extend_from_slice(&frame(b"two"));
        let scan = Scan::slice(&bytes);
        assert_eq!(scan.records.len(), 2);
        assert!(matches!(
            scan.problems[..],
            [ReadProblem::ImpossibleLength { offset: 19, .. }]
        ));
    }

    #[test]
    fn garbage_only_is_one_problem() {
        let bytes = vec![0xAB; 1000];
        let scan = Scan::slice(&bytes);
        assert!(scan.records.is_empty());
        assert!(matches!(
            scan.problems[..],
            [ReadProblem::BadLengthCrc {
                offset: 0,
                skipped: 1000
            }]
        ));
    }

    #[test]
    fn large_records_across_chunks() {
        let big = vec![7u8; 3 * CHUNK + 5];
        let bytes = file_of(&[&big, b"x", &big]);
        let scan = Scan::slice(&bytes);
        assert!(scan.problems.is_empty());
        assert_eq!(scan.records.len(), 3);
        assert_eq!(scan.records[2].data, big);
    }

    #[test]
    fn empty_input_is_empty() {
        let scan = Scan::slice(&[]);
        assert!(scan.records.is_empty() && scan.problems.is_empty());
    }
}
