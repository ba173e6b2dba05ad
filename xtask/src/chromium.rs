//! Headless Chromium for the tasks that look at TensorBoard's and MindInsight's pages (compat's
//! browser step, the object stores' pages): Debian's `chromium`, driven by Playwright's Python
//! package from a venv (no browser build is ever downloaded). Without Chromium, Python or PyPI a
//! task skips in one line, except under `CI=true`, where that is a failure.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::pins::BROWSER_REQUIREMENTS;
use crate::process::{ensure_installed, skip_or_fail};
use crate::venv::{VenvError, ensure_venv};

/// The name the browser's messages start with.
pub(crate) const TASK: &str = "compat browser";

/// Debian's Chromium: the browser Playwright drives, from the package archive like the rest.
const PACKAGES: &[&str] = &["chromium"];

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

/// A venv, or a skip (outside CI) where Python or PyPI is missing.
pub(crate) fn venv_or_skip(
    target: &Path,
    name: &str,
    requirements: &[&str],
) -> anyhow::Result<Option<PathBuf>> {
    match ensure_venv(&target.join(name), requirements) {
        Ok(python) => Ok(Some(python)),
        Err(VenvError::Unavailable(why)) => skip_or_fail(TASK, &why).map(|()| None),
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// The system Chromium and the Python of the venv whose Playwright drives it; `None`, said in
/// one line (a failure under CI), where either cannot be had.
pub(crate) fn chromium_and_driver(target: &Path) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    if let Err(why) = ensure_installed(TASK, PACKAGES, chromium_missing) {
        return skip_or_fail(TASK, &why).map(|()| None);
    }
    let chromium = chromium().context("chromium vanished after it was found")?;
    let python = venv_or_skip(target, "compat-browser-venv", BROWSER_REQUIREMENTS)?;
    Ok(python.map(|python| (chromium, python)))
}
