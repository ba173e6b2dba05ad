//! `ember bench write`: one write workload end to end through the facade's `SummaryRecord`,
//! reported as one JSON line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use ember::SummaryRecord;
use ember::workload::{Workload, WorkloadKind};
use serde_json::json;

use crate::FormatArg;

/// The write benchmark workloads (ember-write's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum WorkloadArg {
    /// One scalar a step, tag `loss`.
    Scalars,
    /// Ten scalars a step, tags `m0`..`m9`.
    Scalars10,
    /// One histogram of 100,000 normal floats a step.
    Hist,
    /// One 3x64x64 float image a step.
    Image,
    /// One tensor of 100,000 floats a step.
    Tensor,
}

impl WorkloadArg {
    fn kind(self) -> WorkloadKind {
        match self {
            WorkloadArg::Scalars => WorkloadKind::Scalars,
            WorkloadArg::Scalars10 => WorkloadKind::Scalars10,
            WorkloadArg::Hist => WorkloadKind::Hist,
            WorkloadArg::Image => WorkloadKind::Image,
            WorkloadArg::Tensor => WorkloadKind::Tensor,
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
    /// An empty or new directory to write into (the byte count is everything under it).
    #[arg(long)]
    out: PathBuf,
    /// Event file format.
    #[arg(long, value_enum, default_value_t = FormatArg::Tensorboard)]
    format: FormatArg,
}

pub(crate) fn write(args: WriteArgs) -> anyhow::Result<ExitCode> {
    if let Ok(mut entries) = std::fs::read_dir(&args.out)
        && entries.next().is_some()
    {
        bail!(
            "--out {} is not empty: the byte count covers everything under it; give a new or \
             empty directory",
            crate::shown(&args.out)
        );
    }
    let kind = args.workload.kind();
    // The workload's data is built before the clock starts: it is the input, not the work.
    let workload = Workload::new(kind);
    let mut summary = SummaryRecord::builder(&args.out)
        .format(args.format.format())
        .build()
        .with_context(|| format!("cannot create {}", crate::shown(&args.out)))?;

    let started = Instant::now();
    for step in 0..args.n {
        summary
            .write_record(workload.record(step))
            .with_context(|| format!("writing step {step}"))?;
    }
    summary.close().context("closing the summary files")?;
    let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);

    let bytes =
        size_under(&args.out).with_context(|| format!("measuring {}", crate::shown(&args.out)))?;
    crate::out(json!({
        "peer": "ember",
        "workload": kind.name(),
        "n": args.n,
        "seconds": seconds,
        "per_second": args.n as f64 / seconds,
        "bytes": bytes,
    }));
    Ok(ExitCode::SUCCESS)
}

/// Total size of the files under `dir`, recursively.
fn size_under(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += size_under(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}
