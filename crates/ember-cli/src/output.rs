//! How the subcommands speak to the user: paths as given, and lines on stdout that a closed
//! pipe does not turn into errors.

use std::io::Write;

/// A path as the user gave it, for messages.
pub(crate) fn shown(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// Writes `text` and a newline to stdout. A closed stdout (`ember inspect | head`) is not an
/// error worth reporting, so write failures are ignored.
pub(crate) fn out(text: impl std::fmt::Display) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
}
