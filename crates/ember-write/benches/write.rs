//! End-to-end write benchmarks: from the first record submitted until
//! `close()` returned, one record per step, for each workload of
//! `support/workload.rs` (bench-only, not public API); plus the caller's cost per scalar record.
//!
//! Each workload also prints its records/s and on-disk MB/s. Set
//! `EMBER_BENCH_QUICK=1` to run a tenth of the steps.

use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
#[path = "support/workload.rs"]
mod workload;

use ember_write::{FullQueuePolicy, WriterPool};
use workload::{Workload, WorkloadKind};

fn steps(kind: WorkloadKind) -> u64 {
    let quick = std::env::var_os("EMBER_BENCH_QUICK").is_some_and(|v| v != "0");
    if quick {
        (kind.default_steps() / 10).max(1)
    } else {
        kind.default_steps()
    }
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn end_to_end(c: &mut Criterion) {
    let mut group = c.benchmark_group("write");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for kind in WorkloadKind::ALL {
        let workload = Workload::new(kind);
        let n = steps(kind);
        group.throughput(Throughput::Elements(n));
        let (mut time, mut bytes, mut runs) = (Duration::ZERO, 0u64, 0u64);
        group.bench_function(kind.name(), |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let pool = WriterPool::builder(dir.path())
                        .queue(4096, FullQueuePolicy::Block)
                        .max_batch(4096)
                        .build()
                        .unwrap();
                    let start = Instant::now();
                    for s in 0..n {
                        pool.write(workload.record(s)).unwrap();
                    }
                    pool.close().unwrap();
                    let took = start.elapsed();
                    elapsed += took;
                    time += took;
                    bytes += dir_bytes(dir.path());
                    runs += 1;
                }
                elapsed
            })
        });
        let secs = time.as_secs_f64();
        if runs > 0 && secs > 0.0 {
            eprintln!(
                "write/{}: {:.0} records/s, {:.1} MB/s on disk ({} records per run, {} runs)",
                kind.name(),
                (n * runs) as f64 / secs,
                bytes as f64 / secs / 1e6,
                n,
                runs
            );
        }
    }
    group.finish();
}

/// The caller's cost per scalar record: building the record and `write`,
/// with a queue large enough never to block. Closing is not timed.
fn caller_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("submit");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let workload = Workload::new(WorkloadKind::Scalars);
    let n = steps(WorkloadKind::Scalars);
    group.throughput(Throughput::Elements(n));
    let (mut time, mut runs) = (Duration::ZERO, 0u64);
    group.bench_function("scalars", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let pool = WriterPool::builder(dir.path())
                    .queue(n as usize, FullQueuePolicy::Block)
                    .max_batch(4096)
                    .build()
                    .unwrap();
                let start = Instant::now();
                for s in 0..n {
                    pool.write(workload.record(s)).unwrap();
                }
                let took = start.elapsed();
                elapsed += took;
                time += took;
                runs += 1;
                pool.close().unwrap();
            }
            elapsed
        })
    });
    if runs > 0 {
        eprintln!(
            "submit/scalars: {:.0} ns per record for the caller",
            time.as_secs_f64() * 1e9 / (n * runs) as f64
        );
    }
    group.finish();
}

criterion_group!(benches, end_to_end, caller_cost);
criterion_main!(benches);
