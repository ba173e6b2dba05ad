//! Histogram bucketing: TensorBoard's equal-width and TensorFlow's exponential rules, and
//! MindSpore's bucket-count rule with NaN/Inf counts.
//!
//! Every rule assigns a finite value `x` to the last bucket `i` whose left edge `e[i] <= x`, so
//! buckets are `[e[i], e[i+1])` and the last one is closed, like `numpy.histogram`. A first
//! guess from the bucket width is corrected against the edges, so the result is exactly that
//! definition even where the width arithmetic rounds the other way.

use half::f16;

use crate::tensor::{DType, TensorValue};

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

/// Calls `f` with the elements of `t` as `f64`, in chunks, without allocating for `f32`/`f64`.
fn with_values(t: &TensorValue, mut f: impl FnMut(&[f64])) {
    const CHUNK: usize = 1024;
    let mut buf = [0f64; CHUNK];
    let size = t.dtype().size();
    for bytes in t.bytes().chunks(CHUNK * size) {
        let n = bytes.len() / size;
        let out = &mut buf[..n];
        match t.dtype() {
            DType::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                }
            }
            DType::F64 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                    *o = f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                }
            }
            dtype => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(size)) {
                    *o = crate::tensor::element_f64(dtype, c);
                }
            }
        }
        f(out);
    }
}

/// Counts, extremes and sums of the elements of `t` (whose bytes match its shape).
pub(crate) fn stats(t: &TensorValue) -> Stats {
    let mut s = Stats {
        total: 0,
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
    with_values(t, |xs| {
        s.total += xs.len() as u64;
        // Four accumulators break the add dependency chain.
        let mut sum = [0f64; 4];
        let mut sq = [0f64; 4];
        let mut min = [f64::INFINITY; 4];
        let mut max = [f64::NEG_INFINITY; 4];
        let mut bad = 0u64;
        let mut quads = xs.chunks_exact(4);
        for q in &mut quads {
            for j in 0..4 {
                let x = q[j];
                if x.is_finite() {
                    sum[j] += x;
                    sq[j] += x * x;
                    min[j] = min[j].min(x);
                    max[j] = max[j].max(x);
                } else {
                    bad += 1;
                }
            }
        }
        for &x in quads.remainder() {
            if x.is_finite() {
                sum[0] += x;
                sq[0] += x * x;
                min[0] = min[0].min(x);
                max[0] = max[0].max(x);
            } else {
                bad += 1;
            }
        }
        s.sum += (sum[0] + sum[1]) + (sum[2] + sum[3]);
        s.sum_squares += (sq[0] + sq[1]) + (sq[2] + sq[3]);
        s.min = s.min.min(min[0].min(min[1]).min(min[2].min(min[3])));
        s.max = s.max.max(max[0].max(max[1]).max(max[2].max(max[3])));
        if bad > 0 {
            for &x in xs {
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
    });
    s.finite = s.total - nonfinite;
    s
}

/// Counts the finite elements of `t` into the buckets bounded by `edges` (non-decreasing,
/// `edges.len() - 1` buckets, at least one), using `guess` for a first bucket index.
fn count(t: &TensorValue, edges: &[f64], guess: impl Fn(f64) -> f64) -> Vec<u64> {
    let k = edges.len() - 1;
    // Four count arrays, so repeated hits on one bucket do not serialize on one counter.
    let mut counts = vec![0u64; 4 * k];
    let last = k - 1;
    let (lo, hi) = (edges[0], edges[k]);
    // Bucket i holds left[i] <= x < right[i]; the open ends make the first and last buckets
    // catch everything in range, so the checks below need no bounds conditions.
    let left: Vec<f64> = (0..k)
        .map(|i| if i == 0 { f64::NEG_INFINITY } else { edges[i] })
        .collect();
    let right: Vec<f64> = (0..k)
        .map(|i| {
            if i == last {
                f64::INFINITY
            } else {
                edges[i + 1]
            }
        })
        .collect();
    with_values(t, |xs| {
        for (j, &x) in xs.iter().enumerate() {
            // Also false for NaN; ±Inf fall outside the finite edges.
            if !(x >= lo && x <= hi) {
                continue;
            }
            // `as` saturates: NaN becomes 0.
            let g = (guess(x) as i64).clamp(0, last as i64) as usize;
            // One branch-free step fixes a guess that is off by one ...
            let mut i = g + usize::from(x >= right[g]) - usize::from(x < left[g]);
            // ... and the rare worse guess (badly conditioned edges) is walked.
            if !(left[i] <= x && x < right[i]) {
                while x < left[i] {
                    i -= 1;
                }
                while x >= right[i] {
                    i += 1;
                }
            }
            counts[(j & 3) * k + i] += 1;
        }
    });
    (0..k)
        .map(|i| counts[i] + counts[k + i] + counts[2 * k + i] + counts[3 * k + i])
        .collect()
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
    let counts = count(t, &edges, |x| (x - min) * scale);
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
    with_values(t, |xs| {
        for &x in xs {
            if x.is_finite() {
                let b = limits.partition_point(|&l| l <= x).min(limits.len() - 1);
                counts[b] += 1;
            }
        }
    });
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
    let counts = count(t, &edges, |x| (x - e0) * scale);
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
