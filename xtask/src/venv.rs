//! Python virtual environments for the xtasks that run Python programs (TensorBoard's and
//! MindInsight's loaders, the browser step, moto, Azurite's container, the benchmarks' peers):
//! one module of their own, so that each of those tasks builds on it rather than on another task.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

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

#[cfg(test)]
mod tests {
    use super::*;

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
