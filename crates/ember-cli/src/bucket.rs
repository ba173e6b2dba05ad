//! The subcommands of log directories in object stores (the `object-store` feature): `pull`, a
//! bucket's run made local, and `push`, what killed writers left in their staging directories
//! shipped to their store.

use std::process::ExitCode;

use clap::Subcommand;

mod pull;
mod push;

#[derive(Debug, Subcommand)]
pub(crate) enum BucketCommand {
    /// Download an object-store log directory (`s3://bucket/run`) into a local directory, each
    /// event file whole again (for MindInsight, which reads local directories only).
    Pull(pull::PullArgs),
    /// Ship what killed writers left in their staging directories to the object store each
    /// was writing, and remove each once all of it is there.
    Push(push::PushArgs),
}

pub(crate) fn run(command: BucketCommand) -> anyhow::Result<ExitCode> {
    match command {
        BucketCommand::Pull(args) => pull::run(args),
        BucketCommand::Push(args) => push::run(args),
    }
}
