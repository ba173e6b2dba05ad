//! What the tasks that train, kill and compare runs share (`resume`, `live`, `objects`, `mpi`,
//! `hosts`): starting a run and killing it with SIGKILL, a model's bytes without Burn's random
//! ids, two runs' values compared as `ember inspect` gives them, the seeded kill moments, and
//! a rank's process under mpirun, and which event files no writer closed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Starts `command` (its output to `<run>.log`) and kills it with SIGKILL after `at`;
/// how long the run took when it finished before `at` (`None`: killed).
pub(crate) fn start_and_time(
    mut command: Command,
    run: &Path,
    at: Duration,
) -> anyhow::Result<Option<Duration>> {
    let log = std::fs::File::create(run.with_extension("log"))?;
    let mut child = command
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting a run to kill")?;
    let started = Instant::now();
    while started.elapsed() < at {
        if child.try_wait()?.is_some() {
            return Ok(Some(started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(1).min(at.saturating_sub(started.elapsed())));
    }
    // `Child::kill` is SIGKILL on Unix: no handler runs, nothing is flushed.
    child.kill().context("killing the run")?;
    child.wait()?;
    Ok(None)
}

/// A `model.bpk`'s bytes with Burn's parameter ids (random per process) zeroed: each is the
/// CBOR key `param_id` and a 64-bit integer.
pub(crate) fn model_without_ids(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let key = b"hparam_id\x1b";
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(key.len()).position(|w| w == key) {
        let start = at + found + key.len();
        let end = (start + 8).min(bytes.len());
        bytes[start..end].fill(0);
        at = end;
    }
    Ok(bytes)
}

/// The runs' `ember inspect --json --values` equal, but for paths, byte counts, wall times
/// and the wall-time-derived series.
pub(crate) fn same_values(
    reference: &serde_json::Value,
    run: &serde_json::Value,
    dir: &Path,
) -> anyhow::Result<()> {
    let tags = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for run in v["runs"].as_array().into_iter().flatten() {
            for tag in run["tags"].as_array().into_iter().flatten() {
                let name = tag["tag"].as_str().unwrap_or_default();
                if name.ends_with("_seconds")
                    || name.ends_with("examples_per_second")
                    || name.starts_with("system/")
                {
                    continue;
                }
                // A resumed MindInsight run starts a lineage file of its own, which MindInsight
                // reads alone (its newest); inspect counts every file's. MindInsight's lineage
                // query is compared instead.
                if tag["kind"] == "lineage" {
                    continue;
                }
                // A resumed run starts its session again where it goes on (`cargo xtask live`
                // shows what that does for a live TensorBoard); no reader counts it as a value.
                if tag["kind"] == "session_log" {
                    continue;
                }
                let mut tag = tag.clone();
                strip_wall_times(&mut tag);
                out.push(tag);
            }
        }
        out
    };
    let (want, got) = (tags(reference), tags(run));
    if want != got {
        for (w, g) in want.iter().zip(&got) {
            if w != g {
                bail!(
                    "{}: ember inspect shows {} where the uninterrupted run has {}",
                    dir.display(),
                    truncate(g),
                    truncate(w)
                );
            }
        }
        bail!(
            "{}: ember inspect lists {} tags, the uninterrupted run {}",
            dir.display(),
            got.len(),
            want.len()
        );
    }
    Ok(())
}

fn truncate(v: &serde_json::Value) -> String {
    let text = v.to_string();
    text.chars().take(400).collect()
}

/// Drops the wall times: `--values` gives each scalar as a `[step, wall_time, value]` triple.
fn strip_wall_times(tag: &mut serde_json::Value) {
    if let Some(values) = tag.get_mut("values").and_then(|v| v.as_array_mut()) {
        for triple in values {
            if let Some(items) = triple.as_array_mut()
                && items.len() == 3
            {
                items.remove(1);
            }
        }
    }
}

/// Marsaglia's xorshift64: the kill moments, reproducible from the seed.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    /// Uniform in [0.12, 0.85): after the process has started and saved its command line (a
    /// run killed before that has nothing to resume), and before a run that goes faster than
    /// the reference did (a cold start) has ended.
    pub(crate) fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        0.12 + 0.73 * (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The process id of rank `rank` of the `ember train` job writing `logdir` (a path or URL), found by its
/// command line and Open MPI's `OMPI_COMM_WORLD_RANK`: the `ember` process, not a shell around it
/// (`cargo xtask mpi`'s `RankExits`).
pub(crate) fn rank_process(logdir: &str, rank: usize) -> Option<u32> {
    let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            if !cmdline.contains(logdir) || !cmdline.contains("train") || cmdline.contains("mpirun")
            {
                return None;
            }
            let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
            if exe.file_name()? != "ember" {
                return None;
            }
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_bytes())
                .then_some(pid)
        })
}

/// The event files under `dir` that no writer closed: ember-write seals a file read-only when
/// its log is closed, and leaves a killed writer's writable.
pub(crate) fn unsealed_event_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt;
    let mut unsealed = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains("tfevents") && entry.metadata()?.permissions().mode() & 0o222 != 0 {
            unsealed.push(name);
        }
    }
    Ok(unsealed)
}

/// The newest whole checkpoint among `names` (file names, or object keys ending in one): rank
/// 0's `ckpt-<number>.ember` of the greatest number; other ranks' parts (`.rank<r>`) and
/// temporary files aside. One rule for every task that waits for or resumes from a checkpoint.
pub(crate) fn newest_checkpoint<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Option<S> {
    names
        .into_iter()
        .filter(|name| {
            let file = name.as_ref().rsplit('/').next().unwrap_or_default();
            file.starts_with("ckpt-") && file.ends_with(".ember") && !file.contains(".rank")
        })
        .max_by(|a, b| a.as_ref().cmp(b.as_ref()))
}

/// The file names in the local directory `dir` (none where it cannot be read).
pub(crate) fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::newest_checkpoint;

    #[test]
    fn the_newest_checkpoint_is_rank_0_s_of_the_greatest_number() {
        let keys = [
            "run/checkpoints/ckpt-000000000002.ember",
            "run/checkpoints/ckpt-000000000003.rank1.ember",
            "run/checkpoints/ckpt-000000000003.ember.tmp",
            "run/checkpoints/run.json",
            "run/checkpoints/ckpt-000000000001.ember",
        ];
        assert_eq!(
            newest_checkpoint(keys),
            Some("run/checkpoints/ckpt-000000000002.ember")
        );
        assert_eq!(newest_checkpoint(Vec::<String>::new()), None);
    }
}
