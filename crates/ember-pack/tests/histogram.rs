//! Histogram buckets equal an independent, brute-force computation in both formats, for normal,
//! constant, integer and NaN/Inf-laden input.
//!
//! Past 600 lines on purpose: one file per public surface; each test builds its own input and
//! stands alone, so its length couples nothing.

use ember_pack::proto::mindspore as msp;
use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    Bucket, Format, HistogramBuckets, HistogramRule, MetadataFor, PackErrorKind, PackOptions,
    Packer, Record, Tag, TensorValue, Value,
};
use prost::Message;

fn tb_histogram(values: TensorValue, rule: HistogramRule) -> tbp::HistogramProto {
    let mut record = Record::new(1, 1.0);
    record.add(Tag::new("h").unwrap(), Value::histogram(values));
    let options = PackOptions {
        histogram: rule,
        ..PackOptions::new(Format::TensorBoard)
    };
    let packed = Packer::new(options).pack(&record, MetadataFor::All);
    assert!(packed.rejected.is_empty(), "{:?}", packed.rejected);
    let event = tbp::Event::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(tbp::event::What::Summary(s)) = event.what else {
        panic!()
    };
    let Some(tbp::summary::value::Value::Histo(h)) = s.value[0].value.clone() else {
        panic!()
    };
    h
}

fn ms_histogram(values: TensorValue) -> msp::summary::Histogram {
    let mut record = Record::new(1, 1.0);
    record.add(Tag::new("h").unwrap(), Value::histogram(values));
    let packed = Packer::new(PackOptions::new(Format::MindInsight)).pack(&record, MetadataFor::All);
    assert!(packed.rejected.is_empty(), "{:?}", packed.rejected);
    let event = msp::Event::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(msp::event::What::Summary(s)) = event.what else {
        panic!()
    };
    let Some(msp::summary::value::Value::Histogram(h)) = s.value[0].value.clone() else {
        panic!()
    };
    h
}

/// Counts of `xs` in buckets `[e[i], e[i+1])`, the last closed: the last `i` with `e[i] <= x`.
fn brute_counts(xs: &[f64], edges: &[f64]) -> Vec<u64> {
    let k = edges.len() - 1;
    let mut counts = vec![0u64; k];
    for &x in xs.iter().filter(|x| x.is_finite()) {
        if x < edges[0] || x > edges[k] {
            continue;
        }
        let i = (0..k).rev().find(|&i| edges[i] <= x).unwrap();
        counts[i] += 1;
    }
    counts
}

/// TensorBoard's equal-width edges as docs/formats.md specifies them.
fn tb_edges(min: f64, max: f64, k: usize) -> Vec<f64> {
    let mut edges: Vec<f64> = (0..=k)
        .map(|i| {
            if i == k {
                max
            } else {
                min * (1.0 - i as f64 / k as f64) + max * (i as f64 / k as f64)
            }
        })
        .collect();
    for i in 1..=k {
        edges[i] = edges[i].max(edges[i - 1]);
    }
    edges
}

fn check_tb_equal_width(xs: &[f64], h: &tbp::HistogramProto, k: usize) {
    let finite: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!((h.min, h.max, h.num), (min, max, finite.len() as f64));
    let sum: f64 = finite.iter().sum();
    let sum_squares: f64 = finite.iter().map(|x| x * x).sum();
    assert!((h.sum - sum).abs() <= 1e-9 * sum.abs().max(1.0));
    assert!((h.sum_squares - sum_squares).abs() <= 1e-9 * sum_squares.max(1.0));
    if min == max {
        assert_eq!(h.bucket_limit, [max]);
        assert_eq!(h.bucket, [finite.len() as f64]);
        return;
    }
    let edges = tb_edges(min, max, k);
    assert_eq!(h.bucket_limit, edges[1..]);
    let counts: Vec<f64> = brute_counts(xs, &edges)
        .into_iter()
        .map(|c| c as f64)
        .collect();
    assert_eq!(h.bucket, counts);
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 20.0 - 7.0
        })
        .collect()
}

#[test]
fn tensorboard_equal_width_normal_input() {
    let xs: Vec<f64> = pseudo_random(10_000, 1);
    let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let back: Vec<f64> = xs32.iter().map(|&x| f64::from(x)).collect();
    check_tb_equal_width(
        &back,
        &tb_histogram(TensorValue::from(xs32), HistogramRule::default()),
        30,
    );
    check_tb_equal_width(
        &xs,
        &tb_histogram(TensorValue::from(xs.clone()), HistogramRule::EqualWidth(7)),
        7,
    );
}

#[test]
fn tensorboard_equal_width_edge_values_land_exactly() {
    // Values sitting exactly on edges, where width arithmetic could round either way.
    let edges = tb_edges(-1.0, 2.0, 30);
    let mut xs = edges.clone();
    xs.extend(edges.iter().map(|e| e - 1e-12));
    xs.retain(|&x| (-1.0..=2.0).contains(&x));
    check_tb_equal_width(
        &xs,
        &tb_histogram(TensorValue::from(xs.clone()), HistogramRule::default()),
        30,
    );
}

#[test]
fn tensorboard_constant_integer_and_non_finite() {
    let constant = vec![3.5f64; 17];
    check_tb_equal_width(
        &constant,
        &tb_histogram(
            TensorValue::from(constant.clone()),
            HistogramRule::default(),
        ),
        30,
    );

    let ints: Vec<i32> = (0..1000).map(|i| (i * 7919) % 101 - 50).collect();
    let as_f64: Vec<f64> = ints.iter().map(|&i| f64::from(i)).collect();
    check_tb_equal_width(
        &as_f64,
        &tb_histogram(TensorValue::from(ints), HistogramRule::default()),
        30,
    );

    let mut xs = pseudo_random(500, 2);
    xs.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    let h = tb_histogram(TensorValue::from(xs.clone()), HistogramRule::default());
    assert_eq!(h.num, 500.0, "non-finite values are left out");
    check_tb_equal_width(&xs, &h, 30);

    let h = tb_histogram(
        TensorValue::from(vec![f32::NAN, f32::INFINITY]),
        HistogramRule::default(),
    );
    assert_eq!((h.num, h.bucket.len()), (0.0, 0));
}

#[test]
fn tensorflow_exponential_buckets() {
    // Limits written out independently from TensorFlow's histogram.cc.
    let mut pos = vec![];
    let mut v = 1.0e-12;
    while v < 1.0e20 {
        pos.push(v);
        v *= 1.1;
    }
    pos.push(f64::MAX);
    let mut limits: Vec<f64> = pos.iter().rev().map(|v| -v).collect();
    limits.push(0.0);
    limits.extend(&pos);
    assert_eq!(limits.len(), 2 * 775 + 1);

    let mut xs = pseudo_random(2000, 3);
    xs.extend([0.0, -0.0, 1e-13, -5e30, f64::NAN]);
    let mut counts = vec![0u64; limits.len()];
    for &x in xs.iter().filter(|x| x.is_finite()) {
        let b = limits.iter().position(|&l| x < l).unwrap();
        counts[b] += 1;
    }
    // Collapse runs of empty buckets, keeping the run's last limit.
    let (mut want_limits, mut want_counts) = (vec![], vec![]);
    let mut i = 0;
    while i < counts.len() {
        if counts[i] > 0 {
            want_limits.push(limits[i]);
            want_counts.push(counts[i] as f64);
            i += 1;
        } else {
            let mut j = i;
            while j + 1 < counts.len() && counts[j + 1] == 0 {
                j += 1;
            }
            want_limits.push(limits[j]);
            want_counts.push(0.0);
            i = j + 1;
        }
    }
    let h = tb_histogram(TensorValue::from(xs), HistogramRule::Exponential);
    assert_eq!(h.bucket_limit, want_limits);
    assert_eq!(h.bucket, want_counts);
    assert_eq!(h.num, 2004.0);
}

/// MindSpore's bucket count, written from the reference table.
fn ms_bins(valid: usize) -> usize {
    if valid == 0 {
        1
    } else if valid <= 5 {
        2
    } else if valid <= 10 {
        3
    } else if valid <= 880 {
        valid / 10 + 1
    } else {
        90
    }
}

/// `numpy.linspace(first, last, bins + 1)` then the dtype's rounding.
fn ms_edges(first: f64, last: f64, bins: usize, round: impl Fn(f64) -> f64) -> Vec<f64> {
    let step = (last - first) / bins as f64;
    (0..=bins)
        .map(|i| {
            round(if i == bins {
                last
            } else {
                first + i as f64 * step
            })
        })
        .collect()
}

fn check_ms(
    xs: &[f64],
    h: &msp::summary::Histogram,
    round: impl Fn(f64) -> f64,
    width: impl Fn(f64, f64) -> f64,
) {
    let finite: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    assert_eq!(h.count, Some(xs.len() as i64));
    assert_eq!(
        h.nan_count,
        Some(xs.iter().filter(|x| x.is_nan()).count() as i64)
    );
    assert_eq!(
        h.pos_inf_count,
        Some(xs.iter().filter(|&&x| x == f64::INFINITY).count() as i64)
    );
    assert_eq!(
        h.neg_inf_count,
        Some(xs.iter().filter(|&&x| x == f64::NEG_INFINITY).count() as i64)
    );
    if finite.is_empty() {
        assert!(h.buckets.is_empty());
        assert_eq!((h.min, h.max, h.sum), (None, None, None));
        return;
    }
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!((h.min, h.max), (Some(min), Some(max)));
    let sum: f64 = finite.iter().sum();
    assert!((h.sum.unwrap() - sum).abs() <= 1e-9 * sum.abs().max(1.0));
    let bins = ms_bins(finite.len());
    let (first, last) = if min < max {
        (min, max)
    } else {
        (min - 0.5, max + 0.5)
    };
    let edges = ms_edges(first, last, bins, round);
    let counts = brute_counts(xs, &edges);
    assert_eq!(h.buckets.len(), bins);
    for (i, b) in h.buckets.iter().enumerate() {
        assert_eq!(b.left, edges[i], "left {i}");
        assert_eq!(b.width, width(edges[i], edges[i + 1]), "width {i}");
        assert_eq!(b.count as u64, counts[i], "count {i}");
    }
}

#[test]
fn mindspore_normal_f32_and_f64() {
    for n in [1usize, 4, 5, 6, 10, 11, 99, 880, 881, 5000] {
        let xs = pseudo_random(n, n as u64);
        check_ms(
            &xs,
            &ms_histogram(TensorValue::from(xs.clone())),
            |x| x,
            |a, b| b - a,
        );
        let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
        let back: Vec<f64> = xs32.iter().map(|&x| f64::from(x)).collect();
        check_ms(
            &back,
            &ms_histogram(TensorValue::from(xs32)),
            |x| f64::from(x as f32),
            |a, b| f64::from(b as f32 - a as f32),
        );
    }
}

#[test]
fn mindspore_constant_integer_and_non_finite() {
    let constant = vec![2.0f64; 8];
    let h = ms_histogram(TensorValue::from(constant.clone()));
    check_ms(&constant, &h, |x| x, |a, b| b - a);
    assert_eq!(h.buckets[0].left, 1.5, "a single value gets ±0.5");

    // Integer input: integer edges (floor), widths in integers.
    let ints: Vec<i64> = (0..137).map(|i| (i * 31) % 23 - 9).collect();
    let as_f64: Vec<f64> = ints.iter().map(|&i| i as f64).collect();
    check_ms(
        &as_f64,
        &ms_histogram(TensorValue::from(ints)),
        f64::floor,
        |a, b| b - a,
    );
    let h = ms_histogram(TensorValue::from(vec![5u8; 3]));
    check_ms(&[5.0; 3], &h, f64::floor, |a, b| b - a);
    assert_eq!(
        h.buckets.iter().map(|b| b.left).collect::<Vec<_>>(),
        [4.0, 5.0]
    );

    let mut xs = pseudo_random(300, 9);
    xs.extend([
        f64::NAN,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ]);
    check_ms(
        &xs,
        &ms_histogram(TensorValue::from(xs.clone())),
        |x| x,
        |a, b| b - a,
    );

    let only_bad = vec![f64::NAN, f64::INFINITY];
    check_ms(
        &only_bad,
        &ms_histogram(TensorValue::from(only_bad.clone())),
        |x| x,
        |a, b| b - a,
    );
}

#[test]
fn empty_histogram_is_rejected_in_both_formats() {
    for format in [Format::TensorBoard, Format::MindInsight] {
        let mut record = Record::new(1, 1.0);
        record.add(
            Tag::new("empty").unwrap(),
            Value::histogram(Vec::<f32>::new()),
        );
        record.add(Tag::new("ok").unwrap(), 1.0);
        let packed = Packer::new(PackOptions::new(format)).pack(&record, MetadataFor::All);
        assert_eq!(packed.rejected.len(), 1);
        assert_eq!(packed.rejected[0].tag.as_str(), "empty");
        assert_eq!(packed.rejected[0].kind, PackErrorKind::EmptyHistogram);
        assert_eq!(packed.items.len(), 1, "the scalar still packs");
    }
}

#[test]
fn precomputed_buckets() {
    let buckets = HistogramBuckets {
        min: 0.0,
        max: 3.0,
        num: 6.0,
        sum: 9.0,
        sum_squares: 20.0,
        nan_count: 1,
        pos_inf_count: 0,
        neg_inf_count: 2,
        buckets: vec![
            Bucket {
                left: 0.0,
                right: 1.0,
                count: 2.0,
            },
            Bucket {
                left: 1.0,
                right: 3.0,
                count: 4.0,
            },
        ],
    };
    let mut record = Record::new(1, 1.0);
    record.add(
        Tag::new("b").unwrap(),
        ember_pack::Histogram::Buckets(buckets.clone()),
    );
    let tb = Packer::default().pack(&record, MetadataFor::All);
    let event = tbp::Event::decode(tb.items[0].bytes.as_slice()).unwrap();
    let Some(tbp::event::What::Summary(s)) = event.what else {
        panic!()
    };
    let Some(tbp::summary::value::Value::Histo(h)) = &s.value[0].value else {
        panic!()
    };
    assert_eq!(
        (h.bucket_limit.as_slice(), h.bucket.as_slice()),
        (&[1.0, 3.0][..], &[2.0, 4.0][..])
    );
    assert_eq!(
        (h.min, h.max, h.num, h.sum, h.sum_squares),
        (0.0, 3.0, 6.0, 9.0, 20.0)
    );

    let ms = Packer::new(PackOptions::new(Format::MindInsight)).pack(&record, MetadataFor::All);
    let event = msp::Event::decode(ms.items[0].bytes.as_slice()).unwrap();
    let Some(msp::event::What::Summary(s)) = event.what else {
        panic!()
    };
    let Some(msp::summary::value::Value::Histogram(h)) = &s.value[0].value else {
        panic!()
    };
    let got: Vec<(f64, f64, i64)> = h
        .buckets
        .iter()
        .map(|b| (b.left, b.width, b.count))
        .collect();
    assert_eq!(got, [(0.0, 1.0, 2), (1.0, 2.0, 4)]);
    assert_eq!(
        (h.count, h.nan_count, h.neg_inf_count),
        (Some(9), Some(1), Some(2))
    );

    let mut bad = buckets;
    bad.buckets.swap(0, 1);
    let mut record = Record::new(1, 1.0);
    record.add(
        Tag::new("bad").unwrap(),
        ember_pack::Histogram::Buckets(bad),
    );
    let packed = Packer::default().pack(&record, MetadataFor::All);
    assert!(matches!(
        packed.rejected[0].kind,
        PackErrorKind::InvalidBuckets(_)
    ));
    assert!(
        packed.items.is_empty(),
        "no summary values, no summary event"
    );
}

/// f32 inputs that stress the `f32` fast path: NaN and ±Inf, equal values, subnormals, the
/// extremes of `f32`, values on and next to every edge, and lengths around the internal block
/// (1,024) and task (16,384) sizes.
fn f32_edge_cases() -> Vec<(String, Vec<f32>)> {
    let normal = |n: usize, seed: u64| -> Vec<f32> {
        pseudo_random(n, seed).iter().map(|&x| x as f32).collect()
    };
    let mut cases: Vec<(String, Vec<f32>)> = Vec::new();
    for n in [
        1usize, 2, 7, 8, 9, 1023, 1024, 1025, 16_383, 16_384, 16_385, 40_000,
    ] {
        cases.push((format!("normal {n}"), normal(n, n as u64)));
    }
    let mut with_bad = normal(40_000, 3);
    for (i, bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN]
        .into_iter()
        .enumerate()
    {
        // One in the first block, others deep inside later tasks.
        for at in [i, 1024 * (i + 1) + 5, 17_000 + i, 39_999 - i] {
            with_bad[at] = bad;
        }
    }
    cases.push(("nan and inf".into(), with_bad));
    cases.push(("all nan".into(), vec![f32::NAN; 3000]));
    cases.push(("inf only".into(), vec![f32::INFINITY, f32::NEG_INFINITY]));
    cases.push(("equal".into(), vec![0.1f32; 33_000]));
    cases.push((
        "two values".into(),
        (0..5000)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect(),
    ));
    cases.push((
        "subnormals".into(),
        (0..3000)
            .map(|i| f32::from_bits(1 + (i * 7919) % 5000) * if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect(),
    ));
    cases.push((
        "extremes".into(),
        (0..3000)
            .map(|i| match i % 4 {
                0 => f32::MAX,
                1 => -f32::MAX,
                2 => f32::MIN_POSITIVE,
                _ => (i as f32) * 1e30,
            })
            .collect(),
    ));
    cases.push((
        "huge positive".into(),
        (0..3000).map(|i| 1e38 + (i as f32) * 1e33).collect(),
    ));
    // Every edge of a [-1, 2] histogram, rounded to f32, and its neighbours.
    let mut on_edges = Vec::new();
    for e in tb_edges(-1.0, 2.0, 30) {
        let f = e as f32;
        on_edges.extend([f, f.next_up(), f.next_down()]);
    }
    on_edges.retain(|x| (-1.0..=2.0).contains(x));
    on_edges.extend([-1.0, 2.0]);
    cases.push(("on edges".into(), on_edges));
    cases
}

#[test]
fn f32_fast_path_equals_reference_on_edge_cases() {
    for (name, xs) in f32_edge_cases() {
        let back: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        for k in [1u32, 2, 30, 1000] {
            let h = tb_histogram(TensorValue::from(xs.clone()), HistogramRule::EqualWidth(k));
            if back.iter().all(|x| !x.is_finite()) {
                assert_eq!((h.num, h.bucket.len()), (0.0, 0), "{name}");
                continue;
            }
            let finite: Vec<f64> = back.iter().copied().filter(|x| x.is_finite()).collect();
            let spread = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                - finite.iter().copied().fold(f64::INFINITY, f64::min);
            if spread.is_infinite() {
                // Sums of squares overflow; the buckets must still be exact.
                let edges = tb_edges(h.min, h.max, k as usize);
                let counts: Vec<f64> = brute_counts(&back, &edges)
                    .into_iter()
                    .map(|c| c as f64)
                    .collect();
                assert_eq!(h.bucket, counts, "{name}, k {k}");
                continue;
            }
            check_tb_equal_width(&back, &h, k as usize);
        }
        let h = ms_histogram(TensorValue::from(xs.clone()));
        let sums_overflow = back
            .iter()
            .filter(|x| x.is_finite())
            .map(|x| x.abs())
            .sum::<f64>()
            .is_infinite();
        if !sums_overflow {
            check_ms(
                &back,
                &h,
                |x| f64::from(x as f32),
                |a, b| f64::from(b as f32 - a as f32),
            );
        }
    }
}

#[test]
fn every_dtype_equals_reference() {
    use half::{bf16, f16};
    let base: Vec<f64> = pseudo_random(20_000, 9)
        .iter()
        .map(|x| (x * 7.0).round())
        .collect();
    let cases: Vec<(TensorValue, Vec<f64>)> = vec![
        (
            TensorValue::from(base.iter().map(|&x| x as i8).collect::<Vec<_>>()),
            base.iter().map(|&x| f64::from(x as i8)).collect(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| (x + 50.0) as u8).collect::<Vec<_>>()),
            base.iter().map(|&x| f64::from((x + 50.0) as u8)).collect(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| x as i16).collect::<Vec<_>>()),
            base.iter().map(|&x| f64::from(x as i16)).collect(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| (x + 50.0) as u16).collect::<Vec<_>>()),
            base.iter().map(|&x| f64::from((x + 50.0) as u16)).collect(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| x as i64).collect::<Vec<_>>()),
            base.clone(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| (x + 50.0) as u64).collect::<Vec<_>>()),
            base.iter().map(|&x| x + 50.0).collect(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| (x / 8.0) as f32).collect::<Vec<_>>()),
            base.iter().map(|&x| f64::from((x / 8.0) as f32)).collect(),
        ),
        (
            TensorValue::from(base.iter().map(|&x| x / 8.0).collect::<Vec<_>>()),
            base.iter().map(|&x| x / 8.0).collect(),
        ),
        (
            TensorValue::from(
                base.iter()
                    .map(|&x| f16::from_f64(x / 8.0))
                    .collect::<Vec<_>>(),
            ),
            base.iter()
                .map(|&x| f16::from_f64(x / 8.0).to_f64())
                .collect(),
        ),
        (
            TensorValue::from(
                base.iter()
                    .map(|&x| bf16::from_f64(x / 8.0))
                    .collect::<Vec<_>>(),
            ),
            base.iter()
                .map(|&x| bf16::from_f64(x / 8.0).to_f64())
                .collect(),
        ),
    ];
    for (t, xs) in cases {
        let dtype = t.dtype();
        let h = tb_histogram(t, HistogramRule::default());
        check_tb_equal_width(&xs, &h, 30);
        assert_eq!(h.num, xs.len() as f64, "{dtype:?}");
    }
}

/// A large input split across a rayon pool's threads packs to the same bytes as on one thread.
#[test]
fn split_across_threads_gives_the_same_bytes() {
    let xs: Vec<f32> = pseudo_random(100_000, 5)
        .iter()
        .map(|&x| x as f32)
        .collect();
    let mut xs_bad = xs.clone();
    xs_bad[50_000] = f32::NAN;
    xs_bad[70_001] = f32::INFINITY;
    for data in [
        TensorValue::from(xs),
        TensorValue::from(xs_bad),
        TensorValue::from(pseudo_random(70_000, 6)),
    ] {
        for format in [Format::TensorBoard, Format::MindInsight] {
            let mut record = Record::new(1, 1.0);
            record.add(Tag::new("h").unwrap(), Value::histogram(data.clone()));
            let packer = Packer::new(PackOptions::new(format));
            let serial = packer.pack(&record, MetadataFor::All);
            for threads in [2, 3, 5] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let parallel = pool.install(|| packer.pack(&record, MetadataFor::All));
                assert_eq!(parallel, serial, "{format:?}, {threads} threads");
            }
        }
    }
}
