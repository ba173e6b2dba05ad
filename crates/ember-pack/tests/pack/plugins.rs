//! PR curves, audio and custom scalar layouts against independent expectations: the curve's
//! definition (counts of predictions at or above each threshold), a WAV header read by hand, and
//! the layout decoded from what was written.

use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    Audio, CUSTOM_SCALARS_TAG, Category, ChartContent, CustomScalarLayout, Format, MarginSeries,
    MetadataFor, PackErrorKind, PackOptions, Packer, PrCurve, Record, Tag, Value,
};
use prost::Message;

fn tag(s: &str) -> Tag {
    Tag::new(s).unwrap()
}

/// The one `Summary.Value` of a one-value record packed for TensorBoard.
fn packed_value(value: impl Into<Value>) -> tbp::summary::Value {
    let record = Record::new(3, 1.5).with(tag("t"), value);
    let packed = Packer::default().pack(&record, MetadataFor::All);
    assert!(packed.rejected.is_empty(), "{:?}", packed.rejected);
    let event = tbp::Event::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(tbp::event::What::Summary(summary)) = event.what else {
        panic!("not a summary event")
    };
    assert_eq!(summary.value.len(), 1);
    summary.value.into_iter().next().unwrap()
}

fn plugin(v: &tbp::summary::Value) -> (String, Vec<u8>, i32) {
    let m = v.metadata.as_ref().unwrap();
    let p = m.plugin_data.as_ref().unwrap();
    (p.plugin_name.clone(), p.content.clone(), m.data_class)
}

/// The curve straight from its definition: at threshold `i / (n - 1)`, the positives are the
/// predictions at or above it.
fn by_definition(labels: &[bool], predictions: &[f32], n: usize) -> [Vec<f64>; 6] {
    let mut rows: [Vec<f64>; 6] = Default::default();
    let positives = labels.iter().filter(|&&l| l).count() as f64;
    let negatives = labels.len() as f64 - positives;
    for i in 0..n {
        let t = i as f64 / (n - 1) as f64;
        let above = |want: bool| {
            labels
                .iter()
                .zip(predictions)
                .filter(|&(&l, &p)| l == want && f64::from(p) >= t)
                .count() as f64
        };
        let (tp, fp) = (above(true), above(false));
        rows[0].push(tp);
        rows[1].push(fp);
        rows[2].push(negatives - fp);
        rows[3].push(positives - tp);
        rows[4].push(if tp + fp > 0.0 { tp / (tp + fp) } else { 0.0 });
        rows[5].push(if positives > 0.0 { tp / positives } else { 0.0 });
    }
    rows
}

#[test]
fn pr_curve_matches_a_hand_computed_one() {
    let labels = [true, false, true, false, true, true];
    let predictions = [0.1, 0.3, 0.6, 0.8, 0.9, 1.0];
    let curve = PrCurve::from_predictions(&labels, &predictions, 5).unwrap();
    assert_eq!(curve.true_positives, [4.0, 3.0, 3.0, 2.0, 1.0]);
    assert_eq!(curve.false_positives, [2.0, 2.0, 1.0, 1.0, 0.0]);
    assert_eq!(curve.true_negatives, [0.0, 0.0, 1.0, 1.0, 2.0]);
    assert_eq!(curve.false_negatives, [0.0, 1.0, 1.0, 2.0, 3.0]);
    assert_eq!(curve.precision, [4.0 / 6.0, 0.6, 0.75, 2.0 / 3.0, 1.0]);
    assert_eq!(curve.recall, [1.0, 0.75, 0.75, 0.5, 0.25]);
}

#[test]
fn pr_curve_matches_its_definition_on_many_values() {
    let n = 127;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut labels = Vec::new();
    let mut predictions = Vec::new();
    while predictions.len() < 2000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let p = (state >> 40) as f32 / (1u64 << 24) as f32;
        // Away from the thresholds, where f32 bucketing and f64 comparison could disagree.
        let scaled = f64::from(p) * (n - 1) as f64;
        if (scaled - scaled.round()).abs() < 1e-3 {
            continue;
        }
        labels.push((state >> 13) & 1 == 1);
        predictions.push(p);
    }
    let curve = PrCurve::from_predictions(&labels, &predictions, n as u32).unwrap();
    let expected = by_definition(&labels, &predictions, n);
    for (row, want) in curve.rows().iter().zip(&expected) {
        for (got, want) in row.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{got} != {want}");
        }
    }
}

#[test]
fn pr_curve_empty_classes_give_zero_not_nan() {
    let curve = PrCurve::from_predictions(&[false, false], &[0.2, 0.7], 3).unwrap();
    assert_eq!(curve.precision, [0.0, 0.0, 0.0]);
    assert_eq!(curve.recall, [0.0, 0.0, 0.0]);
    let none = PrCurve::from_predictions(&[], &[], 2).unwrap();
    assert_eq!(none.true_positives, [0.0, 0.0]);
}

#[test]
fn pr_curve_bad_input_is_a_typed_error() {
    let bad = |r: Result<PrCurve, PackErrorKind>| {
        assert!(matches!(r, Err(PackErrorKind::InvalidPrCurve(_))), "{r:?}")
    };
    bad(PrCurve::from_predictions(&[true], &[0.5, 0.5], 3));
    bad(PrCurve::from_predictions(&[true], &[0.5], 1));
    bad(PrCurve::from_predictions(&[true], &[f32::NAN], 3));
    bad(PrCurve::from_predictions(&[true], &[1.5], 3));
    bad(PrCurve::from_predictions(&[true], &[-0.1], 3));
    bad(PrCurve::from_counts(
        vec![1.0, 0.0],
        vec![0.0; 2],
        vec![0.0; 2],
        vec![0.0; 2],
        vec![0.0; 2],
        vec![0.0; 3],
    ));
    // A curve whose rows were edited after it was built is refused when packed.
    let mut curve = PrCurve::from_predictions(&[true], &[0.5], 3).unwrap();
    curve.recall.pop();
    let packed =
        Packer::default().pack(&Record::new(0, 0.0).with(tag("t"), curve), MetadataFor::All);
    assert!(matches!(
        packed.rejected[0].kind,
        PackErrorKind::InvalidPrCurve(_)
    ));
}

#[test]
fn pr_curve_is_a_6_by_n_float_tensor_with_the_plugins_metadata() {
    let curve = PrCurve::from_counts(
        vec![75.0, 64.0, 21.0],
        vec![150.0, 105.0, 18.0],
        vec![0.0, 45.0, 132.0],
        vec![0.0, 11.0, 54.0],
        vec![0.333, 0.378, 0.538],
        vec![1.0, 0.853, 0.28],
    )
    .unwrap();
    let v = packed_value(curve.clone());
    let (name, content, class) = plugin(&v);
    assert_eq!(name, "pr_curves");
    assert_eq!(class, tbp::DataClass::Tensor as i32);
    let data = tbp::PrCurvePluginData::decode(content.as_slice()).unwrap();
    assert_eq!((data.version, data.num_thresholds), (0, 3));
    let Some(tbp::summary::value::Value::Tensor(t)) = v.value else {
        panic!("not a tensor")
    };
    assert_eq!(t.dtype, tbp::DataType::DtFloat as i32);
    let dims: Vec<i64> = t.tensor_shape.unwrap().dim.iter().map(|d| d.size).collect();
    assert_eq!(dims, [6, 3]);
    let floats: Vec<f32> = t
        .tensor_content
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = curve
        .rows()
        .iter()
        .flat_map(|r| r.iter().map(|&x| x as f32))
        .collect();
    assert_eq!(floats, want);
}

#[test]
fn audio_is_pcm16_wav_in_a_1_by_2_string_tensor() {
    let samples = vec![0.0, 0.5, -0.5, 1.0, -1.0, 2.0, f32::NAN, 0.25];
    let v = packed_value(Audio {
        samples: samples.clone(),
        sample_rate: 8000,
        channels: 2,
    });
    let (name, content, class) = plugin(&v);
    assert_eq!(name, "audio");
    // Unset, as TensorBoard's own audio summaries: its loaders migrate the [k, 2] tensor only
    // then.
    assert_eq!(class, tbp::DataClass::Unknown as i32);
    let data = tbp::AudioPluginData::decode(content.as_slice()).unwrap();
    assert_eq!(data.encoding, tbp::audio_plugin_data::Encoding::Wav as i32);
    let Some(tbp::summary::value::Value::Tensor(t)) = v.value else {
        panic!("not a tensor")
    };
    assert_eq!(t.dtype, tbp::DataType::DtString as i32);
    let dims: Vec<i64> = t.tensor_shape.unwrap().dim.iter().map(|d| d.size).collect();
    assert_eq!(dims, [1, 2]);
    assert_eq!(t.string_val[1], b"");
    let wav = &t.string_val[0];
    // The canonical 44-byte header (RIFF, fmt chunk of 16 bytes, data chunk), read by hand.
    let u16_at = |i: usize| u16::from_le_bytes([wav[i], wav[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes(wav[i..i + 4].try_into().unwrap());
    assert_eq!(&wav[0..4], b"RIFF");
    assert_eq!(u32_at(4) as usize, wav.len() - 8);
    assert_eq!(&wav[8..16], b"WAVEfmt ");
    assert_eq!(u32_at(16), 16);
    assert_eq!(u16_at(20), 1, "pcm");
    assert_eq!(u16_at(22), 2, "channels");
    assert_eq!(u32_at(24), 8000, "rate");
    assert_eq!(u32_at(28), 8000 * 2 * 2, "byte rate");
    assert_eq!(u16_at(32), 4, "block align");
    assert_eq!(u16_at(34), 16, "bits");
    assert_eq!(&wav[36..40], b"data");
    assert_eq!(u32_at(40) as usize, samples.len() * 2);
    let pcm: Vec<i16> = wav[44..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    // TensorFlow's encode_wav: round(x · 32768), clamped; NaN as silence.
    assert_eq!(pcm, [0, 16384, -16384, 32767, -32768, 32767, 0, 8192]);
}

#[test]
fn bad_audio_is_a_typed_error() {
    let packer = Packer::default();
    for audio in [
        Audio::mono(vec![0.0], 0),
        Audio {
            samples: vec![0.0; 3],
            sample_rate: 10,
            channels: 2,
        },
        Audio {
            samples: vec![],
            sample_rate: 10,
            channels: 0,
        },
    ] {
        let err = packer.check(&tag("a"), &Value::Audio(audio)).unwrap_err();
        assert!(matches!(err.kind, PackErrorKind::InvalidAudio(_)), "{err}");
    }
}

#[test]
fn custom_scalars_layout_goes_under_the_plugins_tag() {
    let layout = CustomScalarLayout::new()
        .category(
            Category::new("loss")
                .multiline("loss", ["train/loss", "valid/loss"])
                .margin(
                    "band",
                    vec![MarginSeries {
                        value: "m".into(),
                        lower: "lo".into(),
                        upper: "hi".into(),
                    }],
                ),
        )
        .category(Category {
            closed: true,
            ..Category::new("closed")
        });
    let v = packed_value(layout.clone());
    assert_eq!(v.tag, CUSTOM_SCALARS_TAG);
    let (name, content, class) = plugin(&v);
    assert_eq!((name.as_str(), content.len()), ("custom_scalars", 0));
    assert_eq!(class, tbp::DataClass::Tensor as i32);
    let Some(tbp::summary::value::Value::Tensor(t)) = v.value else {
        panic!("not a tensor")
    };
    assert_eq!(t.dtype, tbp::DataType::DtString as i32);
    assert!(t.tensor_shape.unwrap().dim.is_empty());
    let decoded = tbp::Layout::decode(t.string_val[0].as_slice()).unwrap();
    assert_eq!(decoded.category.len(), 2);
    let loss = &decoded.category[0];
    assert_eq!((loss.title.as_str(), loss.closed), ("loss", false));
    assert!(decoded.category[1].closed);
    match &loss.chart[0].content {
        Some(tbp::chart::Content::Multiline(m)) => assert_eq!(m.tag, ["train/loss", "valid/loss"]),
        other => panic!("{other:?}"),
    }
    match &loss.chart[1].content {
        Some(tbp::chart::Content::Margin(m)) => {
            assert_eq!(
                (
                    m.series[0].value.as_str(),
                    m.series[0].lower.as_str(),
                    m.series[0].upper.as_str()
                ),
                ("m", "lo", "hi")
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        layout.categories[0].charts[0].content,
        ChartContent::Multiline(_)
    ));
}

#[test]
fn mindinsight_refuses_each_new_kind_naming_the_format() {
    let packer = Packer::new(PackOptions::new(Format::MindInsight));
    let values: [(Value, &str); 3] = [
        (
            PrCurve::from_predictions(&[true], &[0.5], 2)
                .unwrap()
                .into(),
            "pr curve",
        ),
        (Audio::mono(vec![0.0], 8000).into(), "audio"),
        (CustomScalarLayout::new().into(), "custom scalars layout"),
    ];
    for (value, kind) in values {
        let err = packer.check(&tag("x"), &value).unwrap_err();
        assert_eq!(
            err.kind,
            PackErrorKind::Unsupported {
                format: Format::MindInsight,
                kind
            }
        );
        assert!(err.to_string().contains("MindInsight"), "{err}");
    }
}
