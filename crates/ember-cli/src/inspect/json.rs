//! The `--json` output: one document of the runs (files with their problems, the projector
//! config, tags with their figures and, with `--values`, every value), the paths skipped, and
//! the totals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use super::detail::Detail;
use super::report::{Problem, RunReport, Severity, Skipped, TagStats};

pub(super) fn to_json(
    runs: &BTreeMap<PathBuf, RunReport>,
    skipped: &[Skipped],
    errors: usize,
    warnings: usize,
    values: bool,
) -> Json {
    let runs: Vec<Json> = runs
        .iter()
        .map(|(dir, run)| run_json(dir, run, values))
        .collect();
    let skipped: Vec<Json> = skipped
        .iter()
        .map(|skip| json!({ "path": crate::output::shown(&skip.path), "reason": skip.reason }))
        .collect();
    json!({
        "runs": runs,
        "skipped": skipped,
        "errors": errors,
        "warnings": warnings,
        "ok": errors == 0,
    })
}

/// One run: its files with their problems, its projector config and its tags.
fn run_json(dir: &Path, run: &RunReport, values: bool) -> Json {
    let files: Vec<Json> = run
        .files
        .iter()
        .map(|file| {
            let problems: Vec<Json> = file.problems.iter().map(problem_json).collect();
            json!({
                "path": crate::output::shown(&file.path),
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
        .map(|((kind, tag), stats)| tag_json(kind, tag, stats, values))
        .collect();
    let projector = run.projector.as_ref().map(|projector| {
        json!({
            "path": crate::output::shown(&projector.path),
            "embeddings": projector.embeddings,
            "problems": projector.problems.iter().map(problem_json).collect::<Vec<_>>(),
        })
    });
    json!({
        "dir": crate::output::shown(dir),
        "files": files,
        "projector": projector,
        "tags": tags,
        "log_gaps": run
            .log_gaps
            .iter()
            .map(|(step, note)| json!({ "step": step, "note": note }))
            .collect::<Vec<_>>(),
    })
}

/// One tag: its count, steps and figures, and with `values` every value.
fn tag_json(kind: &str, tag: &str, stats: &TagStats, values: bool) -> Json {
    let mut entry = json!({
        "kind": kind,
        "tag": tag,
        "count": stats.count,
        "step_min": stats.steps.map(|s| s.0),
        "step_max": stats.steps.map(|s| s.1),
    });
    if let Some(detail) = Detail::summarised(stats.first.as_ref(), stats.last.as_ref()) {
        entry[detail.json_key()] = detail.json_summary();
        if values {
            entry["values"] = stats
                .details
                .iter()
                .map(|(step, wall_time, detail)| json!([step, wall_time, detail.json_value()]))
                .collect();
        }
    }
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
}

fn problem_json(problem: &Problem) -> Json {
    json!({
        "offset": problem.offset,
        "severity": match problem.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        },
        "kind": problem.kind,
        "message": problem.message,
    })
}
