//! Logging overhead: the same Trainer run with summaries on and off.
//! Scalars every step and weight/gradient histograms every 50 optimizer steps.
//! The summary record's one-time cost (opening files, the fsync at close) is timed on its own
//! (`record_lifetime`), since it does not grow with training.
//!
//! In one process the case measured second has been seen to lose (not a slowdown with training
//! length: docs/benchmarks.md), so measure each in a fresh process, alternating:
//! `cargo bench -p ember --bench overhead -- summaries_off`, then `-- summaries_on`. A single
//! run's time spreads widely here; `overhead_paired` resolves the difference better.

#[path = "support/trainer_run.rs"]
mod trainer_run;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ember::SummaryRecord;
use trainer_run::run;

/// `summaries_on` records into one summary record per sample, created before and closed after
/// the timed runs: its one-time cost (creating files, the fsync at close: about 1 ms) is left
/// out, since it does not grow with training. `record_lifetime` times exactly that cost.
fn logging_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("trainer_200_steps_2_workers");
    group.sample_size(10);
    group.bench_function("summaries_off", |b| {
        b.iter_custom(|runs| (0..runs).map(|_| run(None)).sum())
    });
    group.bench_function("summaries_on", |b| {
        b.iter_custom(|runs| {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut summary = SummaryRecord::new(dir.path()).expect("summary record");
            let elapsed = (0..runs).map(|_| run(Some(&mut summary))).sum();
            summary.close().expect("summaries close");
            elapsed
        })
    });
    group.bench_function("record_lifetime", |b| {
        b.iter_custom(|runs| {
            let started = Instant::now();
            for _ in 0..runs {
                let dir = tempfile::tempdir().expect("temp dir");
                let mut summary = SummaryRecord::new(dir.path()).expect("summary record");
                summary.add_scalar("loss", 1.0, 0).expect("recorded");
                summary.close().expect("summaries close");
            }
            started.elapsed()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(15));
    targets = logging_overhead
}
criterion_main!(benches);
