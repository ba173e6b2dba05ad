//! How the subcommands speak to the user: paths as given, and lines on stdout and stderr that
//! a closed pipe does not turn into errors or panics (`ember train 2>&1 | head` trains on to
//! the end once `head` has gone: printing stops, training does not), drawn above the progress
//! bar while one is shown.

use std::io::Write;
use std::sync::{Mutex, PoisonError};

use indicatif::ProgressBar;

/// The progress bar on the terminal now, if any: stderr lines are drawn above it.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

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

/// Writes `text` and a newline to stderr in one write (so that a line is not interleaved with
/// another process's on a shared stderr), above the progress bar if one is shown. Write
/// failures are ignored, as [`out`]'s.
pub(crate) fn err(text: impl std::fmt::Display) {
    err_bytes(format!("{text}\n").as_bytes());
}

/// Writes `bytes` to stderr as [`err`] does.
pub(crate) fn err_bytes(bytes: &[u8]) {
    let write = || {
        let _ = std::io::stderr().lock().write_all(bytes);
    };
    let bar = BAR.lock().unwrap_or_else(PoisonError::into_inner).clone();
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// Draws the lines of [`err`] above `bar` from now on; `None` once it is gone.
pub(crate) fn draw_above(bar: Option<ProgressBar>) {
    *BAR.lock().unwrap_or_else(PoisonError::into_inner) = bar;
}

/// `error` and its causes in one line, each cause once: ember's errors say their cause in
/// their own message and also give it as their source, so joining the chain as anyhow's `{:#}`
/// does would repeat each cause (a failed writer's error three times over).
pub(crate) fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let said = cause.to_string();
        if line.contains(&said) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&said);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Saying(&'static str, Option<Box<Saying>>);

    impl std::fmt::Display for Saying {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match &self.1 {
                Some(cause) => write!(f, "{}: {cause}", self.0),
                None => f.write_str(self.0),
            }
        }
    }

    impl std::error::Error for Saying {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as _)
        }
    }

    #[test]
    fn an_error_line_says_each_cause_once() {
        let disk = Saying("no space left", None);
        let file = Saying("cannot write f", Some(Box::new(disk)));
        let writer = Saying("writer failed", Some(Box::new(file)));
        let error = anyhow::Error::new(writer).context("writing summaries");
        assert_eq!(
            error_line(&error),
            "writing summaries: writer failed: cannot write f: no space left"
        );
        let plain = anyhow::anyhow!("bottom").context("middle").context("top");
        assert_eq!(error_line(&plain), "top: middle: bottom");
    }
}
