//! ember's project automation, following the cargo-xtask convention
//! (<https://github.com/matklad/cargo-xtask>): `cargo xtask <task>` from anywhere in the workspace.
//!
//! Tasks:
//! - `bench [--peers] [--skip-criterion] [--rounds R]`: criterion benchmarks and the
//!   `ember bench write` workloads (with `--peers`, tensorboardX's too), reported in
//!   `target/bench/report.{md,json}`.
//! - `browser`: the browser step of `compat` alone, over the log the last `compat` wrote.
//! - `ci`: runs what `.ci/run` runs, cheapest checks first.
//! - `compat`: checks with TensorBoard's and MindInsight's own loaders (pinned, in venvs under
//!   `target/`) that every value kind ember writes reads back as written, truncated files,
//!   graph edges, hparams columns and lineage rows included; then that every plugin's page shows
//!   its tags with data in headless Chromium (`browser.rs`), a screenshot per page.
//! - `codegen [--check]`: regenerates ember-pack's protobuf code (`--check` only verifies it).
//! - `devices`: multi-device training on two distinct wgpu devices (Mesa's lavapipe where there
//!   is no GPU), against one device, burn-train's own summary and the flex build.
//! - `gpu [--epochs E]`: on a machine with CUDA GPUs, the two-device suite and `ember train` on
//!   1..N GPUs with its throughput and memory, into `target/bench/gpu.md`.
//! - `docs`: checks README.md and docs/*.md: every relative link exists, every `pip install`
//!   line is a list CI tests, and every fenced `sh` block runs (with `ember` the release binary)
//!   unless its first line marks it as needing what CI lacks (`# needs: gpu`, …).
//! - `features`: checks that `ember` without its `burn` feature builds no Burn, that the logging
//!   example builds and runs that way in a crate of its own, and that the docs of both feature
//!   sets build without warnings.
//! - `hosts`: ranks on hosts of their own (network namespaces joined by veth links, as root):
//!   2 hosts x 1 rank against one host, a host's link cut mid-run (every process gone within a
//!   bound, then `--resume` from the bucket), and links slowed by tc (all-reduce against the
//!   α–β model) into `target/bench/hosts.md`.
//! - `layers`: checks that each crate depends only on the layer directly below it, and that no
//!   modules of any crate (xtask and the tests' crate included) import each other in circles,
//!   every path docs/architecture.md names exists, and no function of any crate's `src` is over
//!   80 lines unless a `// length: <why>` comment above it says why.
//! - `live`: kills `ember train` 10 times at seeded moments and resumes it while TensorBoard
//!   watches (its Python loader and rustboard, over HTTP); each must show every step once, as
//!   the uninterrupted run.
//! - `objects`: `ember train --logdir s3://…`, `gs://…` and `az://…` against loopback emulators
//!   (moto, fake-gcs-server, Azurite), read back by TensorBoard (its loader and its page),
//!   killed mid-run and resumed from the bucket, and against an endpoint that does not answer.
//! - `recovery [--rounds R]`: how long a killed `ember train` takes to train again, part by
//!   part, for the digits model and a 10.1 M-parameter one, into `target/bench/recovery.md`.
//! - `resume`: kills `ember train` with SIGKILL at seeded random moments, resumes each run, and
//!   checks its model and its log (in ember inspect, TensorBoard's loaders, tbparse, rustboard
//!   and MindInsight) against an uninterrupted run's.
//! - `scaling [--rounds R] [--quick]`: examples per second at 1 and 2 workers, ember against
//!   burn-train's own strategies, side by side, into `target/bench/scaling.md`.
//! - `slurm`: a one-node Slurm cluster (as root): `examples/slurm/train.sbatch` as 2 MPI ranks,
//!   plain, signalled by its time limit and requeued, preempted 3 times, and cancelled; each
//!   ends with plain `mpirun`'s model byte for byte and each step once.

mod architecture_doc;
mod bench;
mod browser;
mod ci;
mod codegen;
mod compat;
mod devices;
mod docs;
mod features;
mod gpu;
mod hosts;
mod layers;
mod module_cycles;
mod mpi;
mod objects;
mod objects_azure;
mod objects_bench;
mod objects_clouds;
mod objects_gcs;
mod objects_scenarios;
mod process;
mod recovery;
mod resume;
mod runs;
mod scaling;
mod server;
mod slurm;
mod venv;

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("bench") => bench::run(&root, &args[1..]),
        Some("browser") => browser::run_alone(&root),
        Some("ci") => ci::run(&root),
        Some("compat") => compat::run(&root),
        Some("codegen") => codegen::run(&root, args.iter().any(|a| a == "--check")),
        Some("devices") => devices::run(&root),
        Some("docs") => docs::run(&root),
        Some("features") => features::run(&root),
        Some("gpu") => gpu::run(&root, &args[1..]),
        Some("hosts") => hosts::run(&root, &args[1..]),
        Some("layers") => layers::run(&root),
        Some("mpi") => mpi::run(&root, &args[1..]),
        Some("objects") => objects::run(&root, &args[1..]),
        Some("recovery") => recovery::run(&root, &args[1..]),
        Some("resume") => resume::run(&root),
        Some("live") => resume::live::run(&root),
        Some("scaling") => scaling::run(&root, &args[1..]),
        Some("slurm") => slurm::run(&root),
        _ => {
            eprintln!(
                "usage: cargo xtask <task>\n\ntasks:\n  bench    criterion + `ember bench write` workloads into target/bench/report.md (--peers: vs tensorboardX; --skip-criterion; --rounds R)\n  browser  the browser step of compat alone: TensorBoard's and MindInsight's pages in headless Chromium, over the last compat log\n  ci       run what CI runs\n  compat   check that TensorBoard and MindInsight read back every value kind ember writes, and show it in a browser\n  codegen  regenerate ember-pack's protobuf code (--check: fail if stale)\n  devices  train on two distinct wgpu devices (lavapipe without a GPU) against one device and the flex build\n  docs     run the README's and docs/'s sh blocks (those not marked `# needs: …`) and check their links and pip lines\n  features logging-only ember builds no Burn; docs of both feature sets build\n  gpu      on a machine with CUDA GPUs: the two-device suite, ember train on 1..N GPUs (--epochs E), and the scaling table against burn-train's strategies (--rounds R)\n  hosts    ranks on hosts of their own (network namespaces, as root): equivalence, a cut link, slow links into target/bench/hosts.md (--release: the release build, for the step times of docs/benchmarks.md)\n  live     kill and resume ember train 10 times under a live TensorBoard (Python loader and rustboard), which must show each step once, as an uninterrupted run\n  layers   check the crate layering against docs/architecture.md, no module cycle in any crate, the doc's paths, no function over 80 lines without a `// length: <why>`, and no file over 650\n  mpi      train 2 ranks under mpirun and check equivalence and fault handling (--bench: all-reduce cost)\n  objects  ember train --logdir s3://, gs://, az:// on loopback emulators (moto, fake-gcs-server, Azurite), read back by TensorBoard (--bench: what each costs, vs local disk and tensorboardX's s3:// writer; --rounds R; --checkpoints: the Trainer's checkpoints alone)\n  recovery how long a killed ember train takes to train again, part by part, into target/bench/recovery.md (--rounds R; --s3: the run in moto's S3)\n  resume   kill ember train with SIGKILL at seeded moments, resume it, and compare model and logs with an uninterrupted run in every reader\n  scaling  examples/s of 1 and 2 workers, ember against burn-train's own strategies, into target/bench/scaling.md (--rounds R; --mpi: ember as mpirun ranks too; --wgpu: on two wgpu devices too; --quick: one small round, as CI runs it)\n  slurm    a one-node Slurm cluster (as root): the sbatch script of examples/slurm plain, time-limited and requeued, preempted 3 times, cancelled; each as plain mpirun"
            );
            Ok(())
        }
    }
}

/// The workspace root: xtask's manifest sits one level below it.
fn workspace_root() -> PathBuf {
    // `cargo run` sets it for the process: the checkout being worked on, even when a target
    // directory shared between checkouts holds an xtask built in another one.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}
