//! The vectorized passes against straightforward reference code, on inputs chosen to break
//! them: values on and next to every edge, NaN, ±Inf, subnormals, ±0, equal values and
//! ranges that span all of `f32`.

use super::count::{Guess, Slots32};
use super::elems::{CHUNK, Elems, TASK};
use super::stats::{Stats, stats_f32_portable};
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
    let mut cases = plain_cases();
    cases.push(("nan and inf", with_nan_and_inf()));
    cases.push(("on edges", on_edges()));
    cases
}

/// Data sets of one kind each: spreads, bit patterns, ranges and repeated values.
fn plain_cases() -> Vec<(&'static str, Vec<f32>)> {
    vec![
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
    ]
}

/// Uniform values with NaN and both infinities at the start, the end and across lanes.
fn with_nan_and_inf() -> Vec<f32> {
    let mut with_bad = uniform(40_000, 6, -1.0, 1.0);
    for (i, bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN]
        .into_iter()
        .enumerate()
    {
        for at in [i, 1030 + i, 17_000 + i, 39_999 - i] {
            with_bad[at] = bad;
        }
    }
    with_bad
}

/// Every edge of equal-width and MindSpore histograms over [-1, 2], as f32, with its
/// neighbours, many times over so that every lane and slot sees them.
fn on_edges() -> Vec<f32> {
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
    on_edges.iter().copied().cycle().take(50_000).collect()
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
            let took = count_avx2(&plan, elems, &mut fast);
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
