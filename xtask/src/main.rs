//! ember's project automation, following the cargo-xtask convention
//! (<https://github.com/matklad/cargo-xtask>): `cargo xtask <task>` from anywhere in the workspace.
//! The tasks are [`Task`]'s variants, each line of `cargo xtask --help` its doc comment; each
//! task's module says in its own docs what it checks or measures and how.

mod architecture_doc;
mod bench;
mod chromium;
mod ci;
mod ci_steps;
mod codegen;
mod compat;
mod devices;
mod docs;
mod features;
mod gpu;
mod hosts;
mod layers;
mod mlflow;
mod module_cycles;
mod mpi;
mod mpirun;
mod objects;
mod pins;
mod process;
mod readers;
mod recovery;
mod resume;
mod runs;
mod scaling;
mod scenario;
mod server;
mod slurm;
mod stats;
mod task_imports;
mod venv;

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "ember's project automation"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

/// Every task of `cargo xtask`, written once.
#[derive(Debug, Subcommand)]
enum Task {
    /// Criterion benchmarks and the `ember bench write` workloads into target/bench/report.md.
    Bench(bench::Options),
    /// The browser step of compat alone: TensorBoard's and MindInsight's pages in headless
    /// Chromium, over the log the last compat wrote.
    Browser,
    /// Runs what CI runs (.ci/run), cheapest checks first.
    Ci,
    /// TensorBoard's and MindInsight's own loaders read back every value kind ember writes, and
    /// their pages show it in headless Chromium.
    Compat,
    /// Regenerates ember-pack's protobuf code.
    Codegen {
        /// Only check that the checked-in code is what the protos make.
        #[arg(long)]
        check: bool,
    },
    /// Trains on two distinct wgpu devices (lavapipe without a GPU) against one device and the
    /// flex build.
    Devices,
    /// Runs the README's and docs/'s sh blocks (those not marked `# needs: …`) and checks their
    /// links and pip lines.
    Docs,
    /// ember without its burn feature builds no Burn; the docs of both feature sets build.
    Features,
    /// On a machine with CUDA GPUs: the two-device suite, ember train on 1..N GPUs, and the
    /// scaling table against burn-train's strategies, into target/bench/gpu.md.
    Gpu {
        /// Rounds of the scaling table.
        #[arg(long, default_value = "1")]
        rounds: NonZeroUsize,
        /// Epochs of each ember train run.
        #[arg(long, default_value = "10")]
        epochs: NonZeroUsize,
    },
    /// Ranks on hosts of their own (network namespaces, as root): equivalence, a cut link, slow
    /// links into target/bench/hosts.md.
    Hosts {
        /// The release build, for the step times of docs/benchmarks.md.
        #[arg(long)]
        release: bool,
    },
    /// Kills and resumes ember train 10 times under a live TensorBoard (Python loader and
    /// rustboard), which must show each step once, as an uninterrupted run.
    Live,
    /// Checks the crate layering against docs/architecture.md, that no crate's modules import
    /// each other in circles, and the doc's paths.
    Layers,
    /// ember train --mlflow against a real MLflow tracking server (SQLite store, loopback), read
    /// back with MLflow's Python client: once, refused before training, killed and resumed,
    /// through a server outage.
    Mlflow {
        /// Measures metrics a second from ember and MLflow's Python client instead, into
        /// target/bench/mlflow.md.
        #[arg(long)]
        bench: bool,
        /// Rounds of --bench.
        #[arg(long, default_value = "3")]
        rounds: NonZeroUsize,
        /// Runs the Trainer's logging-overhead pairs (`overhead_paired`) with the sink off
        /// and on instead, this many pairs, into target/bench/mlflow-overhead.txt.
        #[arg(long, conflicts_with = "bench")]
        overhead: Option<NonZeroUsize>,
    },
    /// Trains 2 ranks under mpirun and checks equivalence and fault handling.
    Mpi {
        /// Measures the all-reduce's cost instead.
        #[arg(long)]
        bench: bool,
        /// Rounds of --bench.
        #[arg(long, default_value = "3")]
        rounds: NonZeroUsize,
    },
    /// ember train --logdir s3://, gs://, az:// on loopback emulators (moto, fake-gcs-server,
    /// Azurite), read back by TensorBoard.
    Objects {
        /// Measures what each store costs instead, against local disk and tensorboardX's
        /// s3:// writer.
        #[arg(long)]
        bench: bool,
        /// Rounds of --bench.
        #[arg(long, default_value = "5")]
        rounds: NonZeroUsize,
        /// With --bench: the Trainer's checkpoints alone.
        #[arg(long, requires = "bench")]
        checkpoints: bool,
    },
    /// How long a killed ember train takes to train again, part by part, into
    /// target/bench/recovery.md.
    Recovery {
        /// Rounds of each measurement.
        #[arg(long, default_value = "5")]
        rounds: NonZeroUsize,
        /// The run in moto's S3 rather than on local disk.
        #[arg(long)]
        s3: bool,
    },
    /// Kills ember train with SIGKILL at seeded moments, resumes it, and compares model and logs
    /// with an uninterrupted run in every reader.
    Resume,
    /// Examples/s of 1 and 2 workers, ember against burn-train's own strategies, into
    /// target/bench/scaling.md.
    Scaling(scaling::Options),
    /// A one-node Slurm cluster (as root): examples/slurm's sbatch script plain, time-limited and
    /// requeued, preempted 3 times, cancelled; each as plain mpirun.
    Slurm,
}

fn main() -> anyhow::Result<()> {
    let root = workspace_root();
    match Cli::parse().task {
        Task::Bench(options) => bench::run(&root, &options),
        Task::Browser => compat::browser::run_alone(&root),
        Task::Ci => ci::run(&root),
        Task::Compat => compat::run(&root),
        Task::Codegen { check } => codegen::run(&root, check),
        Task::Devices => devices::run(&root),
        Task::Docs => docs::run(&root),
        Task::Features => features::run(&root),
        Task::Gpu { rounds, epochs } => gpu::run(&root, rounds.get(), epochs.get()),
        Task::Hosts { release } => hosts::run(&root, release),
        Task::Layers => layers::run(&root),
        Task::Live => resume::live::run(&root),
        Task::Mlflow {
            bench,
            rounds,
            overhead,
        } => mlflow::run(
            &root,
            match (bench, overhead) {
                (_, Some(pairs)) => mlflow::Mode::Overhead(pairs.get()),
                (true, None) => mlflow::Mode::Bench(rounds.get()),
                (false, None) => mlflow::Mode::Scenarios,
            },
        ),
        Task::Mpi { bench, rounds } => mpi::run(&root, bench.then_some(rounds.get())),
        Task::Objects { bench: false, .. } => objects::run(&root),
        Task::Objects {
            bench: true,
            rounds,
            checkpoints,
        } => objects::bench::run(&root, rounds.get(), checkpoints),
        Task::Recovery { rounds, s3 } => recovery::run(&root, rounds.get(), s3),
        Task::Resume => resume::run(&root),
        Task::Scaling(options) => scaling::run(&root, &options),
        Task::Slurm => slurm::run(&root),
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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    #[test]
    fn the_task_list_is_consistent_and_every_ci_step_of_xtask_parses() {
        Cli::command().debug_assert();
        for step in crate::ci_steps::STEPS {
            if let Some(task) = step.strip_prefix("cargo xtask ") {
                let words = std::iter::once("xtask").chain(task.split_whitespace());
                if let Err(error) = Cli::try_parse_from(words) {
                    panic!("`{step}`: {error}");
                }
            }
        }
        assert!(Cli::try_parse_from(["xtask", "scaling", "--rounds", "0"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "objects", "--checkpoints"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "no-such-task"]).is_err());
    }
}
