//! Histogram bucketing: TensorBoard's equal-width and TensorFlow's exponential rules, and
//! MindSpore's bucket-count rule with NaN/Inf counts.
//!
//! Every rule assigns a finite value `x` to the last bucket `i` whose left edge `e[i] <= x`, so
//! buckets are `[e[i], e[i+1])` and the last one is closed, like `numpy.histogram`. A first
//! guess from the bucket width is corrected against the edges, so the result is exactly that
//! definition even where the width arithmetic rounds the other way.

use std::borrow::Cow;

use half::f16;

use crate::error::PackErrorKind;
use crate::tensor::{DType, TensorValue, buffer_len};
use crate::value::{Histogram, HistogramBuckets};

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

/// Summary statistics of raw histogram input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stats {
    /// All elements, finite or not.
    pub(crate) total: u64,
    /// Finite elements.
    pub(crate) finite: u64,
    pub(crate) nan: u64,
    pub(crate) pos_inf: u64,
    pub(crate) neg_inf: u64,
    /// Smallest finite value (`+inf` when there is none).
    pub(crate) min: f64,
    /// Largest finite value (`-inf` when there is none).
    pub(crate) max: f64,
    /// Sum of finite values.
    pub(crate) sum: f64,
    /// Sum of squares of finite values.
    pub(crate) sum_squares: f64,
}

/// Elements per block of the statistics pass; its per-block reduction order is part of the
/// result (the sums' rounding), so it stays fixed.
const CHUNK: usize = 1024;

/// The elements of a tensor as little-endian `f32` or `f64` words: `f32`/`f64` data borrowed as
/// is, every other dtype converted (exactly, see [`crate::tensor::element_f64`]) to `f64` first.
enum Elems<'a> {
    F32(&'a [[u8; 4]]),
    F64(Cow<'a, [[u8; 8]]>),
}

impl Elems<'_> {
    fn of(t: &TensorValue) -> Elems<'_> {
        let bytes = t.bytes();
        match t.dtype() {
            DType::F32 => Elems::F32(bytes.as_chunks::<4>().0),
            DType::F64 => Elems::F64(Cow::Borrowed(bytes.as_chunks::<8>().0)),
            dtype => {
                let size = dtype.size();
                Elems::F64(Cow::Owned(
                    bytes
                        .chunks_exact(size)
                        .map(|c| crate::tensor::element_f64(dtype, c).to_le_bytes())
                        .collect(),
                ))
            }
        }
    }
}

/// An `f32` element, widened exactly.
#[inline(always)]
fn f32_le(b: [u8; 4]) -> f64 {
    f64::from(f32::from_le_bytes(b))
}

/// An `f64` element.
#[inline(always)]
fn f64_le(b: [u8; 8]) -> f64 {
    f64::from_le_bytes(b)
}

/// Counts, extremes and sums of the elements of `t` (whose bytes match its shape).
pub(crate) fn stats(t: &TensorValue) -> Stats {
    match Elems::of(t) {
        Elems::F32(e) => stats_of(e, f32_le),
        Elems::F64(e) => stats_of(&e, f64_le),
    }
}

/// [`stats`] over elements read by `conv`, in blocks of [`CHUNK`].
#[inline(always)]
fn stats_of<const N: usize>(elems: &[[u8; N]], conv: impl Fn([u8; N]) -> f64 + Copy) -> Stats {
    let mut s = Stats {
        total: elems.len() as u64,
        finite: 0,
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        sum: 0.0,
        sum_squares: 0.0,
    };
    let mut nonfinite = 0u64;
    for block in elems.chunks(CHUNK) {
        // Four accumulators break the add dependency chain.
        let mut sum = [0f64; 4];
        let mut sq = [0f64; 4];
        let mut min = [f64::INFINITY; 4];
        let mut max = [f64::NEG_INFINITY; 4];
        // Non-finite elements are rare: count them first (a loop without branches), and let
        // blocks without any take a loop that needs no test per element.
        let bad = block
            .iter()
            .map(|&e| u64::from(!conv(e).is_finite()))
            .sum::<u64>();
        let (quads, rest) = block.as_chunks::<4>();
        if bad == 0 {
            for q in quads {
                for j in 0..4 {
                    let x = conv(q[j]);
                    sum[j] += x;
                    sq[j] += x * x;
                    min[j] = min[j].min(x);
                    max[j] = max[j].max(x);
                }
            }
        } else {
            for q in quads {
                for j in 0..4 {
                    let x = conv(q[j]);
                    if x.is_finite() {
                        sum[j] += x;
                        sq[j] += x * x;
                        min[j] = min[j].min(x);
                        max[j] = max[j].max(x);
                    }
                }
            }
        }
        for &e in rest {
            let x = conv(e);
            if x.is_finite() {
                sum[0] += x;
                sq[0] += x * x;
                min[0] = min[0].min(x);
                max[0] = max[0].max(x);
            }
        }
        s.sum += (sum[0] + sum[1]) + (sum[2] + sum[3]);
        s.sum_squares += (sq[0] + sq[1]) + (sq[2] + sq[3]);
        s.min = s.min.min(min[0].min(min[1]).min(min[2].min(min[3])));
        s.max = s.max.max(max[0].max(max[1]).max(max[2].max(max[3])));
        if bad > 0 {
            for &e in block {
                let x = conv(e);
                if x.is_nan() {
                    s.nan += 1;
                } else if x == f64::INFINITY {
                    s.pos_inf += 1;
                } else if x == f64::NEG_INFINITY {
                    s.neg_inf += 1;
                }
            }
        }
        nonfinite += bad;
    }
    s.finite = s.total - nonfinite;
    s
}

/// Counts the finite elements of `t` into the buckets bounded by `edges` (non-decreasing,
/// `edges.len() - 1` buckets, at least one), using `guess` for a first bucket index. `nan` is
/// the number of NaN elements of `t` (see [`Stats::nan`]).
fn count(t: &TensorValue, edges: &[f64], nan: u64, guess: impl Fn(f64) -> f64 + Copy) -> Vec<u64> {
    match Elems::of(t) {
        Elems::F32(e) => count_of(e, f32_le, edges, nan, guess),
        Elems::F64(e) => count_of(&e, f64_le, edges, nan, guess),
    }
}

/// Elements counted into `u32` counters before they are added to the `u64` totals.
const COUNT_RUN: usize = 1 << 30;

/// [`count`] over elements read by `conv`.
///
/// Every element, NaN and ±Inf included, is put in a slot without a branch: slot 0 holds what
/// is below the first edge, slot `i + 1` bucket `i`, slot `k + 1` what is above the last edge.
/// A NaN guesses bucket 0 and compares false with both its bounds, so all NaNs land in slot 1
/// and are taken off it at the end.
#[inline(always)]
fn count_of<const N: usize>(
    elems: &[[u8; N]],
    conv: impl Fn([u8; N]) -> f64 + Copy,
    edges: &[f64],
    nan: u64,
    guess: impl Fn(f64) -> f64 + Copy,
) -> Vec<u64> {
    let k = edges.len() - 1;
    let last = k - 1;
    let slots = k + 2;
    let (lo, hi) = (edges[0], edges[k]);
    // Slot s holds left <= x < right; the last bucket is closed, so its right bound is the
    // next value above `hi` (x >= next_up(hi) is x > hi).
    let above = hi.next_up();
    let mut bounds: Vec<[f64; 2]> = Vec::with_capacity(slots);
    bounds.push([f64::NEG_INFINITY, lo]);
    for i in 0..k {
        let right = if i == last { above } else { edges[i + 1] };
        bounds.push([edges[i], right]);
    }
    bounds.push([above, f64::INFINITY]);
    let bounds = &bounds[..slots];
    let guess_slot = move |x: f64| (guess(x) as i64).clamp(0, last as i64) as usize + 1;
    // The guess is monotone in `x`, so if at both ends of every non-empty bucket it is off by at
    // most one, it is everywhere, and the one-step fix alone is exact; values outside the edges
    // need the first (last) bucket guessed for them.
    let one_step = guess_slot(lo.next_down()) == 1
        && guess_slot(above) == k
        && (0..k).all(|i| {
            let (a, b) = (edges[i], edges[i + 1]);
            if a == b {
                return true;
            }
            let upper = if i == last { b } else { b.next_down() };
            // Bucket i is slot i + 1.
            guess_slot(a) >= i && guess_slot(upper) <= i + 2
        });
    // Four interleaved counter lanes, so repeated hits on one slot do not serialize on one
    // counter.
    let mut totals = vec![0u64; slots];
    let mut lanes = vec![0u32; 4 * slots];
    for run in elems.chunks(COUNT_RUN) {
        if one_step {
            count_into(run, conv, &mut lanes, |x| {
                let g = guess_slot(x);
                let [l, r] = bounds[g];
                g + usize::from(x >= r) - usize::from(x < l)
            });
        } else {
            count_into(run, conv, &mut lanes, |x| {
                let g = guess_slot(x);
                // One branch-free step fixes a guess that is off by one ...
                let [l, r] = bounds[g];
                let mut i = g + usize::from(x >= r) - usize::from(x < l);
                // ... and the rare worse guess (badly conditioned edges) is walked.
                let [l, r] = bounds[i];
                if !(l <= x && x < r) {
                    while i > 0 && x < bounds[i][0] {
                        i -= 1;
                    }
                    while i < slots - 1 && x >= bounds[i][1] {
                        i += 1;
                    }
                }
                i
            });
        }
        for (t, l) in totals.iter_mut().zip(lanes.chunks_exact_mut(4)) {
            *t += l.iter().map(|&c| u64::from(c)).sum::<u64>();
            l.fill(0);
        }
    }
    totals[1] -= nan;
    totals[1..=k].to_vec()
}

/// Adds one to `lanes[4 * slot(x) + j % 4]` for the `j`-th element `x` (read by `conv`).
#[inline(always)]
fn count_into<const N: usize>(
    elems: &[[u8; N]],
    conv: impl Fn([u8; N]) -> f64 + Copy,
    lanes: &mut [u32],
    slot: impl Fn(f64) -> usize,
) {
    let (quads, rest) = elems.as_chunks::<4>();
    for q in quads {
        let s = [
            slot(conv(q[0])),
            slot(conv(q[1])),
            slot(conv(q[2])),
            slot(conv(q[3])),
        ];
        for j in 0..4 {
            lanes[4 * s[j] + j] += 1;
        }
    }
    for &e in rest {
        lanes[4 * slot(conv(e))] += 1;
    }
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
    let counts = count(t, &edges, s.nan, |x| (x - min) * scale);
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
    let counts = count(t, &edges, s.nan, |x| (x - e0) * scale);
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
