//! Histogram buckets equal an independent, brute-force computation in both formats, for normal,
//! constant, integer and NaN/Inf-laden input. This file holds the packing helpers and the
//! reference computations; the tests are in `tensorboard.rs`, `mindspore.rs` and `inputs.rs`.

use ember_pack::proto::mindspore as msp;
use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    Bucket, Format, HistogramBuckets, HistogramRule, MetadataFor, PackErrorKind, PackOptions,
    Packer, Record, Tag, TensorValue, Value,
};
use prost::Message;

mod inputs;
mod mindspore;
mod tensorboard;

pub(crate) fn tb_histogram(values: TensorValue, rule: HistogramRule) -> tbp::HistogramProto {
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

pub(crate) fn ms_histogram(values: TensorValue) -> msp::summary::Histogram {
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
pub(crate) fn brute_counts(xs: &[f64], edges: &[f64]) -> Vec<u64> {
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
pub(crate) fn tb_edges(min: f64, max: f64, k: usize) -> Vec<f64> {
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

pub(crate) fn check_tb_equal_width(xs: &[f64], h: &tbp::HistogramProto, k: usize) {
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

pub(crate) fn pseudo_random(n: usize, seed: u64) -> Vec<f64> {
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

/// MindSpore's bucket count, written from the reference table.
pub(crate) fn ms_bins(valid: usize) -> usize {
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
pub(crate) fn ms_edges(first: f64, last: f64, bins: usize, round: impl Fn(f64) -> f64) -> Vec<f64> {
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

pub(crate) fn check_ms(
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
