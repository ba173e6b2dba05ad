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
//! Each program is a [`KillAndResume`] scenario walked in a [`Local`] env (`crate::scenario`).
//! Prints what the kills hit (before the first checkpoint, during a checkpoint write, after a
//! torn summary record). Without Python or PyPI the readers are skipped in one line (a failure
//! under `CI=true`); the kills and ember's own checks always run.

use std::path::Path;

use anyhow::{Context, ensure};

use crate::process::{build, target_dir};
use crate::scenario::{KillAndResume, Local, Program};

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

    let cli = |format: &str| Program::cli(&[TRAIN_ARGS, &["--format", format]].concat());
    let library = |mode| Program::Library {
        example: example.clone(),
        mode,
    };
    let programs = [
        (cli("tensorboard"), "tb", KILLS_TB),
        (cli("mindinsight"), "mi", KILLS_MI),
        (library("trainer"), "trainer", KILLS_LIBRARY),
        (library("burn-train"), "burn-train", KILLS_LIBRARY),
    ];
    let mut resumed = Vec::new();
    let mut during_checkpoint = 0;
    for (index, (program, name, kills)) in programs.into_iter().enumerate() {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir)?;
        let what = program.name();
        let library = matches!(program, Program::Library { .. });
        let scenario = KillAndResume {
            program,
            prefix: "",
            kills,
            // One stream of moments across the programs, as before: each its own seed.
            seed: seed.wrapping_add(index as u64),
            expected: None,
        };
        let walked = scenario.walk(&Local::new(&ember, &dir))?;
        eprintln!(
            "resume: {what}: {kills} runs killed and resumed, each with the uninterrupted run's \
             parameters byte for byte and its values in ember inspect: {walked}"
        );
        during_checkpoint += walked.hits.during_checkpoint;
        // The readers take runs relative to their base directory: the run's log directory.
        let logs = walked
            .places
            .iter()
            .map(|place| {
                let log = Path::new(place);
                let log = if library {
                    log.join("log")
                } else {
                    log.to_path_buf()
                };
                let relative = log.strip_prefix(&base).unwrap_or(&log);
                relative
                    .to_str()
                    .map(str::to_owned)
                    .context("a run path that is not UTF-8")
            })
            .collect::<anyhow::Result<Vec<String>>>()?;
        resumed.push((name, logs));
    }

    ensure!(
        during_checkpoint > 0,
        "no kill landed during a checkpoint write; the moments do not cover what they must"
    );

    crate::readers::read_with_tensorboard(root, &target, &base, &resumed)?;
    crate::readers::read_with_mindinsight(root, &target, &base, &resumed)
}
