//! The statistics pass, portable: counts, extremes and sums in a fixed lane and block order,
//! so that the bits never depend on threads or CPU.

use super::elems::{CHUNK, f32_le};

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
    pub(super) fn empty() -> Stats {
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
    pub(super) fn then(mut self, next: &Stats) -> Stats {
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

/// [`super::stats`] of `f32` elements without AVX2: one pass per block of [`CHUNK`] (eight
/// lanes, extremes compared in `f32`, which widening to `f64` does not change), taken again by
/// [`stats_of`] for the rare block that holds a NaN or an infinity.
pub(super) fn stats_f32_portable(elems: &[[u8; 4]]) -> Stats {
    stats_by_block(elems, finite_block_f32)
}

/// The statistics of `elems`, block by block: from `finite_block`, or for a block it refuses
/// (one holding a NaN or an infinity) from [`stats_of`].
#[inline(always)]
pub(super) fn stats_by_block(
    elems: &[[u8; 4]],
    finite_block: impl Fn(&[[u8; 4]]) -> Option<Stats>,
) -> Stats {
    elems.chunks(CHUNK).fold(Stats::empty(), |s, block| {
        s.then(&finite_block(block).unwrap_or_else(|| stats_of(block, f32_le)))
    })
}

/// The sums and extremes of one block of `f32` elements, or `None` when it holds a NaN or an
/// infinity.
pub(super) fn finite_block_f32(block: &[[u8; 4]]) -> Option<Stats> {
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
pub(super) fn block_stats(
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
pub(super) fn stats_of<const N: usize>(
    elems: &[[u8; N]],
    conv: impl Fn([u8; N]) -> f64 + Copy,
) -> Stats {
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
