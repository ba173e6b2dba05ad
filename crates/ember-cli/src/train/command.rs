//! The run's command line, kept beside its checkpoints and parsed again by `--resume` and
//! `--restart`.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};

use super::args::TrainArgs;
use super::logdir::CHECKPOINTS;

/// The file in it that holds the run's command line, for `--resume`.
const COMMAND_FILE: &str = "command.json";

/// The arguments of the run `flag` (`--resume` or `--restart`) names (or the newest under
/// `runs/`), as it was started, and its directory. Other flags given with it are refused: a
/// resumed or restarted run must be the run it continues.
pub(super) fn resumed_args(
    flag: &str,
    dir: Option<&Path>,
    given: &[String],
) -> anyhow::Result<(TrainArgs, PathBuf)> {
    let others: Vec<&String> = given
        .iter()
        .filter(|a| a.starts_with("--") && !a.starts_with(flag))
        .collect();
    ensure!(
        others.is_empty(),
        "{flag} goes on with the arguments the run was started with; leave out {}",
        others
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None => newest_run(Path::new("runs"))?,
    };
    let command = dir.join(CHECKPOINTS).join(COMMAND_FILE);
    let text = read_file(&dir.join(CHECKPOINTS), COMMAND_FILE)
        .and_then(|bytes| Ok(String::from_utf8(bytes)?))
        .with_context(|| {
            format!(
                "{} is not a run `ember train` can resume: cannot read {}",
                crate::output::shown(&dir),
                crate::output::shown(&command)
            )
        })?;
    let saved: Vec<String> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a list of arguments",
            crate::output::shown(&command)
        )
    })?;
    #[derive(clap::Parser)]
    struct Saved {
        #[command(flatten)]
        args: TrainArgs,
    }
    let mut args = <Saved as clap::Parser>::try_parse_from(
        std::iter::once("ember-train".to_string()).chain(saved),
    )
    .with_context(|| format!("the arguments saved in {}", crate::output::shown(&command)))?
    .args;
    args.logdir = Some(dir.clone());
    Ok((args, dir))
}

/// The newest run under `runs` (their names are UTC start times) that has checkpoints.
pub(super) fn newest_run(runs: &Path) -> anyhow::Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(runs)
        .with_context(|| {
            format!(
                "no run to resume: cannot list {}",
                crate::output::shown(runs)
            )
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(CHECKPOINTS).join(COMMAND_FILE).is_file())
        .collect();
    found.sort();
    found.pop().with_context(|| {
        format!(
            "no run to resume under {}; name one: --resume RUN_DIR",
            crate::output::shown(runs)
        )
    })
}

/// Saves the run's command line for `--resume`, the log directory made explicit.
pub(super) fn save_command(dir: &Path, given: &[String], logdir: &Path) -> anyhow::Result<()> {
    let mut saved: Vec<String> = Vec::new();
    let mut rest = given.iter();
    while let Some(arg) = rest.next() {
        if arg == "--logdir" {
            rest.next();
        } else if !arg.starts_with("--logdir=") {
            saved.push(arg.clone());
        }
    }
    saved.push("--logdir".into());
    saved.push(logdir.to_string_lossy().into_owned());
    let path = dir.join(COMMAND_FILE);
    write_file(dir, COMMAND_FILE, serde_json::to_string(&saved)?.as_bytes())
        .with_context(|| format!("writing {}", crate::output::shown(&path)))
}

/// The file `name` of the run directory `dir`, local or (with the `object-store` feature) a
/// URL's object.
pub(super) fn read_file(dir: &Path, name: &str) -> anyhow::Result<Vec<u8>> {
    if let Some(url) = dir.to_str().filter(|d| ember::is_remote(d)) {
        #[cfg(feature = "object-store")]
        return ember::Bucket::open(url)?
            .get(name)?
            .with_context(|| format!("{url} holds no {name}"));
        #[cfg(not(feature = "object-store"))]
        anyhow::bail!("{url}: this ember was built without the `object-store` feature");
    }
    Ok(std::fs::read(dir.join(name))?)
}

/// Writes `bytes` as the file `name` of `dir`, whole: durably (and `dir` made) on a local
/// disk, by one PUT in a bucket.
pub(super) fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(url) = dir.to_str().filter(|d| ember::is_remote(d)) {
        #[cfg(feature = "object-store")]
        return Ok(ember::Bucket::open(url)?.put(name, bytes.to_vec())?);
        #[cfg(not(feature = "object-store"))]
        anyhow::bail!("{url}: this ember was built without the `object-store` feature");
    }
    ember::durable::create_dir(dir)?;
    Ok(ember::durable::replace(&dir.join(name), bytes)?)
}

/// The arguments after `train` on this process's command line.
pub(super) fn given_args() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "train") {
        Some(at) => args[at + 1..].to_vec(),
        None => Vec::new(),
    }
}
