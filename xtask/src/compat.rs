//! `cargo xtask compat`: ember's TensorBoard files, read back by TensorBoard itself.
//!
//! 1. Makes (or reuses) a Python virtual environment under `<target>/compat-venv` with pinned
//!    `tensorboard` and the few packages the checker imports.
//! 2. Runs `cargo run -p ember --example compat_writer -- <dir>`, which writes every value kind
//!    with ember and a manifest of its raw inputs (xtask does not depend on ember crates).
//! 3. Runs `xtask/compat/check_tensorboard.py <dir>` in the venv: TensorBoard's event
//!    accumulators must read every tag back with the right kind, steps and values, and read every
//!    whole record of copies of the file cut mid-record.
//!
//! Where Python, its `venv` module or PyPI is unavailable, it says so in one line and succeeds,
//! except under `CI=true`, where that is a failure.

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

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let target = target_dir(root);
    let python = match ensure_venv(&target.join("compat-venv"), COMPAT_REQUIREMENTS) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => return skip_or_fail("compat", &why),
        Err(VenvError::Failed(e)) => return Err(e),
    };

    let dir = target.join("compat").join("run");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    eprintln!(
        "compat: writing every value kind with ember into {}",
        dir.display()
    );
    let status = cargo()
        .args([
            "run",
            "--quiet",
            "-p",
            "ember",
            "--example",
            "compat_writer",
            "--",
        ])
        .arg(&dir)
        .current_dir(root)
        .status()
        .context("starting cargo run --example compat_writer")?;
    if !status.success() {
        bail!("the compat_writer example failed ({status})");
    }

    let script = root.join("xtask/compat/check_tensorboard.py");
    let status = Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .current_dir(root)
        // TensorBoard warns that TensorFlow is missing; the stub is what we test against.
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .status()
        .with_context(|| format!("starting {}", script.display()))?;
    if !status.success() {
        bail!("TensorBoard does not read ember's files back as written ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_are_pinned() {
        for req in COMPAT_REQUIREMENTS {
            let (name, version) = req.split_once("==").expect("pinned with ==");
            assert!(!name.is_empty() && !version.is_empty(), "{req}");
        }
        assert!(
            COMPAT_REQUIREMENTS
                .iter()
                .any(|r| r.starts_with("tensorboard=="))
        );
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
