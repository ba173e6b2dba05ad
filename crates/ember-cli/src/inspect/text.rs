//! The text output: per run, its projector config and files with their problems, then its
//! tags by kind with counts, steps and each kind's figures, the gaps a resume noted, and, for a Trainer's run, where its
//! step time went; a last line of totals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::detail::{Detail, number};
use super::report::{Problem, RunReport, Severity, TagStats};

pub(super) fn print_text(runs: &BTreeMap<PathBuf, RunReport>, errors: usize, warnings: usize) {
    let mut files = 0;
    let mut records = 0;
    for (dir, run) in runs {
        crate::output::out(format!("run {}", crate::output::shown(dir)));
        if let Some(projector) = &run.projector {
            let state = if projector.problems.is_empty() {
                "ok"
            } else {
                "DAMAGED"
            };
            crate::output::out(format!(
                "  projector config {}: {} embedding(s), {state}",
                file_name(&projector.path),
                projector.embeddings
            ));
            print_problems(&projector.problems);
        }
        let (run_files, run_records) = print_files(run);
        files += run_files;
        records += run_records;
        print_tags(run);
        for (step, note) in &run.log_gaps {
            crate::output::out(format!("  log gap (noted at step {step}): {note}"));
        }
        if let Some(times) = step_times(run) {
            for line in times.to_string().lines() {
                crate::output::out(format!("  {line}"));
            }
        }
    }
    crate::output::out(format!(
        "{} run(s), {files} file(s), {records} valid record(s), {errors} error(s), \
         {warnings} warning(s)",
        runs.len()
    ));
    if errors > 0 {
        crate::output::err(format!(
            "error: {errors} damaged or unreadable record(s) or file(s); see above"
        ));
    } else if warnings > 0 {
        crate::output::err(format!(
            "warning: {warnings} truncated tail(s): a file still being written, or cut by a \
             crash; the records before it are intact"
        ));
    }
}

/// Each file of `run` with its state and problems; how many files and valid records.
fn print_files(run: &RunReport) -> (usize, usize) {
    let (mut files, mut records) = (0, 0);
    for file in &run.files {
        files += 1;
        records += file.records;
        let name = file_name(&file.path);
        let state = if file.problems.is_empty() {
            "ok"
        } else if file.problems.iter().any(|p| p.severity == Severity::Error) {
            "DAMAGED"
        } else {
            "truncated tail"
        };
        crate::output::out(format!(
            "  file {name}  [{} {}]  {} bytes, {} records, {state}",
            file.kind.format(),
            file.kind.content(),
            file.bytes,
            file.records
        ));
        print_problems(&file.problems);
    }
    (files, records)
}

/// The tags of `run` by kind: counts, steps and each kind's figures.
fn print_tags(run: &RunReport) {
    let mut kinds: BTreeMap<&str, Vec<(&str, &TagStats)>> = BTreeMap::new();
    for ((kind, tag), stats) in &run.tags {
        kinds.entry(kind).or_default().push((tag, stats));
    }
    for (kind, tags) in kinds {
        let values: usize = tags.iter().map(|(_, s)| s.count).sum();
        crate::output::out(format!(
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
            if let Some(detail) = Detail::summarised(stats.first.as_ref(), stats.last.as_ref()) {
                line.push_str(&format!("  {}", detail.text()));
            }
            crate::output::out(line);
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || crate::output::shown(path),
        |n| n.to_string_lossy().into(),
    )
}

fn print_problems(problems: &[Problem]) {
    for problem in problems {
        let level = match problem.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        crate::output::out(format!("    {level}: {}", problem.message));
    }
}

/// Where the run's step time went, from the step-time series a Trainer records; `None` for a
/// run without them.
fn step_times(run: &RunReport) -> Option<ember::StepTimes> {
    let scalars = run
        .tags
        .iter()
        .filter(|((kind, _), _)| kind == "scalar")
        .map(|((_, tag), stats)| {
            let points = stats
                .series
                .iter()
                .filter_map(|&(step, wall_time, value)| {
                    Some(ember::read::ScalarPoint {
                        step: step?,
                        wall_time,
                        value,
                    })
                })
                .collect();
            (tag.clone(), points)
        })
        .collect();
    ember::StepTimes::from_scalars(&scalars)
}
