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

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::process::{ensure_installed, skip_or_fail, target_dir};
use crate::venv::{VenvError, ensure_venv, venv_python};

const TASK: &str = "compat browser";

/// Debian's Chromium: the browser Playwright drives, from the package archive like the rest.
const PACKAGES: &[&str] = &["chromium"];

/// Playwright's Python package, pinned so that a pass means the same on every machine;
/// `greenlet` is what its synchronous API runs on, as resolved with Python 3.11. The package
/// carries its own driver; it is pointed at the system Chromium with `executable_path`.
pub(crate) const BROWSER_REQUIREMENTS: &[&str] = &["playwright==1.65.2", "greenlet==3.5.6"];

/// MindInsight for its web server: `compat::MINDINSIGHT_REQUIREMENTS` with two packages older
/// than pip picks, which its loaders do not need. Its lineage search validators take
/// marshmallow 3's arguments (with 4 every lineage page gets a 500), and its lineage page's
/// optimizer panel calls `DataFrame.iteritems`, which pandas 2 removed. A venv of its own, so
/// that the loaders stay checked with what pip resolves for them.
pub(crate) const MINDINSIGHT_WEB_REQUIREMENTS: &[&str] = &[
    "mindinsight==2.3.1",
    "numpy==1.26.4",
    "protobuf==3.20.1",
    "pandas==1.5.3",
    "marshmallow==3.26.2",
    "pillow==13.0.0",
];

/// The system Chromium, where there is one.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

fn chromium_missing() -> Vec<&'static str> {
    if chromium().is_some() {
        Vec::new()
    } else {
        vec!["chromium"]
    }
}

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

/// A venv, or a skip (outside CI) where Python or PyPI is missing.
fn venv(target: &Path, name: &str, requirements: &[&str]) -> anyhow::Result<Option<PathBuf>> {
    match ensure_venv(&target.join(name), requirements) {
        Ok(python) => Ok(Some(python)),
        Err(VenvError::Unavailable(why)) => skip_or_fail(TASK, &why).map(|()| None),
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// The system Chromium and the Python of the venv whose Playwright drives it (also what
/// `cargo xtask objects` opens TensorBoard's page over each cloud with); `None`, said in one
/// line (a failure under CI), where either cannot be had.
pub(crate) fn chromium_and_driver(target: &Path) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    if let Err(why) = ensure_installed(TASK, PACKAGES, chromium_missing) {
        return skip_or_fail(TASK, &why).map(|()| None);
    }
    let chromium = chromium().context("chromium vanished after it was found")?;
    let python = venv(target, "compat-browser-venv", BROWSER_REQUIREMENTS)?;
    Ok(python.map(|python| (chromium, python)))
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
        venv(&target, "compat-mi-web-venv", MINDINSIGHT_WEB_REQUIREMENTS)?
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
    use super::*;

    #[test]
    fn playwright_is_pinned_and_no_browser_is_downloaded() {
        assert!(BROWSER_REQUIREMENTS.contains(&"playwright==1.65.2"));
        assert!(MINDINSIGHT_WEB_REQUIREMENTS.contains(&"marshmallow==3.26.2"));
        for req in BROWSER_REQUIREMENTS
            .iter()
            .chain(MINDINSIGHT_WEB_REQUIREMENTS)
        {
            assert!(req.split_once("==").is_some(), "{req} is not pinned");
        }
        // The script launches the system browser; a downloaded build would need the network.
        let script =
            std::fs::read_to_string(crate::workspace_root().join("xtask/compat/check_browser.py"))
                .unwrap();
        assert!(script.contains("executable_path=chromium"));
        assert!(!script.contains("playwright install"));
    }
}
