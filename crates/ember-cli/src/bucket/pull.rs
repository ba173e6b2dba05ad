//! `ember pull URL DIR`: an object-store log directory brought back to a local directory, each
//! event file's segments joined into the file they were cut from, for the readers that only
//! read local directories (MindInsight) and for keeping a run when its bucket goes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, ensure};
use clap::Args;

use crate::output::{out, shown};

#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    /// The log directory's URL (`s3://bucket/run`, `gs://…`, `az://…`, `file://…`).
    url: String,
    /// The local directory to make (it must not exist yet, or be empty).
    dir: PathBuf,
}

pub(crate) fn run(args: PullArgs) -> anyhow::Result<ExitCode> {
    ensure!(
        ember::is_remote(&args.url),
        "{} is not an object-store URL (s3://, gs://, az://, file://)",
        args.url
    );
    let empty = match std::fs::read_dir(&args.dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(e).with_context(|| format!("reading {}", shown(&args.dir))),
    };
    ensure!(
        empty,
        "{} is not empty: pull into a new directory, so that no file is joined to another",
        shown(&args.dir)
    );
    std::fs::create_dir_all(&args.dir).with_context(|| format!("creating {}", shown(&args.dir)))?;
    let objects = ember::read::download(&args.url, &args.dir)?;
    out(format!(
        "{}: {objects} object(s) into {}",
        args.url,
        shown(&args.dir)
    ));
    Ok(ExitCode::SUCCESS)
}
