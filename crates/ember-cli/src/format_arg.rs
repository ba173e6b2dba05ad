//! The `--format` flag every writing subcommand takes, and the event-file format it names.

use clap::ValueEnum;

/// The event file format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FormatArg {
    /// TensorBoard's `*.tfevents.*` files.
    Tensorboard,
    /// MindInsight's `*.out.events.summary.*` files.
    Mindinsight,
}

impl FormatArg {
    pub(crate) fn format(self) -> ember::pack::Format {
        match self {
            FormatArg::Tensorboard => ember::pack::Format::TensorBoard,
            FormatArg::Mindinsight => ember::pack::Format::MindInsight,
        }
    }
}
