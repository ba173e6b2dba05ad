//! `cargo xtask ci`: the checks `.ci/run` runs, cheapest first, stopping at the first failure.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::ci_steps::STEPS;

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    for step in STEPS {
        eprintln!("ci: {step}");
        let started = std::time::Instant::now();
        let mut words = step.split_whitespace();
        let program = words.next().context("empty CI step")?;
        let status = Command::new(program)
            .args(words)
            .current_dir(root)
            .status()
            .with_context(|| format!("starting `{step}`"))?;
        if !status.success() {
            bail!("`{step}` failed ({status})");
        }
        eprintln!("ci: {:.0} s: {step}", started.elapsed().as_secs_f64());
    }
    eprintln!("ci: all {} steps passed", STEPS.len());
    Ok(())
}
