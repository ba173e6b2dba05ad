//! `cargo xtask live`: a TensorBoard left running while `ember train` is killed and resumed
//! shows each step once.
//!
//! `xtask/resume/live_tensorboard.py` trains a reference run with the release binary, starts
//! TensorBoard 2.21 on the base directory twice (its Python loader, `--load_fast=false`, and
//! rustboard, `--load_fast=true`; both `--reload_interval 1`), then kills the run [`ROUNDS`]
//! times with SIGKILL at moments drawn from [`SEED`] (printed; `EMBER_LIVE_SEED` replays
//! another) and resumes it, waiting after each kill until both servers have loaded what it
//! wrote, the records the next resume rolls back among them. Once the last resume finishes,
//! every scalar series each server gives over HTTP must hold each step once, with the reference's
//! values (wall-time-derived series aside). Without Python or PyPI it is skipped in one line (a
//! failure under `CI=true`).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, ensure};

use crate::process::{build, skip_or_fail, target_dir};
use crate::readers::READER_REQUIREMENTS;
use crate::venv::{VenvError, ensure_venv};

/// Kill-and-resume rounds under the live TensorBoards.
const ROUNDS: usize = 10;
/// The seed of the kill moments, unless `EMBER_LIVE_SEED` gives another.
const SEED: u64 = 20_261_206;
/// The run: 500 epochs of a wide MLP (11,500 steps, about 20 s in a release build), so that
/// each kill, 5 to 12 % of the reference's duration into its round, lands mid-run, past a
/// checkpoint (every 30 steps, and at each epoch's end).
const TRAIN_ARGS: &[&str] = &[
    "--epochs",
    "500",
    "--hidden",
    "2048",
    "--checkpoint-every",
    "30",
];

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let seed = match std::env::var("EMBER_LIVE_SEED") {
        Ok(text) => text.parse().context("EMBER_LIVE_SEED is not a number")?,
        Err(_) => SEED,
    };
    build(root, &["build", "--release", "-p", "ember-cli"])?;
    let target = target_dir(root);
    let python = match ensure_venv(&target.join("resume-venv"), READER_REQUIREMENTS) {
        Ok(python) => python,
        Err(VenvError::Unavailable(why)) => {
            return skip_or_fail("live", &format!("TensorBoard: {why}"));
        }
        Err(VenvError::Failed(e)) => return Err(e),
    };
    let base = target.join("live-check");
    if base.exists() {
        std::fs::remove_dir_all(&base).with_context(|| format!("removing {}", base.display()))?;
    }
    std::fs::create_dir_all(&base)?;
    eprintln!("live: kill moments from seed {seed} (EMBER_LIVE_SEED replays another)");
    let status = Command::new(python)
        .arg(root.join("xtask/resume/live_tensorboard.py"))
        .arg(target.join("release").join("ember"))
        .arg(&base)
        .arg(seed.to_string())
        .arg(ROUNDS.to_string())
        .args(TRAIN_ARGS)
        .current_dir(&base)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .status()
        .context("starting xtask/resume/live_tensorboard.py")?;
    ensure!(
        status.success(),
        "a live TensorBoard does not show the killed and resumed run as the uninterrupted one \
         ({status})"
    );
    Ok(())
}
