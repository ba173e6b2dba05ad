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
//! The modules, bottom up: `detail` (the per-kind details and their text and JSON forms),
//! `report` (what is found: files, runs, tags, problems), `decode` (one record of either
//! format into a run's tags), `text` and `json` (the two outputs), and this one (the
//! arguments, walking the directory, reading files).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use ember::read::RecordReader;

mod decode;
mod detail;
mod json;
mod report;
mod text;

use report::{FileKind, FileReport, Problem, RunReport, Severity, Skipped};

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

pub(crate) fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    if let Some(url) = args.path.to_str().filter(|p| ember::is_remote(p)) {
        // An object-store log directory: its objects (a file's segments in order) downloaded
        // into a private directory of their own (mode 0700, a random name), and inspected there.
        let local = tempfile::Builder::new()
            .prefix("ember-inspect-")
            .tempdir()?;
        let objects = ember::read::download(url, local.path())?;
        crate::output::err(format!(
            "{url}: {objects} object(s), downloaded into {}",
            crate::output::shown(local.path())
        ));
        return run(InspectArgs {
            path: local.path().to_path_buf(),
            ..args
        });
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
        crate::output::out(json::to_json(
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
    let metadata = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", crate::output::shown(path)))?;
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    if metadata.is_dir() {
        collect(path, &mut files, &mut skipped)?;
        for skip in &skipped {
            crate::output::err(format!(
                "warning: skipped {}: {}",
                crate::output::shown(&skip.path),
                skip.reason
            ));
        }
        if files.is_empty() {
            let skipped = match skipped.len() {
                0 => String::new(),
                n => format!("; {n} named so are not regular files"),
            };
            bail!(
                "no event files under {} (looked for *tfevents* and *.out.events.summary.*{skipped})",
                crate::output::shown(path)
            );
        }
    } else if !metadata.is_file() {
        bail!(
            "{} is not a regular file: {}",
            crate::output::shown(path),
            file_type_name(&metadata.file_type())
        );
    } else {
        let kind = FileKind::of(path).with_context(|| {
            format!(
                "{} is not an event file by its name (expected *tfevents* or \
                 *.out.events.summary.*)",
                crate::output::shown(path)
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
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", crate::output::shown(dir)))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", crate::output::shown(dir)))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .with_context(|| format!("cannot read {}", crate::output::shown(&path)))?;
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
