//! Inputs both formats must get right: empty and precomputed histograms, `f32` values around
//! every edge and internal block size, every dtype, and inputs split across threads.

use super::*;

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
