//! TensorBoard's equal-width rule and TensorFlow's exponential buckets against the reference.

use super::*;

#[test]
fn tensorboard_equal_width_normal_input() {
    let xs: Vec<f64> = pseudo_random(10_000, 1);
    let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let back: Vec<f64> = xs32.iter().map(|&x| f64::from(x)).collect();
    check_tb_equal_width(
        &back,
        &tb_histogram(TensorValue::from(xs32), HistogramRule::default()),
        30,
    );
    check_tb_equal_width(
        &xs,
        &tb_histogram(TensorValue::from(xs.clone()), HistogramRule::EqualWidth(7)),
        7,
    );
}

#[test]
fn tensorboard_equal_width_edge_values_land_exactly() {
    // Values sitting exactly on edges, where width arithmetic could round either way.
    let edges = tb_edges(-1.0, 2.0, 30);
    let mut xs = edges.clone();
    xs.extend(edges.iter().map(|e| e - 1e-12));
    xs.retain(|&x| (-1.0..=2.0).contains(&x));
    check_tb_equal_width(
        &xs,
        &tb_histogram(TensorValue::from(xs.clone()), HistogramRule::default()),
        30,
    );
}

#[test]
fn tensorboard_constant_integer_and_non_finite() {
    let constant = vec![3.5f64; 17];
    check_tb_equal_width(
        &constant,
        &tb_histogram(
            TensorValue::from(constant.clone()),
            HistogramRule::default(),
        ),
        30,
    );

    let ints: Vec<i32> = (0..1000).map(|i| (i * 7919) % 101 - 50).collect();
    let as_f64: Vec<f64> = ints.iter().map(|&i| f64::from(i)).collect();
    check_tb_equal_width(
        &as_f64,
        &tb_histogram(TensorValue::from(ints), HistogramRule::default()),
        30,
    );

    let mut xs = pseudo_random(500, 2);
    xs.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    let h = tb_histogram(TensorValue::from(xs.clone()), HistogramRule::default());
    assert_eq!(h.num, 500.0, "non-finite values are left out");
    check_tb_equal_width(&xs, &h, 30);

    let h = tb_histogram(
        TensorValue::from(vec![f32::NAN, f32::INFINITY]),
        HistogramRule::default(),
    );
    assert_eq!((h.num, h.bucket.len()), (0.0, 0));
}

#[test]
fn tensorflow_exponential_buckets() {
    // Limits written out independently from TensorFlow's histogram.cc.
    let mut pos = vec![];
    let mut v = 1.0e-12;
    while v < 1.0e20 {
        pos.push(v);
        v *= 1.1;
    }
    pos.push(f64::MAX);
    let mut limits: Vec<f64> = pos.iter().rev().map(|v| -v).collect();
    limits.push(0.0);
    limits.extend(&pos);
    assert_eq!(limits.len(), 2 * 775 + 1);

    let mut xs = pseudo_random(2000, 3);
    xs.extend([0.0, -0.0, 1e-13, -5e30, f64::NAN]);
    let mut counts = vec![0u64; limits.len()];
    for &x in xs.iter().filter(|x| x.is_finite()) {
        let b = limits.iter().position(|&l| x < l).unwrap();
        counts[b] += 1;
    }
    // Collapse runs of empty buckets, keeping the run's last limit.
    let (mut want_limits, mut want_counts) = (vec![], vec![]);
    let mut i = 0;
    while i < counts.len() {
        if counts[i] > 0 {
            want_limits.push(limits[i]);
            want_counts.push(counts[i] as f64);
            i += 1;
        } else {
            let mut j = i;
            while j + 1 < counts.len() && counts[j + 1] == 0 {
                j += 1;
            }
            want_limits.push(limits[j]);
            want_counts.push(0.0);
            i = j + 1;
        }
    }
    let h = tb_histogram(TensorValue::from(xs), HistogramRule::Exponential);
    assert_eq!(h.bucket_limit, want_limits);
    assert_eq!(h.bucket, want_counts);
    assert_eq!(h.num, 2004.0);
}
