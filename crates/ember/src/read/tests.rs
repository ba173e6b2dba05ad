//! The reader against the values written: each kind written with ember's own API, read back
//! and compared with expectations computed here from the inputs (the formats' documented
//! rules), never from ember's packed bytes.

use std::fs;
use std::path::Path;

use ember_write::framing;
use ember_write::pack::proto::tensorboard as tbp;
use ember_write::pack::{
    Audio, Category, CustomScalarLayout, Format, Image, ImageLayout, MarginSeries, PrCurve,
    TensorValue, Value,
};
use prost::Message;

use super::*;
use crate::SummaryRecord;

fn write_every_kind(format: Format) -> (tempfile::TempDir, Summaries) {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(dir.path())
        .format(format)
        .build()
        .unwrap();
    for step in 0..3 {
        summary
            .add_scalar("loss", 1.0 / (step as f64 + 1.0), step)
            .unwrap();
    }
    summary
        .add_histogram("w", vec![0.0f32, 1.0, 1.0, 2.0, 3.0], 3)
        .unwrap();
    summary
        .add_image(
            "img",
            TensorValue::from_slice(&[0u8; 3 * 2 * 4], vec![3, 2, 4]),
            ImageLayout::Chw,
            3,
        )
        .unwrap();
    summary
        .add_tensor("t", TensorValue::from_slice(&[1.5f32, -2.0], vec![2, 1]), 4)
        .unwrap();
    if format == Format::TensorBoard {
        summary.add_text("note", "hello", 5).unwrap();
    }
    summary.close().unwrap();
    let read = Summaries::read_dir(dir.path()).unwrap();
    (dir, read)
}

#[test]
fn every_kind_comes_back_in_both_formats() {
    for format in [Format::TensorBoard, Format::MindInsight] {
        let (_dir, read) = write_every_kind(format);
        let loss: Vec<(i64, f64)> = read.scalars["loss"]
            .iter()
            .map(|p| (p.step, p.value))
            .collect();
        assert_eq!(
            loss,
            [(0, 1.0), (1, 0.5), (2, f64::from(1.0f32 / 3.0))],
            "{format:?}"
        );
        let h = &read.histograms["w"][0];
        assert_eq!(
            (h.step, h.min, h.max, h.count),
            (3, 0.0, 3.0, 5.0),
            "{format:?}"
        );
        assert_eq!(h.buckets.iter().map(|b| b.2).sum::<f64>(), 5.0);
        let img = &read.images["img"][0];
        assert_eq!((img.width, img.height), (4, 2), "{format:?}");
        assert!(img.png.starts_with(b"\x89PNG"));
        let t = &read.tensors["t"][0];
        assert_eq!((t.step, t.value.shape()), (4, &[2usize, 1][..]));
        assert_eq!(t.value.to_f64_vec(), [1.5, -2.0]);
        if format == Format::TensorBoard {
            assert_eq!(read.texts["note"][0].text, "hello");
        }
    }
}

#[test]
fn a_truncated_tail_ends_the_series_and_corruption_is_an_error() {
    let (dir, _) = write_every_kind(Format::TensorBoard);
    let file = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("tfevents"))
        .unwrap();
    let mut bytes = fs::read(&file).unwrap();
    let mut perms = fs::metadata(&file).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&file, perms).unwrap();
    fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let read = Summaries::read_dir(dir.path()).unwrap();
    assert_eq!(read.scalars["loss"].len(), 3);
    assert!(
        !read.texts.contains_key("note"),
        "the torn last record is not read"
    );
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&file, &bytes).unwrap();
    assert!(matches!(
        Summaries::read_dir(dir.path()),
        Err(ReadError::Corrupt { .. }) | Err(ReadError::Decode { .. })
    ));
}

/// `x` as the `f32` TensorBoard stores, widened back.
fn stored(x: f64) -> f64 {
    f64::from(x as f32)
}

/// The curve by its definition: at threshold `i / (n - 1)` the predictions at or above it are
/// positive; precision and recall are 0 for an empty count.
fn curve_by_definition(labels: &[bool], predictions: &[f32], n: usize) -> [Vec<f64>; 6] {
    let mut rows: [Vec<f64>; 6] = Default::default();
    let positives = labels.iter().filter(|&&l| l).count() as f64;
    let negatives = labels.len() as f64 - positives;
    for i in 0..n {
        let threshold = i as f64 / (n - 1) as f64;
        let count = |label: bool| {
            labels
                .iter()
                .zip(predictions)
                .filter(|&(&l, &p)| l == label && f64::from(p) >= threshold)
                .count() as f64
        };
        let (tp, fp) = (count(true), count(false));
        let ratio = |a: f64, b: f64| if b == 0.0 { 0.0 } else { a / b };
        let values = [
            tp,
            fp,
            negatives - fp,
            positives - tp,
            ratio(tp, tp + fp),
            ratio(tp, positives),
        ];
        for (row, value) in rows.iter_mut().zip(values) {
            row.push(stored(value));
        }
    }
    rows
}

#[test]
fn pr_curves_come_back_with_their_thresholds_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    // No prediction sits on a threshold (multiples of 0.25), so floor and >= agree.
    let labels = [true, false, true, true, false, false, true];
    let predictions = [0.9f32, 0.8, 0.6, 0.3, 0.4, 0.1, 0.05];
    summary
        .add_pr_curve("pr/model", &labels, &predictions, 5, 2)
        .unwrap();
    summary
        .add_pr_curve("pr/model", &labels[..4], &predictions[..4], 5, 7)
        .unwrap();
    let raw = PrCurve::from_counts(
        vec![3.0, 1.0],
        vec![2.0, 0.0],
        vec![0.0, 2.0],
        vec![0.0, 2.0],
        vec![0.6, 1.0],
        vec![1.0, 1.0 / 3.0],
    )
    .unwrap();
    summary.add_pr_curve_raw("pr/raw", raw.clone(), 4).unwrap();
    summary.close().unwrap();

    let read = pr_curves(dir.path()).unwrap();
    let model = &read["pr/model"];
    assert_eq!(model.iter().map(|p| p.step).collect::<Vec<_>>(), [2, 7]);
    for (point, n_examples) in model.iter().zip([7, 4]) {
        assert_eq!(point.thresholds, [0.0, 0.25, 0.5, 0.75, 1.0]);
        let want = curve_by_definition(&labels[..n_examples], &predictions[..n_examples], 5);
        for (got, want) in point.curve.rows().iter().zip(&want) {
            assert_eq!(got, want, "step {}", point.step);
        }
        assert!(point.wall_time > 1.6e9);
    }
    let raw_read = &read["pr/raw"][0];
    assert_eq!(
        (raw_read.step, raw_read.thresholds.as_slice()),
        (4, &[0.0, 1.0][..])
    );
    for (got, want) in raw_read.curve.rows().iter().zip(raw.rows()) {
        let want: Vec<f64> = want.iter().map(|&x| stored(x)).collect();
        assert_eq!(*got, want.as_slice());
    }
}

/// TensorFlow's `encode_wav` quantization, by hand: `round(x · 32768)` half away from zero,
/// clamped to 16 bits, NaN as silence; read back as the sample over 32768.
fn quantized(x: f32) -> f32 {
    if x.is_nan() {
        return 0.0;
    }
    (x * 32768.0).round().clamp(-32768.0, 32767.0) / 32768.0
}

#[test]
fn audio_comes_back_as_its_quantized_samples_and_wav_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let mono = [0.0f32, 0.25, -0.5, 1.5, -1.5, f32::NAN, 0.1];
    summary.add_audio("audio/mono", &mono, 8000, 3).unwrap();
    let stereo = vec![0.5f32, -0.5, 0.75, -0.75];
    summary
        .add(
            "audio/stereo",
            Value::Audio(Audio {
                samples: stereo.clone(),
                sample_rate: 44_100,
                channels: 2,
            }),
        )
        .unwrap();
    summary.record(5).unwrap();
    summary.close().unwrap();

    let read = audio(dir.path()).unwrap();
    let clip = &read["audio/mono"][0];
    assert_eq!(read["audio/mono"].len(), 1);
    assert_eq!(
        (clip.step, clip.clip.sample_rate, clip.clip.channels),
        (3, 8000, 1)
    );
    let want: Vec<f32> = mono.iter().map(|&x| quantized(x)).collect();
    assert_eq!(clip.clip.samples, want);
    assert_eq!(clip.clip.samples[3], 32767.0 / 32768.0, "clipped high");
    assert_eq!(clip.clip.samples[4], -1.0, "clipped low");
    // A canonical 44-byte header, then 2 bytes a sample.
    assert!(clip.clip.wav.starts_with(b"RIFF") && &clip.clip.wav[8..12] == b"WAVE");
    assert_eq!(clip.clip.wav.len(), 44 + 2 * mono.len());
    assert_eq!(clip.clip.label, "");
    let clip = &read["audio/stereo"][0].clip;
    assert_eq!((clip.sample_rate, clip.channels), (44_100, 2));
    assert_eq!(
        clip.samples,
        stereo.iter().map(|&x| quantized(x)).collect::<Vec<_>>()
    );
}

#[test]
fn the_custom_scalars_layout_comes_back_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let mut closed = Category::new("bounds").margin(
        "loss band",
        vec![MarginSeries {
            value: "loss".into(),
            lower: "loss/low".into(),
            upper: "loss/high".into(),
        }],
    );
    closed.closed = true;
    let layout = CustomScalarLayout::new()
        .category(Category::new("losses").multiline("all", ["loss.*", "valid/.*"]))
        .category(closed);
    summary.add_custom_scalars(layout.clone()).unwrap();
    summary.close().unwrap();
    let read = custom_scalars(dir.path()).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!((read[0].step, &read[0].layout), (0, &layout));
}

fn thumbnail(level: u8) -> Image {
    Image::new(
        TensorValue::from_slice(&[level; 3 * 4 * 2], [3, 4, 2]),
        ImageLayout::Chw,
    )
}

#[test]
fn embeddings_come_back_with_their_files_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let points = [1.5f32, -2.0, 0.25, 3.0, 0.0, -0.125];
    summary
        .add_embedding(
            "emb/hidden",
            TensorValue::from_slice(&points, [3, 2]),
            Some(vec!["a".into(), "b".into(), "c".into()]),
            Some(vec![thumbnail(10), thumbnail(20), thumbnail(30)]),
            3,
        )
        .unwrap();
    summary
        .add_embedding(
            "bare",
            TensorValue::from_slice(&[1.0f32], [1, 1]),
            None,
            None,
            12,
        )
        .unwrap();
    summary.close().unwrap();

    let read = embeddings(dir.path()).unwrap();
    assert_eq!(Summaries::read_dir(dir.path()).unwrap().embeddings, read);
    assert_eq!(read.len(), 2);
    let hidden = &read[0];
    assert_eq!(hidden.tensor_name, "emb/hidden:00003");
    assert_eq!(hidden.tensor_shape, [3, 2]);
    assert!(hidden.problems.is_empty(), "{:?}", hidden.problems);
    let tensor_path = hidden.tensor_path.as_ref().unwrap();
    assert!(tensor_path.is_relative(), "{tensor_path:?}");
    let rows: Vec<Vec<f32>> = fs::read_to_string(dir.path().join(tensor_path))
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows, [[1.5, -2.0], [0.25, 3.0], [0.0, -0.125]]);
    let labels = fs::read_to_string(dir.path().join(hidden.metadata_path.as_ref().unwrap()));
    assert_eq!(labels.unwrap(), "a\nb\nc\n");
    let sprite = hidden.sprite.as_ref().unwrap();
    assert_eq!(sprite.single_image_dim, [2, 4], "width, height");
    assert!(dir.path().join(&sprite.image_path).is_file());
    let bare = &read[1];
    assert_eq!(bare.tensor_name, "bare:00012");
    assert_eq!(
        (bare.metadata_path.as_ref(), bare.sprite.as_ref()),
        (None, None)
    );

    // A label file gone and a directory where the points were: problems, not errors.
    let metadata = dir.path().join(hidden.metadata_path.as_ref().unwrap());
    fs::remove_file(&metadata).unwrap();
    let tensors = dir.path().join(bare.tensor_path.as_ref().unwrap());
    fs::remove_file(&tensors).unwrap();
    fs::create_dir(&tensors).unwrap();
    let read = embeddings(dir.path()).unwrap();
    assert_eq!(
        read[0].problems,
        [EmbeddingProblem::Missing {
            file: EmbeddingFile::Metadata,
            path: metadata.clone()
        }]
    );
    assert_eq!(
        read[1].problems,
        [EmbeddingProblem::NotAFile {
            file: EmbeddingFile::Tensor,
            path: tensors
        }]
    );
    assert_eq!(
        read[0].problems[0].to_string(),
        format!("its metadata file {} is missing", metadata.display())
    );
}

/// Replaces (or makes) the run's projector config.
fn write_config(dir: &Path, text: &str) {
    let path = dir.join("projector_config.pbtxt");
    let _ = fs::remove_file(&path);
    fs::write(path, text).unwrap();
}

#[test]
fn a_projector_config_in_any_text_format_spelling_reads_and_a_broken_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("t.tsv"), "1\t2\n").unwrap();
    write_config(
        dir.path(),
        "# by hand\nembeddings <\n  tensor_name: 'x'\n  tensor_path: \"t.tsv\"\n  \
         tensor_shape: 1 tensor_shape: 2\n  future_field: 7\n>\nembeddings: [{ tensor_name: \"y\" }]\n",
    );
    let read = embeddings(dir.path()).unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(
        (read[0].tensor_name.as_str(), &read[0].tensor_shape[..]),
        ("x", &[1, 2][..])
    );
    assert!(read[0].problems.is_empty());
    // No tensor path: the projector would look in a checkpoint; nothing to check here.
    assert_eq!(
        (read[1].tensor_path.as_ref(), read[1].problems.len()),
        (None, 0)
    );

    write_config(dir.path(), "embeddings {\n  tensor_shape: [3, \"x\"]\n}\n");
    let error = embeddings(dir.path()).unwrap_err();
    assert!(
        matches!(
            error,
            ReadError::ProjectorConfig {
                line: 2,
                problem: "a size is not a non-negative integer",
                ..
            }
        ),
        "{error}"
    );
    write_config(dir.path(), "embeddings {\n  tensor_name: \"x\"\n");
    assert!(matches!(
        embeddings(dir.path()),
        Err(ReadError::ProjectorConfig {
            line: 3,
            problem: "a message is not closed",
            ..
        })
    ));
    fs::remove_file(dir.path().join("projector_config.pbtxt")).unwrap();
    assert_eq!(embeddings(dir.path()).unwrap(), []);
}

/// A TensorBoard event file of one value under `plugin`, written by hand.
fn hand_written_value(dir: &Path, plugin: &str, tensor: tbp::TensorProto) {
    let value = tbp::summary::Value {
        tag: "bad".into(),
        metadata: Some(tbp::SummaryMetadata {
            plugin_data: Some(tbp::summary_metadata::PluginData {
                plugin_name: plugin.into(),
                content: Vec::new(),
            }),
            ..Default::default()
        }),
        value: Some(tbp::summary::value::Value::Tensor(tensor)),
        ..Default::default()
    };
    let event = tbp::Event {
        wall_time: 1.7e9,
        step: 1,
        what: Some(tbp::event::What::Summary(tbp::Summary {
            value: vec![value],
        })),
        ..Default::default()
    };
    let path = dir.join("events.out.tfevents.1.host");
    fs::write(path, framing::frame(&event.encode_to_vec())).unwrap();
}

fn shaped(dims: &[i64]) -> Option<tbp::TensorShapeProto> {
    Some(tbp::TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| tbp::tensor_shape_proto::Dim {
                size,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

#[test]
fn plugin_values_that_do_not_hold_their_layout_are_typed_errors() {
    let float = tbp::DataType::DtFloat as i32;
    let string = tbp::DataType::DtString as i32;
    let cases = [
        (
            "pr_curves",
            tbp::TensorProto {
                dtype: float,
                tensor_shape: shaped(&[5, 3]),
                float_val: vec![0.0; 15],
                ..Default::default()
            },
            "a pr_curves value is a [6, n] float tensor (n of at least 2) whose values fill it, \
             not a DT_FLOAT tensor of shape [5, 3]",
        ),
        (
            "audio",
            tbp::TensorProto {
                dtype: string,
                tensor_shape: shaped(&[1, 2]),
                string_val: vec![b"not a wav".to_vec(), Vec::new()],
                ..Default::default()
            },
            "the clip is not a wav file",
        ),
        (
            "custom_scalars",
            tbp::TensorProto {
                dtype: string,
                tensor_shape: shaped(&[]),
                string_val: vec![vec![0xff, 0xff]],
                ..Default::default()
            },
            "the custom scalars layout does not decode",
        ),
    ];
    for (plugin, tensor, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        hand_written_value(dir.path(), plugin, tensor);
        let error = Summaries::read_dir(dir.path()).unwrap_err();
        assert!(
            matches!(&error, ReadError::Value { tag, offset: 0, .. } if tag == "bad"),
            "{error:?}"
        );
        assert!(error.to_string().contains(message), "{plugin}: {error}");
    }
}

#[test]
fn pr_curve_thresholds_equal_numpys_linspace_bit_for_bit() {
    // numpy.linspace(0.0, 1.0, 51)[[35, 41, 47, 50]], as TensorBoard's dashboard computes them:
    // a hair above 0.7, 0.82 and 0.94, where i / 50 rounds to those decimals exactly.
    let thresholds = pr_curve_thresholds(51);
    assert_eq!(thresholds.len(), 51);
    for (i, numpy) in [
        (35, 0.7000000000000001),
        (41, 0.8200000000000001),
        (47, 0.9400000000000001),
        (50, 1.0),
    ] {
        assert_eq!(thresholds[i], numpy, "threshold {i}");
    }
    assert_eq!(pr_curve_thresholds(2), [0.0, 1.0]);
}
