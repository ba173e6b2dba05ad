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

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// The checker's packages, pinned so that a pass means the same thing on every machine.
/// `tensorboard` 2.21.0 is the newest release PyPI offers here (its loaders are what is under
/// test); the others are what it resolved to with Python 3.11, pinned so that a new release of
/// a dependency cannot change the result between runs: `protobuf` parses the events, `numpy`
/// backs `tensor_util`, `pillow` decodes the PNGs.
pub(crate) const COMPAT_REQUIREMENTS: &[&str] = &[
    "tensorboard==2.21.0",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
];

/// MindInsight's checker packages, pinned as resolved with Python 3.11 and tested.
/// `mindinsight` 2.3.1 is the last release; it calls `np.PINF` and `np.NINF`, which numpy 2
/// removed (every tensor value then fails to load), hence `numpy` 1.26. `protobuf` 3.20.1 is
/// the newest it accepts; `pandas` and `pillow` are what it resolved to. (Its web server
/// needs older ones: `browser::MINDINSIGHT_WEB_REQUIREMENTS`.)
pub(crate) const MINDINSIGHT_REQUIREMENTS: &[&str] = &[
    "mindinsight==2.3.1",
    "numpy==1.26.4",
    "protobuf==3.20.1",
    "pandas==3.0.6",
    "pillow==13.0.0",
];

/// Epochs and examples of the `ember train` runs the checkers read: enough for validation
/// and a few steps, a few seconds in a debug build.
const TRAIN_ARGS: &[&str] = &["--epochs", "2", "--subset", "400", "--devices", "2"];

/// Why a Python environment could not be made: the machine lacks something, which is a skip
/// outside CI, or something broke, which is always an error.
#[derive(Debug)]
pub(crate) enum VenvError {
    /// Python, its venv module or PyPI is missing; the message says which.
    Unavailable(String),
    /// Anything else.
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for VenvError {
    fn from(e: anyhow::Error) -> Self {
        VenvError::Failed(e)
    }
}

/// The cargo target directory: `CARGO_TARGET_DIR` when set, else `<root>/target`.
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                root.join(dir)
            }
        }
        _ => root.join("target"),
    }
}

/// The cargo that runs xtask, so nested builds use the same toolchain.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Whether this run is under CI (`CI=true`), where a missing Python is a failure.
pub(crate) fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The `python` inside a venv.
pub(crate) fn venv_python(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

/// Makes the venv at `venv` with exactly `requirements` installed, or reuses it when a previous
/// run installed the same list (recorded in `ember-requirements.txt` inside it).
pub(crate) fn ensure_venv(venv: &Path, requirements: &[&str]) -> Result<PathBuf, VenvError> {
    let stamp = venv.join("ember-requirements.txt");
    let wanted = requirements.join("\n") + "\n";
    let python = venv_python(venv);
    if python.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(python);
    }
    let found = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !found.is_ok_and(|s| s.success()) {
        return Err(VenvError::Unavailable("python3 was not found".into()));
    }
    if venv.exists() {
        std::fs::remove_dir_all(venv)
            .with_context(|| format!("removing the stale venv {}", venv.display()))?;
    }
    eprintln!(
        "xtask: creating {} ({})",
        venv.display(),
        requirements.join(" ")
    );
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .stdout(Stdio::null())
        .output()
        .context("running python3 -m venv")?;
    if !made.status.success() {
        let _ = std::fs::remove_dir_all(venv);
        return Err(VenvError::Unavailable(format!(
            "python3 cannot make a virtual environment ({})",
            last_line(&made.stderr)
        )));
    }
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(requirements)
        .stdout(Stdio::null())
        .output()
        .context("running pip")?;
    if !installed.status.success() {
        let _ = std::fs::remove_dir_all(venv);
        return Err(VenvError::Unavailable(format!(
            "pip could not install {} from PyPI ({})",
            requirements.join(" "),
            last_line(&installed.stderr)
        )));
    }
    std::fs::write(&stamp, wanted).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(python)
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_string()
}

/// Turns an unavailable Python into one line and success, except under CI.
pub(crate) fn skip_or_fail(task: &str, why: &str) -> anyhow::Result<()> {
    if under_ci() {
        bail!("{task}: {why}; CI=true, so this is a failure");
    }
    eprintln!("{task}: skipped: {why} (set CI=true to make this an error)");
    Ok(())
}

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
        crate::browser::run(root, &dir, python, mindinsight.is_some())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_pinned() {
        for req in COMPAT_REQUIREMENTS.iter().chain(MINDINSIGHT_REQUIREMENTS) {
            let (name, version) = req.split_once("==").expect("pinned with ==");
            assert!(!name.is_empty() && !version.is_empty(), "{req}");
        }
        assert!(
            COMPAT_REQUIREMENTS
                .iter()
                .any(|r| r.starts_with("tensorboard=="))
        );
        // MindInsight 2.3.1 calls np.PINF, which numpy 2 removed.
        assert!(MINDINSIGHT_REQUIREMENTS.contains(&"mindinsight==2.3.1"));
        assert!(MINDINSIGHT_REQUIREMENTS.contains(&"numpy==1.26.4"));
    }

    #[test]
    fn a_missing_python_skips_outside_ci_only() {
        // The environment of the test decides which branch runs; both are checked by value.
        let result = skip_or_fail("compat", "python3 was not found");
        assert_eq!(result.is_err(), under_ci());
    }

    #[test]
    fn a_venv_with_the_right_stamp_is_reused_without_python() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        let python = venv_python(&venv);
        std::fs::create_dir_all(python.parent().unwrap()).unwrap();
        std::fs::write(&python, "").unwrap();
        std::fs::write(venv.join("ember-requirements.txt"), "a==1\nb==2\n").unwrap();
        let got = ensure_venv(&venv, &["a==1", "b==2"]);
        assert!(matches!(got, Ok(ref p) if *p == python), "{got:?}");
    }

    #[test]
    fn last_line_skips_blank_lines() {
        assert_eq!(last_line(b"first\nERROR: no route\n\n"), "ERROR: no route");
        assert_eq!(last_line(b""), "no message");
    }
}
