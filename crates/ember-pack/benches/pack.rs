//! Packing throughput, single thread: scalar records (1 and 10 values), histograms of 100,000
//! f32 (a sine's values, many near the extremes, and normal ones), an image 3x64x64 f32, a
//! tensor of 100,000 f32, in both formats.
//!
//! Targets (2-core machine): ≥ 2M one-scalar records/s; histogram ≥ 1 GB/s of input; tensor
//! ≥ 2 GB/s; ≥ 20k 64x64 PNG images/s.

use std::collections::HashSet;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ember_pack::{
    Format, Image, ImageLayout, MetadataFor, PackOptions, Packer, Record, Tag, TensorValue, Value,
};

fn floats(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.618).sin() * 4.0).collect()
}

/// Standard normal values (SplitMix64, Box–Muller), as weights and `ember bench write --workload
/// hist` have them: most fall inside the buckets, away from their edges.
fn normal(n: usize) -> Vec<f32> {
    let mut state = 0x5eed_u64;
    let mut uniform = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (1.0 - uniform(), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let seen = HashSet::new();
    for format in [Format::TensorBoard, Format::MindInsight] {
        let name = match format {
            Format::TensorBoard => "tb",
            Format::MindInsight => "mi",
        };
        let packer = Packer::new(PackOptions::new(format));
        let mut group = c.benchmark_group(name);

        let mut one = Record::new(1000, 1_700_000_000.0);
        one.add(Tag::new("train/loss").unwrap(), 0.25);
        group.throughput(Throughput::Elements(1));
        group.bench_function("scalar_record_1", |b| {
            b.iter(|| packer.pack(black_box(&one), MetadataFor::Only(&seen)))
        });

        let mut ten = Record::new(1000, 1_700_000_000.0);
        for i in 0..10 {
            ten.add(
                Tag::new(format!("train/metric_{i}")).unwrap(),
                i as f64 * 0.5,
            );
        }
        group.bench_function("scalar_record_10", |b| {
            b.iter(|| packer.pack(black_box(&ten), MetadataFor::Only(&seen)))
        });

        let data = floats(100_000);
        let mut hist = Record::new(1, 1.0);
        hist.add(Tag::new("w/hist").unwrap(), Value::histogram(data.clone()));
        group.throughput(Throughput::Bytes(400_000));
        group.bench_function("histogram_100k_f32", |b| {
            b.iter(|| packer.pack(black_box(&hist), MetadataFor::Only(&seen)))
        });

        let mut normal_hist = Record::new(1, 1.0);
        normal_hist.add(
            Tag::new("w/hist").unwrap(),
            Value::histogram(normal(100_000)),
        );
        group.bench_function("histogram_100k_f32_normal", |b| {
            b.iter(|| packer.pack(black_box(&normal_hist), MetadataFor::Only(&seen)))
        });

        let mut tensor = Record::new(1, 1.0);
        tensor.add(Tag::new("w").unwrap(), TensorValue::from(data));
        group.bench_function("tensor_100k_f32", |b| {
            b.iter(|| packer.pack(black_box(&tensor), MetadataFor::Only(&seen)))
        });

        let pixels: Vec<f32> = (0..3 * 64 * 64)
            .map(|i| ((i % 64) as f32 / 63.0) * (((i / 64) % 64) as f32 / 63.0))
            .collect();
        let mut image = Record::new(1, 1.0);
        image.add(
            Tag::new("img").unwrap(),
            Image::new(
                TensorValue::from_slice(&pixels, [3usize, 64, 64]),
                ImageLayout::Chw,
            ),
        );
        group.throughput(Throughput::Elements(1));
        group.bench_function("image_3x64x64_f32", |b| {
            b.iter(|| packer.pack(black_box(&image), MetadataFor::Only(&seen)))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
