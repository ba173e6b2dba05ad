//! `ember bench write`: one write workload end to end through the facade's public per-value
//! API (`SummaryRecord::add_scalar`, `add_histogram`, ...), reported as one JSON line; and
//! `ember bench memory`, a plain read pass over the histogram workload's input, the memory
//! bound `cargo xtask bench` sets the histogram figure against.

pub(crate) mod scaling;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use ember::pack::{ImageLayout, TensorValue};
use ember::{Plugin, SummaryError, SummaryRecord};
use serde_json::json;

use crate::format_arg::FormatArg;

/// The write benchmark workloads. Each step makes the calls a user makes for it, and the data
/// is that of `xtask/bench/workload.py` (see [`data`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum WorkloadArg {
    /// One `add_scalar` a step, tag `loss`.
    Scalars,
    /// Ten `add_scalar` calls a step (ten events), tags `m0`..`m9`.
    Scalars10,
    /// Ten `add_value` calls and one `record` a step: one event with ten values.
    #[value(name = "scalars10-record")]
    Scalars10Record,
    /// One `add_histogram` of 100,000 normal f32 (a slice) a step.
    Hist,
    /// One `add_image` of a 3x64x64 f32 CHW image a step.
    Image,
    /// One `add_tensor` of 100,000 f32 (a slice) a step.
    Tensor,
}

impl WorkloadArg {
    fn name(self) -> &'static str {
        match self {
            WorkloadArg::Scalars => "scalars",
            WorkloadArg::Scalars10 => "scalars10",
            WorkloadArg::Scalars10Record => "scalars10-record",
            WorkloadArg::Hist => "hist",
            WorkloadArg::Image => "image",
            WorkloadArg::Tensor => "tensor",
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct WriteArgs {
    /// What each step records.
    #[arg(long, value_enum)]
    workload: WorkloadArg,
    /// Steps to record.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    n: u64,
    /// An empty or new directory to write into (the byte count is everything under it); with
    /// the `object-store` feature, an object-store URL (the byte count is the bytes shipped).
    #[arg(long)]
    out: PathBuf,
    /// Flush every this many steps (as a loop that wants its values readable at once does);
    /// by default only the timed flushes and the close.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    flush_every: Option<u64>,
    /// Event file format.
    #[arg(long, value_enum, default_value_t = FormatArg::Tensorboard)]
    format: FormatArg,
    /// Also send every scalar to the MLflow tracking server at URI (a new run in
    /// MLFLOW_EXPERIMENT_NAME or _ID): `seconds` then runs until the server has taken them all.
    #[arg(long, value_name = "URI")]
    mlflow: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct MemoryArgs {
    /// Read passes over the histogram workload's 400,000 bytes.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    n: u64,
}

/// The workloads' fixed data: SplitMix64 from [`data::SEED`], normals by Box–Muller, so every
/// run, every machine and the Python peers (`xtask/bench/workload.py`) see the same bytes.
pub(crate) mod data {
    /// The seed of every workload's fixed data.
    pub(crate) const SEED: u64 = 0x000e_4be5_2026;
    /// Elements of the `hist` and `tensor` vectors.
    pub(crate) const VECTOR_LEN: usize = 100_000;
    /// The `image` workload's shape: channels, height, width.
    pub(crate) const IMAGE_SHAPE: [usize; 3] = [3, 64, 64];

    /// SplitMix64.
    pub(crate) struct SplitMix64(u64);

    impl SplitMix64 {
        pub(crate) fn new(seed: u64) -> Self {
            Self(seed)
        }

        pub(crate) fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in [0, 1) with 53 random bits.
        pub(crate) fn next_f64(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
        }

        /// Standard normal (Box–Muller).
        pub(crate) fn next_normal(&mut self) -> f64 {
            let u1 = 1.0 - self.next_f64();
            let u2 = self.next_f64();
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        }
    }

    /// 100,000 standard normal f32.
    pub(crate) fn hist() -> Vec<f32> {
        let mut rng = SplitMix64::new(SEED);
        (0..VECTOR_LEN).map(|_| rng.next_normal() as f32).collect()
    }

    /// 3x64x64 f32 in [0, 1).
    pub(crate) fn image() -> Vec<f32> {
        let mut rng = SplitMix64::new(SEED);
        let n: usize = IMAGE_SHAPE.iter().product();
        (0..n).map(|_| rng.next_f64() as f32).collect()
    }

    /// 100,000 f32 in [0, 1).
    pub(crate) fn tensor() -> Vec<f32> {
        let mut rng = SplitMix64::new(SEED);
        (0..VECTOR_LEN).map(|_| rng.next_f64() as f32).collect()
    }
}

pub(crate) fn write(args: WriteArgs) -> anyhow::Result<ExitCode> {
    if let Ok(mut entries) = std::fs::read_dir(&args.out)
        && entries.next().is_some()
    {
        bail!(
            "--out {} is not empty: the byte count covers everything under it; give a new or \
             empty directory",
            crate::output::shown(&args.out)
        );
    }
    let workload = args.workload;
    // The fixed data and tags are built before the clock starts: they are the input.
    let values = match workload {
        WorkloadArg::Hist => data::hist(),
        WorkloadArg::Image => data::image(),
        WorkloadArg::Tensor => data::tensor(),
        _ => Vec::new(),
    };
    let tags: Vec<String> = (0..10).map(|k| format!("m{k}")).collect();
    let mut builder = SummaryRecord::builder(&args.out).format(args.format.format());
    if let Some(config) = ember::track::MlflowConfig::from_env(args.mlflow.as_deref())? {
        builder = builder.mlflow(config, ember::track::Continue::No, &[]);
    }
    let mut summary = builder
        .build()
        .with_context(|| format!("cannot create {}", crate::output::shown(&args.out)))?;

    let started = Instant::now();
    for step in 0..args.n {
        write_step(&mut summary, workload, &tags, &values, step)
            .with_context(|| format!("writing step {step}"))?;
        if args
            .flush_every
            .is_some_and(|every| (step + 1) % every == 0)
        {
            summary
                .flush()
                .with_context(|| format!("flushing at step {step}"))?;
        }
    }
    // What the loop itself cost its caller: the values queued, nothing waited for.
    let loop_seconds = started.elapsed().as_secs_f64();
    summary.close().context("closing the summary files")?;
    let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);

    let shipped = summary.shipped_bytes();
    let bytes = match shipped {
        Some(bytes) => bytes,
        None => size_under(&args.out)
            .with_context(|| format!("measuring {}", crate::output::shown(&args.out)))?,
    };
    crate::output::out(json!({
        "peer": "ember",
        "workload": workload.name(),
        "n": args.n,
        "seconds": seconds,
        "loop_seconds": loop_seconds,
        "per_second": args.n as f64 / seconds,
        "bytes": bytes,
    }));
    Ok(ExitCode::SUCCESS)
}

/// The calls a user makes for one step of `workload`.
fn write_step(
    summary: &mut SummaryRecord,
    workload: WorkloadArg,
    tags: &[String],
    values: &[f32],
    step: u64,
) -> Result<(), SummaryError> {
    let s = step as f64;
    let at = step as i64;
    match workload {
        WorkloadArg::Scalars => summary.add_scalar("loss", 1.0 / (s + 1.0), at),
        WorkloadArg::Scalars10 => tags
            .iter()
            .enumerate()
            .try_for_each(|(k, tag)| summary.add_scalar(tag, 1.0 / (s + 1.0 + k as f64), at)),
        WorkloadArg::Scalars10Record => tags
            .iter()
            .enumerate()
            .try_for_each(|(k, tag)| {
                summary.add_value(Plugin::Scalar, tag, 1.0 / (s + 1.0 + k as f64))
            })
            .and_then(|()| summary.record(at)),
        WorkloadArg::Hist => summary.add_histogram("w", values, at),
        WorkloadArg::Image => summary.add_image(
            "img",
            TensorValue::from_slice(values, data::IMAGE_SHAPE),
            ImageLayout::Chw,
            at,
        ),
        WorkloadArg::Tensor => summary.add_tensor("t", values, at),
    }
}

/// `n` read passes over the histogram input: every 64-bit word folded into eight XOR lanes (a
/// loop the compiler vectorizes, bound by how fast the bytes arrive), one JSON line.
pub(crate) fn memory(args: MemoryArgs) -> anyhow::Result<ExitCode> {
    let values = data::hist();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let words: Vec<u64> = bytes
        .as_chunks::<8>()
        .0
        .iter()
        .map(|w| u64::from_le_bytes(*w))
        .collect();
    let mut fold = 0u64;
    let started = Instant::now();
    for _ in 0..args.n {
        let words = std::hint::black_box(&words[..]);
        let mut lanes = [0u64; 8];
        for chunk in words.as_chunks::<8>().0 {
            for j in 0..8 {
                lanes[j] ^= chunk[j];
            }
        }
        fold ^= lanes.iter().fold(0, |a, b| a ^ b);
    }
    let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
    std::hint::black_box(fold);
    crate::output::out(json!({
        "peer": "memory",
        "workload": "hist",
        "n": args.n,
        "seconds": seconds,
        "per_second": args.n as f64 / seconds,
        "bytes": bytes.len(),
    }));
    Ok(ExitCode::SUCCESS)
}

/// Total size of the files under `dir`, recursively.
fn size_under(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        // The lock a record holds on the directory, and its journal, are not output.
        let bookkeeping = [ember::DirLock::locks_dir(dir), ember::Journal::dir_in(dir)];
        if kind.is_dir() && !bookkeeping.contains(&entry.path()) {
            total += size_under(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::data::*;

    #[test]
    fn splitmix_is_deterministic_and_normal_is_plausible() {
        let mut a = SplitMix64::new(1);
        let mut b = SplitMix64::new(1);
        assert_eq!(a.next_u64(), b.next_u64());
        let xs = hist();
        let n = xs.len() as f64;
        let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = xs
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "var {var}");
        assert_eq!(hist(), hist());
        assert_eq!(image().len(), 3 * 64 * 64);
        assert!(tensor().iter().all(|x| (0.0..1.0).contains(x)));
    }
}
