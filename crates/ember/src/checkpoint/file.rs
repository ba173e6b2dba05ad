//! The checkpoint file: named byte sections under a CRC-32C, written durably and read back
//! only when whole.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ember_write::durable;

use super::error::{CheckpointError, io_err};

const MAGIC: &[u8; 8] = b"EMBERCKP";
const VERSION: u32 = 1;

/// A checkpoint's contents: named byte sections, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    sections: Vec<(String, Vec<u8>)>,
}

impl Checkpoint {
    /// An empty checkpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the section `name`.
    pub fn with(mut self, name: &str, bytes: Vec<u8>) -> Self {
        self.sections.retain(|(n, _)| n != name);
        self.sections.push((name.to_owned(), bytes));
        self
    }

    /// The section `name`'s bytes.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    }

    /// The whole file: sections framed, then the checksum.
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self
            .sections
            .iter()
            .map(|(n, b)| 10 + n.len() + b.len())
            .sum();
        let mut out = Vec::with_capacity(20 + size);
        self.write_to(&mut out)
            .unwrap_or_else(|_| unreachable!("writing to a Vec cannot fail"));
        out
    }

    /// Writes [`encode`](Self::encode)'s bytes to `out` without gathering them first: a
    /// checkpoint may hold a model of hundreds of megabytes.
    pub fn write_to<W: Write + ?Sized>(&self, out: &mut W) -> io::Result<()> {
        let mut crc = 0u32;
        let mut put = |bytes: &[u8]| -> io::Result<()> {
            crc = crc32c::crc32c_append(crc, bytes);
            out.write_all(bytes)
        };
        put(MAGIC)?;
        put(&VERSION.to_le_bytes())?;
        put(&(self.sections.len() as u32).to_le_bytes())?;
        for (name, bytes) in &self.sections {
            put(&(name.len() as u16).to_le_bytes())?;
            put(name.as_bytes())?;
            put(&(bytes.len() as u64).to_le_bytes())?;
            put(bytes)?;
        }
        out.write_all(&crc.to_le_bytes())
    }

    /// Reads what [`encode`](Self::encode) wrote; `Err` says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or("shorter than a checksum")?;
        let (body, crc) = bytes.split_at(body_len);
        let stored = u32::from_le_bytes(crc.try_into().map_err(|_| "no checksum")?);
        if crc32c::crc32c(body) != stored {
            return Err(format!(
                "checksum mismatch over {body_len} bytes (torn or damaged)"
            ));
        }
        let mut at = body;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if at.len() < n {
                return Err("truncated section".into());
            }
            let (head, rest) = at.split_at(n);
            at = rest;
            Ok(head)
        };
        if take(8)? != MAGIC {
            return Err("not an ember checkpoint".into());
        }
        let version = u32::from_le_bytes(take(4)?.try_into().map_err(|_| "bad version")?);
        if version != VERSION {
            return Err(format!("version {version}, this ember reads {VERSION}"));
        }
        let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| "bad count")?);
        let mut sections = Vec::new();
        for _ in 0..count {
            let name_len = u16::from_le_bytes(take(2)?.try_into().map_err(|_| "bad name")?);
            let name = String::from_utf8(take(usize::from(name_len))?.to_vec())
                .map_err(|_| "a section name is not UTF-8")?;
            let len = u64::from_le_bytes(take(8)?.try_into().map_err(|_| "bad length")?);
            let len = usize::try_from(len).map_err(|_| "a section too large")?;
            if sections.iter().any(|(n, _)| *n == name) {
                return Err(format!("section `{name}` twice"));
            }
            sections.push((name, take(len)?.to_vec()));
        }
        if !at.is_empty() {
            return Err(format!("{} bytes after the last section", at.len()));
        }
        Ok(Self { sections })
    }
}

/// Writes `checkpoint` as `dir/name` so that a crash leaves the old file or the new one,
/// whole, and the new one survives the machine going down: through
/// [`ember_write::durable`] (a temporary file of this writer's own made new, fsynced, renamed, the directory
/// fsynced), the directory made first when missing, with its parent fsynced.
pub fn write_durably(
    dir: &Path,
    name: &str,
    checkpoint: &Checkpoint,
) -> Result<PathBuf, CheckpointError> {
    durable::create_dir(dir).map_err(io_err("create", dir))?;
    let path = dir.join(name);
    durable::replace_with(&path, |tmp| {
        let file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
        let mut buffered = std::io::BufWriter::with_capacity(1 << 20, file);
        checkpoint.write_to(&mut buffered)?;
        buffered.flush()
    })
    .map_err(io_err("write", &path))?;
    Ok(path)
}

/// Reads the checkpoint file at `path`, refusing a torn or damaged one.
pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let bytes = fs::read(path).map_err(io_err("read", path))?;
    Checkpoint::decode(&bytes).map_err(|reason| CheckpointError::Damaged {
        path: path.to_path_buf(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many crafted files the property test reads: `EMBER_FUZZ_CASES`, or a CI-sized
    /// default. `EMBER_FUZZ_CASES=1000000 cargo test --release -p ember --lib crafted` is the
    /// long run.
    fn fuzz_cases() -> usize {
        std::env::var("EMBER_FUZZ_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(20_000)
    }

    /// xorshift64*: a seeded stream, so that a failing case can be replayed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// A whole file's body with its checksum made right again, so that the parser, not only
    /// the checksum, meets what was done to it.
    fn rechecksummed(mut body: Vec<u8>) -> Vec<u8> {
        let crc = crc32c::crc32c(&body);
        body.extend(crc.to_le_bytes());
        body
    }

    #[test]
    fn crafted_checkpoint_files_are_refused_or_read_never_a_panic() {
        let whole = Checkpoint::new()
            .with("meta", b"epoch=2\nepoch_done=false".to_vec())
            .with("model", vec![7; 64])
            .with("optimizer", vec![1; 16])
            .encode();
        let body = &whole[..whole.len() - 4];
        let mut rng = Rng(0x5eed_c0de);
        let (mut refused, mut read) = (0usize, 0usize);
        for case in 0..fuzz_cases() {
            let mut bytes = body.to_vec();
            for _ in 0..=rng.below(3) {
                let at = rng.below(bytes.len());
                match rng.below(6) {
                    // A length or count field set to something large, or zero.
                    0 => {
                        let end = (at + 8).min(bytes.len());
                        let value = [0, u64::MAX, u64::from(u32::MAX), rng.next()][rng.below(4)];
                        bytes[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
                    }
                    1 => bytes[at] ^= 1 << rng.below(8),
                    2 => bytes.truncate(at),
                    3 => {
                        let extra = rng.below(32);
                        bytes.extend((0..extra).map(|_| rng.next() as u8));
                    }
                    4 => bytes[at] = rng.next() as u8,
                    _ => {
                        let from = rng.below(bytes.len());
                        let len = rng.below(16).min(bytes.len() - from.max(at));
                        bytes.copy_within(from..from + len, at);
                    }
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let file = if rng.below(8) == 0 {
                bytes
            } else {
                rechecksummed(bytes)
            };
            match std::panic::catch_unwind(|| Checkpoint::decode(&file)) {
                Ok(Ok(checkpoint)) => {
                    read += 1;
                    // Whatever reads back writes out to the same bytes.
                    assert_eq!(checkpoint.encode(), file, "case {case}");
                }
                Ok(Err(_)) => refused += 1,
                Err(_) => panic!("case {case} panicked on {file:?}"),
            }
        }
        assert!(refused > 0 && read > 0, "{refused} refused, {read} read");
    }

    fn sample(n: u8) -> Checkpoint {
        Checkpoint::new()
            .with("meta", format!("n={n}").into_bytes())
            .with("model", vec![n; 100])
    }

    #[test]
    fn the_file_layout_is_the_documented_one() {
        let bytes = Checkpoint::new().with("ab", vec![7, 8]).encode();
        let mut expected = b"EMBERCKP".to_vec();
        expected.extend([
            1, 0, 0, 0, 1, 0, 0, 0, 2, 0, b'a', b'b', 2, 0, 0, 0, 0, 0, 0, 0, 7, 8,
        ]);
        let crc = crc32c::crc32c(&expected);
        expected.extend(crc.to_le_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(
            Checkpoint::decode(&bytes).unwrap().section("ab"),
            Some(&[7u8, 8][..])
        );
    }

    #[test]
    fn every_torn_or_flipped_file_is_refused() {
        let bytes = sample(3).encode();
        for cut in 0..bytes.len() {
            assert!(Checkpoint::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert!(Checkpoint::decode(&flipped).is_err(), "flip at {at}");
        }
    }
}
