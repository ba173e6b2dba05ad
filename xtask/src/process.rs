//! What the xtasks that run programs share: the cargo that runs xtask and its target
//! directory, finding and installing Debian packages (and skipping, outside CI, what is still
//! missing), building with cargo, running a command under a wall-clock limit or killing it
//! mid-run, and reading a run's logs back with `ember inspect`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

/// How long any one run may take before it counts as hung (a debug build of 2 ranks trains
/// in about a second; `ember train` on two lavapipe devices in about 20 s).
const LIMIT: Duration = Duration::from_secs(120);

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

/// Whether this run is under CI (`CI=true`), where a missing tool is a failure.
pub(crate) fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Turns what the machine lacks (Python, PyPI, a Debian package) into one line and success,
/// except under CI.
pub(crate) fn skip_or_fail(task: &str, why: &str) -> anyhow::Result<()> {
    if under_ci() {
        bail!("{task}: {why}; CI=true, so this is a failure");
    }
    eprintln!("{task}: skipped: {why} (set CI=true to make this an error)");
    Ok(())
}

/// Finds what a task needs (`missing` names what is not there), installing Debian's `packages`
/// when this process may; `Err` says what is still missing.
pub(crate) fn ensure_installed(
    task: &str,
    packages: &[&str],
    missing: fn() -> Vec<&'static str>,
) -> Result<(), String> {
    if missing().is_empty() {
        return Ok(());
    }
    install_as_root(task, packages);
    let missing = missing();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "no {} (Debian: apt-get install {})",
            missing.join(", "),
            packages.join(" ")
        ))
    }
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Installs Debian's `packages` with `apt-get` where this process is root (updating the package
/// lists once if the first try fails); elsewhere does nothing. The caller checks what it got.
fn install_as_root(task: &str, packages: &[&str]) {
    if !is_root() || !on_path("apt-get") {
        return;
    }
    eprintln!("{task}: installing {}", packages.join(" "));
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get")
            .args(["update", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        install();
    }
}

pub(crate) fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

pub(crate) fn build(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = cargo()
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("starting cargo {}", args.join(" ")))?;
    ensure!(
        status.success(),
        "cargo {} failed ({status})",
        args.join(" ")
    );
    Ok(())
}

/// A finished run: whether it succeeded, everything it printed, how long it took.
pub(crate) struct Ran {
    pub(crate) success: bool,
    pub(crate) status: String,
    pub(crate) output: String,
    pub(crate) elapsed: Duration,
}

/// Runs `command` to its end or `limit`, whichever is first (then it is killed, and that is
/// an error: a job that does not end is what these checks exist to catch).
pub(crate) fn run_limited(mut command: Command, what: &str, log: &Path) -> anyhow::Result<Ran> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let started = Instant::now();
    let mut child = command
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{what} did not end within {LIMIT:?}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Ran {
        success: status.success(),
        status: status.to_string(),
        output: std::fs::read_to_string(log).unwrap_or_default(),
        elapsed: started.elapsed(),
    })
}

pub(crate) fn expect_success(ran: &Ran, what: &str) -> anyhow::Result<()> {
    ensure!(
        ran.success,
        "{what} failed ({}):\n{}",
        ran.status,
        ran.output
    );
    Ok(())
}

/// Starts `command` (its output to `log`) and kills it with SIGKILL after `after`, which must
/// find it still running.
pub(crate) fn kill_after(mut command: Command, log: &Path, after: Duration) -> anyhow::Result<()> {
    let log = std::fs::File::create(log)?;
    let mut child = command
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ember train")?;
    std::thread::sleep(after);
    ensure!(
        child.try_wait()?.is_none(),
        "the run to kill ended before it was killed"
    );
    child.kill()?;
    child.wait()?;
    Ok(())
}

/// Every `"tag"` string anywhere in `value`.
pub(crate) fn collect_tags(value: &serde_json::Value, tags: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::String(tag)) = map.get("tag") {
                tags.push(tag.clone());
            }
            map.values().for_each(|v| collect_tags(v, tags));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_tags(v, tags)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{skip_or_fail, under_ci};

    #[test]
    fn a_missing_python_skips_outside_ci_only() {
        // The environment of the test decides which branch runs; both are checked by value.
        let result = skip_or_fail("compat", "python3 was not found");
        assert_eq!(result.is_err(), under_ci());
    }
}
