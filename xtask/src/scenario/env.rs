//! Where a run lives and how `ember` reaches it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

/// A place runs live in, and how `ember` is run against it.
pub(crate) trait Env {
    /// The place's name in messages and log names: `local`, `s3`, `gs`, `az`.
    fn name(&self) -> &str;
    /// Where the scenario's logs, local copies and staging go.
    fn work(&self) -> &Path;
    /// Where the run `name` lives: a directory or a URL.
    fn place(&self, name: &str) -> String;
    /// `ember ARGS`, given what it needs to reach the place.
    fn ember(&self, args: &[&str]) -> Command;
    /// `ember ARGS` as the place launches a training job (under `mpirun` for ranks).
    fn launch(&self, args: &[&str]) -> Command {
        self.ember(args)
    }
    /// The run at `place` as a directory of this disk, where its files can be read as they
    /// are (`None` for a bucket: see [`Env::on_disk`]).
    fn dir(&self, place: &str) -> Option<PathBuf>;
    /// The run at `place` on this disk: itself, or a copy `ember pull` brought back.
    fn on_disk(&self, place: &str) -> anyhow::Result<PathBuf>;
    /// The names in the run's `checkpoints/` (file names or object keys), as they are now.
    fn checkpoint_names(&self, place: &str) -> anyhow::Result<Vec<String>> {
        match self.dir(place) {
            Some(dir) => Ok(crate::runs::file_names(&dir.join("checkpoints"))),
            None => anyhow::bail!(
                "{}: this env cannot list a bucket's checkpoints",
                self.name()
            ),
        }
    }
    /// The file name of the run's newest whole checkpoint ([`crate::runs::newest_checkpoint`]).
    fn newest_checkpoint(&self, place: &str) -> anyhow::Result<Option<String>> {
        let newest = crate::runs::newest_checkpoint(self.checkpoint_names(place)?);
        Ok(newest.map(|name| name.rsplit('/').next().unwrap_or_default().to_owned()))
    }
    /// A log file under the work directory for `what` of the run at `place`.
    fn log(&self, place: &str, what: &str) -> PathBuf {
        let name = place.rsplit('/').next().unwrap_or(place);
        self.work()
            .join(format!("{}-{name}.{what}.log", self.name()))
    }

    /// `ember inspect --json --values` of the run at `place`: every record whole (the command
    /// fails on a corrupt one).
    fn inspect(&self, place: &str) -> anyhow::Result<serde_json::Value> {
        let out = output_within(
            self.ember(&["inspect", "--json", "--values", place]),
            "ember inspect",
        )?;
        // ember inspect --json reports what it found wrong on stdout: both, to tell why.
        ensure!(
            out.status.success(),
            "ember inspect finds problems in {place} ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
                .chars()
                .take(4000)
                .collect::<String>()
        );
        serde_json::from_slice(&out.stdout).context("parsing ember inspect --json")
    }
}

/// Runs in directories under `work`, trained by `ember` itself or by a launcher in front of
/// it (`mpirun -n 2 …`).
pub(crate) struct Local {
    pub(crate) binary: PathBuf,
    pub(crate) work: PathBuf,
    /// The program and arguments in front of `ember` for a training job; empty: none.
    pub(crate) launcher: Vec<String>,
}

impl Local {
    pub(crate) fn new(ember: &Path, work: &Path) -> Self {
        Self {
            binary: ember.to_path_buf(),
            work: work.to_path_buf(),
            launcher: Vec::new(),
        }
    }

    /// The same runs, each training job launched by `launcher` (a program and its arguments,
    /// `ember` and its own after them: `mpirun -n 2 …`).
    pub(crate) fn under(mut self, launcher: &Command) -> Self {
        self.launcher = std::iter::once(launcher.get_program())
            .chain(launcher.get_args())
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        self
    }
}

impl Env for Local {
    fn name(&self) -> &str {
        "local"
    }

    fn work(&self) -> &Path {
        &self.work
    }

    fn place(&self, name: &str) -> String {
        self.work.join(name).to_string_lossy().into_owned()
    }

    fn ember(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command.args(args);
        command
    }

    fn launch(&self, args: &[&str]) -> Command {
        let Some((program, before)) = self.launcher.split_first() else {
            return self.ember(args);
        };
        let mut command = Command::new(program);
        command.args(before).arg(&self.binary).args(args);
        command
    }

    fn dir(&self, place: &str) -> Option<PathBuf> {
        Some(PathBuf::from(place))
    }

    fn on_disk(&self, place: &str) -> anyhow::Result<PathBuf> {
        Ok(PathBuf::from(place))
    }

    fn log(&self, place: &str, what: &str) -> PathBuf {
        PathBuf::from(format!("{place}.{what}.log"))
    }
}

/// `ember inspect --json --values` of the local run directory `dir`, as [`Env::inspect`].
pub(crate) fn inspect_json(ember: &Path, dir: &Path) -> anyhow::Result<serde_json::Value> {
    Local::new(ember, dir).inspect(&dir.to_string_lossy())
}

/// Runs in bucket `ember` of a store server on loopback, reached as a user reaches a store:
/// through the environment `object_store` reads (`AWS_*`, `GOOGLE_*`, `AZURE_*`); each run's
/// staging under `work/tmp`, where `ember push` finds a killed run's.
pub(crate) struct Store {
    /// The URL scheme: `s3`, `gs`, `az`.
    pub(crate) scheme: &'static str,
    pub(crate) binary: PathBuf,
    pub(crate) work: PathBuf,
    /// What `ember` is given to reach the store.
    pub(crate) env: Vec<(String, String)>,
}

impl Store {
    /// The store of `scheme`, its environment what `set` gives a command.
    pub(crate) fn new(
        scheme: &'static str,
        ember: &Path,
        work: &Path,
        set: impl Fn(&mut Command),
    ) -> anyhow::Result<Self> {
        let tmp = work.join("tmp");
        std::fs::create_dir_all(&tmp).with_context(|| format!("making {}", tmp.display()))?;
        Ok(Self {
            scheme,
            binary: ember.to_path_buf(),
            work: work.to_path_buf(),
            env: env_of(set),
        })
    }

    /// `ember pull` of the run at `url` into `into` (emptied first).
    pub(crate) fn pull(&self, url: &str, into: &Path) -> anyhow::Result<()> {
        if into.exists() {
            std::fs::remove_dir_all(into)?;
        }
        let mut pull = self.ember(&["pull", url]);
        pull.arg(into);
        let out = output_within(pull, "ember pull")?;
        ensure!(
            out.status.success(),
            "ember pull {url} failed:\n{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        Ok(())
    }
}

impl Env for Store {
    fn name(&self) -> &str {
        self.scheme
    }

    fn work(&self) -> &Path {
        &self.work
    }

    fn place(&self, name: &str) -> String {
        format!("{}://ember/{name}", self.scheme)
    }

    fn ember(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command.args(args).env("TMPDIR", self.work.join("tmp"));
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        command
    }

    fn dir(&self, _place: &str) -> Option<PathBuf> {
        None
    }

    /// Pulled into `work/pulled/<run>`.
    fn on_disk(&self, place: &str) -> anyhow::Result<PathBuf> {
        let name = place.rsplit('/').next().unwrap_or(place);
        let into = self.work.join("pulled").join(name);
        self.pull(place, &into)?;
        Ok(into)
    }
}

/// The environment `set` gives a command, as name and value pairs.
pub(crate) fn env_of(set: impl Fn(&mut Command)) -> Vec<(String, String)> {
    let mut command = Command::new("env");
    set(&mut command);
    command
        .get_envs()
        .filter_map(|(name, value)| Some((name.to_str()?.to_owned(), value?.to_str()?.to_owned())))
        .collect()
}

/// How long a reader of the bucket may take (each takes a second or two).
const READ_LIMIT: Duration = Duration::from_secs(120);

/// `command`'s output, as `Command::output` gives it, but killed (and an error) when it runs
/// past [`READ_LIMIT`]: a reader that hangs on the store fails the check instead of hanging it.
pub(crate) fn output_within(mut command: Command, what: &str) -> anyhow::Result<Output> {
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
