//! `cargo xtask compat`: ember's files, read back by TensorBoard and MindInsight themselves.
//!
//! 1. Makes (or reuses) two Python virtual environments under the target directory, each with
//!    pinned packages: `compat-venv` with `tensorboard`, `compat-mi-venv` with `mindinsight`
//!    (apart, because MindInsight 2.3.1 needs `numpy<2`).
//! 2. Runs `cargo run -p ember --example compat_writer -- <dir>`, which writes every value kind
//!    with ember and a manifest of its raw inputs (xtask does not depend on ember crates), in
//!    TensorBoard format in `<dir>` and in MindInsight format in the base directory
//!    `<dir>/mindinsight` (with a job laid out as MindSpore writes one), then two short
//!    `ember train` runs: `--format tensorboard` into `<dir>/train-tb` and `--format
//!    mindinsight` into `<dir>/mindinsight/ember-train`.
//! 3. Runs `xtask/compat/check_tensorboard.py <dir> <dir>/train-tb` in the first venv:
//!    TensorBoard's event accumulators must read every tag back with the right kind, steps and
//!    values, read every whole record of copies of the file cut mid-record, and its hparams data
//!    provider must give the train run's final metrics as columns; and `ember inspect --json
//!    --values <dir>` (saved beside it as `inspect.json`) must list the PR curves, audio clips,
//!    custom scalars layout and embeddings of both runs as TensorBoard's plugins return them. Then
//!    `xtask/compat/check_mindinsight.py <dir>/mindinsight` in the second: MindInsight's data
//!    manager must read every kind back, resolve every graph edge, and list all three jobs in
//!    its lineage query.
//!
//! 4. The browser step (`browser.rs`): TensorBoard's and MindInsight's web pages, in headless
//!    Chromium, show every plugin's tags with data, one screenshot per page.
//!
//! Each checker prints one line with its counts. Where Python, its `venv` module or PyPI is
//! unavailable, a reader is skipped in one line and the task succeeds, except under `CI=true`,
//! where that is a failure.

pub(crate) mod browser;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::pins::{COMPAT_REQUIREMENTS, MINDINSIGHT_REQUIREMENTS};
use crate::process::{cargo, skip_or_fail, target_dir};
use crate::venv::{VenvError, ensure_venv};

/// Epochs and examples of the `ember train` runs the checkers read: enough for validation
/// and a few steps, a few seconds in a debug build.
const TRAIN_ARGS: &[&str] = &["--epochs", "2", "--subset", "400", "--devices", "2"];

/// A venv for one reader, or why there is none (then the reader is skipped).
fn reader_venv(
    target: &Path,
    name: &str,
    requirements: &[&str],
) -> anyhow::Result<Result<PathBuf, String>> {
    match ensure_venv(&target.join(name), requirements) {
        Ok(python) => Ok(Ok(python)),
        Err(VenvError::Unavailable(why)) => Ok(Err(why)),
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// Runs `cargo run --quiet <args>` in `root`, failing with `what` and its output when it fails
/// (a passing run's progress output would only bury the checkers' lines).
fn cargo_run(root: &Path, args: &[&str], what: &str) -> anyhow::Result<()> {
    let out = cargo()
        .args(["run", "--quiet"])
        .args(args)
        .current_dir(root)
        .output()
        .with_context(|| format!("starting {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Saves `ember inspect --json --values <dir>` in `out`, for the checker to hold against
/// TensorBoard's plugins.
fn ember_inspect(root: &Path, dir: &str, out: &Path) -> anyhow::Result<()> {
    let args = [
        "run",
        "--quiet",
        "-p",
        "ember-cli",
        "--",
        "inspect",
        "--json",
        "--values",
        dir,
    ];
    let inspect = cargo()
        .args(args)
        .current_dir(root)
        .output()
        .context("starting ember inspect")?;
    if !inspect.status.success() {
        bail!(
            "ember inspect finds problems in {dir} ({}):\n{}",
            inspect.status,
            String::from_utf8_lossy(&inspect.stderr)
        );
    }
    std::fs::write(out, &inspect.stdout).with_context(|| format!("writing {}", out.display()))
}

/// Runs a checker script in its venv; its last line (the counts) is printed by the script.
fn check(
    python: &Path,
    root: &Path,
    script: &str,
    args: &[&Path],
    reader: &str,
) -> anyhow::Result<()> {
    let script = root.join(script);
    let status = Command::new(python)
        .arg(&script)
        .args(args)
        .current_dir(root)
        // TensorBoard warns that TensorFlow is missing; the stub is what we test against.
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .status()
        .with_context(|| format!("starting {}", script.display()))?;
    if !status.success() {
        bail!("{reader} does not read ember's files back as written ({status})");
    }
    Ok(())
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let target = target_dir(root);
    let tensorboard = reader_venv(&target, "compat-venv", COMPAT_REQUIREMENTS)?;
    let mindinsight = reader_venv(&target, "compat-mi-venv", MINDINSIGHT_REQUIREMENTS)?;
    // Without Python or PyPI both readers are missing for the same reason: one line says so.
    let (tensorboard, mindinsight) = match (tensorboard, mindinsight) {
        (Err(why), Err(_)) => return skip_or_fail("compat", &why),
        (Err(why), Ok(mi)) => {
            skip_or_fail("compat", &format!("the TensorBoard reader: {why}"))?;
            (None, Some(mi))
        }
        (Ok(tb), Err(why)) => {
            skip_or_fail("compat", &format!("the MindInsight reader: {why}"))?;
            (Some(tb), None)
        }
        (Ok(tb), Ok(mi)) => (Some(tb), Some(mi)),
    };

    let dir = target.join("compat").join("run");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    eprintln!(
        "compat: writing every value kind with ember into {}",
        dir.display()
    );
    let dir_str = dir.to_str().context("the target directory is not UTF-8")?;
    cargo_run(
        root,
        &["-p", "ember", "--example", "compat_writer", "--", dir_str],
        "the compat_writer example",
    )?;
    let train_tb = dir.join("train-tb");
    let train_mi = dir.join("mindinsight").join("ember-train");
    for (format, logdir) in [("tensorboard", &train_tb), ("mindinsight", &train_mi)] {
        let logdir = logdir
            .to_str()
            .context("the target directory is not UTF-8")?;
        let mut args = vec!["-p", "ember-cli", "--", "train", "--format", format];
        args.extend(TRAIN_ARGS);
        args.extend(["--logdir", logdir]);
        cargo_run(root, &args, &format!("ember train --format {format}"))?;
    }

    if let Some(python) = &tensorboard {
        let inspect = target.join("compat").join("inspect.json");
        ember_inspect(root, dir_str, &inspect)?;
        check(
            python,
            root,
            "xtask/compat/check_tensorboard.py",
            &[&dir, &train_tb, Path::new("--ember-inspect"), &inspect],
            "TensorBoard",
        )?;
    }
    if let Some(python) = &mindinsight {
        check(
            python,
            root,
            "xtask/compat/check_mindinsight.py",
            &[&dir.join("mindinsight")],
            "MindInsight",
        )?;
    }
    // The pages need TensorBoard's server; MindInsight's pages come along where it is here.
    if let Some(python) = &tensorboard {
        browser::run(root, &dir, python, mindinsight.is_some())?;
    }
    Ok(())
}
