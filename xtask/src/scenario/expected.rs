//! The check every resume scenario ends with: the run is the uninterrupted one.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};

use crate::process::{Ran, expect_success, run_limited};
use crate::runs::{model_without_ids, same_values};
use crate::scenario::Env;

/// Where a program keeps its log and its trained parameters in its run directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `ember train`'s: the log is the run directory, the model `model.bpk`.
    Cli,
    /// The `resumable` example's: the log in `log/`, the parameters in `params.bin`.
    Library,
}

impl Layout {
    /// The log of the run at `place` (a directory or a URL).
    pub(crate) fn log(self, place: &str) -> String {
        match self {
            Self::Cli => place.to_owned(),
            Self::Library => format!("{place}/log"),
        }
    }

    /// The log of the run in the local directory `dir`.
    pub(crate) fn log_in(self, dir: &Path) -> PathBuf {
        match self {
            Self::Cli => dir.to_path_buf(),
            Self::Library => dir.join("log"),
        }
    }

    /// The trained parameters of the run in `dir`, as bytes comparable between runs (Burn's
    /// random parameter ids zeroed).
    fn model(self, dir: &Path) -> anyhow::Result<Vec<u8>> {
        match self {
            Self::Cli => model_without_ids(&dir.join("model.bpk")),
            Self::Library => {
                let path = dir.join("params.bin");
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
            }
        }
    }
}

/// What a run must end with: the model and the values of a run that was never interrupted.
pub(crate) struct Expected {
    /// Where the uninterrupted run is, for messages.
    of: String,
    layout: Layout,
    model: Vec<u8>,
    values: serde_json::Value,
}

impl Expected {
    /// The run at `place` of `env`, an `ember train` run.
    pub(crate) fn of(env: &dyn Env, place: &str) -> anyhow::Result<Self> {
        Self::of_layout(env, place, Layout::Cli)
    }

    /// The run at `place` of `env`, its files laid out as `layout` says.
    pub(crate) fn of_layout(env: &dyn Env, place: &str, layout: Layout) -> anyhow::Result<Self> {
        Ok(Self {
            of: place.to_owned(),
            layout,
            model: layout.model(&env.on_disk(place)?)?,
            values: env.inspect(&layout.log(place))?,
        })
    }

    /// The `ember train` run in the local directory `dir`, inspected by `ember`.
    pub(crate) fn of_dir(ember: &Path, dir: &Path) -> anyhow::Result<Self> {
        let local = crate::scenario::Local::new(ember, dir.parent().unwrap_or(dir));
        Self::of(&local, &dir.to_string_lossy())
    }

    /// [`Expected::check`] of the `ember train` run in the local directory `dir`, inspected by
    /// `ember`.
    pub(crate) fn check_dir(&self, ember: &Path, dir: &Path) -> anyhow::Result<()> {
        let local = crate::scenario::Local::new(ember, dir.parent().unwrap_or(dir));
        self.check(&local, &dir.to_string_lossy())
    }

    /// The run at `place` of `env` has the expected model byte for byte and, in `ember
    /// inspect`, the expected values, each step once.
    pub(crate) fn check(&self, env: &dyn Env, place: &str) -> anyhow::Result<()> {
        let values = env.inspect(&self.layout.log(place))?;
        ensure!(
            self.layout.model(&env.on_disk(place)?)? == self.model,
            "{place}: the parameters differ from those of the uninterrupted run ({})",
            self.of
        );
        same_values(&self.values, &values, Path::new(place))
    }

    /// `ember train --resume place` launched in `env` (its output in the place's `resume`
    /// log): it must go on from a checkpoint and end as the uninterrupted run; what it
    /// printed.
    pub(crate) fn resumed_to_the_end(&self, env: &dyn Env, place: &str) -> anyhow::Result<Ran> {
        let what = format!("ember train --resume {place} ({})", env.name());
        let ran = run_limited(
            env.launch(&["train", "--resume", place]),
            &what,
            &env.log(place, "resume"),
        )?;
        expect_success(&ran, &what)?;
        ensure!(
            ran.output.contains("resumed from"),
            "{what} did not go on from a checkpoint:\n{}",
            ran.output
        );
        self.check(env, place)?;
        Ok(ran)
    }

    /// The uninterrupted run's place.
    pub(crate) fn place(&self) -> PathBuf {
        PathBuf::from(&self.of)
    }
}

/// The points (`[step, wall time, value…]`) of `tag` in an `ember inspect --json --values`
/// report, of every run in it.
pub(crate) fn points<'a>(
    inspected: &'a serde_json::Value,
    tag: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    inspected["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|run| run["tags"].as_array().into_iter().flatten())
        .filter(move |found| found["tag"] == tag)
        .flat_map(|found| found["values"].as_array().into_iter().flatten())
}

/// The `train/loss` points (step, value) of an `ember inspect --json --values` report: what a
/// UI's loss chart must draw. An error where a point is malformed or there is none.
pub(crate) fn loss_points(inspected: &serde_json::Value) -> anyhow::Result<Vec<(i64, f64)>> {
    let points: Vec<(i64, f64)> = points(inspected, "train/loss")
        .map(|point| {
            let step = point[0].as_i64().context("a step that is not an integer")?;
            let value = point[2].as_f64().context("a value that is not a number")?;
            Ok((step, value))
        })
        .collect::<anyhow::Result<_>>()?;
    ensure!(!points.is_empty(), "no train/loss");
    Ok(points)
}

/// The step a job stopped by a signal says it was interrupted after (`… interrupted after N
/// steps …`).
pub(crate) fn interrupted_after(output: &str) -> Option<u64> {
    output
        .split("interrupted after ")
        .nth(1)?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stopped_job_s_step_is_read_from_what_it_printed() {
        let printed = "epoch 2/60: …\ninterrupted after 37 step(s), 1 of 60 epoch(s) finished; \
                       the logs are complete\n";
        assert_eq!(super::interrupted_after(printed), Some(37));
        assert_eq!(super::interrupted_after("finished after 40 step(s)"), None);
        assert_eq!(
            super::interrupted_after("interrupted after many steps"),
            None
        );
    }
}
