//! `cargo xtask bench`'s options, which the runs follow and the report states: a module of its
//! own, so that the runs (`bench.rs`) and the report (`report.rs`) share it.

use std::num::NonZeroUsize;

#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// tensorboardX's writer too, side by side.
    #[arg(long)]
    pub(crate) peers: bool,
    /// Leave the criterion benchmarks out.
    #[arg(long)]
    pub(crate) skip_criterion: bool,
    /// Rounds of each workload.
    #[arg(long, default_value = "5")]
    pub(crate) rounds: NonZeroUsize,
}
