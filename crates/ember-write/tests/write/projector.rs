//! The projector layout, read back from disk: `tensors.tsv` values, `metadata.tsv` labels,
//! the sprite's PNG size, and a `projector_config.pbtxt` that keeps every embedding (of this
//! run and of an earlier one into the same directory). A link planted at an embedding's
//! directory fails the projector writer with [`FileError::NotADirectory`] and nothing is
//! written outside the log directory.
#![cfg(unix)]

use std::path::{Path, PathBuf};

use ember_pack::{Embedding, FileKind, Image, ImageLayout, Record, Tag, TensorValue, Value};
use ember_write::{FileError, WriteError, WriterPool, naming};

const N: usize = 20;
const D: usize = 5;

fn matrix(seed: f32) -> Vec<f32> {
    (0..N * D).map(|i| seed + i as f32 * 0.37 - 3.0).collect()
}

fn labels() -> Vec<String> {
    (0..N).map(|i| format!("point {i}")).collect()
}

/// 8×8 gray thumbnails, HWC, each a flat shade.
fn thumbnails() -> Vec<Image> {
    (0..N)
        .map(|i| {
            Image::new(
                TensorValue::from_slice(&[(i * 12) as u8; 64], vec![8, 8, 1]),
                ImageLayout::Hwc,
            )
        })
        .collect()
}

fn embedding_record(tag: &str, step: i64, seed: f32, full: bool) -> Record {
    let mut e = Embedding::new(TensorValue::from_slice(&matrix(seed), vec![N, D]));
    if full {
        e = e.with_labels(labels()).with_thumbnails(thumbnails());
    }
    let mut r = Record::new(step, 1.7e9);
    r.add(Tag::new(tag).unwrap(), Value::from(e));
    r
}

/// Writes `records` with a fresh pool and returns its errors.
fn write(log: &Path, records: Vec<Record>) -> Vec<WriteError> {
    let pool = WriterPool::builder(log)
        .flush_interval(None)
        .build()
        .unwrap();
    for r in records {
        pool.write(r).unwrap();
    }
    pool.flush().unwrap();
    let mut errors = pool.take_errors();
    if let Err(e) = pool.close() {
        errors.extend(e.errors);
    }
    errors
}

fn read_tsv(path: &Path) -> Vec<Vec<f32>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(|v| v.parse().unwrap()).collect())
        .collect()
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&b[12..16], b"IHDR");
    let be = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]);
    (be(&b[16..20]), be(&b[20..24]))
}

#[test]
fn the_layout_reads_back_and_the_config_keeps_every_embedding() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path();
    let errors = write(
        log,
        vec![
            embedding_record("hidden/layer 1", 3, 0.0, true),
            embedding_record("plain", 7, 1.5, false),
        ],
    );
    assert!(errors.is_empty(), "{errors:?}");

    let dir = log.join("embeddings").join("hidden%2Flayer%201_3");
    let rows = read_tsv(&dir.join("tensors.tsv"));
    let want: Vec<Vec<f32>> = matrix(0.0).chunks(D).map(<[f32]>::to_vec).collect();
    assert_eq!(rows, want);
    let meta = std::fs::read_to_string(dir.join("metadata.tsv")).unwrap();
    assert_eq!(meta.lines().map(String::from).collect::<Vec<_>>(), labels());
    // ceil(sqrt(20)) = 5 thumbnails of 8×8 to a side.
    assert_eq!(png_size(&dir.join("sprite.png")), (40, 40));

    let plain = log.join("embeddings").join("plain_7");
    assert_eq!(
        read_tsv(&plain.join("tensors.tsv")),
        matrix(1.5)
            .chunks(D)
            .map(<[f32]>::to_vec)
            .collect::<Vec<_>>()
    );
    assert!(!plain.join("metadata.tsv").exists());
    assert!(!plain.join("sprite.png").exists());

    let config = std::fs::read_to_string(log.join("projector_config.pbtxt")).unwrap();
    assert_eq!(config.matches("embeddings {").count(), 2, "{config}");
    for needle in [
        "tensor_name: \"hidden/layer 1:00003\"",
        "tensor_path: \"embeddings/hidden%2Flayer%201_3/tensors.tsv\"",
        "metadata_path: \"embeddings/hidden%2Flayer%201_3/metadata.tsv\"",
        "image_path: \"embeddings/hidden%2Flayer%201_3/sprite.png\"",
        "single_image_dim: [8, 8]",
        "tensor_shape: [20, 5]",
        "tensor_name: \"plain:00007\"",
        "tensor_path: \"embeddings/plain_7/tensors.tsv\"",
    ] {
        assert!(config.contains(needle), "{needle} not in {config}");
    }

    // A second run into the same directory appends to the config, losing nothing.
    let errors = write(log, vec![embedding_record("later", 9, 2.0, true)]);
    assert!(errors.is_empty(), "{errors:?}");
    let config = std::fs::read_to_string(log.join("projector_config.pbtxt")).unwrap();
    assert_eq!(config.matches("embeddings {").count(), 3, "{config}");
    assert!(config.contains("hidden/layer 1:00003") && config.contains("plain:00007"));
    assert!(config.contains("tensor_path: \"embeddings/later_9/tensors.tsv\""));
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn the_same_tag_and_step_twice_is_refused_and_the_first_kept() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path();
    let errors = write(
        log,
        vec![
            embedding_record("e", 1, 0.0, false),
            embedding_record("e", 1, 9.0, false),
        ],
    );
    assert!(
        matches!(&errors[..], [WriteError::EmbeddingRefused { .. }]),
        "{errors:?}"
    );
    let rows = read_tsv(&log.join("embeddings/e_1/tensors.tsv"));
    assert_eq!(rows[0][0], matrix(0.0)[0]);
    let config = std::fs::read_to_string(log.join("projector_config.pbtxt")).unwrap();
    assert_eq!(config.matches("embeddings {").count(), 1);
}

/// Every path under `dir`, recursively, links not followed.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        out.push(path.clone());
        if meta.is_dir() {
            out.extend(walk(&path));
        }
    }
    out
}

/// Plants a link to `outside` at `at` (relative to the log dir), writes one embedding, and
/// checks the writer failed naming the link, with nothing written outside.
fn planted_link_fails_the_projector_writer(at: &str) {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(log.join("embeddings")).unwrap();
    std::fs::create_dir(&outside).unwrap();
    if at == "embeddings" {
        std::fs::remove_dir(log.join("embeddings")).unwrap();
    }
    std::os::unix::fs::symlink(&outside, log.join(at)).unwrap();

    let errors = write(&log, vec![embedding_record("e", 4, 0.0, true)]);
    assert_eq!(walk(&outside), Vec::<PathBuf>::new(), "{at}");
    match &errors[..] {
        [
            WriteError::WriterFailed {
                kind: FileKind::Projector,
                source: FileError::NotADirectory { path },
            },
        ] => assert_eq!(path, &log.join(at)),
        other => panic!("{at}: expected NotADirectory from the projector writer, got {other:?}"),
    }
    assert!(!log.join("projector_config.pbtxt").exists());
}

#[test]
fn a_link_planted_at_the_embedding_dir_fails_the_writer_and_writes_nothing_outside() {
    planted_link_fails_the_projector_writer(&format!(
        "embeddings/{}",
        naming::embedding_dir_name("e", 4)
    ));
}

#[test]
fn a_link_planted_at_the_embeddings_dir_fails_the_writer_and_writes_nothing_outside() {
    planted_link_fails_the_projector_writer("embeddings");
}
