//! The resumed runs read back by the readers users run: TensorBoard's Python loaders, tbparse
//! and rustboard, and MindInsight.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, ensure};

use crate::pins::{COMPAT_REQUIREMENTS, MINDINSIGHT_REQUIREMENTS};
use crate::process::{expect_success, run_limited, skip_or_fail};
use crate::venv::{VenvError, ensure_venv};

/// The readers' packages: the compat checker's TensorBoard, and tbparse with the pandas it
/// resolved to.
pub(crate) const READER_REQUIREMENTS: &[&str] = &[
    "tensorboard==2.21.0",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
    "tbparse==0.0.9",
    "pandas==3.0.6",
];

/// Every TensorBoard-format program's runs in TensorBoard's Python loaders, tbparse and
/// rustboard; skipped in one line without Python or PyPI (a failure under `CI=true`).
pub(crate) fn read_with_tensorboard(
    root: &Path,
    target: &Path,
    base: &Path,
    resumed: &[(&str, Vec<String>)],
) -> anyhow::Result<()> {
    debug_assert_eq!(&READER_REQUIREMENTS[..4], COMPAT_REQUIREMENTS);
    match ensure_venv(&target.join("resume-venv"), READER_REQUIREMENTS) {
        Ok(python) => {
            for (name, logs) in resumed.iter().filter(|(name, _)| *name != "mi") {
                // Each program's runs apart, so that rustboard loads only those.
                let prefix = format!("{name}/");
                let logs: Vec<String> = logs
                    .iter()
                    .map(|log| log.trim_start_matches(prefix.as_str()).to_owned())
                    .collect();
                let (reference, rest) = logs.split_first().context("no reference run")?;
                check(
                    &python,
                    root,
                    "xtask/resume/check_tensorboard.py",
                    &base.join(name),
                    reference,
                    rest,
                )
                .with_context(|| format!("the {name} runs"))?;
            }
        }
        Err(VenvError::Unavailable(why)) => {
            skip_or_fail("resume", &format!("the TensorBoard readers: {why}"))?
        }
        Err(VenvError::Failed(e)) => return Err(e),
    }
    Ok(())
}

/// For `task`: the runs `runs` under `base` read by TensorBoard's Python loaders, tbparse and
/// rustboard as the run `reference` is, each step once; skipped in one line without Python or
/// PyPI (a failure under `CI=true`).
pub(crate) fn tensorboard_reads_as(
    task: &str,
    (root, target): (&Path, &Path),
    base: &Path,
    reference: &str,
    runs: &[&str],
) -> anyhow::Result<()> {
    match ensure_venv(&target.join("resume-venv"), READER_REQUIREMENTS) {
        Ok(python) => {
            let runs: Vec<String> = runs.iter().map(|run| (*run).to_owned()).collect();
            let script = "xtask/resume/check_tensorboard.py";
            check(&python, root, script, base, reference, &runs)?;
            eprintln!(
                "{task}: TensorBoard's loaders, tbparse and rustboard show each run as {reference}"
            );
            Ok(())
        }
        Err(VenvError::Unavailable(why)) => {
            skip_or_fail(task, &format!("the TensorBoard readers: {why}"))
        }
        Err(VenvError::Failed(e)) => Err(e),
    }
}

/// The MindInsight runs in MindInsight; skipped in one line without Python or PyPI (a failure
/// under `CI=true`).
pub(crate) fn read_with_mindinsight(
    root: &Path,
    target: &Path,
    base: &Path,
    resumed: &[(&str, Vec<String>)],
) -> anyhow::Result<()> {
    match ensure_venv(&target.join("compat-mi-venv"), MINDINSIGHT_REQUIREMENTS) {
        Ok(python) => {
            // MindInsight's jobs are the directories of its base directory: `mi/<run>`.
            let (_, logs) = resumed
                .iter()
                .find(|(name, _)| *name == "mi")
                .context("no mi runs")?;
            let jobs: Vec<String> = logs
                .iter()
                .map(|log| log.trim_start_matches("mi/").to_owned())
                .collect();
            let (reference, rest) = jobs.split_first().context("no reference run")?;
            check(
                &python,
                root,
                "xtask/resume/check_mindinsight.py",
                &base.join("mi"),
                reference,
                rest,
            )?;
        }
        Err(VenvError::Unavailable(why)) => {
            skip_or_fail("resume", &format!("the MindInsight reader: {why}"))?
        }
        Err(VenvError::Failed(e)) => return Err(e),
    }
    Ok(())
}

/// Runs `script` over the runs under `base`: each must read as `reference` does.
fn check(
    python: &Path,
    root: &Path,
    script: &str,
    base: &Path,
    reference: &str,
    runs: &[String],
) -> anyhow::Result<()> {
    let status = Command::new(python)
        .arg(root.join(script))
        .arg(base)
        .arg(reference)
        .args(runs)
        .current_dir(root)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .status()
        .with_context(|| format!("starting {script}"))?;
    ensure!(
        status.success(),
        "{script}: a resumed run does not read as the uninterrupted one ({status})"
    );
    Ok(())
}

/// What a TensorBoard reads a store with (its S3 reader; fsspec's gcsfs and adlfs): its Python
/// (a venv with TensorBoard and the store's reader), and the environment that points the
/// reader at the store.
pub(crate) struct StoreReader<'a> {
    pub(crate) cloud: &'a str,
    pub(crate) python: &'a Path,
    pub(crate) env: Vec<(String, String)>,
}

impl StoreReader<'_> {
    /// `program` with the reader's environment.
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("TF_CPP_MIN_LOG_LEVEL", "3");
        command
    }

    /// TensorBoard's loader on `url` shows every value of every kind of the local run `local`,
    /// each step once, and the store holds the local run's other files as written; the line
    /// that says so.
    pub(crate) fn loads(
        &self,
        root: &Path,
        url: &str,
        local: &Path,
        log: &Path,
    ) -> anyhow::Result<String> {
        let mut compare = self.command(self.python);
        compare
            .arg(root.join("xtask/objects/check_s3.py"))
            .args(["compare", url])
            .arg(local);
        let ran = run_limited(compare, "TensorBoard's loader on the store", log)?;
        expect_success(
            &ran,
            &format!("TensorBoard's loader on {url} against the local run"),
        )?;
        Ok(ran
            .output
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned())
    }
}
