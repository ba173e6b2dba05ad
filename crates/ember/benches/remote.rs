//! The Trainer's step time with an object-store log directory: the Trainer run of `overhead`
//! (200 steps on 2 workers, scalars every step, histograms every 50) recording into a local
//! directory, into an object-store URL, and into nothing, as triples in rotating order so that
//! drift of the machine's load falls on every side alike. Prints the median ratios with their
//! quartiles.
//!
//! It needs a store: `EMBER_BENCH_URL=s3://bucket/prefix` and the store's `AWS_*` settings.
//! `cargo xtask objects --bench` starts a loopback S3 server (moto) and runs it so:
//! `cargo bench -p ember --features object-store --bench remote [-- TRIPLES]`.

#[path = "support/stats.rs"]
mod stats;
#[path = "support/trainer_run.rs"]
mod trainer_run;

use std::time::Duration;

use ember::SummaryRecord;
use stats::quantile;
use trainer_run::run;

fn main() {
    let Ok(url) = std::env::var("EMBER_BENCH_URL") else {
        println!(
            "remote: no store to write to; set EMBER_BENCH_URL=s3://bucket/prefix and its AWS_* \
             settings, or run `cargo xtask objects --bench`, which starts one on loopback"
        );
        return;
    };
    let triples: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(40);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut local = SummaryRecord::new(dir.path()).expect("local summary record");
    let mut remote = SummaryRecord::new(&url).expect("summary record in the store");
    let mut side = |which: usize| -> Duration {
        match which {
            0 => run(None),
            1 => run(Some(&mut local)),
            _ => run(Some(&mut remote)),
        }
    };
    for which in 0..3 {
        side(which);
        side(which);
    }
    let (mut over_local, mut over_none) = (Vec::new(), Vec::new());
    let mut totals = [Duration::ZERO; 3];
    for triple in 0..triples {
        let mut times = [Duration::ZERO; 3];
        for k in 0..3 {
            let which = (triple + k) % 3;
            times[which] = side(which);
        }
        for (total, time) in totals.iter_mut().zip(times) {
            *total += time;
        }
        over_local.push(times[2].as_secs_f64() / times[1].as_secs_f64());
        over_none.push(times[2].as_secs_f64() / times[0].as_secs_f64());
    }
    local.close().expect("local summaries close");
    remote.close().expect("remote summaries close");
    let shipped = remote.remote_stats().unwrap_or_default();
    over_local.sort_by(f64::total_cmp);
    over_none.sort_by(f64::total_cmp);
    let ms = |d: Duration| d.as_secs_f64() * 1e3 / triples as f64;
    println!(
        "Trainer, 200 steps on 2 workers, scalars every step and histograms every 50, {triples} \
         triples: {url} against a local directory median {:.3} (quartiles {:.3}-{:.3}), against \
         no summaries {:.3} (quartiles {:.3}-{:.3}); a run takes {:.1} ms with no summaries, \
         {:.1} ms local, {:.1} ms in the store; {} segments, {} bytes shipped",
        quantile(&over_local, 0.5),
        quantile(&over_local, 0.25),
        quantile(&over_local, 0.75),
        quantile(&over_none, 0.5),
        quantile(&over_none, 0.25),
        quantile(&over_none, 0.75),
        ms(totals[0]),
        ms(totals[1]),
        ms(totals[2]),
        shipped.segments,
        shipped.bytes
    );
}
