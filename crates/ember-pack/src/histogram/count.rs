//! The bucket-counting pass, portable: each element's slot from a first guess and its bounds,
//! checked at plan time so that the guess's rounding cannot mislead.

use super::elems::f64_le;

/// A linear first guess of the bucket of `x`: `(x - origin) * scale`, truncated.
#[derive(Clone, Copy, Debug)]
pub(super) struct Guess {
    pub(super) origin: f64,
    pub(super) scale: f64,
}

/// Bucket search over `f64` elements (every dtype but `f32`).
///
/// Every element, NaN and ±Inf included, is put in a slot without a branch: slot 0 holds what
/// is below the first edge, slot `i + 1` bucket `i`, slot `k + 1` what is above the last edge.
/// A NaN guesses bucket 0 and compares false with both its bounds, so all NaNs land in slot 1
/// and are taken off it at the end.
pub(super) struct Slots64 {
    /// `[left, right)` of each slot.
    bounds: Vec<[f64; 2]>,
    guess: Guess,
    /// Whether the guess is everywhere off by at most one slot.
    one_step: bool,
}

impl Slots64 {
    pub(super) fn new(edges: &[f64], guess: Guess) -> Slots64 {
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
    pub(super) fn guess_slot(&self, x: f64) -> usize {
        let last = (self.bounds.len() - 3) as i64;
        (((x - self.guess.origin) * self.guess.scale) as i64).clamp(0, last) as usize + 1
    }

    /// The slot counts of `elems`.
    pub(super) fn count(&self, elems: &[[u8; 8]]) -> Vec<u64> {
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
pub(super) struct Slots32 {
    /// `[left, right)` of each slot.
    pub(super) bounds: Vec<[f32; 2]>,
    /// The left bound of each slot.
    pub(super) lower: Vec<f32>,
    /// The guess's upper clamp: `k`, the slot above the buckets less one.
    pub(super) top: f32,
    pub(super) origin: f32,
    pub(super) scale: f32,
    /// Whether the guess is everywhere the element's slot or the one above.
    pub(super) one_compare: bool,
    /// Whether every element whose position is not [`SURE`]-close to a whole number is in
    /// the slot its position truncates to (and `one_compare` holds for the others).
    pub(super) truncates: bool,
}

/// How close (in buckets) an element's scaled position may come to a whole number and still
/// be counted from the position alone: about one element in 2,000 of evenly spread data is
/// closer and takes the compare. Far above the position's rounding error in ordinary data
/// (`Slots32::new` checks it), far below a bucket.
pub(super) const SURE: f32 = 1.0 / 4096.0;

/// `2^23`: an `f32` in `[2^23, 2^24)` holds an integer in the low bits of its mantissa.
pub(super) const TWO_POW_23: f32 = 8_388_608.0;

impl Slots32 {
    pub(super) fn new(edges: &[f64], guess: Guess) -> Slots32 {
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
    pub(super) fn position(&self, x: f32) -> f32 {
        // Compares (one vector instruction each), not `f32::clamp`.
        let y = (x - self.origin) * self.scale;
        let y = if y > 0.0 { y } else { 0.0 };
        if y < self.top { y } else { self.top }
    }

    /// The guessed slot of `x`: `(x - origin) * scale` clamped to `[0, k]` and rounded to the
    /// nearest integer, plus one. Monotone in `x`; a NaN guesses slot 1.
    #[inline(always)]
    pub(super) fn guess_slot(&self, x: f32) -> usize {
        self.guess_u32(x) as usize
    }

    /// [`Self::guess_slot`] in 32 bits, four to a vector.
    #[inline(always)]
    pub(super) fn guess_u32(&self, x: f32) -> u32 {
        // Rounded by adding 2^23, whose sum's low mantissa bits are the integer: a single
        // vector instruction, where `as i32` needs saturation checks.
        (self.position(x) + TWO_POW_23).to_bits() - TWO_POW_23.to_bits() + 1
    }

    /// The slot of `x` from its position alone, and whether that position is too close to a
    /// whole number for it (see [`Slots32::truncates`]).
    #[inline(always)]
    pub(super) fn sure_slot(&self, x: f32) -> (u32, bool) {
        let y = self.position(x);
        let rounded = y + TWO_POW_23;
        let off = y - (rounded - TWO_POW_23);
        let slot = rounded.to_bits() - TWO_POW_23.to_bits() + 1 - u32::from(off < 0.0);
        (slot, (-SURE..=SURE).contains(&off))
    }

    /// The slot of `x` from guess `g` when the guess is `x`'s slot or the one above. A NaN
    /// compares false and stays in its guessed slot 1.
    #[inline(always)]
    pub(super) fn settle(&self, g: usize, x: f32) -> usize {
        g - usize::from(x < self.lower.get(g).copied().unwrap_or(f32::INFINITY))
    }

    /// Counts `elems` into `counters` (four per slot, by the element's index).
    pub(super) fn count_portable(&self, elems: &[[u8; 4]], counters: &mut [[u32; 4]]) {
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
/// A task holds at most [`super::elems::TASK`] elements, so `u32` counters cannot overflow.
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
