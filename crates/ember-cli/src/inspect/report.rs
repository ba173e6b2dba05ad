//! What `ember inspect` finds: each file's kind and records, each run's tags with their
//! figures, and every problem with its severity, gathered while reading and shown by `text.rs`
//! and `json.rs`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use ember::read::{EmbeddingEntry, ReadProblem, ValueProblem};

use super::detail::Detail;

/// Which reader a file needs, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileKind {
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
    pub(super) fn of(path: &Path) -> Option<FileKind> {
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

    pub(super) fn format(self) -> &'static str {
        match self {
            FileKind::TensorBoard => "tensorboard",
            _ => "mindinsight",
        }
    }

    pub(super) fn content(self) -> &'static str {
        match self {
            FileKind::TensorBoard | FileKind::MindInsightSummary => "summary",
            FileKind::MindInsightExplain => "explain",
            FileKind::MindInsightLineage => "lineage",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Severity {
    /// A truncated tail: a file being written or cut by a crash.
    Warning,
    /// Damaged bytes, a record that does not decode, a file that cannot be read.
    Error,
}

#[derive(Debug)]
pub(super) struct Problem {
    pub(super) offset: Option<u64>,
    pub(super) severity: Severity,
    pub(super) kind: &'static str,
    pub(super) message: String,
}

impl Problem {
    pub(super) fn from_read(problem: &ReadProblem) -> Self {
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
pub(super) struct FileReport {
    pub(super) path: PathBuf,
    pub(super) kind: FileKind,
    pub(super) bytes: u64,
    pub(super) records: usize,
    pub(super) problems: Vec<Problem>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct ScalarStats {
    pub(super) first: f64,
    pub(super) last: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

#[derive(Debug, Default)]
pub(super) struct TagStats {
    pub(super) count: usize,
    pub(super) steps: Option<(i64, i64)>,
    pub(super) scalar: Option<ScalarStats>,
    /// Every scalar value as (step, wall time, value), in file order.
    pub(super) series: Vec<(Option<i64>, f64, f64)>,
    /// The first and the last decoded value of a kind with details (PR curves, audio, layouts,
    /// embeddings).
    pub(super) first: Option<Detail>,
    pub(super) last: Option<Detail>,
    /// Every decoded value as (step, wall time, value), kept for `--values` only: audio clips
    /// are large. An embedding, listed in the projector config, has neither step nor time.
    pub(super) details: Vec<(Option<i64>, Option<f64>, Detail)>,
}

impl TagStats {
    pub(super) fn add(&mut self, step: Option<i64>, wall_time: f64, scalar: Option<f64>) {
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
pub(super) struct RunReport {
    pub(super) files: Vec<FileReport>,
    /// (kind, tag) to statistics.
    pub(super) tags: BTreeMap<(String, String), TagStats>,
    /// TensorBoard plugin of each tag, from the metadata on its first value in a file.
    pub(super) plugins: HashMap<String, String>,
    /// The wall time of the event being decoded.
    pub(super) wall_time: f64,
    /// Whether every decoded value is kept (`--values`), or the first and last.
    pub(super) keep_details: bool,
    /// The values of the record being decoded that do not decode, with their tags.
    pub(super) value_problems: Vec<(String, ValueProblem)>,
    /// The run's projector config, when it has one.
    pub(super) projector: Option<ProjectorReport>,
    /// The gaps a resumed Trainer run noted in its log ([`ember::LOG_GAP_TAG`]): the step each
    /// was noted at and its text.
    pub(super) log_gaps: Vec<(i64, String)>,
}

/// The run's `projector_config.pbtxt`: where it is and what is wrong with it or its files.
#[derive(Debug)]
pub(super) struct ProjectorReport {
    pub(super) path: PathBuf,
    pub(super) embeddings: usize,
    pub(super) problems: Vec<Problem>,
}

impl RunReport {
    pub(super) fn add(&mut self, kind: &str, tag: &str, step: Option<i64>, scalar: Option<f64>) {
        self.tags
            .entry((kind.to_string(), tag.to_string()))
            .or_default()
            .add(step, self.wall_time, scalar);
    }

    /// Adds a value of a kind with details (after [`add`](Self::add) counted it), recorded at
    /// the wall time of the event being decoded when there is one.
    pub(super) fn add_detail(&mut self, kind: &str, tag: &str, step: Option<i64>, detail: Detail) {
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
    pub(super) fn add_projector(&mut self, dir: &Path) {
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

    pub(super) fn add_embedding(&mut self, entry: EmbeddingEntry) {
        let tag = entry.tensor_name.clone();
        self.add("embedding", &tag, None, None);
        self.add_detail("embedding", &tag, None, Detail::Embedding(entry));
    }
}

/// A path named like an event file that is not read.
#[derive(Debug)]
pub(super) struct Skipped {
    pub(super) path: PathBuf,
    pub(super) reason: String,
}
