//! `cargo xtask mpi --bench`: the all-reduce's cost per gradient size on 1 and 2 processes.

use std::path::Path;

use anyhow::Context;

use crate::mpirun::{TASK, Transport, mpirun};
use crate::process::{build, expect_success, run_limited, target_dir};

/// Gradient sizes timed, in `f32` values.
const BENCH_SIZES: &[usize] = &[1_000, 10_000, 100_000, 1_000_000, 10_000_000];

pub(super) fn bench(root: &Path, rounds: usize) -> anyhow::Result<()> {
    build(root, crate::mpirun::ALLREDUCE_BUILD)?;
    let target = target_dir(root);
    let example = target.join("release/examples/allreduce");
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;
    let sizes: Vec<String> = BENCH_SIZES.iter().map(usize::to_string).collect();
    let figures = time_jobs(&example, &sizes, &out, rounds)?;
    let (md, json) = tables(&figures);
    std::fs::write(out.join("mpi.md"), &md)?;
    std::fs::write(
        out.join("mpi.json"),
        serde_json::to_string_pretty(&serde_json::json!({ "rounds": rounds, "sizes": json }))?,
    )?;
    print!("{md}");
    eprintln!("{TASK}: wrote {}", out.join("mpi.md").display());
    Ok(())
}

/// The jobs timed: one process, and two over each transport.
const JOBS: [(usize, Transport); 3] = [
    (1, Transport::SharedMemory),
    (2, Transport::SharedMemory),
    (2, Transport::Tcp),
];

/// Every round's median µs per all-reduce: `[job][size]`, jobs as [`JOBS`], sizes as
/// [`BENCH_SIZES`].
fn time_jobs(
    example: &Path,
    sizes: &[String],
    out: &Path,
    rounds: usize,
) -> anyhow::Result<Vec<Vec<Vec<f64>>>> {
    let jobs = JOBS;
    // [job][size] -> every round's median µs.
    let mut figures = vec![vec![Vec::new(); BENCH_SIZES.len()]; jobs.len()];
    for round in 0..rounds.max(1) {
        // Rotated each round, so no job always runs first on a warm or cold machine.
        for offset in 0..jobs.len() {
            let at_job = (offset + round) % jobs.len();
            let (processes, transport) = jobs[at_job];
            let mut job = mpirun(processes, transport);
            job.arg(example).args(sizes);
            let ran = run_limited(
                job,
                &format!(
                    "the all-reduce benchmark on {processes} process(es) over {}",
                    transport.name()
                ),
                &out.join("mpi-bench.log"),
            )?;
            expect_success(&ran, "the all-reduce benchmark")?;
            for line in ran.output.lines().filter(|l| l.starts_with("{")) {
                let value: serde_json::Value = serde_json::from_str(line)?;
                let size = value["values"].as_u64().context("values")? as usize;
                let micros = value["median_us"].as_f64().context("median_us")?;
                if let Some(at) = BENCH_SIZES.iter().position(|s| *s == size) {
                    figures[at_job][at].push(micros);
                }
            }
        }
    }
    Ok(figures)
}

/// The markdown table and the JSON rows of the timed figures.
fn tables(figures: &[Vec<Vec<f64>>]) -> (String, Vec<serde_json::Value>) {
    let summary = |samples: &[f64]| match crate::stats::Spread::of(samples.iter().copied()) {
        Some(s) => (s.median, s.min, s.max),
        None => (f64::NAN, f64::NAN, f64::NAN),
    };
    let mut md = String::from(
        "| gradient (f32 values) | bytes | 1 process: µs per all-reduce | 2 processes, shared memory | bus bandwidth | 2 processes, TCP (loopback) | bus bandwidth |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for (at, size) in BENCH_SIZES.iter().enumerate() {
        let one = summary(&figures[0][at]);
        let shm = summary(&figures[1][at]);
        let tcp = summary(&figures[2][at]);
        let bytes = size * 4;
        // A ring all-reduce moves 2(p-1)/p of the buffer through each link: bytes for p = 2.
        let bandwidth = |micros: f64| bytes as f64 / (micros * 1e-6) / 1e9;
        md.push_str(&format!(
            "| {size} | {bytes} | {:.1} ({:.1}–{:.1}) | {:.1} ({:.1}–{:.1}) | {:.2} GB/s | {:.1} ({:.1}–{:.1}) | {:.2} GB/s |\n",
            one.0,
            one.1,
            one.2,
            shm.0,
            shm.1,
            shm.2,
            bandwidth(shm.0),
            tcp.0,
            tcp.1,
            tcp.2,
            bandwidth(tcp.0),
        ));
        json.push(serde_json::json!({
            "values": size,
            "bytes": bytes,
            "one_process_us": figures[0][at],
            "two_processes_us": figures[1][at],
            "two_processes_tcp_us": figures[2][at],
        }));
    }
    (md, json)
}
