//! The two passes of an `f32` histogram in AVX2, for CPUs that have it.
//!
//! Left to the compiler, even when compiled for AVX2 (through `pulp`'s dispatch), both passes
//! came out as a mix of scalar and 128-bit code with spills, and the counting pass measured
//! slower so compiled than for the SSE2 baseline. Here each step is one named instruction:
//! `ember bench write --workload hist` went from 7.2 k to 11.4 k histograms/s. Every operation
//! is the one the portable code does, lane for lane and in the same order, so the results are
//! the same bits (the tests compare the two).
//!
//! The intrinsics are `pulp`'s safe wrappers: a [`V3`] token proves the CPU has the features,
//! and [`V3::vectorize`] compiles the closure for them.

use pulp::x86::V3;

use std::arch::x86_64::{__m256, __m256d, __m256i, _CMP_GE_OQ, _CMP_LE_OQ, _CMP_LT_OQ};

use super::count::{SURE, Slots32, TWO_POW_23};
use super::stats::{Stats, block_stats, stats_by_block};

/// The AVX2 token, where the CPU has AVX2 (and FMA, which `V3` also asks for).
pub(super) fn detect() -> Option<V3> {
    V3::try_new()
}

/// [`super::stats_f32`]: blocks of [`super::elems::CHUNK`] in eight lanes, element `i` of a block in lane
/// `i % 8`, lanes summed in the same tree; a block holding a NaN or an infinity is taken again
/// by [`super::stats::stats_of`].
pub(super) fn stats_f32(simd: V3, elems: &[[u8; 4]]) -> Stats {
    simd.vectorize(
        #[inline(always)]
        || stats_by_block(elems, |block| finite_block(simd, block)),
    )
}

/// Sums, sums of squares and extremes of one block, or `None` when it holds a NaN or an
/// infinity (see [`super::stats::finite_block_f32`], which this is lane for lane).
#[inline(always)]
fn finite_block(simd: V3, block: &[[u8; 4]]) -> Option<Stats> {
    let avx = simd.avx;
    // Lanes 0-3 of the eight `f64` sums in `low`, lanes 4-7 in `high`.
    let mut sum_low: __m256d = avx._mm256_setzero_pd();
    let mut sum_high: __m256d = avx._mm256_setzero_pd();
    let mut sq_low: __m256d = avx._mm256_setzero_pd();
    let mut sq_high: __m256d = avx._mm256_setzero_pd();
    let mut min: __m256 = avx._mm256_set1_ps(f32::INFINITY);
    let mut max: __m256 = avx._mm256_set1_ps(f32::NEG_INFINITY);
    let (octs, rest) = block.as_chunks::<8>();
    for o in octs {
        let x: __m256 = pulp::cast(*o);
        let low = avx._mm256_cvtps_pd(avx._mm256_castps256_ps128(x));
        let high = avx._mm256_cvtps_pd(avx._mm256_extractf128_ps::<1>(x));
        sum_low = avx._mm256_add_pd(sum_low, low);
        sum_high = avx._mm256_add_pd(sum_high, high);
        // Fused, where the portable code rounds the product first: the same bits, as the
        // square of a widened `f32` (24 significant bits) is exact in `f64`.
        sq_low = simd.fma._mm256_fmadd_pd(low, low, sq_low);
        sq_high = simd.fma._mm256_fmadd_pd(high, high, sq_high);
        // `x < min ? x : min`, the portable code's compare (the second operand on ties).
        min = avx._mm256_min_ps(x, min);
        max = avx._mm256_max_ps(x, max);
    }
    let lanes = |low: __m256d, high: __m256d| -> [f64; 8] {
        let [a, b]: [[f64; 4]; 2] = [pulp::cast(low), pulp::cast(high)];
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    };
    block_stats(
        block.len(),
        lanes(sum_low, sum_high),
        lanes(sq_low, sq_high),
        pulp::cast(min),
        pulp::cast(max),
        rest,
    )
}

/// [`super::count_f32`] where [`Slots32::truncates`] holds: the slots eight at a time from the
/// elements' positions, a group with an element too close to a bucket's edge settled by the
/// compare, then one count each into `counters` (four per slot, by the element's index).
pub(super) fn count_truncating(
    simd: V3,
    plan: &Slots32,
    elems: &[[u8; 4]],
    counters: &mut [[u32; 4]],
) {
    simd.vectorize(
        #[inline(always)]
        || {
            let positions = Positions::new(simd, plan);
            // Eight counters per slot, one per lane: an element's count then waits only on
            // the one eight elements before it.
            let mut lanes = vec![[0u32; 8]; counters.len()];
            let mut count = |slots: &[u32; 8]| {
                for (j, &s) in slots.iter().enumerate() {
                    if let Some(c) = lanes.get_mut(s as usize) {
                        c[j] += 1;
                    }
                }
            };
            // The slots of eight groups are stored, then counted, each read back from memory:
            // taking each out of its vector register instead measured slower.
            let (blocks, tail) = elems.as_chunks::<64>();
            for block in blocks {
                let groups: &[[[u8; 4]; 8]; 8] = pulp::bytemuck::cast_ref(block);
                // Plain loops, not `array::from_fn` or `for_each`: a closure the compiler
                // leaves out of line loses the AVX2 features, and every intrinsic in it
                // becomes a call (15 times slower, in one build of the same code).
                let mut pending = [[0u32; 8]; 8];
                for (slots, group) in pending.iter_mut().zip(groups) {
                    *slots = positions.slots(plan, pulp::cast(*group));
                }
                for slots in &pending {
                    count(slots);
                }
            }
            let (groups, rest) = tail.as_chunks::<8>();
            for group in groups {
                count(&positions.slots(plan, pulp::cast(*group)));
            }
            for (c, l) in counters.iter_mut().zip(&lanes) {
                for j in 0..4 {
                    c[j] += l[j] + l[j + 4];
                }
            }
            for &e in rest {
                let x = f32::from_le_bytes(e);
                if let Some(c) = counters.get_mut(plan.settle(plan.guess_slot(x), x)) {
                    c[0] += 1;
                }
            }
        },
    )
}

/// The constants of [`Slots32::position`] and of the slot arithmetic, in vectors.
struct Positions {
    simd: V3,
    origin: __m256,
    scale: __m256,
    zero: __m256,
    top: __m256,
    shift: __m256,
    /// `bits(2^23) - 1`: slot = bits(position + 2^23) - bits(2^23) + 1, less one where the
    /// rounding went up.
    base: __m256i,
    below: __m256,
    above: __m256,
}

impl Positions {
    #[inline(always)]
    fn new(simd: V3, plan: &Slots32) -> Positions {
        let avx = simd.avx;
        Positions {
            simd,
            origin: avx._mm256_set1_ps(plan.origin),
            scale: avx._mm256_set1_ps(plan.scale),
            zero: avx._mm256_setzero_ps(),
            top: avx._mm256_set1_ps(plan.top),
            shift: avx._mm256_set1_ps(TWO_POW_23),
            base: avx._mm256_set1_epi32(TWO_POW_23.to_bits() as i32 - 1),
            below: avx._mm256_set1_ps(-SURE),
            above: avx._mm256_set1_ps(SURE),
        }
    }

    /// The slots of eight elements: from their positions, or by [`Slots32::settle`] for all
    /// eight when one lies too close to a bucket's edge.
    #[inline(always)]
    fn slots(&self, plan: &Slots32, x: __m256) -> [u32; 8] {
        let (avx, avx2) = (self.simd.avx, self.simd.avx2);
        // `Slots32::position`: `(x - origin) * scale`, then `y > 0 ? y : 0` (NaN to 0) and
        // `y < top ? y : top`, the second operand on ties and NaN.
        let y = avx._mm256_mul_ps(avx._mm256_sub_ps(x, self.origin), self.scale);
        let y = avx._mm256_max_ps(y, self.zero);
        let y = avx._mm256_min_ps(y, self.top);
        let rounded = avx._mm256_add_ps(y, self.shift);
        let off = avx._mm256_sub_ps(y, avx._mm256_sub_ps(rounded, self.shift));
        let went_up: __m256i = pulp::cast(avx._mm256_cmp_ps::<_CMP_LT_OQ>(off, self.zero));
        let slot = avx2._mm256_add_epi32(
            avx2._mm256_sub_epi32(pulp::cast(rounded), self.base),
            went_up,
        );
        let unsure = avx._mm256_and_ps(
            avx._mm256_cmp_ps::<_CMP_GE_OQ>(off, self.below),
            avx._mm256_cmp_ps::<_CMP_LE_OQ>(off, self.above),
        );
        let mut slots: [u32; 8] = pulp::cast(slot);
        if avx._mm256_movemask_ps(unsure) != 0 {
            let xs: [f32; 8] = pulp::cast(x);
            for j in 0..8 {
                slots[j] = plan.settle(plan.guess_slot(xs[j]), xs[j]) as u32;
            }
        }
        slots
    }
}
