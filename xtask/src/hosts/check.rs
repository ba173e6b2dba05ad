//! What every scenario uses: the programs, the work directory, the hosts and their launcher,
//! and the readers of a run in the bucket (`ember pull`, `ember inspect`, TensorBoard's S3
//! reader through `xtask/objects/check_s3.py`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use super::launch::Cluster;
use super::net::Network;
use crate::process::{Ran, expect_success, run_limited};

/// Which build of `ember` the hosts run. CI checks behaviour, which a debug build shows as
/// well, and by the time CI gets here `cargo xtask objects` and `mpi` have built each of its
/// two features in debug; a release build of both rebuilds Burn (about 10 minutes cold), which
/// only the step times of scenario (c), the figures of docs/benchmarks.md, need.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Profile {
    Debug,
    Release,
}

impl Profile {
    /// The profile's directory under the target directory.
    pub(super) fn dir(self) -> &'static str {
        match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        }
    }
}

pub(super) struct Check<'a> {
    pub(super) root: &'a Path,
    pub(super) python: &'a Path,
    /// `ember` built with `mpi,object-store` (debug, or release with `--release`).
    pub(super) ember: &'a Path,
    /// ember's `mpi_ranks` example, debug (as `cargo xtask mpi` builds it).
    pub(super) ranks: &'a Path,
    /// ember-collective's `allreduce` example, release.
    pub(super) allreduce: &'a Path,
    pub(super) work: &'a Path,
    pub(super) network: &'a Network,
    pub(super) cluster: &'a Cluster,
}

impl Check<'_> {
    /// `ember` with `args`, in the root namespace, with the S3 settings.
    pub(super) fn ember(&self, args: &[&str]) -> Command {
        let mut command = Command::new(self.ember);
        command.args(args);
        self.cluster.s3(&mut command);
        command
    }

    /// `mpirun` of `program args` with one rank on each host.
    pub(super) fn on_hosts(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = self.cluster.mpirun();
        command.arg(program).args(args);
        command
    }

    /// Runs `command` to its end (bounded), its output in `<work>/<name>.log`, and requires
    /// success.
    pub(super) fn succeed(&self, command: Command, name: &str) -> anyhow::Result<Ran> {
        let ran = run_limited(command, name, &self.work.join(format!("{name}.log")))?;
        expect_success(&ran, name)?;
        Ok(ran)
    }

    /// `ember pull` of `url` into `<work>/<name>`.
    pub(super) fn pull(&self, url: &str, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.work.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut pull = self.ember(&["pull", url]);
        pull.arg(&dir);
        let out = output_within(pull, "ember pull")?;
        ensure!(
            out.status.success(),
            "ember pull {url} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(dir)
    }

    /// `ember inspect --json --values` of `url`.
    pub(super) fn inspect(&self, url: &str) -> anyhow::Result<serde_json::Value> {
        let out = output_within(
            self.ember(&["inspect", "--json", "--values", url]),
            "ember inspect",
        )?;
        ensure!(
            out.status.success(),
            "ember inspect {url} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).context("parsing ember inspect --json")
    }

    /// TensorBoard's own S3 reader shows every value of the run at `url` as of the local run
    /// `local`, and the bucket holds only whole records.
    pub(super) fn tensorboard_same(&self, url: &str, local: &Path) -> anyhow::Result<()> {
        let mut command = Command::new(self.python);
        command
            .arg(self.root.join("xtask/objects/check_s3.py"))
            .args(["compare", url])
            .arg(local);
        self.cluster.s3(&mut command);
        let out = output_within(command, "check_s3.py compare")?;
        ensure!(
            out.status.success(),
            "TensorBoard's S3 reader does not show {url} as {}:\n{}{}",
            local.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}

/// How long a reader of the bucket may take (each takes a second or two).
const READ_LIMIT: Duration = Duration::from_secs(120);

/// `command`'s output, as `Command::output` gives it, but killed (and an error) when it runs
/// past [`READ_LIMIT`]: a reader that hangs on the store fails the check instead of hanging it.
pub(super) fn output_within(mut command: Command, what: &str) -> anyhow::Result<Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    // Read on threads of their own, so that a full pipe cannot stall the child.
    let mut stdout = child.stdout.take().context("no stdout")?;
    let mut stderr = child.stderr.take().context("no stderr")?;
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).map(|_| bytes)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > READ_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("{what} did not end within {READ_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let joined = |handle: std::thread::JoinHandle<std::io::Result<Vec<u8>>>| {
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("reading {what}'s output panicked"))?
            .map_err(anyhow::Error::from)
    };
    Ok(Output {
        status,
        stdout: joined(out)?,
        stderr: joined(err)?,
    })
}

/// A job started in the background (`mpirun`), killed when dropped: when a check fails while it
/// runs, what it started inside the hosts goes with the network.
pub(super) struct Running(pub(super) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
