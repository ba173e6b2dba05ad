//! `ember`: train a digit classifier on several workers while recording TensorBoard or
//! MindInsight summaries, inspect event files, and benchmark writing them.
//!
//! Every failure ends as one `error: ...` line on stderr and a non-zero exit code; bad flags are
//! clap's (exit 2).

mod allocator;
mod bench;
#[cfg(feature = "object-store")]
mod bucket;
mod devices;
mod digits;
mod format_arg;
mod inspect;
mod job;
mod logger;
mod output;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Observable multi-device training with Burn: summaries TensorBoard and MindInsight open.
#[derive(Debug, Parser)]
#[command(name = "ember", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train a digit classifier (8x8 handwritten digits) on several workers, recording summaries.
    ///
    /// Exit code: 0 when trained; 1 on an error; 3 when trained and the model saved but the log
    /// is incomplete (a log writer failed, a full disk: the last line names the step); 128 +
    /// the signal when Ctrl-C (130), SIGTERM (143) or SIGHUP (129) stopped it after a step,
    /// with a checkpoint and whole logs.
    Train(train::TrainArgs),
    /// List the runs, files and tags under a directory (or of one file), checking every record.
    ///
    /// Only regular files are read; anything else named like an event file (a FIFO, a device, a
    /// dangling link) is skipped with a warning naming it.
    ///
    /// Exit code: 0 when every record is whole and valid, or when the only problem is a
    /// truncated tail (a file still being written, or cut by a crash: a warning); 1 when a
    /// record is corrupt or a file cannot be read.
    Inspect(inspect::InspectArgs),
    #[cfg(feature = "object-store")]
    #[command(flatten)]
    Bucket(bucket::BucketCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Write one workload end to end through SummaryRecord's per-value API and print one JSON
    /// line.
    Write(bench::WriteArgs),
    /// Time plain read passes over the histogram workload's input (the memory bound) and print
    /// one JSON line.
    Memory(bench::MemoryArgs),
    /// One data-parallel training run, by ember or by one of burn-train's strategies, as one
    /// JSON line (`cargo xtask scaling` runs the sides against one another).
    Scaling(bench::scaling::ScalingArgs),
}

fn main() -> ExitCode {
    quiet_vulkan_device_select();
    logger::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Train(args) => train::run(args),
        Command::Inspect(args) => inspect::run(args),
        #[cfg(feature = "object-store")]
        Command::Bucket(command) => bucket::run(command),
        Command::Bench(BenchCommand::Write(args)) => bench::write(args),
        Command::Bench(BenchCommand::Memory(args)) => bench::memory(args),
        Command::Bench(BenchCommand::Scaling(args)) => bench::scaling::scaling(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            // One line: the context chain joined, each cause once, no backtrace; `err` writes
            // it at once, so that under mpirun, which merges every rank's stderr, it is not
            // interleaved with another rank's.
            output::err(format!("error: {}", output::error_line(&error)));
            ExitCode::FAILURE
        }
    }
}

/// Turns off Mesa's implicit `VK_LAYER_MESA_device_select` Vulkan layer for this process,
/// unless the user set `NODEVICE_SELECT` themselves. The layer only reorders adapters by the
/// desktop's default GPU (ember picks its adapters by index itself), and on a machine without a
/// Wayland session it prints `error: XDG_RUNTIME_DIR is invalid or not set in the environment.`
/// each time an instance lists its devices: noise a user of `ember train --device wgpu:0,...`
/// should not see. The layer reads only its environment switch, so that is the way to say it.
#[cfg(feature = "wgpu")]
#[allow(unsafe_code)]
fn quiet_vulkan_device_select() {
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: called first thing in `main`, before any thread exists that could read or
        // write the environment concurrently.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
}

#[cfg(not(feature = "wgpu"))]
fn quiet_vulkan_device_select() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
