//! `cargo xtask resume`: `ember train` killed with SIGKILL at seeded random moments and
//! resumed with `--resume` ends with the model and the log of a run that was never killed.
//!
//! 1. Builds the `ember` binary (debug) and trains a reference run of each format without a
//!    break, with a checkpoint every optimizer step, so that much of a run's time is spent
//!    writing checkpoints and flushing the summaries before each, the moments a kill must not
//!    harm.
//! 2. Starts the same run again [`KILLS_TB`] + [`KILLS_MI`] times, each killed with SIGKILL at a
//!    moment drawn uniformly over the reference run's duration from a seeded generator (the
//!    seed is printed; `EMBER_RESUME_SEED` replays one). After each kill: every `*.ember`
//!    checkpoint left is whole (its CRC-32C checks; a kill during a write leaves only a
//!    temporary file), and no directory holds only torn ones.
//! 3. Resumes each with `ember train --resume RUN_DIR` (the arguments the run saved), which
//!    must succeed; its `model.bpk` must equal the reference's byte for byte, Burn's random
//!    parameter ids aside, and `ember inspect --json --values` must list the reference's tags
//!    with the same counts and values.
//! 4. Does the same, [`KILLS_LIBRARY`] kills each, for the two ways a library user trains, in
//!    `crates/ember/examples/resumable.rs`: the Trainer with gradient accumulation and a
//!    shuffling loader (`Trainer::resume_from`), and burn-train's `SupervisedTraining` on
//!    `PoolStrategy` with burn's own checkpointers (`checkpoint(n)` and
//!    `SummaryLogger::resume_from`); their parameters must equal the reference's byte for byte.
//! 5. Reads every run with TensorBoard's Python loaders, tbparse and rustboard
//!    (`xtask/resume/check_tensorboard.py`) and the MindInsight runs with MindInsight 2.3.1
//!    (`xtask/resume/check_mindinsight.py`): each step once, the reference's values.
//!
//! Prints what the kills hit (before the first checkpoint, during a checkpoint write, after a
//! torn summary record). Without Python or PyPI the readers are skipped in one line (a failure
//! under `CI=true`); the kills and ember's own checks always run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, ensure};

use crate::process::{Ran, build, expect_success, inspect_json, run_limited, target_dir};
use crate::runs::{XorShift, model_without_ids, same_values, start_and_time};

pub(crate) mod live;

/// Kills of TensorBoard-format runs.
const KILLS_TB: usize = 18;
/// Kills of MindInsight-format runs.
const KILLS_MI: usize = 6;
/// Kills of each library program (the Trainer, burn-train).
const KILLS_LIBRARY: usize = 20;
/// The seed of the kill moments, unless `EMBER_RESUME_SEED` gives another.
const SEED: u64 = 20_261_204;
/// The run: the whole digits set, 3 epochs on 2 workers (69 steps), a checkpoint every
/// optimizer step; about a second in a debug build.
const TRAIN_ARGS: &[&str] = &["--epochs", "3", "--devices", "2", "--checkpoint-every", "1"];

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let seed = match std::env::var("EMBER_RESUME_SEED") {
        Ok(text) => text.parse().context("EMBER_RESUME_SEED is not a number")?,
        Err(_) => SEED,
    };
    build(root, &["build", "-p", "ember-cli"])?;
    build(root, &["build", "-p", "ember", "--example", "resumable"])?;
    let target = target_dir(root);
    let ember = target.join("debug").join("ember");
    let example = target.join("debug").join("examples").join("resumable");
    let base = target.join("resume-check");
    if base.exists() {
        std::fs::remove_dir_all(&base).with_context(|| format!("removing {}", base.display()))?;
    }
    eprintln!("resume: kill moments from seed {seed} (EMBER_RESUME_SEED replays one)");

    let mut rng = XorShift(seed.max(1));
    let cli = |format| Program::Cli {
        format,
        ember: ember.clone(),
    };
    let library = |mode| Program::Library {
        mode,
        example: example.clone(),
    };
    let programs = [
        (cli("tensorboard"), "tb", KILLS_TB),
        (cli("mindinsight"), "mi", KILLS_MI),
        (library("trainer"), "trainer", KILLS_LIBRARY),
        (library("burn-train"), "burn-train", KILLS_LIBRARY),
    ];
    let mut resumed = Vec::new();
    let mut during_checkpoint = 0;
    for (program, name, kills) in &programs {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir)?;
        let (runs, hits) = kill_and_resume(program, &ember, &dir, *kills, &mut rng)?;
        during_checkpoint += hits.during_checkpoint;
        // The readers take runs relative to their base directory: the run's log directory.
        let logs = runs
            .iter()
            .map(|run| {
                let log = program.log_dir(run);
                let relative = log.strip_prefix(&base).unwrap_or(&log);
                relative
                    .to_str()
                    .map(str::to_owned)
                    .context("a run path that is not UTF-8")
            })
            .collect::<anyhow::Result<Vec<String>>>()?;
        resumed.push((*name, logs));
    }

    ensure!(
        during_checkpoint > 0,
        "no kill landed during a checkpoint write; the moments do not cover what they must"
    );

    crate::readers::read_with_tensorboard(root, &target, &base, &resumed)?;
    crate::readers::read_with_mindinsight(root, &target, &base, &resumed)
}

/// How a run of a program begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    Fresh,
    /// From its newest whole checkpoint: refused, changing nothing, when it has none.
    Resume,
    /// From its first step, what it wrote discarded.
    Restart,
}

/// A program the task kills and resumes.
enum Program {
    /// `ember train` writing `format`.
    Cli {
        format: &'static str,
        ember: PathBuf,
    },
    /// The `resumable` example in `mode` (`trainer` or `burn-train`).
    Library {
        mode: &'static str,
        example: PathBuf,
    },
}

impl Program {
    fn name(&self) -> String {
        match self {
            Program::Cli { format, .. } => format!("ember train --format {format}"),
            Program::Library { mode, .. } => format!("the resumable example ({mode})"),
        }
    }

    /// The command that starts the run in `run` afresh, or resumes it.
    fn command(&self, base: &Path, run: &Path, begin: Begin) -> Command {
        let mut command = match self {
            Program::Cli { format, ember } => {
                let mut c = Command::new(ember);
                match begin {
                    Begin::Fresh => {
                        c.arg("train")
                            .args(TRAIN_ARGS)
                            .args(["--format", format, "--logdir"])
                            .arg(run);
                    }
                    Begin::Resume => {
                        c.args(["train", "--resume"]).arg(run);
                    }
                    Begin::Restart => {
                        c.args(["train", "--restart"]).arg(run);
                    }
                }
                c
            }
            Program::Library { mode, example } => {
                let mut c = Command::new(example);
                c.arg(mode).arg(run);
                match begin {
                    Begin::Fresh => {}
                    Begin::Resume => {
                        c.arg("--resume");
                    }
                    Begin::Restart => {
                        c.arg("--restart");
                    }
                }
                c
            }
        };
        command.current_dir(base);
        command
    }

    /// Where the run's summaries are.
    fn log_dir(&self, run: &Path) -> PathBuf {
        match self {
            Program::Cli { .. } => run.to_path_buf(),
            Program::Library { .. } => run.join("log"),
        }
    }

    /// Where ember's checkpoint files of the run are.
    fn checkpoints(&self, run: &Path) -> PathBuf {
        match self {
            Program::Library {
                mode: "burn-train", ..
            } => run.join("burn").join("checkpoint"),
            _ => run.join("checkpoints"),
        }
    }

    /// The trained parameters, as bytes comparable between runs.
    fn model(&self, run: &Path) -> anyhow::Result<Vec<u8>> {
        match self {
            Program::Cli { .. } => model_without_ids(&run.join("model.bpk")),
            Program::Library { .. } => {
                let path = run.join("params.bin");
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
            }
        }
    }
}

/// The share of the shortest run's duration so far that kill moments are drawn from. Of the
/// runs, a fifth may still end before their kill (the machine sped up since).
const KILL_SPAN: f64 = 0.85;

/// Trains a reference run in `dir/reference`, then `kills` runs each killed at a seeded moment
/// and resumed, each compared with the reference; returns the reference and the resumed runs.
fn kill_and_resume(
    program: &Program,
    ember: &Path,
    dir: &Path,
    kills: usize,
    rng: &mut XorShift,
) -> anyhow::Result<(Vec<PathBuf>, Hits)> {
    let name = program.name();
    let reference = dir.join("reference");
    let ran = run_limited(
        program.command(dir, &reference, Begin::Fresh),
        &name,
        &dir.join("reference.log"),
    )?;
    expect_success(&ran, &format!("the reference run of {name}"))?;
    let duration = ran.elapsed;
    let reference_json = inspect_json(ember, &program.log_dir(&reference))?;
    let reference_model = program.model(&reference)?;
    let mut hits = Hits::default();
    let mut runs = vec![reference];
    // The shortest run seen so far: a reference timed on a busy machine may take longer than
    // its repeats, which would then end before a kill late in its span.
    let mut span = duration;
    for kill in 0..kills {
        let run = dir.join(format!("killed-{kill:02}"));
        let at = span.mul_f64(KILL_SPAN * rng.unit());
        let finished = start_and_time(program.command(dir, &run, Begin::Fresh), &run, at)?;
        if let Some(took) = finished {
            span = span.min(took);
        }
        let was_killed = finished.is_none();
        let checkpointed = hits.count(
            &program.checkpoints(&run),
            &program.log_dir(&run),
            was_killed,
        )?;
        let resumed = resume_or_restart(program, dir, &run, checkpointed, &mut hits)?;
        expect_success(
            &resumed,
            &format!("resuming {} (killed after {at:?})", run.display()),
        )?;
        ensure!(
            program.model(&run)? == reference_model,
            "{}: the resumed run's parameters differ from the uninterrupted run's",
            run.display()
        );
        same_values(
            &reference_json,
            &inspect_json(ember, &program.log_dir(&run))?,
            &run,
        )?;
        runs.push(run);
    }
    eprintln!(
        "resume: {name}: {kills} runs killed over {duration:.2?} and resumed, each with the \
         uninterrupted run's parameters byte for byte and its values in ember inspect; {hits}"
    );
    ensure!(
        hits.killed + kills / 5 >= kills,
        "only {} of {kills} runs were killed before they finished",
        hits.killed
    );
    Ok((runs, hits))
}

/// Resumes a killed run; where no whole checkpoint was left (`checkpointed` false, or
/// burn-train's own torn), the refused resume must leave the run's files as they were, and the
/// run is restarted.
fn resume_or_restart(
    program: &Program,
    dir: &Path,
    run: &Path,
    checkpointed: bool,
    hits: &mut Hits,
) -> anyhow::Result<Ran> {
    let name = program.name();
    let before = files_of(run)?;
    let resumed = run_limited(
        program.command(dir, run, Begin::Resume),
        &format!("resuming {name}"),
        &run.with_extension("resume.log"),
    )?;
    // Killed before `ember train` wrote its command line (a first run on a cold machine may
    // take that long), the run cannot say how it was started: `--restart` takes the arguments.
    let command_lost = !resumed.success
        && resumed
            .output
            .contains("is not a run `ember train` can resume");
    // Killed after its last checkpoint, while it closed: finished, which a resume refuses.
    let finished = !resumed.success && resumed.output.contains("has finished");
    let no_checkpoint = !resumed.success && resumed.output.contains("no checkpoint to resume from");
    if command_lost || finished || no_checkpoint {
        // burn-train's own checkpoints may be torn where ember's snapshots are whole.
        ensure!(
            finished
                || !checkpointed
                || matches!(
                    program,
                    Program::Library {
                        mode: "burn-train",
                        ..
                    }
                ),
            "{}: --resume found no checkpoint where a whole one was left:\n{}",
            run.display(),
            resumed.output
        );
        ensure!(
            files_of(run)? == before,
            "{}: the refused resume changed the run's files",
            run.display()
        );
        if finished {
            hits.finished_then_restarted += 1;
        } else {
            hits.refused += 1;
        }
        let mut restart = program.command(dir, run, Begin::Restart);
        if let (true, Program::Cli { format, .. }) = (command_lost, program) {
            restart.args(TRAIN_ARGS).args(["--format", format]);
        }
        run_limited(
            restart,
            &format!("restarting {name}"),
            &run.with_extension("restart.log"),
        )
    } else {
        Ok(resumed)
    }
}

/// What the kills hit, from what they left.
/// How many checkpoints the Trainer writes at once (its checkpoint threads).
const CHECKPOINTS_AT_ONCE: usize = 2;

#[derive(Debug, Default)]
struct Hits {
    killed: usize,
    finished_first: usize,
    before_first_checkpoint: usize,
    /// Resumes refused for want of a whole checkpoint, the run then restarted.
    refused: usize,
    /// Resumes refused for a run killed after its last checkpoint, the run then restarted.
    finished_then_restarted: usize,
    during_checkpoint: usize,
    torn_summary_tail: usize,
}

impl Hits {
    /// Counts what a kill left in the run's checkpoint and log directories; returns whether a
    /// whole checkpoint was left.
    fn count(&mut self, checkpoints: &Path, log: &Path, killed: bool) -> anyhow::Result<bool> {
        if !killed {
            self.finished_first += 1;
            return Ok(true);
        }
        self.killed += 1;
        let mut whole = 0;
        let mut temporary = 0;
        if let Ok(entries) = std::fs::read_dir(checkpoints) {
            for entry in entries {
                let path = entry?.path();
                let name = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if name.ends_with(".tmp") {
                    temporary += 1;
                } else if name.ends_with(".ember") && path.is_file() {
                    let bytes = std::fs::read(&path)?;
                    ensure!(
                        whole_checkpoint(&bytes),
                        "{} is torn after a kill: a checkpoint must be whole once it has its name",
                        path.display()
                    );
                    whole += 1;
                }
            }
        }
        if whole == 0 {
            // Killed while the run's first checkpoints were written: each of the checkpoints
            // the Trainer writes at once may have left its temporary file, nothing more.
            ensure!(
                temporary <= CHECKPOINTS_AT_ONCE,
                "{} holds only torn checkpoints",
                checkpoints.display()
            );
            self.before_first_checkpoint += 1;
        }
        if temporary > 0 {
            self.during_checkpoint += 1;
        }
        if summary_tail_torn(log)? {
            self.torn_summary_tail += 1;
        }
        Ok(whole > 0)
    }
}

impl std::fmt::Display for Hits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} kills ({} runs finished first): {} before the first checkpoint ({} resumes \
             refused, changing nothing, then restarted), {} after the last (refused as \
             finished, then restarted), {} during a checkpoint write, {} left a torn summary \
             record",
            self.killed,
            self.finished_first,
            self.before_first_checkpoint,
            self.refused,
            self.finished_then_restarted,
            self.during_checkpoint,
            self.torn_summary_tail
        )
    }
}

/// Whether `bytes` is a whole checkpoint: its last 4 bytes are the CRC-32C of the rest.
fn whole_checkpoint(bytes: &[u8]) -> bool {
    let Some(body) = bytes.len().checked_sub(4) else {
        return false;
    };
    let stored = u32::from_le_bytes([
        bytes[body],
        bytes[body + 1],
        bytes[body + 2],
        bytes[body + 3],
    ]);
    bytes.starts_with(b"EMBERCKP") && crc32c::crc32c(&bytes[..body]) == stored
}

/// Whether an event file of the run ends in a part of a record (the kill came while the
/// writer pool was writing): each record is a u64 length, its CRC, the data and the data's CRC.
fn summary_tail_torn(run: &Path) -> anyhow::Result<bool> {
    let Ok(entries) = std::fs::read_dir(run) else {
        // Killed before it made its log directory.
        return Ok(false);
    };
    for entry in entries {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !(name.contains("tfevents") || name.contains(".summary.")) || !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let mut at = 0usize;
        while at < bytes.len() {
            if bytes.len() - at < 12 {
                return Ok(true);
            }
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into()?) as usize;
            let end = at.saturating_add(12).saturating_add(len).saturating_add(4);
            if end > bytes.len() {
                return Ok(true);
            }
            at = end;
        }
    }
    Ok(false)
}

/// Every file under `dir` with its bytes, the lock files aside (they hold the pid of their
/// last holder, which a library program rewrites when it opens its record).
fn files_of(dir: &Path) -> anyhow::Result<std::collections::BTreeMap<PathBuf, Vec<u8>>> {
    let mut files = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let entries = match std::fs::read_dir(&at) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", at.display())),
        };
        for entry in entries {
            let path = entry?.path();
            let locks = path
                .parent()
                .is_some_and(|parent| parent.ends_with(".ember-locks"));
            if path.is_dir() {
                pending.push(path);
            } else if !locks {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                files.insert(path, bytes);
            }
        }
    }
    Ok(files)
}
