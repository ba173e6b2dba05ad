//! Absurd shapes and counts get typed errors, never a panic or a huge allocation: one test per
//! size computation the review found unchecked (each says what it did before), and a table of
//! good and bad values on which `Packer::check` and `Packer::pack` agree. Run in debug, where
//! integer overflow panics.

use ember_pack::proto::mindspore as msp;
use ember_pack::{
    Bucket, DType, Format, Graph, GraphNode, HParams, Histogram, HistogramBuckets, HistogramRule,
    Image, ImageLayout, Lineage, MetadataFor, PackErrorKind, PackOptions, Packer, Record, Tag,
    TensorValue, Value,
};

const FORMATS: [Format; 2] = [Format::TensorBoard, Format::MindInsight];

fn packer(format: Format) -> Packer {
    Packer::new(PackOptions::new(format))
}

fn tag() -> Tag {
    Tag::new("v").unwrap()
}

/// What packing `value` alone gives: `Ok` with the items it made, or the error.
fn pack_one(packer: &Packer, value: &Value) -> Result<usize, PackErrorKind> {
    let record = Record::new(1, 1.0).with(tag(), value.clone());
    let mut packed = packer.pack(&record, MetadataFor::All);
    match packed.rejected.pop() {
        Some(e) => {
            assert!(packed.rejected.is_empty() && packed.items.is_empty());
            assert_eq!(e.tag, tag());
            Err(e.kind)
        }
        None => Ok(packed.items.len()),
    }
}

/// Asserts that `check` and `pack` both reject `value` with `expected`.
fn assert_rejected(packer: &Packer, value: &Value, expected: &PackErrorKind) {
    let checked = packer.check(&tag(), value).unwrap_err();
    assert_eq!(checked.tag, tag());
    assert_eq!(&checked.kind, expected, "check, {:?}", packer.format());
    assert_eq!(
        pack_one(packer, value).unwrap_err(),
        *expected,
        "pack, {:?}",
        packer.format()
    );
}

/// Asserts that `check` accepts `value` and `pack` packs it.
fn assert_packs(packer: &Packer, value: &Value) {
    assert_eq!(packer.check(&tag(), value), Ok(()), "{:?}", packer.format());
    assert_eq!(pack_one(packer, value), Ok(1), "{:?}", packer.format());
}

/// Image data of `shape` and no bytes: any shape with a zero dimension is consistent with them.
fn empty_image(dtype: DType, shape: &[usize], layout: ImageLayout) -> Value {
    Value::Image(Image::new(
        TensorValue::new(dtype, shape, Vec::new()),
        layout,
    ))
}

const BIG: usize = 1 << 32;
const HUGE: usize = 1 << 63;

#[test]
fn empty_batch_with_overflowing_image_size_in_every_layout() {
    // Before: `View::new` computed the strides before any size check; with N = 0 the bytes
    // (none) match the shape, and `c * h * w` (NCHW) or `h * w * c` (NHWC) overflowed: "attempt
    // to multiply with overflow" in image.rs, killing the writer thread. The single-image
    // layouts have no N; their analogue is a zero width (CHW: `c * h` overflowed, once the
    // element count stopped overflowing on a zero dimension) or height (HWC: `w * c`).
    let size = |batch, height, width| PackErrorKind::ImageSize {
        batch,
        height,
        width,
    };
    let cases = [
        (ImageLayout::Nchw, vec![0, 3, BIG, BIG], size(0, BIG, BIG)),
        (ImageLayout::Nhwc, vec![0, BIG, BIG, 3], size(0, BIG, BIG)),
        (ImageLayout::Chw, vec![3, HUGE, 0], size(1, HUGE, 0)),
        (ImageLayout::Hwc, vec![0, HUGE, 3], size(1, 0, HUGE)),
    ];
    for format in FORMATS {
        for dtype in [DType::U8, DType::F32, DType::F16] {
            for (layout, shape, expected) in &cases {
                let value = empty_image(dtype, shape, *layout);
                assert_rejected(&packer(format), &value, expected);
            }
        }
    }
}

#[test]
fn zero_channels_with_overflowing_plane() {
    // Before: NCHW with C = 0 has no elements, and the channel stride `h * w` overflowed before
    // the channel count was checked.
    for format in FORMATS {
        assert_rejected(
            &packer(format),
            &empty_image(DType::U8, &[1, 0, BIG, BIG], ImageLayout::Nchw),
            &PackErrorKind::ImageChannels {
                format,
                channels: 0,
            },
        );
    }
}

#[test]
fn zero_height_with_overflowing_row() {
    // Before: NHWC with H = 0 has no elements, and the row stride `w * c` overflowed.
    for format in FORMATS {
        assert_rejected(
            &packer(format),
            &empty_image(DType::F32, &[2, 0, HUGE, 3], ImageLayout::Nhwc),
            &PackErrorKind::ImageSize {
                batch: 2,
                height: 0,
                width: HUGE,
            },
        );
    }
}

#[test]
fn empty_tensor_with_huge_dimensions_packs() {
    // Before: the element count multiplied left to right and overflowed before it reached the
    // zero, so an empty tensor was rejected as needing "more than usize::MAX" bytes.
    let t = TensorValue::new(DType::F32, [1usize << 62, 4, 0], Vec::new());
    assert_eq!(t.num_elements(), Some(0));
    for format in FORMATS {
        assert_packs(&packer(format), &Value::Tensor(t.clone()));
        assert_packs(&packer(format), &Value::Export(t.clone()));
    }
}

#[test]
fn tensor_dimension_beyond_i64() {
    // Before: both formats wrote the dimension as an int64 varint, which reads back negative
    // (-2^63), and the `.npy` header held a size numpy cannot load.
    let t = TensorValue::new(DType::F32, [0, HUGE], Vec::new());
    let expected = PackErrorKind::SizeOverflow("a tensor dimension exceeds i64::MAX");
    for format in FORMATS {
        assert_rejected(&packer(format), &Value::Tensor(t.clone()), &expected);
        assert_rejected(&packer(format), &Value::Export(t.clone()), &expected);
    }
}

fn buckets() -> HistogramBuckets {
    HistogramBuckets {
        min: 0.0,
        max: 1.0,
        num: 2.0,
        sum: 1.0,
        sum_squares: 1.0,
        buckets: vec![Bucket {
            left: 0.0,
            right: 1.0,
            count: 2.0,
        }],
        ..HistogramBuckets::default()
    }
}

#[test]
fn precomputed_non_finite_counts_that_overflow() {
    // Before: MindInsight summed `nan_count + pos_inf_count + neg_inf_count` unchecked: "attempt
    // to add with overflow" in ms.rs. TensorBoard does not write these counts.
    let b = HistogramBuckets {
        nan_count: u64::MAX,
        pos_inf_count: 1,
        ..buckets()
    };
    let value = Value::Histogram(Histogram::Buckets(b));
    assert_rejected(
        &packer(Format::MindInsight),
        &value,
        &PackErrorKind::SizeOverflow("histogram counts exceed i64::MAX"),
    );
    assert_packs(&packer(Format::TensorBoard), &value);
}

#[test]
fn precomputed_counts_beyond_i64() {
    // Before: MindInsight cast these to its int64 fields with `as`: a NaN count of 2^63 became
    // negative, and a bucket count or `num` of 1e19 saturated to i64::MAX.
    let cases = [
        HistogramBuckets {
            nan_count: 1 << 63,
            ..buckets()
        },
        HistogramBuckets {
            num: 1e19,
            ..buckets()
        },
        HistogramBuckets {
            buckets: vec![Bucket {
                left: 0.0,
                right: 1.0,
                count: 1e19,
            }],
            ..buckets()
        },
    ];
    for b in cases {
        assert_rejected(
            &packer(Format::MindInsight),
            &Value::Histogram(Histogram::Buckets(b)),
            &PackErrorKind::SizeOverflow("histogram counts exceed i64::MAX"),
        );
    }
}

#[test]
fn equal_width_bucket_count_beyond_the_limit() {
    // Before: `EqualWidth(u32::MAX)` made every raw histogram allocate 4 billion edges and
    // counters (tens of GiB), whatever its values.
    let value = Value::histogram(vec![1.0f32, 2.0]);
    let with = |k| {
        Packer::new(PackOptions {
            histogram: HistogramRule::EqualWidth(k),
            ..PackOptions::default()
        })
    };
    assert_rejected(
        &with(u32::MAX),
        &value,
        &PackErrorKind::SizeOverflow(
            "the equal-width bucket count exceeds HistogramRule::MAX_EQUAL_WIDTH",
        ),
    );
    assert_packs(&with(HistogramRule::MAX_EQUAL_WIDTH), &value);
    // Precomputed buckets do not use the rule.
    assert_packs(
        &with(u32::MAX),
        &Value::Histogram(Histogram::Buckets(buckets())),
    );
}

fn image(values: Vec<f32>, shape: &[usize], layout: ImageLayout) -> Value {
    Value::Image(Image::new(TensorValue::from_slice(&values, shape), layout))
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one table of values, each checked by check and by pack alike"
)]
fn check_agrees_with_pack() {
    let graph = Graph {
        name: "g".to_string(),
        nodes: vec![GraphNode::new("a/b", "Relu")],
    };
    let explain = msp::Explain {
        image_path: Some("x.png".to_string()),
        ..Default::default()
    };
    // (value, accepted by TensorBoard, accepted by MindInsight)
    let table: Vec<(Value, bool, bool)> = vec![
        (Value::Scalar(f64::NAN), true, true),
        (
            TensorValue::from_slice(&[1.0f32, 2.0], [2usize]).into(),
            true,
            true,
        ),
        (
            TensorValue::new(DType::F32, [3usize], vec![0; 11]).into(),
            false,
            false,
        ),
        (
            TensorValue::from_slice(&[half::bf16::ONE], [1usize]).into(),
            true,
            false,
        ),
        (
            TensorValue::new(DType::U8, [0usize, HUGE], Vec::new()).into(),
            false,
            false,
        ),
        (
            TensorValue::from_slice::<u8>(&[], [0usize]).into(),
            true,
            true,
        ),
        (Value::histogram(vec![1u8, 2, 3]), true, true),
        (Value::histogram(Vec::<f64>::new()), false, false),
        (
            Value::Histogram(Histogram::Raw(TensorValue::new(
                DType::F64,
                [2usize],
                vec![0; 9],
            ))),
            false,
            false,
        ),
        (Value::Histogram(Histogram::Buckets(buckets())), true, true),
        (
            Value::Histogram(Histogram::Buckets(HistogramBuckets {
                buckets: vec![],
                num: 0.0,
                ..buckets()
            })),
            false,
            false,
        ),
        (
            Value::Histogram(Histogram::Buckets(HistogramBuckets {
                num: f64::NAN,
                ..buckets()
            })),
            false,
            false,
        ),
        (
            Value::Histogram(Histogram::Buckets(HistogramBuckets {
                nan_count: u64::MAX,
                neg_inf_count: u64::MAX,
                ..buckets()
            })),
            true,
            false,
        ),
        (
            image(vec![0.5; 36], &[3, 3, 2, 2], ImageLayout::Nchw),
            true,
            true,
        ),
        (
            image(vec![0.5; 16], &[2, 2, 4], ImageLayout::Hwc),
            true,
            false,
        ),
        (
            image(vec![0.5; 8], &[2, 2, 2], ImageLayout::Chw),
            false,
            false,
        ),
        (image(vec![0.5; 4], &[2, 2], ImageLayout::Chw), false, false),
        (
            Value::Image(Image::new(
                TensorValue::from_slice(&[half::f16::ONE; 9], [1usize, 3, 3]),
                ImageLayout::Chw,
            )),
            true,
            true,
        ),
        (
            Value::Image(Image::new(
                TensorValue::from_slice(&[1i32; 4], [1usize, 2, 2]),
                ImageLayout::Chw,
            )),
            false,
            false,
        ),
        (
            empty_image(DType::U8, &[0, 3, BIG, BIG], ImageLayout::Nchw),
            false,
            false,
        ),
        (
            empty_image(DType::U8, &[1, 3, 2, 0], ImageLayout::Nchw),
            false,
            false,
        ),
        (
            Value::Image(Image::new(
                TensorValue::new(DType::F32, [3usize, 2, 2], vec![0; 5]),
                ImageLayout::Chw,
            )),
            false,
            false,
        ),
        (Value::from("text"), true, false),
        (
            HParams::new().with("lr", 0.1).metric("loss").into(),
            true,
            true,
        ),
        (
            Lineage::from(msp::UserDefinedInfo::default()).into(),
            false,
            true,
        ),
        (graph.into(), true, true),
        (msp::Explain::default().into(), false, false),
        (explain.into(), false, true),
        (Value::export(vec![1i64, 2, 3]), true, true),
        (
            Value::export(TensorValue::new(DType::U8, vec![1; 30_000], vec![0])),
            false,
            false,
        ),
        (
            Value::export(TensorValue::new(DType::F32, [2usize], vec![0; 7])),
            false,
            false,
        ),
    ];
    for (i, (value, tb_ok, mi_ok)) in table.iter().enumerate() {
        for (format, ok) in [(Format::TensorBoard, tb_ok), (Format::MindInsight, mi_ok)] {
            let packer = packer(format);
            let checked = packer.check(&tag(), value).map_err(|e| e.kind);
            assert_eq!(checked.is_ok(), *ok, "row {i}, {format:?}: {checked:?}");
            assert_eq!(
                checked,
                pack_one(&packer, value).map(drop),
                "row {i}, {format:?}"
            );
        }
    }
}
