//! The kinds with more to show than a count and steps: PR curves, audio clips, custom scalars
//! layouts and embeddings, each as one line of text figures, a JSON summary of the tag, and a
//! JSON value for `--values`.

use ember::pack::{ChartContent, CustomScalarLayout, PrCurve};
use ember::read::{AudioClip, EmbeddingEntry, pr_curve_thresholds};
use serde_json::{Value as Json, json};

/// One decoded value of a kind with details.
#[derive(Debug, Clone)]
pub(super) enum Detail {
    PrCurve(PrCurve),
    Audio(AudioClip),
    Layout(CustomScalarLayout),
    Embedding(EmbeddingEntry),
}

impl Detail {
    /// Which of a tag's values its summary shows: the layout TensorBoard's dashboard draws is
    /// the first; for the other kinds the latest says most.
    pub(super) fn summarised<'a>(
        first: Option<&'a Detail>,
        last: Option<&'a Detail>,
    ) -> Option<&'a Detail> {
        match first {
            Some(Detail::Layout(_)) => first,
            _ => last,
        }
    }

    /// The key of the summary in a tag's JSON entry.
    pub(super) fn json_key(&self) -> &'static str {
        match self {
            Detail::PrCurve(_) => "pr_curve",
            Detail::Audio(_) => "audio",
            Detail::Layout(_) => "layout",
            Detail::Embedding(_) => "embedding",
        }
    }

    /// The figures after a tag's count and steps in the text output.
    pub(super) fn text(&self) -> String {
        match self {
            Detail::PrCurve(curve) => {
                let (positives, negatives) = examples(curve);
                format!(
                    "{} thresholds, {} positive(s), {} negative(s)",
                    curve.num_thresholds(),
                    number(positives),
                    number(negatives)
                )
            }
            Detail::Audio(clip) => format!(
                "{} Hz, {} channel(s), {} s",
                clip.sample_rate,
                clip.channels,
                number(seconds(clip))
            ),
            Detail::Layout(layout) => {
                let charts: usize = layout.categories.iter().map(|c| c.charts.len()).sum();
                format!(
                    "{} categor{}, {charts} chart(s)",
                    layout.categories.len(),
                    if layout.categories.len() == 1 {
                        "y"
                    } else {
                        "ies"
                    }
                )
            }
            Detail::Embedding(entry) => {
                let mut figures = match &entry.tensor_shape[..] {
                    [] => "shape not given".to_string(),
                    shape => format!("{shape:?}"),
                };
                if entry.metadata_path.is_some() {
                    figures.push_str(", labels");
                }
                if let Some(sprite) = &entry.sprite {
                    let dims: Vec<String> =
                        sprite.single_image_dim.iter().map(u32::to_string).collect();
                    figures.push_str(&format!(", sprite of {} thumbnails", dims.join("x")));
                }
                if !entry.problems.is_empty() {
                    figures.push_str(&format!(", {} file(s) missing", entry.problems.len()));
                }
                figures
            }
        }
    }

    /// The summary in a tag's JSON entry.
    pub(super) fn json_summary(&self) -> Json {
        match self {
            Detail::PrCurve(curve) => {
                let (positives, negatives) = examples(curve);
                json!({
                    "num_thresholds": curve.num_thresholds(),
                    "positives": positives,
                    "negatives": negatives,
                })
            }
            Detail::Audio(clip) => json!({
                "sample_rate": clip.sample_rate,
                "channels": clip.channels,
                "frames": frames(clip),
                "seconds": seconds(clip),
            }),
            Detail::Layout(layout) => layout_json(layout),
            Detail::Embedding(entry) => {
                let path = |p: Option<&std::path::Path>| p.map(|p| p.display().to_string());
                json!({
                    "tensor_path": path(entry.tensor_path.as_deref()),
                    "tensor_shape": entry.tensor_shape,
                    "metadata_path": path(entry.metadata_path.as_deref()),
                    "sprite": entry.sprite.as_ref().map(|s| json!({
                        "image_path": s.image_path.display().to_string(),
                        "single_image_dim": s.single_image_dim,
                    })),
                    "problems": entry.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                })
            }
        }
    }

    /// The whole value, for `--values`.
    pub(super) fn json_value(&self) -> Json {
        match self {
            Detail::PrCurve(curve) => json!({
                "thresholds": pr_curve_thresholds(curve.num_thresholds()),
                "true_positives": curve.true_positives,
                "false_positives": curve.false_positives,
                "true_negatives": curve.true_negatives,
                "false_negatives": curve.false_negatives,
                "precision": curve.precision,
                "recall": curve.recall,
            }),
            Detail::Audio(clip) => json!({
                "sample_rate": clip.sample_rate,
                "channels": clip.channels,
                "samples": clip.samples,
                "label": clip.label,
            }),
            Detail::Layout(_) | Detail::Embedding(_) => self.json_summary(),
        }
    }
}

/// The positive and negative examples a curve counts: at the first threshold (0) every
/// example is predicted positive.
fn examples(curve: &PrCurve) -> (f64, f64) {
    let first = |row: &[f64]| row.first().copied().unwrap_or(0.0);
    (
        first(&curve.true_positives) + first(&curve.false_negatives),
        first(&curve.false_positives) + first(&curve.true_negatives),
    )
}

fn frames(clip: &AudioClip) -> usize {
    clip.samples.len() / usize::from(clip.channels.max(1))
}

fn seconds(clip: &AudioClip) -> f64 {
    frames(clip) as f64 / f64::from(clip.sample_rate.max(1))
}

/// The layout's categories and charts, a multiline chart with its tag patterns and a margin
/// chart with its series.
fn layout_json(layout: &CustomScalarLayout) -> Json {
    let categories: Vec<Json> = layout
        .categories
        .iter()
        .map(|category| {
            let charts: Vec<Json> = category
                .charts
                .iter()
                .map(|chart| match &chart.content {
                    ChartContent::Multiline(tags) => {
                        json!({ "title": chart.title, "multiline": tags })
                    }
                    ChartContent::Margin(series) => {
                        let series: Vec<Json> = series
                            .iter()
                            .map(
                                |s| json!({ "value": s.value, "lower": s.lower, "upper": s.upper }),
                            )
                            .collect();
                        json!({ "title": chart.title, "margin": series })
                    }
                })
                .collect();
            json!({ "title": category.title, "closed": category.closed, "charts": charts })
        })
        .collect();
    json!({ "categories": categories })
}

/// A number in at most six decimals, without trailing zeros.
pub(super) fn number(v: f64) -> String {
    format!("{v:.6}")
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_string()
}
