//! Histogram bucketing: TensorBoard's equal-width and TensorFlow's exponential rules, and
//! MindSpore's bucket-count rule with NaN/Inf counts.
//!
//! Every rule assigns a finite value `x` to the last bucket `i` whose left edge `e[i] <= x`, so
//! buckets are `[e[i], e[i+1])` and the last one is closed, like `numpy.histogram`. A first
//! guess from the bucket width is corrected against the edges, so the result is exactly that
//! definition even where the width arithmetic rounds the other way.
//!
//! This file runs past 600 lines on purpose: every bucketing rule of both formats and the
//! one-pass statistics they share live together, since they share the edge arithmetic and are
//! tested against one reference computation.

use std::borrow::Cow;

use half::f16;

use crate::error::PackErrorKind;
use crate::tensor::{DType, TensorValue, buffer_len};
use crate::value::{Histogram, HistogramBuckets};

#[cfg(target_arch = "x86_64")]
mod avx2;

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

impl Stats {
    fn empty() -> Stats {
        Stats {
            total: 0,
            finite: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
            sum_squares: 0.0,
        }
    }

    /// Adds the statistics of the elements that follow `self`'s: sums add in this order, so
    /// a fold over tasks in input order gives the same bits however many threads ran them.
    fn then(mut self, next: &Stats) -> Stats {
        self.total += next.total;
        self.finite += next.finite;
        self.nan += next.nan;
        self.pos_inf += next.pos_inf;
        self.neg_inf += next.neg_inf;
        self.min = self.min.min(next.min);
        self.max = self.max.max(next.max);
        self.sum += next.sum;
        self.sum_squares += next.sum_squares;
        self
    }
}

/// Elements per block of the statistics pass; its per-block reduction order is part of the
/// result (the sums' rounding), so it stays fixed.
const CHUNK: usize = 1024;

/// Elements per task when a large input is split across threads. Fixed, so the result (the
/// sums' rounding) does not depend on how many threads there are.
const TASK: usize = 16 * CHUNK;

/// Inputs with at least this many elements are split into tasks of [`TASK`] elements that run
/// on the rayon pool the caller is running on (the writer's pack threads), if any.
const PARALLEL_MIN: usize = 2 * TASK;

/// `f` over the tasks of `elems`, in order; in parallel when `elems` is large and the caller
/// runs on a rayon pool's thread (never on rayon's global pool from outside it).
fn per_task<T: Sync, R: Send>(elems: &[T], f: impl Fn(&[T]) -> R + Sync + Send) -> Vec<R> {
    use rayon::prelude::*;
    if elems.len() >= PARALLEL_MIN
        && rayon::current_thread_index().is_some()
        && rayon::current_num_threads() > 1
    {
        elems.par_chunks(TASK).map(f).collect()
    } else {
        elems.chunks(TASK).map(f).collect()
    }
}

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
    let parts = match Elems::of(t) {
        Elems::F32(e) => per_task(e, stats_f32),
        Elems::F64(e) => per_task(&e[..], |task| stats_of(task, f64_le)),
    };
    parts.iter().fold(Stats::empty(), |s, p| s.then(p))
}

/// [`stats`] of `f32` elements: one pass per block of [`CHUNK`] (eight lanes, extremes
/// compared in `f32`, which widening to `f64` does not change), taken again by [`stats_of`]
/// for the rare block that holds a NaN or an infinity. In AVX2 where the CPU has it.
fn stats_f32(elems: &[[u8; 4]]) -> Stats {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = avx2::detect() {
        return avx2::stats_f32(simd, elems);
    }
    stats_f32_portable(elems)
}

/// [`stats_f32`] without AVX2.
fn stats_f32_portable(elems: &[[u8; 4]]) -> Stats {
    stats_by_block(elems, finite_block_f32)
}

/// The statistics of `elems`, block by block: from `finite_block`, or for a block it refuses
/// (one holding a NaN or an infinity) from [`stats_of`].
#[inline(always)]
fn stats_by_block(elems: &[[u8; 4]], finite_block: impl Fn(&[[u8; 4]]) -> Option<Stats>) -> Stats {
    elems.chunks(CHUNK).fold(Stats::empty(), |s, block| {
        s.then(&finite_block(block).unwrap_or_else(|| stats_of(block, f32_le)))
    })
}

/// The sums and extremes of one block of `f32` elements, or `None` when it holds a NaN or an
/// infinity.
fn finite_block_f32(block: &[[u8; 4]]) -> Option<Stats> {
    // Element `i` goes to lane `i % 8`; the lanes are added in a fixed tree at the end.
    let mut sum = [0f64; 8];
    let mut sq = [0f64; 8];
    let mut min = [f32::INFINITY; 8];
    let mut max = [f32::NEG_INFINITY; 8];
    let (octs, rest) = block.as_chunks::<8>();
    for o in octs {
        let x: [f32; 8] = std::array::from_fn(|j| f32::from_le_bytes(o[j]));
        let d: [f64; 8] = x.map(f64::from);
        let d2: [f64; 8] = std::array::from_fn(|j| d[j] * d[j]);
        sum = std::array::from_fn(|j| sum[j] + d[j]);
        sq = std::array::from_fn(|j| sq[j] + d2[j]);
        // Compares rather than `f32::min`: a lane keeps the first of equal values (-0 and
        // +0), as it always has, and needs no NaN handling (a block with a NaN is not taken
        // from here).
        min = std::array::from_fn(|j| if x[j] < min[j] { x[j] } else { min[j] });
        max = std::array::from_fn(|j| if x[j] > max[j] { x[j] } else { max[j] });
    }
    block_stats(block.len(), sum, sq, min, max, rest)
}

/// The statistics of a block of `len` elements from its eight lanes and the `rest` of it (fewer
/// than eight elements, element `j` in lane `j`), or `None` when a sum shows a NaN or an
/// infinity.
fn block_stats(
    len: usize,
    mut sum: [f64; 8],
    mut sq: [f64; 8],
    mut min: [f32; 8],
    mut max: [f32; 8],
    rest: &[[u8; 4]],
) -> Option<Stats> {
    for (j, &e) in rest.iter().enumerate() {
        let x = f32::from_le_bytes(e);
        let d = f64::from(x);
        sum[j] += d;
        sq[j] += d * d;
        min[j] = if x < min[j] { x } else { min[j] };
        max[j] = if x > max[j] { x } else { max[j] };
    }
    // No test per element: the sums of at most 128 finite `f32` (and of their squares) are
    // finite in `f64`, so a NaN or an infinity shows as a sum that is not.
    if !sum.iter().chain(&sq).all(|v| v.is_finite()) {
        return None;
    }
    let total = |v: [f64; 8]| ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    let low = min.iter().fold(f32::INFINITY, |a, &b| a.min(b));
    let high = max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    Some(Stats {
        total: len as u64,
        finite: len as u64,
        sum: total(sum),
        sum_squares: total(sq),
        min: f64::from(low),
        max: f64::from(high),
        ..Stats::empty()
    })
}

/// Statistics of elements read by `conv`, in blocks of [`CHUNK`].
#[inline(always)]
fn stats_of<const N: usize>(elems: &[[u8; N]], conv: impl Fn([u8; N]) -> f64 + Copy) -> Stats {
    let mut s = Stats::empty();
    s.total = elems.len() as u64;
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

/// A linear first guess of the bucket of `x`: `(x - origin) * scale`, truncated.
#[derive(Clone, Copy, Debug)]
struct Guess {
    origin: f64,
    scale: f64,
}

/// Counts the finite elements of `t` into the buckets bounded by `edges` (non-decreasing,
/// `edges.len() - 1` buckets, at least one), using `guess` for a first bucket index. `nan` is
/// the number of NaN elements of `t` (see [`Stats::nan`]).
fn count(t: &TensorValue, edges: &[f64], nan: u64, guess: Guess) -> Vec<u64> {
    let slots = edges.len() + 1;
    let totals = match Elems::of(t) {
        Elems::F32(e) => {
            let plan = Slots32::new(edges, guess);
            per_task(e, |task| plan.count(task))
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

/// Bucket search over `f64` elements (every dtype but `f32`).
///
/// Every element, NaN and ±Inf included, is put in a slot without a branch: slot 0 holds what
/// is below the first edge, slot `i + 1` bucket `i`, slot `k + 1` what is above the last edge.
/// A NaN guesses bucket 0 and compares false with both its bounds, so all NaNs land in slot 1
/// and are taken off it at the end.
struct Slots64 {
    /// `[left, right)` of each slot.
    bounds: Vec<[f64; 2]>,
    guess: Guess,
    /// Whether the guess is everywhere off by at most one slot.
    one_step: bool,
}

impl Slots64 {
    fn new(edges: &[f64], guess: Guess) -> Slots64 {
        let k = edges.len() - 1;
        let last = k - 1;
        let (lo, hi) = (edges[0], edges[k]);
        // Slot s holds left <= x < right; the last bucket is closed, so its right bound is the
        // next value above `hi` (x >= next_up(hi) is x > hi).
        let above = hi.next_up();
        let mut bounds: Vec<[f64; 2]> = Vec::with_capacity(k + 2);
        bounds.push([f64::NEG_INFINITY, lo]);
        for i in 0..k {
            let right = if i == last { above } else { edges[i + 1] };
            bounds.push([edges[i], right]);
        }
        bounds.push([above, f64::INFINITY]);
        let mut plan = Slots64 {
            bounds,
            guess,
            one_step: false,
        };
        // The guess is monotone in `x`, so if at both ends of every non-empty bucket it is off
        // by at most one, it is everywhere, and the one-step fix alone is exact; values outside
        // the edges need the first (last) bucket guessed for them.
        plan.one_step = plan.guess_slot(lo.next_down()) == 1
            && plan.guess_slot(above) == k
            && (0..k).all(|i| {
                let (a, b) = (edges[i], edges[i + 1]);
                if a == b {
                    return true;
                }
                let upper = if i == last { b } else { b.next_down() };
                // Bucket i is slot i + 1.
                plan.guess_slot(a) >= i && plan.guess_slot(upper) <= i + 2
            });
        plan
    }

    #[inline(always)]
    fn guess_slot(&self, x: f64) -> usize {
        let last = (self.bounds.len() - 3) as i64;
        (((x - self.guess.origin) * self.guess.scale) as i64).clamp(0, last) as usize + 1
    }

    /// The slot counts of `elems`.
    fn count(&self, elems: &[[u8; 8]]) -> Vec<u64> {
        let slots = self.bounds.len();
        let bounds = &self.bounds[..];
        let mut counters = vec![0u32; 4 * slots];
        let step = |x: f64| {
            let g = self.guess_slot(x);
            let [l, r] = bounds[g];
            g + usize::from(x >= r) - usize::from(x < l)
        };
        if self.one_step {
            count_into(elems, f64_le, &mut counters, step);
        } else {
            count_into(elems, f64_le, &mut counters, |x| {
                // One branch-free step fixes a guess that is off by one ...
                let mut i = step(x);
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
        fold_lanes(&counters)
    }
}

/// The smallest `f32` at or above `x` (`+inf` above `f32::MAX`): for an `f32` value `v`,
/// `v >= x` exactly when `v >= up_f32(x)`, and `v < x` exactly when `v < up_f32(x)`.
fn up_f32(x: f64) -> f32 {
    let r = x as f32;
    if f64::from(r) < x { r.next_up() } else { r }
}

/// Bucket search over `f32` elements, all in `f32`: the same slots as [`Slots64`], with every
/// bound rounded up to an `f32` (which compares with `f32` values exactly as the `f64` bound
/// does), and a guess computed in `f32`, sixteen at a time.
///
/// The guess rounds to the nearest slot where the bucket width would truncate, so that it is
/// the element's slot or the one above: one compare with that slot's lower bound settles it.
/// It is monotone, so checking it at both ends of every slot proves that for every input;
/// where the check fails (badly conditioned edges), the guess is only a start for a walk.
///
/// Most elements need not even that compare: an element whose scaled position is more than
/// [`SURE`] from a whole number is in the bucket the position truncates to, once a check at
/// every bucket's lower bound has shown that the position's error stays below `SURE` there.
struct Slots32 {
    /// `[left, right)` of each slot.
    bounds: Vec<[f32; 2]>,
    /// The left bound of each slot.
    lower: Vec<f32>,
    /// The guess's upper clamp: `k`, the slot above the buckets less one.
    top: f32,
    origin: f32,
    scale: f32,
    /// Whether the guess is everywhere the element's slot or the one above.
    one_compare: bool,
    /// Whether every element whose position is not [`SURE`]-close to a whole number is in
    /// the slot its position truncates to (and `one_compare` holds for the others).
    truncates: bool,
}

/// How close (in buckets) an element's scaled position may come to a whole number and still
/// be counted from the position alone: about one element in 2,000 of evenly spread data is
/// closer and takes the compare. Far above the position's rounding error in ordinary data
/// (`Slots32::new` checks it), far below a bucket.
const SURE: f32 = 1.0 / 4096.0;

/// `2^23`: an `f32` in `[2^23, 2^24)` holds an integer in the low bits of its mantissa.
const TWO_POW_23: f32 = 8_388_608.0;

impl Slots32 {
    fn new(edges: &[f64], guess: Guess) -> Slots32 {
        let k = edges.len() - 1;
        let last = k - 1;
        let up = |e: f64| up_f32(e);
        let above = up(edges[k].next_up());
        let mut bounds: Vec<[f32; 2]> = Vec::with_capacity(k + 2);
        bounds.push([f32::NEG_INFINITY, up(edges[0])]);
        for i in 0..k {
            let right = if i == last { above } else { up(edges[i + 1]) };
            bounds.push([up(edges[i]), right]);
        }
        bounds.push([above, f32::INFINITY]);
        let mut plan = Slots32 {
            lower: bounds.iter().map(|b| b[0]).collect(),
            bounds,
            // The guess's rounding needs it below 2^22 (bucket counts are far below); a
            // lower clamp only makes the guess worse, never wrong.
            top: k.min((1 << 22) - 1) as f32,
            origin: guess.origin as f32,
            scale: guess.scale as f32,
            one_compare: false,
            truncates: false,
        };
        // Slot `s` holds the f32 values of `[a, b)`; every guess in it must be `s` or `s + 1`.
        // The guess never goes below 1, which slot 0 allows, nor above `k + 1`, which the
        // top slot allows.
        plan.one_compare = plan.origin.is_finite()
            && plan.scale.is_finite()
            && plan.bounds.iter().enumerate().all(|(s, &[a, b])| {
                a >= b
                    || ((s == 0 || plan.guess_slot(a) >= s)
                        && (b == f32::INFINITY || plan.guess_slot(b.next_down()) <= s + 1))
            });
        // Slot `s` starts at its lower bound `a`: at `a` the position must be at least
        // `s - 1 - SURE`, just below it at most `s - 1 + SURE`. As the position is monotone,
        // every element at or above `a` (below `a`) whose position is not SURE-close to a whole
        // number then truncates to `s - 1` or more (`s - 2` or less).
        plan.truncates = plan.one_compare
            && plan.lower.iter().enumerate().skip(1).all(|(s, &a)| {
                let at = (s - 1) as f32;
                plan.position(a) >= at - SURE && plan.position(a.next_down()) <= at + SURE
            });
        plan
    }

    /// `(x - origin) * scale` clamped to `[0, k]` (NaN to 0): where `x` lies, in buckets.
    #[inline(always)]
    fn position(&self, x: f32) -> f32 {
        // Compares (one vector instruction each), not `f32::clamp`.
        let y = (x - self.origin) * self.scale;
        let y = if y > 0.0 { y } else { 0.0 };
        if y < self.top { y } else { self.top }
    }

    /// The guessed slot of `x`: `(x - origin) * scale` clamped to `[0, k]` and rounded to the
    /// nearest integer, plus one. Monotone in `x`; a NaN guesses slot 1.
    #[inline(always)]
    fn guess_slot(&self, x: f32) -> usize {
        self.guess_u32(x) as usize
    }

    /// [`Self::guess_slot`] in 32 bits, four to a vector.
    #[inline(always)]
    fn guess_u32(&self, x: f32) -> u32 {
        // Rounded by adding 2^23, whose sum's low mantissa bits are the integer: a single
        // vector instruction, where `as i32` needs saturation checks.
        (self.position(x) + TWO_POW_23).to_bits() - TWO_POW_23.to_bits() + 1
    }

    /// The slot of `x` from its position alone, and whether that position is too close to a
    /// whole number for it (see [`Slots32::truncates`]).
    #[inline(always)]
    fn sure_slot(&self, x: f32) -> (u32, bool) {
        let y = self.position(x);
        let rounded = y + TWO_POW_23;
        let off = y - (rounded - TWO_POW_23);
        let slot = rounded.to_bits() - TWO_POW_23.to_bits() + 1 - u32::from(off < 0.0);
        (slot, (-SURE..=SURE).contains(&off))
    }

    /// The slot of `x` from guess `g` when the guess is `x`'s slot or the one above. A NaN
    /// compares false and stays in its guessed slot 1.
    #[inline(always)]
    fn settle(&self, g: usize, x: f32) -> usize {
        g - usize::from(x < self.lower.get(g).copied().unwrap_or(f32::INFINITY))
    }

    /// The slot counts of `elems`.
    fn count(&self, elems: &[[u8; 4]]) -> Vec<u64> {
        // Four counters per slot, so that repeated hits on one slot do not wait on each
        // other.
        let mut counters = vec![[0u32; 4]; self.bounds.len()];
        if !self.count_avx2(elems, &mut counters) {
            self.count_portable(elems, &mut counters);
        }
        counters
            .iter()
            .map(|c| c.iter().map(|&n| u64::from(n)).sum())
            .collect()
    }

    /// Counts `elems` into `counters` in AVX2 where the CPU has it and the positions settle
    /// most elements ([`Slots32::truncates`]); whether it did.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn count_avx2(&self, elems: &[[u8; 4]], counters: &mut [[u32; 4]]) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.truncates
            && let Some(simd) = avx2::detect()
        {
            avx2::count_truncating(simd, self, elems, counters);
            return true;
        }
        false
    }

    /// Counts `elems` into `counters` (four per slot, by the element's index).
    fn count_portable(&self, elems: &[[u8; 4]], counters: &mut [[u32; 4]]) {
        let slots = self.bounds.len();
        let bounds = &self.bounds[..];
        if self.truncates {
            // Slots sixteen at a time from the positions (a loop the compiler vectorizes);
            // a group with an element too close to a bucket's edge takes the compare.
            const GROUP: usize = 16;
            let (groups, rest) = elems.as_chunks::<GROUP>();
            for group in groups {
                let x: [f32; GROUP] = std::array::from_fn(|j| f32::from_le_bytes(group[j]));
                let mut slot = [0u32; GROUP];
                let mut unsure = [false; GROUP];
                for j in 0..GROUP {
                    (slot[j], unsure[j]) = self.sure_slot(x[j]);
                }
                if unsure.contains(&true) {
                    for j in 0..GROUP {
                        slot[j] = self.settle(self.guess_slot(x[j]), x[j]) as u32;
                    }
                }
                for j in 0..GROUP {
                    if let Some(c) = counters.get_mut(slot[j] as usize) {
                        c[j % 4] += 1;
                    }
                }
            }
            for &e in rest {
                let x = f32::from_le_bytes(e);
                if let Some(c) = counters.get_mut(self.settle(self.guess_slot(x), x)) {
                    c[0] += 1;
                }
            }
        } else if self.one_compare {
            // Guesses sixteen at a time (a loop the compiler vectorizes), then one compare
            // and one count each.
            const GROUP: usize = 16;
            let (groups, rest) = elems.as_chunks::<GROUP>();
            for group in groups {
                let x: [f32; GROUP] = std::array::from_fn(|j| f32::from_le_bytes(group[j]));
                let g: [u32; GROUP] = std::array::from_fn(|j| self.guess_u32(x[j]));
                for j in 0..GROUP {
                    if let Some(c) = counters.get_mut(self.settle(g[j] as usize, x[j])) {
                        c[j % 4] += 1;
                    }
                }
            }
            for &e in rest {
                let x = f32::from_le_bytes(e);
                if let Some(c) = counters.get_mut(self.settle(self.guess_slot(x), x)) {
                    c[0] += 1;
                }
            }
        } else {
            for &e in elems {
                let x = f32::from_le_bytes(e);
                let mut i = self.guess_slot(x).min(slots - 1);
                while i > 0 && x < bounds[i][0] {
                    i -= 1;
                }
                while i < slots - 1 && x >= bounds[i][1] {
                    i += 1;
                }
                counters[i][0] += 1;
            }
        }
    }
}

/// Sums each slot's four counters. Each slot has four interleaved counters, so repeated hits
/// on one slot do not serialize on one counter.
fn fold_lanes(counters: &[u32]) -> Vec<u64> {
    counters
        .chunks_exact(4)
        .map(|l| l.iter().map(|&c| u64::from(c)).sum())
        .collect()
}

/// Adds one to `counters[4 * slot(x) + j % 4]` for the `j`-th element `x` (read by `conv`).
/// A task holds at most [`TASK`] elements, so `u32` counters cannot overflow.
#[inline(always)]
fn count_into<const N: usize>(
    elems: &[[u8; N]],
    conv: impl Fn([u8; N]) -> f64 + Copy,
    counters: &mut [u32],
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
            counters[4 * s[j] + j] += 1;
        }
    }
    for &e in rest {
        counters[4 * slot(conv(e))] += 1;
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

#[cfg(test)]
mod tests {
    //! The vectorized passes against straightforward reference code, on inputs chosen to break
    //! them: values on and next to every edge, NaN, ±Inf, subnormals, ±0, equal values and
    //! ranges that span all of `f32`.

    use super::*;

    /// Statistics the slow way: the same blocks, lanes and order of additions as [`stats`]
    /// promises (eight lanes in a block without NaN or infinity, four over the finite values
    /// of one with them, a task's blocks in order, then the tasks in order), one element at a
    /// time.
    fn reference_stats(xs: &[f32]) -> Stats {
        let mut total = Stats::empty();
        for task in xs.chunks(TASK) {
            let mut s = Stats::empty();
            for block in task.chunks(CHUNK) {
                let finite = block.iter().all(|x| x.is_finite());
                let lanes = if finite { 8 } else { 4 };
                let mut sum = [0f64; 8];
                let mut sq = [0f64; 8];
                let whole = block.len() / lanes * lanes;
                for (i, &x) in block.iter().enumerate() {
                    s.total += 1;
                    if x.is_nan() {
                        s.nan += 1;
                        continue;
                    }
                    if x.is_infinite() {
                        if x > 0.0 {
                            s.pos_inf += 1;
                        } else {
                            s.neg_inf += 1;
                        }
                        continue;
                    }
                    s.finite += 1;
                    // The fast pass gives the tail its lane; the slow one puts it in lane 0.
                    let lane = if finite || i < whole { i % lanes } else { 0 };
                    let d = f64::from(x);
                    sum[lane] += d;
                    sq[lane] += d * d;
                    s.min = s.min.min(d);
                    s.max = s.max.max(d);
                }
                let tree = |v: [f64; 8]| {
                    if finite {
                        ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
                    } else {
                        (v[0] + v[1]) + (v[2] + v[3])
                    }
                };
                s.sum += tree(sum);
                s.sum_squares += tree(sq);
            }
            total = total.then(&s);
        }
        total
    }

    /// Bucket counts the slow way: the last bucket whose left edge is at or below the value,
    /// compared in `f64`, the last bucket closed.
    fn reference_counts(xs: &[f32], edges: &[f64]) -> Vec<u64> {
        let k = edges.len() - 1;
        let mut counts = vec![0u64; k];
        for x in xs.iter().map(|&x| f64::from(x)) {
            if x.is_finite() && edges[0] <= x && x <= edges[k] {
                counts[(0..k).rev().find(|&i| edges[i] <= x).unwrap_or(0)] += 1;
            }
        }
        counts
    }

    fn tensor(xs: &[f32]) -> TensorValue {
        TensorValue::from_slice(xs, vec![xs.len()])
    }

    /// SplitMix64, for inputs that are the same on every run.
    fn bits(n: usize, seed: u64) -> Vec<u32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u32
            })
            .collect()
    }

    fn uniform(n: usize, seed: u64, low: f32, high: f32) -> Vec<f32> {
        bits(n, seed)
            .into_iter()
            .map(|b| low + (high - low) * ((b >> 8) as f32 / (1 << 24) as f32))
            .collect()
    }

    fn adversarial() -> Vec<(&'static str, Vec<f32>)> {
        let mut cases = vec![
            ("uniform", uniform(40_000, 1, -3.0, 5.0)),
            (
                "any bits",
                bits(40_000, 2).into_iter().map(f32::from_bits).collect(),
            ),
            (
                "finite bits",
                bits(40_000, 3)
                    .into_iter()
                    .map(f32::from_bits)
                    .filter(|x| x.is_finite())
                    .collect(),
            ),
            (
                "small integers",
                bits(20_000, 4)
                    .into_iter()
                    .map(|b| (b % 11) as f32 - 5.0)
                    .collect(),
            ),
            (
                "subnormals and zeros",
                bits(20_000, 5)
                    .into_iter()
                    .map(|b| match b % 4 {
                        0 => -f32::from_bits(b % 64),
                        1 => -0.0,
                        2 => 0.0,
                        _ => f32::from_bits(b % 64),
                    })
                    .collect(),
            ),
            ("all equal", vec![0.1; 20_000]),
            ("all minus zero", vec![-0.0; 3000]),
            ("all nan", vec![f32::NAN; 3000]),
            (
                "huge range",
                (0..20_000)
                    .map(|i| match i % 3 {
                        0 => f32::MAX,
                        1 => -f32::MAX,
                        _ => i as f32,
                    })
                    .collect(),
            ),
            (
                "narrow range far from zero",
                (0..20_000)
                    .map(|i| 1.0e30 + (i % 97) as f32 * 1.0e24)
                    .collect(),
            ),
            (
                "a few ulps",
                (0..20_000)
                    .map(|i| f32::from_bits(1.0f32.to_bits() + (i % 5)))
                    .collect(),
            ),
        ];
        let mut with_bad = uniform(40_000, 6, -1.0, 1.0);
        for (i, bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN]
            .into_iter()
            .enumerate()
        {
            for at in [i, 1030 + i, 17_000 + i, 39_999 - i] {
                with_bad[at] = bad;
            }
        }
        cases.push(("nan and inf", with_bad));
        // Every edge of equal-width and MindSpore histograms over [-1, 2], as f32, with its
        // neighbours, many times over so that every lane and slot sees them.
        let mut on_edges = Vec::new();
        for k in [7, 30, 90, 1000] {
            for e in equal_width_edges(-1.0, 2.0, k)
                .into_iter()
                .chain(mindspore_edges(DType::F32, -1.0, 2.0, k))
            {
                let f = e as f32;
                on_edges.extend([f, f.next_up(), f.next_down()]);
            }
        }
        on_edges.retain(|x| (-1.0..=2.0).contains(x));
        on_edges.extend([-1.0, 2.0]);
        let on_edges: Vec<f32> = on_edges.iter().copied().cycle().take(50_000).collect();
        cases.push(("on edges", on_edges));
        cases
    }

    #[test]
    fn stats_equal_the_reference_bit_for_bit() {
        for (name, xs) in adversarial() {
            for len in [1, 7, 8, 9, 1023, 1025, 16_385, xs.len()] {
                let xs = &xs[..len.min(xs.len())];
                let (got, want) = (stats(&tensor(xs)), reference_stats(xs));
                assert_eq!(
                    (got.total, got.finite, got.nan, got.pos_inf, got.neg_inf),
                    (
                        want.total,
                        want.finite,
                        want.nan,
                        want.pos_inf,
                        want.neg_inf
                    ),
                    "{name}, {len}"
                );
                assert_eq!(got.sum.to_bits(), want.sum.to_bits(), "{name}, {len}");
                assert_eq!(
                    got.sum_squares.to_bits(),
                    want.sum_squares.to_bits(),
                    "{name}, {len}"
                );
                // Equal as numbers: which zero a tie between -0 and +0 keeps is not promised.
                assert!(got.min == want.min && got.max == want.max, "{name}, {len}");
            }
        }
    }

    /// The tests above take the AVX2 passes where the CPU has them; these hold the portable
    /// passes to the same bits there (elsewhere the tests above already take them).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn portable_passes_equal_the_avx2_ones() {
        let Some(simd) = avx2::detect() else {
            return;
        };
        for (name, xs) in adversarial() {
            let t = tensor(&xs);
            let Elems::F32(elems) = Elems::of(&t) else {
                unreachable!("f32 input")
            };
            for len in [1, 7, 8, 9, 1023, 1025, xs.len()] {
                let elems = &elems[..len.min(elems.len())];
                let (portable, fast) = (stats_f32_portable(elems), avx2::stats_f32(simd, elems));
                assert_eq!(
                    (portable.total, portable.finite, portable.nan),
                    (fast.total, fast.finite, fast.nan),
                    "{name}, {len}"
                );
                assert_eq!(portable.sum.to_bits(), fast.sum.to_bits(), "{name}, {len}");
                assert_eq!(
                    portable.sum_squares.to_bits(),
                    fast.sum_squares.to_bits(),
                    "{name}, {len}"
                );
                assert!(portable.min == fast.min && portable.max == fast.max);
            }
            let s = stats(&t);
            if s.finite == 0 || s.min == s.max {
                continue;
            }
            for k in [2, 7, 30, 1000] {
                let edges = equal_width_edges(s.min, s.max, k);
                let guess = Guess {
                    origin: s.min,
                    scale: k as f64 / (s.max - s.min),
                };
                let plan = Slots32::new(&edges, guess);
                let mut portable = vec![[0u32; 4]; plan.bounds.len()];
                let mut fast = portable.clone();
                plan.count_portable(elems, &mut portable);
                let took = plan.count_avx2(elems, &mut fast);
                assert_eq!(took, plan.truncates, "{name}, k {k}");
                if took {
                    let sums =
                        |c: &[[u32; 4]]| -> Vec<u32> { c.iter().map(|l| l.iter().sum()).collect() };
                    assert_eq!(sums(&portable), sums(&fast), "{name}, k {k}");
                }
            }
        }
    }

    #[test]
    fn counts_equal_the_reference() {
        for (name, xs) in adversarial() {
            let s = stats(&tensor(&xs));
            if s.finite == 0 || s.min == s.max {
                continue;
            }
            let mut edge_sets = vec![mindspore_edges(DType::F32, s.min, s.max, 90)];
            for k in [2, 7, 30, 1000] {
                edge_sets.push(equal_width_edges(s.min, s.max, k));
            }
            for edges in edge_sets {
                let k = edges.len() - 1;
                let width = k as f64 / (edges[k] - edges[0]);
                let want = reference_counts(&xs, &edges);
                // The guess as packing makes it; one a little off, so that positions no
                // longer truncate to the bucket but the one compare holds; one too steep for
                // that; and one that is no guess at all: the walk must still land exactly.
                for scale in [width, width * 1.001, width * 3.0, 0.0] {
                    let guess = Guess {
                        origin: edges[0],
                        scale,
                    };
                    let plan = Slots32::new(&edges, guess);
                    // Ordinary inputs must take each path, or it goes untested.
                    if ["uniform", "on edges", "nan and inf"].contains(&name) {
                        if scale == width {
                            assert!(plan.truncates, "{name}, k {k}: positions should do");
                        } else if scale == width * 1.001 && (30..=90).contains(&k) {
                            assert!(
                                plan.one_compare && !plan.truncates,
                                "{name}, k {k}: only the compare should hold"
                            );
                        }
                    }
                    let got = count(&tensor(&xs), &edges, s.nan, guess);
                    assert_eq!(got, want, "{name}, k {k}, scale {scale}");
                }
            }
        }
    }
}
