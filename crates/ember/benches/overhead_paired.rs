//! Logging overhead as paired runs in one process: the Trainer run of `overhead` (200 steps on
//! 2 workers, scalars every step, histograms every 50) with summaries off and on, one pair after
//! another, the order inside each pair alternating, so that drift of the machine's load and any
//! advantage of going first or second falls on both sides alike. Prints each pair's ratio and
//! their median with the quartiles: on a noisy 2-core machine a single criterion figure spreads
//! ±5%, while the median of 40 paired ratios resolves about 1%.
//!
//! `cargo bench -p ember --bench overhead_paired [-- PAIRS]`
//!
//! With `mlflow` after the pair count, both sides record summaries, and the pair is the
//! MLflow sink off and on: the "on" record also sends to the tracking server of
//! `MLFLOW_TRACKING_URI` (`cargo xtask mlflow --overhead PAIRS` starts one and runs this).

#[path = "support/stats.rs"]
mod stats;
#[path = "support/trainer_run.rs"]
mod trainer_run;

use std::time::Duration;

use ember::SummaryRecord;
use stats::quantile;
use trainer_run::run;

fn main() {
    // `cargo bench` passes `--bench`; the one number given is the pair count.
    let pairs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(40);
    let sink = std::env::args().any(|a| a == "mlflow");
    let dir = tempfile::tempdir().expect("temp dir");
    // "On" records; "off" does not, or (against the sink) records without it.
    let (mut summary, mut without) = if sink {
        assert!(
            std::env::var_os("MLFLOW_TRACKING_URI").is_some(),
            "`mlflow` compares the sink off and on: set MLFLOW_TRACKING_URI"
        );
        let with_sink = SummaryRecord::builder(dir.path().join("sink"))
            .mlflow_from_env()
            .and_then(|builder| builder.build())
            .expect("a record with the MLflow sink");
        let without = SummaryRecord::new(dir.path().join("off")).expect("summary record");
        (with_sink, Some(without))
    } else {
        (
            SummaryRecord::new(dir.path()).expect("summary record"),
            None,
        )
    };
    let mut run_off = || run(without.as_mut());
    for _ in 0..3 {
        run_off();
        run(Some(&mut summary));
    }
    let mut ratios = Vec::with_capacity(pairs);
    let (mut off_total, mut on_total) = (Duration::ZERO, Duration::ZERO);
    for pair in 0..pairs {
        let (off, on) = if pair % 2 == 0 {
            let off = run_off();
            (off, run(Some(&mut summary)))
        } else {
            let on = run(Some(&mut summary));
            (run_off(), on)
        };
        off_total += off;
        on_total += on;
        let ratio = on.as_secs_f64() / off.as_secs_f64();
        println!(
            "pair {pair:>3}: off {:7.2} ms, on {:7.2} ms, on/off {ratio:.3}",
            off.as_secs_f64() * 1e3,
            on.as_secs_f64() * 1e3
        );
        ratios.push(ratio);
    }
    let sink_cpu = sink.then(|| cpu_seconds(|name| name.starts_with("ember-mlflow")));
    summary.close().expect("summaries close");
    if let Some(mut without) = without {
        without.close().expect("summaries close");
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "{pairs} pairs: on/off median {:.3} (quartiles {:.3}-{:.3}, min {:.3}, max {:.3}); totals off {:.1} ms, on {:.1} ms",
        quantile(&ratios, 0.5),
        quantile(&ratios, 0.25),
        quantile(&ratios, 0.75),
        ratios[0],
        ratios[pairs - 1],
        off_total.as_secs_f64() * 1e3,
        on_total.as_secs_f64() * 1e3,
    );
    if let Some(sink_cpu) = sink_cpu {
        let all = process_cpu_seconds();
        println!(
            "the sink's threads (ember-mlflow*) used {sink_cpu:.2} s of the process's {all:.2} s of CPU ({:.1}%)",
            100.0 * sink_cpu / all
        );
    }
}

/// CPU seconds (user and system) the process's live threads whose name passes `named` have
/// used, from /proc/self/task (Linux; 0 elsewhere).
fn cpu_seconds(named: impl Fn(&str) -> bool) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|name| named(name.trim()))
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .map(|stat| seconds_of(&stat))
        .sum()
}

/// The CPU seconds of the whole process, its ended threads included.
fn process_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat").map_or(0.0, |stat| seconds_of(&stat))
}

/// utime + stime of a /proc `stat` line, in seconds.
fn seconds_of(stat: &str) -> f64 {
    // The fields after the command's closing parenthesis start at the 3rd; utime and stime are
    // the 14th and 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // In clock ticks of 1/100 s (USER_HZ) on every architecture Rust supports.
    (field(11) + field(12)) as f64 / 100.0
}
