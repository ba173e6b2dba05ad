//! Histogram bucketing: TensorBoard's equal-width and TensorFlow's exponential rules, and
//! MindSpore's bucket-count rule with NaN/Inf counts.
//!
//! Every rule assigns a finite value `x` to the last bucket `i` whose left edge `e[i] <= x`, so
//! buckets are `[e[i], e[i+1])` and the last one is closed, like `numpy.histogram`. A first
//! guess from the bucket width is corrected against the edges, so the result is exactly that
//! definition even where the width arithmetic rounds the other way.
//!
//! This module holds the rules and picks, for each pass, the AVX2 kernel or the portable loop;
//! the passes read upwards: `elems.rs` (the input, in tasks), `stats.rs` (the statistics pass),
//! `count.rs` (the bucket-counting pass), `avx2.rs` (both passes for `f32` in AVX2, lane for
//! lane the portable code). `tests.rs` holds the passes to reference computations.

use half::f16;

use crate::dtype::DType;
use crate::error::PackErrorKind;
use crate::tensor::{TensorValue, buffer_len};
use crate::value::{Histogram, HistogramBuckets};

#[cfg(target_arch = "x86_64")]
mod avx2;
mod count;
mod elems;
mod stats;
#[cfg(test)]
mod tests;

use count::{Guess, Slots32, Slots64};
use elems::{Elems, f32_le, f64_le, per_task};
pub(crate) use stats::Stats;
use stats::{stats_f32_portable, stats_of};

/// Checks a histogram as both formats need it. Raw values: bytes matching the shape, at least
/// one value, and room to widen them to `f64` (see [`Elems::of`]). Precomputed buckets: see
/// [`check_buckets`].
pub(crate) fn check(h: &Histogram) -> Result<(), PackErrorKind> {
    match h {
        Histogram::Raw(t) | Histogram::RawWith(t, _) => {
            t.check()?;
            if t.bytes().is_empty() {
                return Err(PackErrorKind::EmptyHistogram);
            }
            let borrowed = matches!(t.dtype(), DType::F32 | DType::F64);
            if !borrowed && buffer_len(t.element_count(), 8).is_none() {
                return Err(PackErrorKind::SizeOverflow(
                    "histogram values widened to f64 exceed isize::MAX bytes",
                ));
            }
            Ok(())
        }
        Histogram::Buckets(b) => check_buckets(b),
    }
}

/// Checks precomputed buckets: some buckets or values, `num` finite and ≥ 0, buckets in order,
/// not overlapping, with finite edges and counts finite and ≥ 0.
fn check_buckets(b: &HistogramBuckets) -> Result<(), PackErrorKind> {
    if b.buckets.is_empty() && b.num == 0.0 {
        return Err(PackErrorKind::EmptyHistogram);
    }
    if !(b.num.is_finite() && b.num >= 0.0) {
        return Err(PackErrorKind::InvalidBuckets(
            "num must be finite and not negative",
        ));
    }
    let mut previous_right = f64::NEG_INFINITY;
    for bucket in &b.buckets {
        if !(bucket.left.is_finite() && bucket.right.is_finite()) {
            return Err(PackErrorKind::InvalidBuckets("edges must be finite"));
        }
        if bucket.left > bucket.right {
            return Err(PackErrorKind::InvalidBuckets(
                "a bucket's left edge is above its right edge",
            ));
        }
        if bucket.left < previous_right {
            return Err(PackErrorKind::InvalidBuckets(
                "buckets overlap or are out of order",
            ));
        }
        if !(bucket.count.is_finite() && bucket.count >= 0.0) {
            return Err(PackErrorKind::InvalidBuckets(
                "counts must be finite and not negative",
            ));
        }
        previous_right = bucket.right;
    }
    Ok(())
}

/// Counts, extremes and sums of the elements of `t` (whose bytes match its shape).
pub(crate) fn stats(t: &TensorValue) -> Stats {
    let parts = match Elems::of(t) {
        Elems::F32(e) => per_task(e, stats_f32),
        Elems::F64(e) => per_task(&e[..], |task| stats_of(task, f64_le)),
    };
    parts.iter().fold(Stats::empty(), |s, p| s.then(p))
}

/// [`stats`] of `f32` elements: in AVX2 where the CPU has it, else [`stats_f32_portable`]; the
/// same bits either way.
fn stats_f32(elems: &[[u8; 4]]) -> Stats {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = avx2::detect() {
        return avx2::stats_f32(simd, elems);
    }
    stats_f32_portable(elems)
}

/// Counts the finite elements of `t` into the buckets bounded by `edges` (non-decreasing,
/// `edges.len() - 1` buckets, at least one), using `guess` for a first bucket index. `nan` is
/// the number of NaN elements of `t` (see [`Stats::nan`]).
fn count(t: &TensorValue, edges: &[f64], nan: u64, guess: Guess) -> Vec<u64> {
    let slots = edges.len() + 1;
    let totals = match Elems::of(t) {
        Elems::F32(e) => {
            let plan = Slots32::new(edges, guess);
            per_task(e, |task| count_f32(&plan, task))
        }
        Elems::F64(e) => {
            let plan = Slots64::new(edges, guess);
            per_task(&e[..], |task| plan.count(task))
        }
    };
    let mut sums = vec![0u64; slots];
    for task in &totals {
        for (s, &c) in sums.iter_mut().zip(task) {
            *s += c;
        }
    }
    let k = edges.len() - 1;
    sums[1] -= nan;
    sums[1..=k].to_vec()
}

/// The slot counts of `f32` elements under `plan`.
fn count_f32(plan: &Slots32, elems: &[[u8; 4]]) -> Vec<u64> {
    // Four counters per slot, so that repeated hits on one slot do not wait on each
    // other.
    let mut counters = vec![[0u32; 4]; plan.bounds.len()];
    if !count_avx2(plan, elems, &mut counters) {
        plan.count_portable(elems, &mut counters);
    }
    counters
        .iter()
        .map(|c| c.iter().map(|&n| u64::from(n)).sum())
        .collect()
}

/// Counts `elems` into `counters` in AVX2 where the CPU has it and the positions settle
/// most elements ([`Slots32::truncates`]); whether it did.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn count_avx2(plan: &Slots32, elems: &[[u8; 4]], counters: &mut [[u32; 4]]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if plan.truncates
        && let Some(simd) = avx2::detect()
    {
        avx2::count_truncating(simd, plan, elems, counters);
        return true;
    }
    false
}

/// TensorBoard's equal-width rule: `k` buckets over `[min, max]` of the finite values.
///
/// Edge `i` is `min·(1 − i/k) + max·(i/k)`, forced non-decreasing; the last is exactly `max`.
/// When every finite value is equal there is one bucket, whose limit is that value.
/// Returns `(bucket_limit, bucket)`: the right edges and the counts.
pub(crate) fn equal_width(t: &TensorValue, s: &Stats, k: usize) -> (Vec<f64>, Vec<f64>) {
    if s.finite == 0 {
        return (Vec::new(), Vec::new());
    }
    if s.min == s.max || k <= 1 {
        return (vec![s.max], vec![s.finite as f64]);
    }
    let edges = equal_width_edges(s.min, s.max, k);
    let scale = k as f64 / (s.max - s.min);
    let min = s.min;
    let counts = count(t, &edges, s.nan, Guess { origin: min, scale });
    (
        edges[1..].to_vec(),
        counts.into_iter().map(|c| c as f64).collect(),
    )
}

/// The `k + 1` edges of [`equal_width`].
pub(crate) fn equal_width_edges(min: f64, max: f64, k: usize) -> Vec<f64> {
    let mut edges = Vec::with_capacity(k + 1);
    for i in 0..=k {
        let t = i as f64 / k as f64;
        let e = if i == k {
            max
        } else {
            min * (1.0 - t) + max * t
        };
        let prev = edges.last().copied().unwrap_or(f64::NEG_INFINITY);
        edges.push(e.max(prev));
    }
    edges
}

/// TensorFlow's default bucket limits (`tensorflow/core/lib/histogram/histogram.cc`):
/// `-DBL_MAX`, then `-1e-12·1.1^i` descending, `0`, `1e-12·1.1^i` ascending (below 1e20),
/// and `DBL_MAX`.
pub(crate) fn tensorflow_limits() -> Vec<f64> {
    let mut pos = Vec::new();
    let mut v = 1.0e-12;
    while v < 1.0e20 {
        pos.push(v);
        v *= 1.1;
    }
    pos.push(f64::MAX);
    let mut limits: Vec<f64> = pos.iter().rev().map(|v| -v).collect();
    limits.push(0.0);
    limits.extend_from_slice(&pos);
    limits
}

/// TensorFlow's exponential rule: each finite value goes to the first bucket whose limit is
/// above it; runs of empty buckets collapse into one that ends at the run's last limit, as
/// TensorFlow's `Histogram::EncodeToProto` does.
pub(crate) fn exponential(t: &TensorValue, s: &Stats) -> (Vec<f64>, Vec<f64>) {
    if s.finite == 0 {
        return (Vec::new(), Vec::new());
    }
    let limits = tensorflow_limits();
    let mut counts = vec![0u64; limits.len()];
    let mut add = |x: f64| {
        if x.is_finite() {
            let b = limits.partition_point(|&l| l <= x).min(limits.len() - 1);
            counts[b] += 1;
        }
    };
    match Elems::of(t) {
        Elems::F32(e) => e.iter().for_each(|&b| add(f32_le(b))),
        Elems::F64(e) => e.iter().for_each(|&b| add(f64_le(b))),
    }
    let (mut out_limits, mut out_counts) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < counts.len() {
        let mut end = limits[i];
        let mut c = counts[i];
        i += 1;
        if c == 0 {
            while i < counts.len() && counts[i] == 0 {
                end = limits[i];
                c = counts[i];
                i += 1;
            }
        }
        out_limits.push(end);
        out_counts.push(c as f64);
    }
    (out_limits, out_counts)
}

/// MindSpore's bucket count for `valid` finite values (`_summary_adapter.py`).
pub(crate) fn mindspore_bins(valid: u64) -> usize {
    match valid {
        0 => 1,
        1..=5 => 2,
        6..=10 => 3,
        11..=880 => (valid / 10 + 1) as usize,
        _ => 90,
    }
}

/// Rounds an `f64` to the value the dtype holds, as `numpy.linspace(..., dtype=...)` does
/// (integers: floor, as numpy 2 does).
fn round_to_dtype(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 | DType::BF16 => f64::from(x as f32),
        DType::F16 => f16::from_f64(x).to_f64(),
        _ => x.floor(),
    }
}

/// `b - a` computed in the dtype, as numpy computes `edges[1:] - edges[:-1]`.
fn width_in_dtype(dtype: DType, a: f64, b: f64) -> f64 {
    match dtype {
        DType::F64 => b - a,
        DType::F32 | DType::BF16 => f64::from(b as f32 - a as f32),
        DType::F16 => (f16::from_f64(b) - f16::from_f64(a)).to_f64(),
        _ => b - a,
    }
}

/// One MindSpore bucket: left edge, width and count.
pub(crate) type MsBucket = (f64, f64, u64);

/// MindSpore's histogram buckets: [`mindspore_bins`] buckets, edges
/// `numpy.linspace(min, max, bins + 1)` in the input dtype (±0.5 around a single value), and
/// every bucket listed, empty ones included. bf16 input gets `f32` edges.
pub(crate) fn mindspore(t: &TensorValue, s: &Stats) -> Vec<MsBucket> {
    if s.finite == 0 {
        return Vec::new();
    }
    let dtype = t.dtype();
    let bins = mindspore_bins(s.finite);
    let (first, last) = if s.min < s.max {
        (s.min, s.max)
    } else {
        (s.min - 0.5, s.max + 0.5)
    };
    let edges = mindspore_edges(dtype, first, last, bins);
    let scale = bins as f64 / (edges[bins] - edges[0]);
    let e0 = edges[0];
    let counts = count(t, &edges, s.nan, Guess { origin: e0, scale });
    (0..bins)
        .map(|i| {
            (
                edges[i],
                width_in_dtype(dtype, edges[i], edges[i + 1]),
                counts[i],
            )
        })
        .collect()
}

/// `numpy.linspace(first, last, bins + 1, dtype=dtype)`, computed in `f64`.
pub(crate) fn mindspore_edges(dtype: DType, first: f64, last: f64, bins: usize) -> Vec<f64> {
    let step = (last - first) / bins as f64;
    let mut edges: Vec<f64> = (0..=bins)
        .map(|i| {
            if i == bins {
                last
            } else {
                i as f64 * step + first
            }
        })
        .map(|e| round_to_dtype(dtype, e))
        .collect();
    // Rounding keeps order, but guard it so bucket search stays well defined.
    for i in 1..edges.len() {
        if edges[i] < edges[i - 1] {
            edges[i] = edges[i - 1];
        }
    }
    edges
}
