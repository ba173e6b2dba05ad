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
//! This file runs past 600 lines on purpose: it is the whole command (walking, reading, decoding
//! both formats, printing text and JSON), and each part is a few functions used only here.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use ember::pack::proto::{mindspore, tensorboard};
use ember::read::{ReadProblem, RecordReader};
use prost::Message;
use serde_json::{Value as Json, json};

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// A log directory (searched recursively) or one event file.
    path: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// With --json, every scalar's full series as `[step, wall_time, value]` triples.
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
}

impl RunReport {
    fn add(&mut self, kind: &str, tag: &str, step: Option<i64>, scalar: Option<f64>) {
        self.tags
            .entry((kind.to_string(), tag.to_string()))
            .or_default()
            .add(step, self.wall_time, scalar);
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
        let local = std::env::temp_dir().join(format!("ember-inspect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&local);
        let objects = ember::read::download(url, &local)?;
        eprintln!(
            "{url}: {objects} object(s), downloaded into {}",
            crate::shown(&local)
        );
        let result = run(InspectArgs {
            path: local.clone(),
            ..args
        });
        let _ = std::fs::remove_dir_all(&local);
        return result;
    }
    let (runs, skipped) = inspect(&args.path)?;
    let problems = runs
        .values()
        .flat_map(|r| &r.files)
        .flat_map(|f| &f.problems);
    let (mut errors, mut warnings) = (0usize, 0usize);
    for problem in problems {
        match problem.severity {
            Severity::Error => errors += 1,
            Severity::Warning => warnings += 1,
        }
    }
    if args.json {
        crate::out(to_json(&runs, &skipped, errors, warnings, args.values));
    } else {
        print_text(&runs, errors, warnings);
    }
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Every run under `path` (or the one holding the file `path`), keyed by directory, and the
/// paths skipped, each already named in a warning on stderr.
fn inspect(path: &Path) -> anyhow::Result<(BTreeMap<PathBuf, RunReport>, Vec<Skipped>)> {
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
        let run = runs.entry(dir).or_default();
        let report = read_file(&file, kind, run);
        run.files.push(report);
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
                if let Err(error) = decode(kind, &record.data, run) {
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
            }
            Err(problem) => report.problems.push(Problem::from_read(&problem)),
        }
    }
    report
}

fn decode(kind: FileKind, data: &[u8], run: &mut RunReport) -> Result<(), prost::DecodeError> {
    match kind {
        FileKind::TensorBoard => decode_tensorboard(tensorboard::Event::decode(data)?, run),
        FileKind::MindInsightSummary | FileKind::MindInsightExplain => {
            decode_mindspore(mindspore::Event::decode(data)?, run)
        }
        FileKind::MindInsightLineage => {
            use mindspore::lineage_event::What;
            let event = mindspore::LineageEvent::decode(data)?;
            let tag = match &event.what {
                Some(What::Version(_)) | None => return Ok(()),
                Some(What::TrainLineage(_)) => "train_lineage",
                Some(What::EvaluationLineage(_)) => "evaluation_lineage",
                Some(What::DatasetGraph(_)) => "dataset_graph",
                Some(What::UserDefinedInfo(_)) => "user_defined_info",
            };
            run.add("lineage", tag, event.step, None);
        }
    }
    Ok(())
}

fn decode_tensorboard(event: tensorboard::Event, run: &mut RunReport) {
    use tensorboard::event::What;
    use tensorboard::summary::value::Value as V;
    let step = Some(event.step);
    run.wall_time = event.wall_time;
    match event.what {
        None | Some(What::FileVersion(_)) => {}
        Some(What::GraphDef(_)) => run.add("graph", "graph", step, None),
        Some(What::MetaGraphDef(_)) => run.add("graph", "meta_graph", step, None),
        Some(What::SessionLog(_)) => run.add("session_log", "session_log", step, None),
        Some(What::TaggedRunMetadata(m)) => run.add("run_metadata", &m.tag, step, None),
        Some(What::Summary(summary)) => {
            for value in summary.value {
                if let Some(plugin) = value
                    .metadata
                    .as_ref()
                    .and_then(|m| m.plugin_data.as_ref())
                    .filter(|p| !p.plugin_name.is_empty())
                {
                    run.plugins
                        .insert(value.tag.clone(), plugin.plugin_name.clone());
                }
                let plugin = run.plugins.get(&value.tag).map(String::as_str);
                let (kind, scalar) = match &value.value {
                    Some(V::SimpleValue(v)) => ("scalar", Some(f64::from(*v))),
                    Some(V::Histo(_)) | Some(V::ObsoleteOldStyleHistogram(_)) => {
                        ("histogram", None)
                    }
                    Some(V::Image(_)) => ("image", None),
                    Some(V::Audio(_)) => ("audio", None),
                    Some(V::Tensor(t)) => match plugin {
                        Some("text") => ("text", None),
                        Some("hparams") => ("hparams", None),
                        Some("pr_curves") => ("pr curve", None),
                        Some("audio") => ("audio", None),
                        Some("custom_scalars") => ("custom scalars layout", None),
                        Some("scalars") => ("scalar", tensor_scalar(t)),
                        _ => ("tensor", None),
                    },
                    None => ("empty", None),
                };
                run.add(kind, &value.tag, step, scalar);
            }
        }
    }
}

/// The single number of a scalar tensor (TensorBoard's newer scalar form).
fn tensor_scalar(t: &tensorboard::TensorProto) -> Option<f64> {
    if let Some(v) = t.float_val.first() {
        return Some(f64::from(*v));
    }
    if let Some(v) = t.double_val.first() {
        return Some(*v);
    }
    let content = &t.tensor_content;
    if t.dtype == tensorboard::DataType::DtDouble as i32 && content.len() >= 8 {
        let bytes: [u8; 8] = content[..8].try_into().ok()?;
        return Some(f64::from_le_bytes(bytes));
    }
    if t.dtype == tensorboard::DataType::DtFloat as i32 && content.len() >= 4 {
        let bytes: [u8; 4] = content[..4].try_into().ok()?;
        return Some(f64::from(f32::from_le_bytes(bytes)));
    }
    None
}

fn decode_mindspore(event: mindspore::Event, run: &mut RunReport) {
    use mindspore::event::What;
    use mindspore::summary::value::Value as V;
    let step = event.step;
    run.wall_time = event.wall_time;
    match event.what {
        None | Some(What::Version(_)) => {}
        Some(What::GraphDef(graph)) => {
            let name = graph.name.filter(|n| !n.is_empty());
            run.add("graph", name.as_deref().unwrap_or("graph"), step, None);
        }
        Some(What::Explain(_)) => run.add("explain", "explain", step, None),
        Some(What::Summary(summary)) => {
            for value in summary.value {
                let (kind, scalar) = match &value.value {
                    Some(V::ScalarValue(v)) => ("scalar", Some(f64::from(*v))),
                    Some(V::Image(_)) => ("image", None),
                    Some(V::Tensor(_)) => ("tensor", None),
                    Some(V::Histogram(_)) => ("histogram", None),
                    Some(V::LossLandscape(_)) => ("loss_landscape", None),
                    None => ("empty", None),
                };
                run.add(kind, &value.tag, step, scalar);
            }
        }
    }
}

/// The embeddings listed in the run's `projector_config.pbtxt`, when it is a regular file (a
/// link is not followed): TensorBoard's projector reads it, not the event files.
fn projector_embeddings(dir: &Path) -> Option<usize> {
    let path = dir.join("projector_config.pbtxt");
    if !std::fs::symlink_metadata(&path).ok()?.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    Some(
        text.lines()
            .filter(|l| l.trim_start().starts_with("embeddings {"))
            .count(),
    )
}

fn print_text(runs: &BTreeMap<PathBuf, RunReport>, errors: usize, warnings: usize) {
    let mut files = 0;
    let mut records = 0;
    for (dir, run) in runs {
        crate::out(format!("run {}", crate::shown(dir)));
        if let Some(embeddings) = projector_embeddings(dir) {
            crate::out(format!(
                "  projector config projector_config.pbtxt: {embeddings} embedding(s)"
            ));
        }
        for file in &run.files {
            files += 1;
            records += file.records;
            let name = file
                .path
                .file_name()
                .map_or_else(|| crate::shown(&file.path), |n| n.to_string_lossy().into());
            let state = if file.problems.is_empty() {
                "ok"
            } else if file.problems.iter().any(|p| p.severity == Severity::Error) {
                "DAMAGED"
            } else {
                "truncated tail"
            };
            crate::out(format!(
                "  file {name}  [{} {}]  {} bytes, {} records, {state}",
                file.kind.format(),
                file.kind.content(),
                file.bytes,
                file.records
            ));
            for problem in &file.problems {
                let level = match problem.severity {
                    Severity::Warning => "warning",
                    Severity::Error => "error",
                };
                crate::out(format!("    {level}: {}", problem.message));
            }
        }
        let mut kinds: BTreeMap<&str, Vec<(&str, &TagStats)>> = BTreeMap::new();
        for ((kind, tag), stats) in &run.tags {
            kinds.entry(kind).or_default().push((tag, stats));
        }
        for (kind, tags) in kinds {
            let values: usize = tags.iter().map(|(_, s)| s.count).sum();
            crate::out(format!(
                "  {kind}: {} tag(s), {values} value(s)",
                tags.len()
            ));
            let width = tags.iter().map(|(t, _)| t.len()).max().unwrap_or(0);
            for (tag, stats) in tags {
                let steps = match stats.steps {
                    Some((lo, hi)) => format!("steps {lo}..{hi}"),
                    None => "no step".to_string(),
                };
                let mut line = format!("    {tag:<width$}  {:>6} x  {steps}", stats.count);
                if let Some(s) = stats.scalar {
                    line.push_str(&format!(
                        "  first {} last {} min {} max {}",
                        number(s.first),
                        number(s.last),
                        number(s.min),
                        number(s.max)
                    ));
                }
                crate::out(line);
            }
        }
    }
    crate::out(format!(
        "{} run(s), {files} file(s), {records} valid record(s), {errors} error(s), \
         {warnings} warning(s)",
        runs.len()
    ));
    if errors > 0 {
        eprintln!("error: {errors} damaged or unreadable record(s) or file(s); see above");
    } else if warnings > 0 {
        eprintln!(
            "warning: {warnings} truncated tail(s): a file still being written, or cut by a \
             crash; the records before it are intact"
        );
    }
}

fn number(v: f64) -> String {
    format!("{v:.6}")
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_string()
}

fn to_json(
    runs: &BTreeMap<PathBuf, RunReport>,
    skipped: &[Skipped],
    errors: usize,
    warnings: usize,
    values: bool,
) -> Json {
    let runs: Vec<Json> = runs
        .iter()
        .map(|(dir, run)| {
            let files: Vec<Json> = run
                .files
                .iter()
                .map(|file| {
                    let problems: Vec<Json> = file
                        .problems
                        .iter()
                        .map(|p| {
                            json!({
                                "offset": p.offset,
                                "severity": match p.severity {
                                    Severity::Warning => "warning",
                                    Severity::Error => "error",
                                },
                                "kind": p.kind,
                                "message": p.message,
                            })
                        })
                        .collect();
                    json!({
                        "path": crate::shown(&file.path),
                        "format": file.kind.format(),
                        "content": file.kind.content(),
                        "bytes": file.bytes,
                        "records": file.records,
                        "problems": problems,
                    })
                })
                .collect();
            let tags: Vec<Json> = run
                .tags
                .iter()
                .map(|((kind, tag), stats)| {
                    let mut entry = json!({
                        "kind": kind,
                        "tag": tag,
                        "count": stats.count,
                        "step_min": stats.steps.map(|s| s.0),
                        "step_max": stats.steps.map(|s| s.1),
                    });
                    if let Some(s) = stats.scalar {
                        entry["scalar"] = json!({
                            "first": s.first, "last": s.last, "min": s.min, "max": s.max,
                        });
                        if values {
                            entry["values"] = stats
                                .series
                                .iter()
                                .map(|(step, wall_time, value)| json!([step, wall_time, value]))
                                .collect();
                        }
                    }
                    entry
                })
                .collect();
            json!({ "dir": crate::shown(dir), "files": files, "tags": tags })
        })
        .collect();
    let skipped: Vec<Json> = skipped
        .iter()
        .map(|skip| json!({ "path": crate::shown(&skip.path), "reason": skip.reason }))
        .collect();
    json!({
        "runs": runs,
        "skipped": skipped,
        "errors": errors,
        "warnings": warnings,
        "ok": errors == 0,
    })
}
