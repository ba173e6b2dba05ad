//! A run directory's names: where a run's logs go when `--logdir` is not given
//! (`runs/<UTC date-time>`, named by the time the run, rank 0's across ranks, started), and the
//! folder of its checkpoints.

use std::path::PathBuf;

/// The checkpoint directory, inside the run's log directory.
pub(super) const CHECKPOINTS: &str = "checkpoints";

/// The default log directory for a run started at `secs`: `runs/<UTC date-time>`.
pub(super) fn default_logdir_at(secs: u64) -> PathBuf {
    PathBuf::from("runs").join(utc_stamp(secs))
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
}
