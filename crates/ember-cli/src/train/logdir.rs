//! A run directory's names: where a run's logs go when `--logdir` is not given
//! (`runs/<UTC date-time>`, named by the time the run, rank 0's across ranks, started), and the
//! folder of its checkpoints.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The checkpoint directory, inside the run's log directory.
pub(super) const CHECKPOINTS: &str = "checkpoints";

/// Where runs without `--logdir` go, relative to the working directory.
pub(super) const RUNS: &str = "runs";

/// How many names a second's runs may take: `…Z`, `…Z-2`, … `…Z-100`.
const NAMES_A_SECOND: u64 = 100;

/// The default log directory under `runs` of a run started at `secs`, the `n`th of that
/// second: `<UTC date-time>`, then `<UTC date-time>-2`, `-3`, ….
pub(super) fn default_logdir_at(runs: &Path, secs: u64, n: u64) -> PathBuf {
    let stamp = utc_stamp(secs);
    runs.join(if n <= 1 {
        stamp
    } else {
        format!("{stamp}-{n}")
    })
}

/// Claims the first free default log directory under `runs` for a run started at `secs` by
/// making it, and returns its number (see [`default_logdir_at`]): runs started in the same
/// second (a script's loop of short runs, two shells) each get a directory of their own,
/// where the second used to be refused as another run's.
pub(super) fn claim_default_logdir(runs: &Path, secs: u64) -> anyhow::Result<u64> {
    std::fs::create_dir_all(runs).with_context(|| format!("cannot create {}", runs.display()))?;
    for n in 1..=NAMES_A_SECOND {
        let dir = default_logdir_at(runs, secs, n);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(n),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => {
                return Err(error).with_context(|| format!("cannot create {}", dir.display()));
            }
        }
    }
    anyhow::bail!(
        "{} and the next {} names of that second are all taken; give --logdir",
        default_logdir_at(runs, secs, 1).display(),
        NAMES_A_SECOND - 1
    )
}

/// Seconds since the Unix epoch, now.
pub(super) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `YYYY-MM-DDTHH-MM-SSZ` for seconds since the Unix epoch (UTC; `-` rather than `:` so the
/// name is valid on every file system).
fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_dates() {
        assert_eq!(utc_stamp(0), "1970-01-01T00-00-00Z");
        // 2000-02-29 12:34:56 UTC, a leap day.
        assert_eq!(utc_stamp(951_827_696), "2000-02-29T12-34-56Z");
        // 2026-01-01 00:00:00 UTC.
        assert_eq!(utc_stamp(1_767_225_600), "2026-01-01T00-00-00Z");
    }

    #[test]
    fn runs_started_in_one_second_each_claim_a_directory_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let secs = 1_767_225_600;
        let claimed: Vec<u64> = (0..3)
            .map(|_| claim_default_logdir(&runs, secs).unwrap())
            .collect();
        assert_eq!(claimed, [1, 2, 3]);
        let mut names: Vec<String> = std::fs::read_dir(&runs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "2026-01-01T00-00-00Z",
                "2026-01-01T00-00-00Z-2",
                "2026-01-01T00-00-00Z-3"
            ]
        );
        // A name another tool took (a file) is passed over too.
        std::fs::write(default_logdir_at(&runs, secs + 1, 1), b"not a run").unwrap();
        assert_eq!(claim_default_logdir(&runs, secs + 1).unwrap(), 2);
    }
}
