//! The browser step of `cargo xtask compat` (alone: `cargo xtask browser`, over the log the
//! last compat run wrote): what ember writes, as users see it, in TensorBoard's and
//! MindInsight's own web pages.
//!
//! 1. Finds Chromium (`chromium`); as root with `apt-get`, installs Debian's `chromium` when
//!    missing. Makes (or reuses) `compat-browser-venv` under the target directory with
//!    Playwright's Python package, pinned, which drives that system Chromium: no browser build
//!    is downloaded (`playwright install` is never run). Without Chromium, Python or PyPI the
//!    step is skipped in one line, except under `CI=true`, where that is a failure. Makes (or
//!    reuses) `compat-mi-web-venv`: MindInsight pinned for its web server, which needs older
//!    packages than its loaders (see [`MINDINSIGHT_WEB_REQUIREMENTS`]).
//! 2. Runs `xtask/compat/check_browser.py` there: it starts TensorBoard (from `compat-venv`)
//!    on loopback over `<dir>` (the compat_writer run and the demo `ember train` run), and
//!    MindInsight (from `compat-mi-web-venv`) over `<dir>/mindinsight`, opens every plugin's page
//!    in headless Chromium, asserts that each expected tag is listed with its chart, image,
//!    table or player drawn with data and no error on the page, and saves one screenshot per
//!    page into `<target>/compat/screenshots`, which it prints.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::chromium::{TASK, chromium_and_driver, venv_or_skip};
use crate::pins::MINDINSIGHT_WEB_REQUIREMENTS;
use crate::process::target_dir;
use crate::venv::venv_python;

/// `cargo xtask browser`: the step alone, over the log of the last `cargo xtask compat`.
pub(crate) fn run_alone(root: &Path) -> anyhow::Result<()> {
    let target = target_dir(root);
    let dir = target.join("compat").join("run");
    ensure!(
        dir.join("manifest.json").is_file(),
        "no compat log in {}: run `cargo xtask compat` first",
        dir.display()
    );
    let tensorboard = venv_python(&target.join("compat-venv"));
    ensure!(
        tensorboard.exists(),
        "no TensorBoard venv in {}: run `cargo xtask compat` first",
        target.display()
    );
    run(root, &dir, &tensorboard, true)
}

/// Checks `dir` (a compat log) in TensorBoard's pages, run by `tensorboard` (a venv's Python),
/// and, with `mindinsight`, `dir/mindinsight` in MindInsight's.
pub(crate) fn run(
    root: &Path,
    dir: &Path,
    tensorboard: &Path,
    mindinsight: bool,
) -> anyhow::Result<()> {
    let target = target_dir(root);
    let Some((chromium, python)) = chromium_and_driver(&target)? else {
        return Ok(());
    };
    let mindinsight = if mindinsight {
        venv_or_skip(&target, "compat-mi-web-venv", MINDINSIGHT_WEB_REQUIREMENTS)?
    } else {
        None
    };
    let shots = target.join("compat").join("screenshots");
    let script = root.join("xtask/compat/check_browser.py");
    let mut command = Command::new(&python);
    command
        .arg(&script)
        .arg("--chromium")
        .arg(&chromium)
        .arg("--shots")
        .arg(&shots)
        .arg("--tensorboard")
        .arg(tensorboard)
        .arg("--logdir")
        .arg(dir)
        .current_dir(root);
    if let Some(mindinsight) = &mindinsight {
        command
            .arg("--mindinsight")
            .arg(mindinsight)
            .arg("--summary-base-dir")
            .arg(dir.join("mindinsight"));
    }
    let started = std::time::Instant::now();
    let status = command
        .status()
        .with_context(|| format!("starting {}", script.display()))?;
    if !status.success() {
        bail!(
            "the web pages do not show what ember wrote ({status}); screenshots in {}",
            shots.display()
        );
    }
    eprintln!("{TASK}: passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_browser_is_downloaded() {
        // The script launches the system browser; a downloaded build would need the network.
        let script =
            std::fs::read_to_string(crate::workspace_root().join("xtask/compat/check_browser.py"))
                .unwrap();
        assert!(script.contains("executable_path=chromium"));
        assert!(!script.contains("playwright install"));
    }
}
