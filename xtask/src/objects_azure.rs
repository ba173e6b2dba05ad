//! `cargo xtask objects`, Azure part: the write, read and kill scenarios run against Azurite
//! (the Azure Storage emulator, from the npm registry) on loopback, as they run against moto.
//!
//! 1. Installs `azurite` (pinned) under the target directory with npm, and a venv with the
//!    Azure SDK for Python, which makes the container (`object_store` cannot).
//! 2. Starts `azurite-blob` on a free loopback port. ember gets the emulator's account from
//!    the environment, as `object_store`'s `MicrosoftAzureBuilder::from_env` reads it
//!    (`AZURE_STORAGE_USE_EMULATOR`, `AZURITE_BLOB_STORAGE_URL`).
//! 3. Write and read: `ember train --logdir az://ember/run` and the same run locally; `ember
//!    inspect --json --values az://ember/run` gives the local run's values.
//! 4. Kill: a run killed with SIGKILL leaves only whole records (`ember inspect` of the URL
//!    passes) and every step up to its last; `ember push` then ships what its staging held,
//!    and the steps stay whole, none missing.
//! 5. Two runs to one URL at once, in both formats: both runs' files are there, whole.
//! 6. A key the emulator does not know: one line, at once, saying access was refused.
//!
//! Node.js and npm come from Debian where CI runs as root; without them or PyPI it skips in
//! one line, a failure under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};

use crate::compat::{VenvError, ensure_venv, skip_or_fail};
use crate::objects::{Server, free_port, wait_for_port};
use crate::process::{expect_success, run_limited};

const TASK: &str = "objects (azurite)";

/// The emulator, pinned.
const AZURITE: &str = "azurite@3.37.0";

/// The Azure SDK for Python, to make the container.
const AZURE_REQUIREMENTS: &[&str] = &["azure-storage-blob==12.31.1"];

/// The emulator's well-known account and key (documented by Microsoft for Azurite).
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// About five seconds in a debug build.
const TRAIN_ARGS: &[&str] = &["train", "--epochs", "20", "--devices", "2"];

/// The Azure scenarios; `ember` is built with the object-store feature, `work` is empty.
pub(crate) fn run(root: &Path, target: &Path, ember: &Path, work: &Path) -> anyhow::Result<()> {
    let azurite = match install_azurite(target) {
        Ok(bin) => bin,
        Err(why) => return skip_or_fail(TASK, &why),
    };
    let python = match ensure_venv(&target.join("azure-venv"), AZURE_REQUIREMENTS) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => return skip_or_fail(TASK, &why),
        Err(VenvError::Failed(e)) => return Err(e),
    };
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let data = work.join("azurite-data");
    std::fs::create_dir_all(&data)?;
    let log = std::fs::File::create(work.join("azurite.log"))?;
    let server = Server(
        Command::new(&azurite)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .arg("--location")
            .arg(&data)
            .args(["--skipApiVersionCheck", "--loose"])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting azurite-blob")?,
    );
    wait_for_port(port, "Azurite")?;
    let status = Command::new(&python)
        .arg(root.join("xtask/objects/azure_container.py"))
        .args([&endpoint, ACCOUNT, KEY, "ember"])
        .status()
        .context("starting azure_container.py")?;
    ensure!(
        status.success(),
        "making the container in Azurite ({status})"
    );
    let azure = Azure {
        ember,
        work,
        endpoint: &endpoint,
    };
    azure.every_value()?;
    azure.killed()?;
    azure.two_at_once()?;
    azure.refused()?;
    drop(server);
    Ok(())
}

/// `npm install` of the pinned Azurite under the target directory, once; its blob server.
fn install_azurite(target: &Path) -> Result<PathBuf, String> {
    let prefix = target.join("azurite");
    let bin = prefix.join("node_modules/.bin/azurite-blob");
    let stamp = prefix.join("ember-azurite.txt");
    if bin.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(AZURITE) {
        return Ok(bin);
    }
    crate::process::ensure_installed(TASK, &["nodejs", "npm"], || {
        ["node", "npm"]
            .into_iter()
            .filter(|tool| !crate::process::on_path(tool))
            .collect()
    })?;
    std::fs::create_dir_all(&prefix).map_err(|e| format!("creating {}: {e}", prefix.display()))?;
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
        .arg(AZURITE)
        .output()
        .map_err(|e| format!("npm is not at hand ({e})"))?;
    if !out.status.success() || !bin.is_file() {
        return Err(format!(
            "npm install {AZURITE} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::write(&stamp, AZURITE).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    Ok(bin)
}

struct Azure<'a> {
    ember: &'a Path,
    work: &'a Path,
    endpoint: &'a str,
}

impl Azure<'_> {
    /// `ember` with `args`, given the emulator's account through the environment, and its
    /// staging under the work directory (where `ember push` finds a killed run's).
    fn ember(&self, args: &[&str]) -> Command {
        let mut command = Command::new(self.ember);
        command
            .args(args)
            .env("AZURE_STORAGE_USE_EMULATOR", "true")
            .env("AZURITE_BLOB_STORAGE_URL", self.endpoint)
            .env("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
            .env("AZURE_STORAGE_ACCOUNT_KEY", KEY)
            .env("TMPDIR", self.work.join("tmp"));
        command
    }

    fn command(&self) -> impl Fn(&[&str]) -> Command + '_ {
        |args| self.ember(args)
    }

    /// `ember inspect --json --values` of `url`.
    fn inspect(&self, url: &str) -> anyhow::Result<serde_json::Value> {
        std::fs::create_dir_all(self.work.join("tmp"))?;
        inspect(&self.command(), url)
    }

    fn every_value(&self) -> anyhow::Result<()> {
        let local = self.work.join("az-local");
        let mut train = Command::new(self.ember);
        train.args(TRAIN_ARGS).arg("--logdir").arg(&local);
        expect_success(
            &run_limited(
                train,
                "ember train (local)",
                &self.work.join("az-local.log"),
            )?,
            "ember train into a local directory",
        )?;
        std::fs::create_dir_all(self.work.join("tmp"))?;
        let mut train = self.ember(TRAIN_ARGS);
        train.args(["--logdir", "az://ember/run"]);
        let ran = run_limited(
            train,
            "ember train --logdir az://",
            &self.work.join("az.log"),
        )?;
        expect_success(&ran, "ember train --logdir az://ember/run")?;
        crate::resume::same_values(
            &crate::process::inspect_json(self.ember, &local)?,
            &self.inspect("az://ember/run")?,
            Path::new("az://ember/run"),
        )?;
        eprintln!(
            "{TASK}: ember train --logdir az://ember/run on Azurite ({:.1} s); ember inspect of \
             the URL gives the local run's values",
            ran.elapsed.as_secs_f64()
        );
        Ok(())
    }

    fn killed(&self) -> anyhow::Result<()> {
        killed_then_pushed(
            &self.command(),
            "az://ember/killed",
            &self.work.join("tmp"),
            &self.work.join("az-killed.log"),
            TASK,
        )
    }

    fn two_at_once(&self) -> anyhow::Result<()> {
        two_at_once(&self.command(), "az://ember", TASK)
    }

    /// A key the emulator does not know: one line saying access was refused.
    fn refused(&self) -> anyhow::Result<()> {
        let url = "az://ember/denied";
        let mut train = self.ember(TRAIN_ARGS);
        train
            .env("AZURE_STORAGE_ACCOUNT_KEY", "bm90LXRoZS1rZXk=")
            .args(["--logdir", url]);
        let ran = run_limited(
            train,
            "ember train with a wrong key",
            &self.work.join("az-denied.log"),
        )?;
        ensure!(!ran.success, "ember train with a wrong key succeeded");
        let lines: Vec<&str> = ran
            .output
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        ensure!(
            lines.len() == 1 && lines[0].contains(url) && lines[0].contains("refused"),
            "expected one line saying access to {url} was refused:\n{}",
            ran.output
        );
        eprintln!("{TASK}: a key the store refuses: {}", lines[0]);
        Ok(())
    }
}

/// The last step of `train/loss` in an `ember inspect --json --values` report, checking that
/// the steps are 1..N with none missing.
fn loss_steps(inspected: &serde_json::Value) -> anyhow::Result<i64> {
    let mut steps: Vec<i64> = inspected["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .filter(|tag| tag["tag"] == "train/loss")
        .flat_map(|tag| tag["values"].as_array().into_iter().flatten())
        .filter_map(|point| point[0].as_i64())
        .collect();
    steps.sort_unstable();
    ensure!(!steps.is_empty(), "no train/loss in the killed run");
    let expected: Vec<i64> = (1..=steps.len() as i64).collect();
    ensure!(
        steps == expected,
        "train/loss steps are not 1..N: {:?}…",
        &steps[..steps.len().min(20)]
    );
    Ok(steps.len() as i64)
}

/// `ember inspect --json --values` of `url`, `ember` making the command.
pub(crate) fn inspect(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
) -> anyhow::Result<serde_json::Value> {
    let out = ember(&["inspect", "--json", "--values", url])
        .output()
        .context("starting ember inspect")?;
    ensure!(
        out.status.success(),
        "ember inspect {url} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("parsing ember inspect --json")
}

/// A run into `url` killed with SIGKILL mid-run: whole records and no step missing; then
/// `ember push` (its staging under `tmp`, the `TMPDIR` `ember` gives the runs) ships what the
/// kill left, no step lost or repeated, and leaves no staging directory.
pub(crate) fn killed_then_pushed(
    ember: &dyn Fn(&[&str]) -> Command,
    url: &str,
    tmp: &Path,
    log: &Path,
    task: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(tmp)?;
    let train = ember(&[
        "train",
        "--epochs",
        "5000",
        "--subset",
        "400",
        "--devices",
        "2",
        "--logdir",
        url,
    ]);
    crate::objects::kill_after(train, log, Duration::from_secs(6))?;
    let before = loss_steps(&inspect(ember, url)?)?;
    let push = ember(&["push"]).output().context("starting ember push")?;
    ensure!(
        push.status.success(),
        "ember push failed:\n{}{}",
        String::from_utf8_lossy(&push.stdout),
        String::from_utf8_lossy(&push.stderr)
    );
    let after = loss_steps(&inspect(ember, url)?)?;
    ensure!(
        after >= before,
        "ember push lost steps: {after} after, {before} before"
    );
    let left = std::fs::read_dir(tmp)?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("ember-staging-")
        })
        .flat_map(|parent| std::fs::read_dir(parent.path()).into_iter().flatten())
        .count();
    ensure!(
        left == 0,
        "{left} staging directories left after ember push"
    );
    eprintln!(
        "{task}: after SIGKILL, whole records with train/loss at steps 1..{before}, none \
         missing; ember push shipped the staging the kill left: 1..{after}"
    );
    Ok(())
}

/// Two runs into one URL under `base` at the same moment, in both formats: both runs'
/// summary files are in the store, each whole (before, two MindInsight-format runs of one
/// host and rank in one second had one name, and the second's PUTs replaced the first's).
pub(crate) fn two_at_once(
    ember: &dyn Fn(&[&str]) -> Command,
    base: &str,
    task: &str,
) -> anyhow::Result<()> {
    for (format, ending) in [("tensorboard", ""), ("mindinsight", "_MS")] {
        let url = format!("{base}/twice-{format}");
        let args = [
            "train", "--epochs", "2", "--subset", "400", "--format", format, "--logdir", &url,
        ];
        let children: Vec<_> = (0..2)
            .map(|_| {
                ember(&args)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
            })
            .collect::<Result<_, _>>()
            .context("starting ember train")?;
        for child in children {
            let out = child.wait_with_output()?;
            ensure!(
                out.status.success(),
                "a run into {url} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let inspected = inspect(ember, &url)?;
        let files: Vec<String> = inspected["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|run| run["files"].as_array().into_iter().flatten())
            .filter_map(|file| file["path"].as_str().map(str::to_owned))
            .filter(|path| {
                let name = path.rsplit('/').next().unwrap_or(path);
                (name.contains("tfevents") || name.contains(".summary."))
                    && (ending.is_empty() || name.ends_with(ending))
            })
            .collect();
        ensure!(
            files.len() == 2,
            "two runs into {url} left {} summary file(s): {files:?}",
            files.len()
        );
    }
    eprintln!(
        "{task}: two runs into one URL at once keep both their summary files, in both formats"
    );
    Ok(())
}
