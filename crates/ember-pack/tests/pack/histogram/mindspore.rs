//! MindSpore's bucket rule, in `f32` and `f64`, against the reference.

use super::*;

#[test]
fn mindspore_normal_f32_and_f64() {
    for n in [1usize, 4, 5, 6, 10, 11, 99, 880, 881, 5000] {
        let xs = pseudo_random(n, n as u64);
        check_ms(
            &xs,
            &ms_histogram(TensorValue::from(xs.clone())),
            |x| x,
            |a, b| b - a,
        );
        let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
        let back: Vec<f64> = xs32.iter().map(|&x| f64::from(x)).collect();
        check_ms(
            &back,
            &ms_histogram(TensorValue::from(xs32)),
            |x| f64::from(x as f32),
            |a, b| f64::from(b as f32 - a as f32),
        );
    }
}

#[test]
fn mindspore_constant_integer_and_non_finite() {
    let constant = vec![2.0f64; 8];
    let h = ms_histogram(TensorValue::from(constant.clone()));
    check_ms(&constant, &h, |x| x, |a, b| b - a);
    assert_eq!(h.buckets[0].left, 1.5, "a single value gets ±0.5");

    // Integer input: integer edges (floor), widths in integers.
    let ints: Vec<i64> = (0..137).map(|i| (i * 31) % 23 - 9).collect();
    let as_f64: Vec<f64> = ints.iter().map(|&i| i as f64).collect();
    check_ms(
        &as_f64,
        &ms_histogram(TensorValue::from(ints)),
        f64::floor,
        |a, b| b - a,
    );
    let h = ms_histogram(TensorValue::from(vec![5u8; 3]));
    check_ms(&[5.0; 3], &h, f64::floor, |a, b| b - a);
    assert_eq!(
        h.buckets.iter().map(|b| b.left).collect::<Vec<_>>(),
        [4.0, 5.0]
    );

    let mut xs = pseudo_random(300, 9);
    xs.extend([
        f64::NAN,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ]);
    check_ms(
        &xs,
        &ms_histogram(TensorValue::from(xs.clone())),
        |x| x,
        |a, b| b - a,
    );

    let only_bad = vec![f64::NAN, f64::INFINITY];
    check_ms(
        &only_bad,
        &ms_histogram(TensorValue::from(only_bad.clone())),
        |x| x,
        |a, b| b - a,
    );
}
