//! `ember push [STAGING...]`: what a remote record's writer left in its staging directory when
//! it was killed (records written and not yet in the bucket), shipped to the URL it was
//! writing, from where it had got, and the directory removed once all of it is there.
//!
//! Without arguments, every staging directory of this user (`$TMPDIR/ember-staging-<uid>/*`)
//! whose writer is gone; a live writer's (it holds its lock) is left to its own mirror.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::output::{out, shown};

#[derive(Debug, Args)]
pub(crate) struct PushArgs {
    /// Staging directories to ship [default: every one of this user whose writer is gone].
    staging: Vec<PathBuf>,
}

pub(crate) fn run(args: PushArgs) -> anyhow::Result<ExitCode> {
    let orphans = ember::ship_orphans(&args.staging)?;
    let mut failed = 0;
    for orphan in &orphans {
        let url = orphan.url.as_deref().unwrap_or("?");
        match &orphan.outcome {
            Ok(bytes) => out(format!(
                "{}: {bytes} byte(s) shipped to {url}; removed",
                shown(&orphan.staging)
            )),
            Err(error) => {
                failed += 1;
                crate::output::err(format!("error: {}: {error}; kept", shown(&orphan.staging)));
            }
        }
    }
    if orphans.is_empty() {
        out("nothing to push: no staging directory left by a writer that is gone");
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
