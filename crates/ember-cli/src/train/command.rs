//! The run's command line, kept in its record beside its checkpoints (`run.json`, written by
//! [`ember::run::Run`]) and parsed again by `--resume` and `--restart`; and the run opened with
//! it, its refusals said as `ember train` says them.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};

use ember::checkpoint::CheckpointError;
use ember::pack::HParams;
use ember::run::{Begin, RECORD_FILE, Run, RunRecord, Settings};

use super::args::TrainArgs;
use super::logdir::CHECKPOINTS;
use super::plan::Plan;

/// The arguments of the run `flag` (`--resume` or `--restart`) names, as it was started, and
/// its directory. Bare `--resume` takes the newest unfinished run under `runs/`, bare
/// `--restart` the newest. Other flags given with it are refused: a resumed or restarted run
/// must be the run it continues; except where it runs ([`PLACEMENT`]: a run goes on on fewer
/// devices, each running a share of a step's batches), and a run whose record is lost, which
/// goes on with the flags given (the checkpoint it goes on from is compared with them) or is
/// restarted with them.
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
    let checkpointed = !ember::checkpoint::Checkpoints::new(dir.join(CHECKPOINTS), 1)
        .list()?
        .is_empty();
    if recorded_command(&dir)?.is_none() && (checkpointed || flag == "--restart") {
        crate::output::err(format!(
            "{} has no record of its command line: going on with the arguments given here",
            crate::output::shown(&dir)
        ));
        let mut args = parse_args(without_flag(given, flag))
            .with_context(|| format!("the arguments given with {flag}"))?;
        args.resume = None;
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
    let record = dir.join(CHECKPOINTS).join(RECORD_FILE);
    let mut saved = recorded_command(dir)?.with_context(|| {
        format!(
            "{} is not a run `ember train` can resume: it has no record of its command line \
             and no checkpoint",
            crate::output::shown(dir),
        )
    })?;
    if !placement.is_empty() {
        saved = placement_flags(&saved).1;
        saved.extend(placement.iter().cloned());
    }
    let mut args = parse_args(saved)
        .with_context(|| format!("the arguments saved in {}", crate::output::shown(&record)))?;
    args.logdir = Some(dir.to_path_buf());
    Ok(args)
}

/// The command line the run directory `dir`'s record holds; `None` without one.
pub(super) fn recorded_command(dir: &Path) -> anyhow::Result<Option<Vec<String>>> {
    let record = RunRecord::read(&dir.join(CHECKPOINTS))
        .with_context(|| format!("reading the record of {}", crate::output::shown(dir)))?;
    Ok(record.and_then(|record| record.command))
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
        .filter(|p| {
            let checkpoints = p.join(CHECKPOINTS);
            checkpoints.join(RECORD_FILE).is_file()
                || checkpoints.join(ember::run::LEGACY_COMMAND_FILE).is_file()
        })
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
/// finished run has nothing to go on with. A run whose record does not read (a damaged or
/// hand-edited file) is passed over, said, not taken for the end of the search.
fn newest_unfinished_run(runs: &Path) -> anyhow::Result<PathBuf> {
    let found = runs_newest_first(runs)?;
    ensure!(
        !found.is_empty(),
        "no run to resume under {}; name one: --resume RUN_DIR",
        crate::output::shown(runs)
    );
    for dir in &found {
        let epochs = match saved_args(dir, &[]) {
            Ok(args) => usize::from(args.epochs),
            Err(error) => {
                crate::output::err(format!(
                    "passing over {}: {}",
                    crate::output::shown(dir),
                    crate::output::error_line(&error)
                ));
                continue;
            }
        };
        let resume = Run::builder(Begin::Resume, dir.join(CHECKPOINTS))
            .dir(dir)
            .epochs(epochs);
        if !matches!(resume.admit(), Err(CheckpointError::Finished { .. })) {
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

/// Opens the run of `plan` with ember's one admission (the claims on its directories, another
/// run's or program's files, its record and checkpoint, a finished run, the settings and counts
/// its checkpoint holds), before anything is written; `hparams` are the run's settings, over
/// `examples`, its training and test digits. `None` where `--resume-if-any` finds the run
/// finished, its model saved.
pub(super) fn open_run(
    plan: &Plan,
    given: &[String],
    hparams: &HParams,
    examples: (usize, usize),
) -> anyhow::Result<Option<Run>> {
    let (args, logdir) = (&plan.args, &plan.logdir);
    let [batch_size, train_examples, valid_examples] = recorded_counts(plan, examples);
    let opened = Run::builder(plan.begin, plan.checkpoints())
        .dir(logdir)
        .rank(plan.job.rank() as u32, plan.job.size())
        .epochs(plan.epochs())
        .settings(Settings::of(hparams))
        .format(args.format.format())
        .count(batch_size.0, batch_size.1)
        .rank_count(train_examples.0, train_examples.1)
        .count(valid_examples.0, valid_examples.1)
        .command(command_to_record(given, logdir))
        .writes_checkpoints(plan.checkpointing())
        .open();
    let shown = crate::output::shown(logdir);
    match opened {
        Ok(run) => Ok(Some(run)),
        Err(error @ CheckpointError::NothingToResume { .. }) => anyhow::bail!(
            "{error}; nothing was changed. To train the run again from its first step, \
             discarding its log: ember train --restart {shown}"
        ),
        Err(error @ CheckpointError::AnotherRun { .. }) => anyhow::bail!(
            "{error} (ember train --resume {shown}, ember train --restart {shown}, or another \
             --logdir)"
        ),
        Err(CheckpointError::Finished { .. }) if args.resume_if_any => Ok(None),
        Err(error @ CheckpointError::Finished { .. }) => {
            anyhow::bail!("{error}: ember train --restart {shown}")
        }
        Err(error) => Err(error.into()),
    }
}

/// What the run's recorded arguments make of the counts a checkpoint holds, as the Trainer
/// counts them on rank 0, over `(train, test)` digits: the examples of worker 0's first batch
/// (the batch size, or the worker's whole slice of the data when that is smaller), of an epoch's
/// training on rank 0, and of a validation (every rank's).
fn recorded_counts(plan: &Plan, (train, test): (usize, usize)) -> [(&'static str, usize); 3] {
    let shard = ember::collective::shard_range(train, plan.job.size(), 0).len();
    let slice = shard / plan.specs.len().max(1);
    let first_batch = usize::from(plan.args.batch_size).min(slice.max(1));
    // The devices are the Trainer's to check: a run goes on on fewer than it started on.
    [
        ("batch_size", first_batch),
        ("train_examples", shard),
        ("valid_examples", test),
    ]
}

/// The command line to record for the run: the one given, the log directory made explicit, how
/// this start was asked for left out (the next start says its own).
pub(super) fn command_to_record(given: &[String], logdir: &Path) -> Vec<String> {
    let mut saved: Vec<String> = Vec::new();
    let given = without_flag(&without_flag(given, "--resume-if-any"), "--restart");
    let given = without_flag(&given, "--resume");
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
    saved
}

/// The arguments after `train` on this process's command line.
pub(super) fn given_args() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "train") {
        Some(at) => args[at + 1..].to_vec(),
        None => Vec::new(),
    }
}
