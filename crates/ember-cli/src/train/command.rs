//! The run's command line, kept beside its checkpoints and parsed again by `--resume` and
//! `--restart`.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};

use ember::checkpoint::{Admission, Begin, CheckpointError, DataLayout};

use super::args::TrainArgs;
use super::logdir::CHECKPOINTS;

/// The file in it that holds the run's command line, for `--resume`.
const COMMAND_FILE: &str = "command.json";

/// The arguments of the run `flag` (`--resume` or `--restart`) names, as it was started, and
/// its directory. Bare `--resume` takes the newest unfinished run under `runs/`, bare
/// `--restart` the newest. Other flags given with it are refused: a resumed or restarted run
/// must be the run it continues; except where it runs ([`PLACEMENT`]: a run goes on on fewer
/// devices, each running a share of a step's batches), and a run whose `command.json` is lost,
/// restarted with the flags given (its checkpoints cannot say how it was started, and a
/// restart discards them).
pub(super) fn resumed_args(
    flag: &str,
    dir: Option<&Path>,
    given: &[String],
) -> anyhow::Result<(TrainArgs, PathBuf)> {
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None if flag == "--resume" => newest_unfinished_run(Path::new("runs"))?,
        None => newest_run(Path::new("runs"))?,
    };
    if flag == "--restart" && !command_saved(&dir.join(CHECKPOINTS)) {
        eprintln!(
            "{} has no {COMMAND_FILE}: restarting it with the arguments given here",
            crate::output::shown(&dir)
        );
        let mut args = parse_args(without_flag(given, flag))
            .with_context(|| format!("the arguments given with {flag}"))?;
        args.restart = None;
        args.logdir = Some(dir.clone());
        return Ok((args, dir));
    }
    let (placement, given) = placement_flags(given);
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
    Ok((saved_args(&dir, &placement)?, dir))
}

/// The flags that say where a run trains, not what it trains: given with `--resume`, they
/// replace the ones the run was started with.
const PLACEMENT: [&str; 4] = [
    "--device",
    "--devices",
    "--share-devices",
    "--worker-threads",
];

/// `given`'s [`PLACEMENT`] flags (with their values) and the rest.
fn placement_flags(given: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut placement, mut rest) = (Vec::new(), Vec::new());
    let mut args = given.iter().peekable();
    while let Some(arg) = args.next() {
        let name = arg.split('=').next().unwrap_or(arg);
        if !PLACEMENT.contains(&name) {
            rest.push(arg.clone());
            continue;
        }
        placement.push(arg.clone());
        if !arg.contains('=')
            && name != "--share-devices"
            && let Some(value) = args.next_if(|next| !next.starts_with("--"))
        {
            placement.push(value.clone());
        }
    }
    (placement, rest)
}

/// The arguments saved in the run directory `dir`, its log directory made `dir`, with the
/// `placement` flags given in place of the saved ones.
pub(super) fn saved_args(dir: &Path, placement: &[String]) -> anyhow::Result<TrainArgs> {
    let command = dir.join(CHECKPOINTS).join(COMMAND_FILE);
    let text = read_file(&dir.join(CHECKPOINTS), COMMAND_FILE)
        .and_then(|bytes| Ok(String::from_utf8(bytes)?))
        .with_context(|| {
            format!(
                "{} is not a run `ember train` can resume: cannot read {}; to train it again \
                 from its first step, give the arguments it was started with: ember train \
                 --restart {0} ARGS",
                crate::output::shown(dir),
                crate::output::shown(&command)
            )
        })?;
    let mut saved: Vec<String> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a list of arguments",
            crate::output::shown(&command)
        )
    })?;
    if !placement.is_empty() {
        saved = placement_flags(&saved).1;
        saved.extend(placement.iter().cloned());
    }
    let mut args = parse_args(saved)
        .with_context(|| format!("the arguments saved in {}", crate::output::shown(&command)))?;
    args.logdir = Some(dir.to_path_buf());
    Ok(args)
}

/// `ember train`'s flags parsed from `args` (those after `train`).
fn parse_args(args: Vec<String>) -> anyhow::Result<TrainArgs> {
    #[derive(clap::Parser)]
    struct Saved {
        #[command(flatten)]
        args: TrainArgs,
    }
    Ok(<Saved as clap::Parser>::try_parse_from(
        std::iter::once("ember-train".to_string()).chain(args),
    )?
    .args)
}

/// `given` without `flag` and the directory given with it.
pub(super) fn without_flag(given: &[String], flag: &str) -> Vec<String> {
    let mut kept = Vec::new();
    let mut rest = given.iter().peekable();
    while let Some(arg) = rest.next() {
        if arg == flag {
            rest.next_if(|next| !next.starts_with("--"));
        } else if !arg.starts_with(&format!("{flag}=")) {
            kept.push(arg.clone());
        }
    }
    kept
}

/// Whether the checkpoint directory `dir` holds the run's command line.
pub(super) fn command_saved(dir: &Path) -> bool {
    read_file(dir, COMMAND_FILE).is_ok()
}

/// The runs under `runs` with a command line saved, newest first (their names are UTC start
/// times).
fn runs_newest_first(runs: &Path) -> anyhow::Result<Vec<PathBuf>> {
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
    found.reverse();
    Ok(found)
}

/// The newest run under `runs`, for bare `--restart`.
pub(super) fn newest_run(runs: &Path) -> anyhow::Result<PathBuf> {
    runs_newest_first(runs)?
        .into_iter()
        .next()
        .with_context(|| {
            format!(
                "no run to restart under {}; name one: --restart RUN_DIR",
                crate::output::shown(runs)
            )
        })
}

/// The newest run under `runs` that has not trained all its epochs, for bare `--resume`: a
/// finished run has nothing to go on with.
fn newest_unfinished_run(runs: &Path) -> anyhow::Result<PathBuf> {
    let found = runs_newest_first(runs)?;
    ensure!(
        !found.is_empty(),
        "no run to resume under {}; name one: --resume RUN_DIR",
        crate::output::shown(runs)
    );
    for dir in &found {
        let epochs = usize::from(saved_args(dir, &[])?.epochs);
        if !ember::checkpoint::finished(&dir.join(CHECKPOINTS), epochs)? {
            return Ok(dir.clone());
        }
    }
    anyhow::bail!(
        "every run under {} has finished (the newest: {}); nothing to resume. To train one \
         again from its first step: ember train --restart RUN_DIR",
        crate::output::shown(runs),
        crate::output::shown(&found[0])
    )
}

/// What admission made of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admitted {
    /// It may begin; a resume, with how the run began cutting its data.
    Yes(Option<DataLayout>),
    /// It has trained all its epochs, and `--resume-if-any` asks for nothing more.
    Finished,
}

/// Admits the run to its log directory with ember's one admission check (the locks of the
/// log and checkpoint directories, another run's files, a finished run, the settings its
/// checkpoint holds), before anything is written. `workers` train on each of `world_size`
/// ranks; `test_fraction` of the digits is held out.
pub(super) fn admit(
    begin: Begin,
    args: &TrainArgs,
    (logdir, checkpoints): (&Path, &Path),
    (rank, world_size): (usize, usize),
    (workers, test_fraction): (usize, f64),
) -> anyhow::Result<Admitted> {
    let mut admission = Admission::new(begin)
        .log_dir(logdir)
        .checkpoint_dir(checkpoints)
        .rank(rank as u32, world_size)
        .epochs(usize::from(args.epochs));
    if begin == Begin::Resume {
        let [batch_size, train_examples, valid_examples] =
            recorded_settings(args, world_size, (workers, test_fraction))?;
        admission = admission
            .setting(batch_size.0, batch_size.1)
            .rank_setting(train_examples.0, train_examples.1)
            .setting(valid_examples.0, valid_examples.1);
    }
    let admitted = admission.admit();
    match admitted {
        Err(error @ CheckpointError::NothingToResume { .. }) => anyhow::bail!(
            "{error}; nothing was changed. To train the run again from its first step, \
             discarding its log: ember train --restart {}",
            crate::output::shown(logdir)
        ),
        Err(error @ CheckpointError::AnotherRun { .. }) => anyhow::bail!(
            "{error} (ember train --resume {0}, ember train --restart {0}, or another --logdir)",
            crate::output::shown(logdir)
        ),
        Err(CheckpointError::Finished { .. }) if args.resume_if_any => Ok(Admitted::Finished),
        Err(error @ CheckpointError::Finished { .. }) => anyhow::bail!(
            "{error}: ember train --restart {}",
            crate::output::shown(logdir)
        ),
        Err(error) => Err(error.into()),
        Ok(layout) => Ok(Admitted::Yes(layout)),
    }
}

/// What the run's recorded arguments make of the settings a checkpoint holds, as the Trainer
/// counts them on rank 0: its workers, the examples of worker 0's first batch (the batch size,
/// or the worker's whole slice of the data when that is smaller), of an epoch's training on
/// rank 0, and of a validation (every rank's).
fn recorded_settings(
    args: &TrainArgs,
    world_size: usize,
    (workers, test_fraction): (usize, f64),
) -> anyhow::Result<[(&'static str, usize); 3]> {
    let mut examples = crate::digits::load()?.len();
    if let Some(subset) = args.subset {
        examples = examples.min(usize::try_from(subset).unwrap_or(usize::MAX));
    }
    let test = ((examples as f64 * test_fraction).round() as usize).min(examples);
    let shard = ember::collective::shard_range(examples - test, world_size, 0).len();
    let slice = shard / workers.max(1);
    let first_batch = usize::from(args.batch_size).min(slice.max(1));
    // The devices are the Trainer's to check: a run goes on on fewer than it started on.
    Ok([
        ("batch_size", first_batch),
        ("train_examples", shard),
        ("valid_examples", test),
    ])
}

/// Saves the run's command line for `--resume`, the log directory made explicit.
pub(super) fn save_command(dir: &Path, given: &[String], logdir: &Path) -> anyhow::Result<()> {
    let mut saved: Vec<String> = Vec::new();
    // How this start was asked for is not the run's: its next start says its own.
    let given = without_flag(given, "--resume-if-any");
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
