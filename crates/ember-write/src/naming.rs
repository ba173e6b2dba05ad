//! File and directory names of everything the writers create.
//!
//! | file | name |
//! |---|---|
//! | TensorBoard summary | `<prefix>.out.tfevents.<secs, 10 digits>.<host>.<pid>.<counter>[.rank<rank>]<suffix>` |
//! | MindInsight summary | `<prefix>.out.events.summary.<secs>.<rank>.<host><suffix>` |
//! | lineage (both formats) | `<prefix>.out.events.summary.<secs>.<rank>.<host>_lineage` |
//! | explain (both formats) | `<prefix>.out.events.summary.<secs>.<rank>.<host>_explain` |
//! | exported tensor | `export_<secs>/tensor/<percent-encoded tag>_<step>.npy` |
//!
//! The prefix defaults to `events`; the suffix to nothing for TensorBoard and
//! `_MS` for MindInsight. The TensorBoard name carries the rank only when asked
//! ([`Naming::rank_in_tensorboard_names`]), as `.rank<r>` after the counter.
//! Lineage and explain files hold MindInsight protos, so they always take
//! MindInsight's pattern, whose `_lineage`/`_explain` endings MindInsight keys
//! on, and never contain `tfevents`, which would make TensorBoard read them.
//!
//! `secs` is the pool's start time for the first file of each kind (so the
//! summary and lineage files of one run share it, as in MindSpore); a rotated
//! file takes `max(now, previous + 1)`, so its name sorts after the previous
//! one whatever follows the fixed-width seconds. The counter is a per-process
//! count of files created, as in TensorBoard's Python writer.
//!
//! Tags become export file names only through [`percent_encode`], which keeps
//! just `A-Z a-z 0-9 _ . - ~`: no separator, so no tag can leave the directory.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ember_pack::{FileKind, Format};

static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The next value of the per-process file counter of TensorBoard names.
pub(crate) fn next_counter() -> u64 {
    FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// The longest file name most file systems accept, in bytes.
pub const MAX_FILE_NAME_LEN: usize = 255;

/// Percent-encodes `tag` like Python's `urllib.parse.quote(tag, safe='')`:
/// every byte outside `A-Z a-z 0-9 _ . - ~` becomes `%XX`.
pub fn percent_encode(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    for b in tag.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The file name of an exported tensor: `<percent-encoded tag>_<step>.npy`.
pub fn export_file_name(tag: &str, step: i64) -> String {
    format!("{}_{step}.npy", percent_encode(tag))
}

/// The directory of one embedding inside `embeddings/`: `<percent-encoded tag>_<step>`.
/// A step has no `_`, so two tags or steps never share a directory.
pub fn embedding_dir_name(tag: &str, step: i64) -> String {
    format!("{}_{step}", percent_encode(tag))
}

/// The directory of exported tensors, relative to the log directory.
pub fn export_dir(secs: u64) -> PathBuf {
    PathBuf::from(format!("export_{secs}")).join("tensor")
}

/// Checks a file prefix or suffix: ASCII letters, digits, `_`, `.` and `-`
/// only; a prefix must be non-empty and start with a letter, digit or `_`.
pub(crate) fn check_affix(value: &str, is_prefix: bool) -> Result<(), String> {
    let what = if is_prefix { "prefix" } else { "suffix" };
    if is_prefix && value.is_empty() {
        return Err("file prefix must not be empty".into());
    }
    if is_prefix && value.starts_with(['.', '-']) {
        return Err(format!(
            "file prefix `{value}` must not start with `.` or `-`"
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "file {what} `{value}` contains `{c}`; only letters, digits, `_`, `.` and `-` are allowed"
        ));
    }
    Ok(())
}

/// The host name, reduced to characters safe in a file name.
pub(crate) fn host_name() -> String {
    #[cfg(unix)]
    let raw = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    #[cfg(not(unix))]
    let raw = std::env::var("COMPUTERNAME").unwrap_or_default();
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "localhost".into()
    } else {
        clean
    }
}

/// The creation time in an event file's name: TensorBoard's `…tfevents.<secs>.…` or
/// MindInsight's `…summary.<secs>.…`.
pub fn name_secs(name: &str) -> Option<u64> {
    let mut segments = name.split('.');
    segments.find(|s| *s == "tfevents" || *s == "summary")?;
    segments.next()?.parse().ok()
}

/// `name` with its creation time (see [`name_secs`]) replaced by `secs`, written as wide as
/// before at least (TensorBoard's ten digits), or `None` when it has none; for an export
/// directory (`export_<secs>`), the same. How a name taken in an object store by another
/// writer moves on to the next second, still sorting after it.
pub fn with_secs(name: &str, secs: u64) -> Option<String> {
    if let Some(old) = name.strip_prefix("export_") {
        old.parse::<u64>().ok()?;
        return Some(format!("export_{secs}"));
    }
    let mut segments: Vec<String> = name.split('.').map(str::to_owned).collect();
    let at = segments
        .iter()
        .position(|s| s == "tfevents" || s == "summary")?
        + 1;
    let old = segments.get(at)?;
    old.parse::<u64>().ok()?;
    let width = old.len();
    segments[at] = format!("{secs:0width$}");
    Some(segments.join("."))
}

/// The kind of event file `name` names, as far as its name orders it: lineage, explain, or a
/// summary file (of either format).
pub(crate) fn kind_of(name: &str) -> FileKind {
    if name.ends_with("_lineage") {
        FileKind::Lineage
    } else if name.ends_with("_explain") {
        FileKind::Explain
    } else {
        FileKind::Summary
    }
}

/// The newest creation time among the `kind` event files of `dir`; `None` when it has none
/// (or cannot be listed: then the new file is named by the clock alone).
pub(crate) fn newest_secs(dir: &std::path::Path, kind: FileKind) -> Option<u64> {
    let kind = match kind {
        FileKind::Lineage | FileKind::Explain => kind,
        _ => FileKind::Summary,
    };
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| kind_of(name) == kind)
        .filter_map(|name| name_secs(&name))
        .max()
}

/// Everything that goes into a file name except the time and the counter.
#[derive(Debug, Clone)]
pub struct Naming {
    /// Which summary-file pattern to use.
    pub format: Format,
    /// Leading part of every event file name (default `events`).
    pub prefix: String,
    /// Trailing part of summary file names; `None` means the format's default
    /// (nothing for TensorBoard, `_MS` for MindInsight).
    pub suffix: Option<String>,
    /// Rank (device id) in MindInsight names.
    pub rank: u32,
    /// Whether TensorBoard summary names carry `.rank<rank>` after the counter.
    pub rank_in_tensorboard_names: bool,
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
}

impl Naming {
    /// Naming for this host and process with the defaults of `format`.
    pub fn new(format: Format) -> Self {
        Self {
            format,
            prefix: "events".into(),
            suffix: None,
            rank: 0,
            rank_in_tensorboard_names: false,
            host: host_name(),
            pid: std::process::id(),
        }
    }

    fn mindinsight_name(&self, secs: u64, suffix: &str) -> String {
        format!(
            "{}.out.events.summary.{secs}.{}.{}{suffix}",
            self.prefix, self.rank, self.host
        )
    }

    /// The name of a `kind` file created at `secs` with file `counter`
    /// (TensorBoard summary names only use the counter). Export files are
    /// named by [`export_file_name`] instead; for `Export` this gives the
    /// export directory's name.
    pub fn file_name(&self, kind: FileKind, secs: u64, counter: u64) -> String {
        match kind {
            FileKind::Summary => match self.format {
                Format::TensorBoard => {
                    let rank = if self.rank_in_tensorboard_names {
                        format!(".rank{}", self.rank)
                    } else {
                        String::new()
                    };
                    format!(
                        "{}.out.tfevents.{secs:010}.{}.{}.{counter}{rank}{}",
                        self.prefix,
                        self.host,
                        self.pid,
                        self.suffix.as_deref().unwrap_or("")
                    )
                }
                Format::MindInsight => {
                    self.mindinsight_name(secs, self.suffix.as_deref().unwrap_or("_MS"))
                }
            },
            FileKind::Lineage => self.mindinsight_name(secs, "_lineage"),
            FileKind::Explain => self.mindinsight_name(secs, "_explain"),
            FileKind::Export => format!("export_{secs}"),
            FileKind::Projector => String::from("embeddings"),
        }
    }
}

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Seconds since the Unix epoch as a float, now.
pub(crate) fn unix_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naming(format: Format) -> Naming {
        Naming {
            host: "myhost".into(),
            pid: 4242,
            ..Naming::new(format)
        }
    }

    #[test]
    fn tensorboard_names() {
        let n = naming(Format::TensorBoard);
        assert_eq!(
            n.file_name(FileKind::Summary, 1_700_000_000, 3),
            "events.out.tfevents.1700000000.myhost.4242.3"
        );
        assert_eq!(
            n.file_name(FileKind::Summary, 42, 0),
            "events.out.tfevents.0000000042.myhost.4242.0"
        );
        let n = Naming {
            rank: 7,
            rank_in_tensorboard_names: true,
            suffix: Some(".v2".into()),
            ..n
        };
        assert_eq!(
            n.file_name(FileKind::Summary, 1_700_000_000, 0),
            "events.out.tfevents.1700000000.myhost.4242.0.rank7.v2"
        );
    }

    #[test]
    fn name_secs_reads_the_creation_time_back() {
        for format in [Format::TensorBoard, Format::MindInsight] {
            let n = naming(format);
            assert_eq!(
                name_secs(&n.file_name(FileKind::Summary, 1_700_000_001, 3)),
                Some(1_700_000_001)
            );
            assert_eq!(name_secs(&n.file_name(FileKind::Summary, 42, 0)), Some(42));
        }
        assert_eq!(
            name_secs(&naming(Format::MindInsight).file_name(FileKind::Lineage, 9, 0)),
            Some(9)
        );
        assert_eq!(name_secs("projector_config.pbtxt"), None);
        assert_eq!(name_secs("events.out.tfevents.x.h"), None);
    }

    #[test]
    fn mindinsight_names() {
        let n = naming(Format::MindInsight);
        assert_eq!(
            n.file_name(FileKind::Summary, 1_700_000_000, 9),
            "events.out.events.summary.1700000000.0.myhost_MS"
        );
        assert_eq!(
            n.file_name(FileKind::Lineage, 1_700_000_000, 9),
            "events.out.events.summary.1700000000.0.myhost_lineage"
        );
        assert_eq!(
            n.file_name(FileKind::Explain, 1_700_000_000, 9),
            "events.out.events.summary.1700000000.0.myhost_explain"
        );
        let tb = naming(Format::TensorBoard);
        assert!(!tb.file_name(FileKind::Lineage, 1, 1).contains("tfevents"));
    }

    #[test]
    fn export_names_stay_inside() {
        assert_eq!(export_file_name("loss", 3), "loss_3.npy");
        assert_eq!(export_file_name("a/b c", -1), "a%2Fb%20c_-1.npy");
        assert_eq!(
            export_file_name("../../etc/passwd", 0),
            "..%2F..%2Fetc%2Fpasswd_0.npy"
        );
        assert_eq!(export_file_name("..", 0), ".._0.npy");
        assert_eq!(export_file_name("é", 0), "%C3%A9_0.npy");
        for tag in ["..", ".", "/", "a/../..", "\\..\\", "\0"] {
            let name = export_file_name(tag, 1);
            assert!(!name.contains('/') && !name.contains('\\') && !name.contains('\0'));
            let p = std::path::Path::new(&name);
            assert_eq!(p.components().count(), 1);
            assert!(matches!(
                p.components().next(),
                Some(std::path::Component::Normal(_))
            ));
        }
        assert_eq!(export_dir(5), PathBuf::from("export_5/tensor"));
    }

    #[test]
    fn affixes_are_checked() {
        assert!(check_affix("events", true).is_ok());
        assert!(check_affix("", true).is_err());
        assert!(check_affix("", false).is_ok());
        assert!(check_affix("_MS", false).is_ok());
        assert!(check_affix("a/b", true).is_err());
        assert!(check_affix("..", true).is_err());
        assert!(check_affix("x y", false).is_err());
    }

    #[test]
    fn host_name_is_file_safe() {
        let h = host_name();
        assert!(!h.is_empty());
        assert!(!h.contains('/'));
    }
}
