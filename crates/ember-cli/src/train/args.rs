//! `ember train`'s flags ([`TrainArgs`]), parsed by clap, saved beside a run's checkpoints and
//! parsed again on `--resume`.

use std::path::PathBuf;

use clap::Args;

use crate::devices::{DeviceList, parse_device_list};
use crate::format_arg::FormatArg;

#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    /// Devices to train on, comma-separated, the first being the main device: `cpu` (Burn's
    /// flex backend), `wgpu:N` (the N-th logical wgpu device: the N-th GPU, or a device of its
    /// own on the machine's one adapter), `cuda:N` [default: `cpu`; built with `--features
    /// wgpu`, `wgpu:0,wgpu:1`; with `--features cuda`, every CUDA device]. A device listed
    /// twice is shared by two workers.
    #[arg(long, value_name = "LIST", value_parser = parse_device_list)]
    pub(super) device: Option<DeviceList>,
    /// Worker threads [default: one per listed device; 2 on `cpu`, the flex backend's one
    /// device, which its workers share]. More workers than listed devices is an error unless
    /// --share-devices is given.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(super) devices: Option<u16>,
    /// Let more workers than listed devices share them, taking the list round robin.
    #[arg(long)]
    pub(super) share_devices: bool,
    /// Passes over the training set.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) epochs: u16,
    /// Where to write the summaries [default: runs/YYYY-MM-DDTHH-MM-SSZ, the UTC start time;
    /// -2, -3, … after it for runs started in the same second].
    #[arg(long)]
    pub(super) logdir: Option<PathBuf>,
    /// Event file format.
    #[arg(long, value_enum, default_value_t = FormatArg::Tensorboard)]
    pub(super) format: FormatArg,
    /// Use only the first N examples of the shuffled data set (for quick runs and tests).
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..))]
    pub(super) subset: Option<u64>,
    /// Examples per batch on each worker.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) batch_size: u16,
    /// Batches each worker adds up before an optimizer step: a step of the model trains on
    /// batch size × workers × this many examples. A run resumed on more workers than it began
    /// with spreads a window's batches over them, so this must be a multiple of the factor.
    #[arg(long, value_name = "STEPS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) grad_accumulation: u16,
    /// Hidden units of the MLP (up to 1,048,576: 78 M parameters).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub(super) hidden: u32,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 0.01)]
    pub(super) lr: f64,
    /// Give up on a worker whose step takes longer than this many seconds (counted from when
    /// its batch was sent): it is reported as timed out, abandoned and replaced. Off by default,
    /// since a first step on a GPU may compile kernels for long.
    #[arg(long, value_parser = parse_seconds)]
    pub(super) step_timeout: Option<std::time::Duration>,
    /// Threads of each worker's own compute pool (CPU backends). By default, workers that share
    /// the CPU each get their share of the cores this process may use (cores / workers, at
    /// least 1), and a single worker uses every core; `1` gives each worker a core of its own,
    /// the CPU stand-in for one device each.
    #[arg(long, value_name = "N")]
    pub(super) worker_threads: Option<std::num::NonZeroUsize>,
    /// Sample the process's CPU use and memory (and each device's, where the backend counts
    /// it) this often, off the training thread, recorded as `system/…` scalars.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_seconds)]
    pub(super) system_every: std::time::Duration,
    /// Under mpirun: end the whole job when a rank waits longer than this many seconds for
    /// the others in one round (a rank hung or gone). Rounds come once a step, so this bounds
    /// the slowest rank's step and each epoch's validation.
    #[cfg(feature = "mpi")]
    #[arg(long, default_value = "300", value_parser = parse_seconds)]
    pub(super) collective_timeout: std::time::Duration,
    /// Write a checkpoint every this many optimizer steps (and at each epoch's end), into
    /// `<logdir>/checkpoints`.
    #[arg(long, value_name = "STEPS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) checkpoint_every: u32,
    /// How many checkpoints to keep, newest first.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) keep_checkpoints: u16,
    /// Write no checkpoints.
    #[arg(long, conflicts_with_all = ["resume", "restart", "resume_if_any"])]
    pub(super) no_checkpoints: bool,
    /// One command line for a run's first start and every start after it (a batch script a
    /// scheduler runs again after preempting it): with --logdir R, starts fresh where R holds
    /// no run, goes on from the newest whole checkpoint where R holds this command's unfinished
    /// run (trains it again from its first step where it stopped before its first checkpoint),
    /// and exits 0 saying so where that run has finished. R holding a run started with other
    /// arguments, another run's files, or a live run is refused.
    #[arg(long, requires = "logdir", conflicts_with_all = ["resume", "restart"])]
    pub(super) resume_if_any: bool,
    /// Go on with the run in RUN_DIR (default: the newest under `runs/` that has not finished)
    /// from its newest whole checkpoint, with the arguments it was started with; its log is
    /// rolled back to the checkpoint first, so that every step shows once.
    /// A run without a whole checkpoint, a finished one, or one whose saved arguments its
    /// checkpoint contradicts (another batch size or data set size, a device count that cannot
    /// keep its global batch) is refused, and left as it is.
    #[arg(long, value_name = "RUN_DIR")]
    #[allow(clippy::option_option)]
    pub(super) resume: Option<Option<PathBuf>>,
    /// Train the run in RUN_DIR (default: the newest under `runs/`) again from its first step,
    /// with the arguments it was started with: its checkpoints and the log files it wrote are
    /// removed first. For a run stopped before its first checkpoint, which --resume refuses;
    /// a run whose saved `command.json` was lost is restarted with the flags given here.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "resume")]
    #[allow(clippy::option_option)]
    pub(super) restart: Option<Option<PathBuf>>,
    /// Also send the run's scalars (as metrics), hyper-parameters (as params) and its command,
    /// ember's version and the run's id (as tags) to the MLflow tracking server at URI
    /// [default: MLFLOW_TRACKING_URI, when set], into the experiment MLFLOW_EXPERIMENT_NAME or
    /// MLFLOW_EXPERIMENT_ID [default: Default], with MLFLOW_TRACKING_USERNAME and
    /// MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN; off the training thread, through a
    /// spool in the run's directory, each step once across resumes.
    #[arg(long, value_name = "URI", value_parser = parse_tracking_uri)]
    pub(crate) mlflow: Option<String>,
    /// With --mlflow: at the run's end, also upload its event files to the MLflow run as
    /// artifacts (`events/…`), for TensorBoard or MindInsight to open from there.
    #[arg(long)]
    pub(crate) mlflow_event_files: bool,
}

/// A tracking URI without credentials in it: the command is recorded with the run.
fn parse_tracking_uri(text: &str) -> Result<String, String> {
    let authority = text.split_once("://").map_or(text, |(_, rest)| rest);
    let authority = authority.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "give the credentials in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or \
             MLFLOW_TRACKING_TOKEN), not in the URI, which the run's command records"
                .into(),
        );
    }
    Ok(text.to_owned())
}

/// A positive, finite number of seconds.
pub(super) fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("`{text}` is not a positive number of seconds"))
}
