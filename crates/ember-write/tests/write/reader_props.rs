//! Property tests of the reader: it never panics on any bytes, and whatever
//! it yields is consistent with the input.

use std::io::Read;

use ember_write::framing::frame;
use ember_write::{ReadProblem, RecordReader, Scan};
use proptest::prelude::*;

/// A `Read` that hands out at most `chunk` bytes per call.
struct Trickle<'a> {
    bytes: &'a [u8],
    chunk: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.chunk.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// Checks what a scan of `bytes` yields: records are framed exactly as the
/// bytes at their offsets; offsets increase; a truncated tail comes last.
fn check_consistent(bytes: &[u8], scan: &Scan) {
    for r in &scan.records {
        let framed = frame(&r.data);
        let at = r.offset as usize;
        assert_eq!(&bytes[at..at + framed.len()], &framed[..]);
    }
    let mut offsets: Vec<(u64, bool)> = scan
        .records
        .iter()
        .map(|r| (r.offset, true))
        .chain(scan.problems.iter().map(|p| (p.offset(), false)))
        .collect();
    offsets.sort();
    offsets.dedup();
    assert_eq!(offsets.len(), scan.records.len() + scan.problems.len());
    for (i, p) in scan.problems.iter().enumerate() {
        if p.is_truncated_tail() {
            assert_eq!(i, scan.problems.len() - 1, "truncation is last");
            assert!(scan.records.iter().all(|r| r.offset < p.offset()));
        }
        assert!(p.offset() <= bytes.len() as u64);
    }
}

fn records() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12)
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1..40usize).prop_map(|(i, n)| Mutation::Delete(i, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match m {
        Mutation::Flip(i, x) => bytes[i % len] ^= x,
        Mutation::Truncate(i) => bytes.truncate(i % len),
        Mutation::Insert(i, v) => {
            let at = i % (len + 1);
            bytes.splice(at..at, v.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let at = i % len;
            let end = (at + n).min(len);
            bytes.drain(at..end);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), chunk in 1..64usize) {
        let scan = Scan::slice(&bytes);
        check_consistent(&bytes, &scan);
        let trickled = Scan::read(RecordReader::new(Trickle { bytes: &bytes, chunk }));
        prop_assert_eq!(&scan.records, &trickled.records);
        prop_assert_eq!(scan.problems.len(), trickled.problems.len());
    }

    #[test]
    fn valid_files_read_back_exactly(recs in records()) {
        let bytes: Vec<u8> = recs.iter().flat_map(|r| frame(r)).collect();
        let scan = Scan::slice(&bytes);
        prop_assert!(scan.problems.is_empty());
        let data: Vec<Vec<u8>> = scan.records.into_iter().map(|r| r.data).collect();
        prop_assert_eq!(data, recs);
    }

    #[test]
    fn a_truncated_file_is_a_prefix_plus_one_tail(recs in records(), cut in any::<usize>()) {
        let bytes: Vec<u8> = recs.iter().flat_map(|r| frame(r)).collect();
        let cut = if bytes.is_empty() { 0 } else { cut % bytes.len() };
        let scan = Scan::slice(&bytes[..cut]);
        prop_assert!(scan.problems.len() <= 1);
        prop_assert!(scan.problems.iter().all(ReadProblem::is_truncated_tail));
        let data: Vec<Vec<u8>> = scan.records.iter().map(|r| r.data.clone()).collect();
        prop_assert_eq!(&data[..], &recs[..data.len()]);
    }

    #[test]
    fn mutated_files_never_panic_and_stay_consistent(
        recs in records(),
        muts in prop::collection::vec(mutation(), 1..4),
        chunk in 1..97usize,
    ) {
        let mut bytes: Vec<u8> = recs.iter().flat_map(|r| frame(r)).collect();
        for m in &muts {
            apply(&mut bytes, m);
        }
        let scan = Scan::slice(&bytes);
        check_consistent(&bytes, &scan);
        let trickled = Scan::read(RecordReader::new(Trickle { bytes: &bytes, chunk }));
        prop_assert_eq!(&scan.records, &trickled.records);
        // Every record found is one of the originals: forging a valid frame
        // takes matching two CRCs by chance.
        for r in &scan.records {
            prop_assert!(recs.contains(&r.data));
        }
    }
}
