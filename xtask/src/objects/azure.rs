//! `cargo xtask objects`, Azure part: the write, read and kill scenarios run against Azurite
//! (the Azure Storage emulator, from the npm registry) on loopback, as they run against moto.
//!
//! 1. Installs `azurite` (pinned) under the target directory with npm; the Azure SDK for Python,
//!    which makes the container (`object_store` cannot), is in the readers' venv
//!    (`objects/clouds.rs`).
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
//! 7. TensorBoard's loader (adlfs, given Azurite's connection string) shows every value of the
//!    run of 3. as the local run, and its page in Chromium its `train/loss`
//!    (`objects/clouds.rs`).
//!
//! Node.js and npm come from Debian where CI runs as root; without them or PyPI it skips in
//! one line, a failure under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::objects::clouds::Part;
use crate::objects::scenarios::TRAIN_ARGS;
use crate::process::{run_limited, skip_or_fail};
use crate::readers::StoreReader;
use crate::scenario::{Env, Expected, Store};
use crate::server::{Server, free_port, wait_for_port};

const TASK: &str = "objects (azurite)";

/// The emulator, pinned.
const AZURITE: &str = "azurite@3.37.0";

/// The emulator's well-known account and key (documented by Microsoft for Azurite).
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The Azure scenarios against the run the S3 part trained locally (`local`); `ember` is
/// built with the object-store feature, `work` is empty.
pub(crate) fn run(
    root: &Path,
    target: &Path,
    (ember, local): (&Path, &Expected),
    work: &Path,
) -> anyhow::Result<()> {
    let azurite = match install_azurite(target) {
        Ok(bin) => bin,
        Err(why) => return skip_or_fail(TASK, &why),
    };
    let Some(python) = crate::objects::clouds::readers_python(target, TASK)? else {
        return Ok(());
    };
    let (server, endpoint) = start(root, &azurite, &python, work, "ember")?;
    let part = Part {
        root,
        python: &python,
        store: Store::new("az", ember, work, |command| store_env(command, &endpoint))?,
    };
    // TensorBoard reads Azurite with adlfs, given the emulator's connection string.
    let connection = format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};\
         BlobEndpoint={endpoint}/{ACCOUNT};"
    );
    let reader = StoreReader {
        cloud: "az",
        python: &python,
        env: vec![("AZURE_STORAGE_CONNECTION_STRING".into(), connection)],
    };
    crate::objects::scenarios::every_value(&part, &reader, "az://ember/run", local)?;
    crate::objects::scenarios::against(&part.store, TASK)?;
    refused(&part.store)?;
    drop(server);
    Ok(())
}

/// Azurite's blob server (`azurite`, from [`install_azurite`]) on a free loopback port, its
/// data and log under `work`, with an empty container `container` (made with the Azure SDK
/// of the readers' venv, `python`): the server, stopped when dropped, and its endpoint.
pub(crate) fn start(
    root: &Path,
    azurite: &Path,
    python: &Path,
    work: &Path,
    container: &str,
) -> anyhow::Result<(Server, String)> {
    let port = free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let data = work.join("azurite-data");
    std::fs::create_dir_all(&data)?;
    let log = std::fs::File::create(work.join("azurite.log"))?;
    let server = Server(
        Command::new(azurite)
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
    let status = Command::new(python)
        .arg(root.join("xtask/objects/azure_container.py"))
        .args([&endpoint, ACCOUNT, KEY, container])
        .status()
        .context("starting azure_container.py")?;
    ensure!(
        status.success(),
        "making the container in Azurite ({status})"
    );
    Ok((server, endpoint))
}

/// What ember is given for Azurite at `endpoint`, as `object_store`'s
/// `MicrosoftAzureBuilder::from_env` reads it: the emulator's account and key.
pub(crate) fn store_env(command: &mut Command, endpoint: &str) {
    command
        .env("AZURE_STORAGE_USE_EMULATOR", "true")
        .env("AZURITE_BLOB_STORAGE_URL", endpoint)
        .env("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
        .env("AZURE_STORAGE_ACCOUNT_KEY", KEY);
}

/// `npm install` of the pinned Azurite under the target directory, once; its blob server.
pub(crate) fn install_azurite(target: &Path) -> Result<PathBuf, String> {
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

/// A key the emulator does not know: one line saying access was refused.
fn refused(store: &Store) -> anyhow::Result<()> {
    let url = "az://ember/denied";
    let mut train = store.ember(TRAIN_ARGS);
    train
        .env("AZURE_STORAGE_ACCOUNT_KEY", "bm90LXRoZS1rZXk=")
        .args(["--logdir", url]);
    let ran = run_limited(
        train,
        "ember train with a wrong key",
        &store.log(url, "train"),
    )?;
    let line = crate::objects::scenarios::one_error_line(&ran, url, "refused")?;
    eprintln!("{TASK}: a key the store refuses: {line}");
    Ok(())
}
