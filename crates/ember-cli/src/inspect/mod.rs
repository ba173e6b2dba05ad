//! `ember inspect`: runs, files and tags of TensorBoard and MindInsight event files, with every
//! record's CRCs checked and every problem reported at its byte offset.
//!
//! A *run* is a directory that directly holds event files. Tags are gathered per run over its
//! files in name order (the order TensorBoard and MindInsight read them), grouped by kind.
//!
//! Only regular files are read (a symbolic link only when it leads to one): a FIFO or a device
//! named like an event file would block or never end. Such paths are skipped and named, with
//! the reason, in one warning line each on stderr and in the `--json` output's `skipped` list.
//!
//! PR curves, audio clips and custom scalars layouts are decoded with `ember::read`'s decoders
//! and shown with their figures; a run's `projector_config.pbtxt` (read by TensorBoard's
//! projector, not from the event files) lists its embeddings, each a tag of kind `embedding`
//! whose files are checked to be there. A value or config that does not decode, or an
//! embedding file that is missing, is an error like a damaged record.
//!
//! The modules, bottom up: `kinds` (the per-kind details and their text and JSON forms),
//! `decode` (one record of either format into a run's tags), `text` and `json` (the two
//! outputs), and this one (the arguments, walking the directory, reading files).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use ember::read::{EmbeddingEntry, ReadProblem, RecordReader, ValueProblem};

mod decode;
mod json;
mod kinds;
mod text;

use kinds::Detail;

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// A log directory (searched recursively) or one event file.
    path: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// With --json, every value's full series as `[step, wall_time, value]` triples: a number
    /// for a scalar, an object for a PR curve, audio clip or custom scalars layout.
    #[arg(long, requires = "json")]
    values: bool,
}

/// Which reader a file needs, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    /// `*tfevents*`: TensorBoard `Event`s.
    TensorBoard,
    /// `*.out.events.summary.*` (not lineage or explain): MindInsight `Event`s.
    MindInsightSummary,
    /// `*.out.events.summary.*_explain`: MindInsight `Event`s holding explain records.
    MindInsightExplain,
    /// `*.out.events.summary.*_lineage`: MindInsight `LineageEvent`s.
    MindInsightLineage,
}

impl FileKind {
    fn of(path: &Path) -> Option<FileKind> {
        let name = path.file_name()?.to_str()?;
        if name.contains(".out.events.summary.") {
            Some(if name.ends_with("_lineage") {
                FileKind::MindInsightLineage
            } else if name.ends_with("_explain") {
                FileKind::MindInsightExplain
            } else {
                FileKind::MindInsightSummary
            })
        } else if name.contains("tfevents") {
            Some(FileKind::TensorBoard)
        } else {
            None
        }
    }

    fn format(self) -> &'static str {
        match self {
            FileKind::TensorBoard => "tensorboard",
            _ => "mindinsight",
        }
    }

    fn content(self) -> &'static str {
        match self {
            FileKind::TensorBoard | FileKind::MindInsightSummary => "summary",
            FileKind::MindInsightExplain => "explain",
            FileKind::MindInsightLineage => "lineage",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Severity {
    /// A truncated tail: a file being written or cut by a crash.
    Warning,
    /// Damaged bytes, a record that does not decode, a file that cannot be read.
    Error,
}

#[derive(Debug)]
struct Problem {
    offset: Option<u64>,
    severity: Severity,
    kind: &'static str,
    message: String,
}

impl Problem {
    fn from_read(problem: &ReadProblem) -> Self {
        let kind = match problem {
            ReadProblem::Truncated { .. } => "truncated_tail",
            ReadProblem::BadLengthCrc { .. } => "bad_length_crc",
            ReadProblem::ImpossibleLength { .. } => "impossible_length",
            ReadProblem::BadDataCrc { .. } => "bad_data_crc",
            ReadProblem::Io { .. } => "read_error",
            _ => "unknown",
        };
        Problem {
            offset: Some(problem.offset()),
            severity: if problem.is_truncated_tail() {
                Severity::Warning
            } else {
                Severity::Error
            },
            kind,
            message: problem.to_string(),
        }
    }
}

#[derive(Debug)]
struct FileReport {
    path: PathBuf,
    kind: FileKind,
    bytes: u64,
    records: usize,
    problems: Vec<Problem>,
}

#[derive(Debug, Clone, Copy)]
struct ScalarStats {
    first: f64,
    last: f64,
    min: f64,
    max: f64,
}

#[derive(Debug, Default)]
struct TagStats {
    count: usize,
    steps: Option<(i64, i64)>,
    scalar: Option<ScalarStats>,
    /// Every scalar value as (step, wall time, value), in file order.
    series: Vec<(Option<i64>, f64, f64)>,
    /// The first and the last decoded value of a kind with details (PR curves, audio, layouts,
    /// embeddings).
    first: Option<Detail>,
    last: Option<Detail>,
    /// Every decoded value as (step, wall time, value), kept for `--values` only: audio clips
    /// are large. An embedding, listed in the projector config, has neither step nor time.
    details: Vec<(Option<i64>, Option<f64>, Detail)>,
}

impl TagStats {
    fn add(&mut self, step: Option<i64>, wall_time: f64, scalar: Option<f64>) {
        self.count += 1;
        if let Some(v) = scalar {
            self.series.push((step, wall_time, v));
        }
        if let Some(step) = step {
            self.steps = Some(match self.steps {
                Some((lo, hi)) => (lo.min(step), hi.max(step)),
                None => (step, step),
            });
        }
        if let Some(v) = scalar {
            self.scalar = Some(match self.scalar {
                Some(s) => ScalarStats {
                    first: s.first,
                    last: v,
                    min: s.min.min(v),
                    max: s.max.max(v),
                },
                None => ScalarStats {
                    first: v,
                    last: v,
                    min: v,
                    max: v,
                },
            });
        }
    }
}

#[derive(Debug, Default)]
struct RunReport {
    files: Vec<FileReport>,
    /// (kind, tag) to statistics.
    tags: BTreeMap<(String, String), TagStats>,
    /// TensorBoard plugin of each tag, from the metadata on its first value in a file.
    plugins: HashMap<String, String>,
    /// The wall time of the event being decoded.
    wall_time: f64,
    /// Whether every decoded value is kept (`--values`), or the first and last.
    keep_details: bool,
    /// The values of the record being decoded that do not decode, with their tags.
    value_problems: Vec<(String, ValueProblem)>,
    /// The run's projector config, when it has one.
    projector: Option<ProjectorReport>,
}

/// The run's `projector_config.pbtxt`: where it is and what is wrong with it or its files.
#[derive(Debug)]
struct ProjectorReport {
    path: PathBuf,
    embeddings: usize,
    problems: Vec<Problem>,
}

impl RunReport {
    fn add(&mut self, kind: &str, tag: &str, step: Option<i64>, scalar: Option<f64>) {
        self.tags
            .entry((kind.to_string(), tag.to_string()))
            .or_default()
            .add(step, self.wall_time, scalar);
    }

    /// Adds a value of a kind with details (after [`add`](Self::add) counted it), recorded at
    /// the wall time of the event being decoded when there is one.
    fn add_detail(&mut self, kind: &str, tag: &str, step: Option<i64>, detail: Detail) {
        let wall_time = (!matches!(detail, Detail::Embedding(_))).then_some(self.wall_time);
        let stats = self
            .tags
            .entry((kind.to_string(), tag.to_string()))
            .or_default();
        if self.keep_details {
            stats.details.push((step, wall_time, detail.clone()));
        }
        if stats.first.is_none() {
            stats.first = Some(detail.clone());
        }
        stats.last = Some(detail);
    }

    /// Reads the projector config of the run in `dir`, its embeddings becoming tags.
    fn add_projector(&mut self, dir: &Path) {
        let path = dir.join(ember::pack::projector_files::CONFIG);
        if std::fs::symlink_metadata(&path).is_err() {
            return;
        }
        let mut report = ProjectorReport {
            path,
            embeddings: 0,
            problems: Vec::new(),
        };
        match ember::read::embeddings(dir) {
            Ok(entries) => {
                report.embeddings = entries.len();
                for entry in entries {
                    report
                        .problems
                        .extend(entry.problems.iter().map(|problem| Problem {
                            offset: None,
                            severity: Severity::Error,
                            kind: "missing_file",
                            message: format!("embedding {:?}: {problem}", entry.tensor_name),
                        }));
                    self.add_embedding(entry);
                }
            }
            Err(error) => report.problems.push(Problem {
                offset: None,
                severity: Severity::Error,
                kind: "undecodable",
                message: error.to_string(),
            }),
        }
        self.projector = Some(report);
    }

    fn add_embedding(&mut self, entry: EmbeddingEntry) {
        let tag = entry.tensor_name.clone();
        self.add("embedding", &tag, None, None);
        self.add_detail("embedding", &tag, None, Detail::Embedding(entry));
    }
}

/// A path named like an event file that is not read.
#[derive(Debug)]
struct Skipped {
    path: PathBuf,
    reason: String,
}

pub(crate) fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    if let Some(url) = args.path.to_str().filter(|p| ember::is_remote(p)) {
        // An object-store log directory: its objects (a file's segments in order) downloaded
        // into a directory of their own, and inspected there.
        #[cfg(feature = "object-store")]
        {
            let local = ember::read::download_private(url)?;
            eprintln!(
                "{url}: {} object(s), downloaded into {}",
                local.objects,
                crate::shown(local.path())
            );
            return run(InspectArgs {
                path: local.path().to_path_buf(),
                ..args
            });
        }
        #[cfg(not(feature = "object-store"))]
        {
            ember::read::download(url, std::path::Path::new(""))?;
            anyhow::bail!("{url}: this ember was built without the `object-store` feature");
        }
    }
    let (runs, skipped) = inspect(&args.path, args.values)?;
    let problems = runs.values().flat_map(|r| {
        let files = r.files.iter().flat_map(|f| &f.problems);
        files.chain(r.projector.iter().flat_map(|p| &p.problems))
    });
    let (mut errors, mut warnings) = (0usize, 0usize);
    for problem in problems {
        match problem.severity {
            Severity::Error => errors += 1,
            Severity::Warning => warnings += 1,
        }
    }
    if args.json {
        crate::out(json::to_json(
            &runs,
            &skipped,
            errors,
            warnings,
            args.values,
        ));
    } else {
        text::print_text(&runs, errors, warnings);
    }
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Every run under `path` (or the one holding the file `path`), keyed by directory, and the
/// paths skipped, each already named in a warning on stderr. With `keep_details`, every
/// decoded value is kept, not only each tag's first and last.
fn inspect(
    path: &Path,
    keep_details: bool,
) -> anyhow::Result<(BTreeMap<PathBuf, RunReport>, Vec<Skipped>)> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", crate::shown(path)))?;
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    if metadata.is_dir() {
        collect(path, &mut files, &mut skipped)?;
        for skip in &skipped {
            eprintln!(
                "warning: skipped {}: {}",
                crate::shown(&skip.path),
                skip.reason
            );
        }
        if files.is_empty() {
            let skipped = match skipped.len() {
                0 => String::new(),
                n => format!("; {n} named so are not regular files"),
            };
            bail!(
                "no event files under {} (looked for *tfevents* and *.out.events.summary.*{skipped})",
                crate::shown(path)
            );
        }
    } else if !metadata.is_file() {
        bail!(
            "{} is not a regular file: {}",
            crate::shown(path),
            file_type_name(&metadata.file_type())
        );
    } else {
        let kind = FileKind::of(path).with_context(|| {
            format!(
                "{} is not an event file by its name (expected *tfevents* or \
                 *.out.events.summary.*)",
                crate::shown(path)
            )
        })?;
        files.push((path.to_path_buf(), kind));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut runs: BTreeMap<PathBuf, RunReport> = BTreeMap::new();
    for (file, kind) in files {
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let run = runs.entry(dir).or_insert_with(|| RunReport {
            keep_details,
            ..RunReport::default()
        });
        let report = read_file(&file, kind, run);
        run.files.push(report);
    }
    for (dir, run) in &mut runs {
        run.add_projector(dir);
    }
    Ok((runs, skipped))
}

/// Event files under `dir`, recursively, and those named so that are not regular files. An
/// unreadable directory is an error. Symbolic links to directories are not followed, so a link
/// cycle cannot loop.
fn collect(
    dir: &Path,
    files: &mut Vec<(PathBuf, FileKind)>,
    skipped: &mut Vec<Skipped>,
) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", crate::shown(dir)))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", crate::shown(dir)))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .with_context(|| format!("cannot read {}", crate::shown(&path)))?;
        if file_type.is_dir() {
            collect(&path, files, skipped)?;
        } else if let Some(kind) = FileKind::of(&path) {
            match not_regular(&path, &file_type) {
                None => files.push((path, kind)),
                Some(reason) => skipped.push(Skipped { path, reason }),
            }
        }
    }
    Ok(())
}

/// Why `path` (of type `file_type`, not followed) is not to be read, or `None` when it is a
/// regular file or a symbolic link to one.
fn not_regular(path: &Path, file_type: &std::fs::FileType) -> Option<String> {
    if file_type.is_file() {
        return None;
    }
    if !file_type.is_symlink() {
        return Some(format!("not a regular file: {}", file_type_name(file_type)));
    }
    match std::fs::metadata(path) {
        Ok(target) if target.is_file() => None,
        Ok(target) => Some(format!(
            "a symbolic link to {}",
            file_type_name(&target.file_type())
        )),
        Err(error) => Some(format!("a symbolic link that cannot be followed: {error}")),
    }
}

/// What a file that is not a regular file is, for messages.
fn file_type_name(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "neither a file nor a directory"
    }
}

/// Reads one file, adding its tags to `run`; problems go in the report, never stop the scan.
fn read_file(path: &Path, kind: FileKind, run: &mut RunReport) -> FileReport {
    let mut report = FileReport {
        path: path.to_path_buf(),
        kind,
        bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        records: 0,
        problems: Vec::new(),
    };
    let reader = match RecordReader::open(path) {
        Ok(reader) => reader,
        Err(error) => {
            report.problems.push(Problem {
                offset: None,
                severity: Severity::Error,
                kind: "unreadable",
                message: format!("cannot open: {error}"),
            });
            return report;
        }
    };
    for item in reader {
        match item {
            Ok(record) => {
                report.records += 1;
                if let Err(error) = decode::decode(kind, &record.data, run) {
                    report.problems.push(Problem {
                        offset: Some(record.offset),
                        severity: Severity::Error,
                        kind: "undecodable",
                        message: format!(
                            "record at byte {} has valid CRCs but is not a {} {} event: {error}",
                            record.offset,
                            kind.format(),
                            kind.content()
                        ),
                    });
                }
                for (tag, problem) in run.value_problems.drain(..) {
                    report.problems.push(Problem {
                        offset: Some(record.offset),
                        severity: Severity::Error,
                        kind: "undecodable_value",
                        message: format!(
                            "record at byte {}: the value {tag:?} does not decode: {problem}",
                            record.offset
                        ),
                    });
                }
            }
            Err(problem) => report.problems.push(Problem::from_read(&problem)),
        }
    }
    report
}
