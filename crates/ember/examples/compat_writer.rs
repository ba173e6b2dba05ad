//! The writer half of `cargo xtask compat`: writes every value kind with `SummaryRecord` in
//! TensorBoard format, then a manifest of the *raw inputs* (`manifest.json`) beside the event
//! file, from which `xtask/compat/check_tensorboard.py` computes what TensorBoard must read back
//! without using ember's packer.
//!
//! Under `<dir>/mindinsight/` it writes a MindInsight base directory: the job `ember-kinds`
//! with every value kind MindInsight holds (and its own `manifest.json` in the base directory,
//! for `xtask/compat/check_mindinsight.py`), and the job `mindspore-job`, whose lineage is laid
//! out as MindSpore's `SummaryCollector` writes it (built from ember-pack's MindSpore messages),
//! so the check proves ember's jobs leave other jobs listed.
//!
//! `cargo run -p ember --example compat_writer [-- <empty log dir>]` (default: a new directory
//! under `runs/`)
//!
//! Values are chosen so the expectations are unambiguous: scalars exactly representable in `f32`
//! next to ones that are not (and NaN, ±Inf, a subnormal), image values away from the
//! rounding midpoint of `x * 255`, histogram values that include both ends of the range.
//!
//! Past 600 lines on purpose: one writer for every value kind of both readers, each next to
//! the manifest entry its checker compares against.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ember::pack::proto::mindspore as msp;
use ember::pack::{
    Category, CustomScalarLayout, Format, Graph, GraphNode, HParams, ImageLayout, Lineage,
    MarginSeries, PrCurve, SessionStatus, TensorValue,
};
use ember::{Plugin, SummaryError, SummaryRecord};

/// The manifest, built by hand: the example uses no JSON crate (ember has none as a dependency).
#[derive(Default)]
struct Manifest {
    sections: Vec<(String, String)>,
}

impl Manifest {
    fn add(&mut self, key: &str, json: String) {
        self.sections.push((key.to_string(), json));
    }

    fn render(&self) -> String {
        let body: Vec<String> = self
            .sections
            .iter()
            .map(|(k, v)| format!("  {}: {}", json_str(k), v))
            .collect();
        format!("{{\n{}\n}}\n", body.join(",\n"))
    }
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as Python's `json` module reads it: the shortest round-trip decimal, or the
/// `NaN`/`Infinity` tokens it accepts.
fn json_num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == f64::INFINITY {
        "Infinity".into()
    } else if x == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        format!("{x:?}")
    }
}

fn json_nums(xs: impl IntoIterator<Item = f64>) -> String {
    let items: Vec<String> = xs.into_iter().map(json_num).collect();
    format!("[{}]", items.join(","))
}

fn json_strs<S: AsRef<str>>(xs: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = xs.into_iter().map(|s| json_str(s.as_ref())).collect();
    format!("[{}]", items.join(","))
}

fn json_list(items: Vec<String>) -> String {
    format!("[{}]", items.join(","))
}

/// Image values in `[0, 1]` whose `x * 255` is at least 0.1 away from a rounding midpoint,
/// plus values outside `[0, 1]` that must be clamped.
fn image_values(n: usize, salt: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let k = (i * 37 + salt * 11) % 263;
            if k >= 256 {
                // 256..262: out of range on both sides.
                if k.is_multiple_of(2) { 1.5 } else { -0.25 }
            } else {
                // Level k with a +0.2 offset: rounds to k (or 255 when k = 255).
                ((k as f32) + 0.2) / 255.0
            }
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Without an argument, a fresh directory under runs/, so a bare `cargo run` works too.
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        format!("runs/compat-writer-{secs}-{}", std::process::id())
    }));
    std::fs::create_dir_all(&dir)?;
    let mut summary = SummaryRecord::new(&dir)?;
    let mut manifest = Manifest::default();

    // Scalars: exact f32 values, values that f32 rounds, and NaN/±Inf/subnormal/huge.
    let mut scalar_tags = Vec::new();
    let exact: Vec<(i64, f64)> = (0..12).map(|s| (s, s as f64 * 0.375 - 2.0)).collect();
    let rounded: Vec<(i64, f64)> = (0..12).map(|s| (s * 10, 0.1 * (s as f64) + 1e-9)).collect();
    let special: Vec<(i64, f64)> = vec![
        (1, f64::NAN),
        (2, f64::INFINITY),
        (3, f64::NEG_INFINITY),
        (4, 1e-40),
        (5, 3.0e38),
        (6, -0.0),
    ];
    // The custom-scalars margin chart draws a band only where its three tags share their steps
    // (TensorBoard's page shows an error otherwise): bounds a quarter either side of `exact`.
    let lower: Vec<(i64, f64)> = exact.iter().map(|&(s, v)| (s, v - 0.25)).collect();
    let upper: Vec<(i64, f64)> = exact.iter().map(|&(s, v)| (s, v + 0.25)).collect();
    for (tag, points) in [
        ("scalars/exact", &exact),
        ("scalars/rounded", &rounded),
        ("scalars/special", &special),
        ("scalars/lower", &lower),
        ("scalars/upper", &upper),
    ] {
        for &(step, value) in points {
            summary.add_scalar(tag, value, step)?;
        }
        let steps = points.iter().map(|p| p.0.to_string()).collect::<Vec<_>>();
        scalar_tags.push(format!(
            "{{\"tag\":{},\"steps\":[{}],\"values\":{}}}",
            json_str(tag),
            steps.join(","),
            json_nums(points.iter().map(|p| p.1))
        ));
    }

    // Histograms: a spread of values at three steps, a skewed small set, and a constant.
    let hists = histogram_inputs();
    let mut hist_json = Vec::new();
    for (tag, step, values) in hists {
        hist_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"values\":{}}}",
            json_str(tag),
            step,
            json_nums(values.iter().map(|&v| v as f64))
        ));
        summary.add_histogram(tag, values, step)?;
    }

    // Images: one RGB CHW image, one gray CHW image, and a batch of 10 RGB NCHW images (tiled
    // into 8 columns and 2 rows on a black canvas).
    let mut image_json = Vec::new();
    type ImageInput = (
        &'static str,
        i64,
        ImageLayout,
        &'static str,
        Vec<usize>,
        usize,
    );
    let images: Vec<ImageInput> = vec![
        ("image/rgb", 2, ImageLayout::Chw, "CHW", vec![3, 6, 9], 1),
        ("image/gray", 4, ImageLayout::Chw, "CHW", vec![1, 5, 4], 2),
        (
            "image/batch",
            6,
            ImageLayout::Nchw,
            "NCHW",
            vec![10, 3, 4, 5],
            3,
        ),
    ];
    for (tag, step, layout, layout_name, shape, salt) in images {
        let n: usize = shape.iter().product();
        let values = image_values(n, salt);
        let tensor = TensorValue::from_slice(&values, shape.clone());
        if layout == ImageLayout::Nchw {
            summary.add_images(tag, tensor, layout, step)?;
        } else {
            summary.add_image(tag, tensor, layout, step)?;
        }
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        image_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"layout\":{},\"shape\":[{}],\"values\":{}}}",
            json_str(tag),
            step,
            json_str(layout_name),
            dims.join(","),
            json_nums(values.iter().map(|&v| v as f64))
        ));
    }

    // Text: markdown with non-ASCII characters, at two steps.
    let texts = [
        ("notes", 0i64, "**ember** compat run: *every* value kind"),
        (
            "notes",
            9,
            "line one\n\n| a | b |\n|---|---|\n| 1 | é ∑ 🚀 |",
        ),
    ];
    let mut text_json = Vec::new();
    for (tag, step, text) in texts {
        summary.add_text(tag, text, step)?;
        text_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"text\":{}}}",
            json_str(tag),
            step,
            json_str(text)
        ));
    }

    // Tensors: an f32 tensor of rank 3 and an i64 vector.
    let weights: Vec<f32> = (0..24).map(|i| (i as f32 - 11.5) / 8.0).collect();
    summary.add_tensor(
        "tensor/weights",
        TensorValue::from_slice(&weights, vec![2, 3, 4]),
        1,
    )?;
    let counts: Vec<i64> = vec![-3, 0, 7, 1 << 40, i64::MIN];
    summary.add_tensor(
        "tensor/counts",
        TensorValue::from_slice(&counts, vec![5]),
        8,
    )?;
    manifest.add(
        "tensors",
        json_list(vec![
            format!(
                "{{\"tag\":\"tensor/weights\",\"step\":1,\"dtype\":\"float32\",\"shape\":[2,3,4],\"values\":{}}}",
                json_nums(weights.iter().map(|&v| v as f64))
            ),
            format!(
                "{{\"tag\":\"tensor/counts\",\"step\":8,\"dtype\":\"int64\",\"shape\":[5],\"values\":[{}]}}",
                counts.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
            ),
        ]),
    );

    // Twelve large tensors, 1.2 MB each: 14.4 MB, past the 4 MiB after which the writer starts
    // the disk's writeback three times; value `i` at step `s` is `s * LARGE + i`, exact in f32.
    const LARGE: usize = 300_000;
    let large_steps: Vec<i64> = (20..32).collect();
    for &step in &large_steps {
        let values: Vec<f32> = (0..LARGE)
            .map(|i| (step as usize * LARGE + i) as f32)
            .collect();
        summary.add_tensor(
            "tensor/large",
            TensorValue::from_slice(&values, vec![LARGE]),
            step,
        )?;
    }
    manifest.add(
        "large_tensors",
        format!(
            "[{{\"tag\":\"tensor/large\",\"steps\":{:?},\"n\":{LARGE}}}]",
            large_steps
        ),
    );

    // Hyper-parameters with metrics and an end status.
    let mut hparams = HParams::new()
        .with("lr", 0.125)
        .with("optimizer", "adam")
        .with("batch_size", 32i64)
        .with("use_bn", true);
    hparams.status = Some(SessionStatus::Success);
    let metrics = [("final/loss", 0.5), ("final/accuracy", 0.875)];
    summary.add_hparams(hparams, &metrics, 11)?;
    manifest.add(
        "hparams",
        format!(
            "{{\"step\":11,\"status\":\"success\",\"hparams\":[[\"lr\",0.125],[\"optimizer\",\"adam\"],[\"batch_size\",32],[\"use_bn\",true]],\"metrics\":[{}]}}",
            metrics
                .iter()
                .map(|(t, v)| format!("[{},{}]", json_str(t), json_num(*v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    );

    // A graph: a small MLP.
    let graph = Graph {
        name: "mlp".into(),
        nodes: vec![
            GraphNode::new("input", "Placeholder"),
            GraphNode::new("model/linear1", "Linear").input("input"),
            GraphNode::new("model/relu", "Relu").input("model/linear1"),
            GraphNode::new("model/linear2", "Linear").input("model/relu"),
            GraphNode::new("loss", "CrossEntropy")
                .input("model/linear2")
                .input("input"),
        ],
    };
    manifest.add(
        "graph",
        format!("{{\"step\":0,\"nodes\":{}}}", graph_json(&graph)),
    );
    summary.add_graph(graph, 0)?;

    write_plugins(&mut summary, &mut manifest)?;

    summary.close()?;

    manifest.add("scalars", json_list(scalar_tags));
    manifest.add("histograms", json_list(hist_json));
    manifest.add("images", json_list(image_json));
    manifest.add("texts", json_list(text_json));
    std::fs::write(dir.join("manifest.json"), manifest.render())?;
    write_mindinsight(&dir.join("mindinsight"))?;
    eprintln!("compat_writer: wrote {}", dir.display());
    Ok(())
}

/// PR curves (from predictions at two steps, and from raw counts), a tone sweep and a custom
/// scalars layout, with their raw inputs in the manifest.
fn write_plugins(
    summary: &mut SummaryRecord,
    manifest: &mut Manifest,
) -> Result<(), Box<dyn std::error::Error>> {
    // Predictions (m + 0.5) / 1000 lie at least 0.01 of a bucket away from every threshold
    // k / 20, so the checker's definition (p >= threshold, in f64) cannot disagree with f32
    // bucketing.
    let num_thresholds = 21;
    let mut pr_json = Vec::new();
    for step in [1i64, 2] {
        let predictions: Vec<f32> = (0..300u32)
            .map(|i| ((i * 37 + step as u32 * 101) % 1000) as f32 / 1000.0 + 0.0005)
            .collect();
        let labels: Vec<bool> = predictions
            .iter()
            .enumerate()
            .map(|(i, &p)| (p > 0.4) ^ (i % 7 == 0))
            .collect();
        summary.add_pr_curve("pr/digit", &labels, &predictions, num_thresholds, step)?;
        pr_json.push(format!(
            "{{\"tag\":\"pr/digit\",\"step\":{step},\"num_thresholds\":{num_thresholds},\"labels\":[{}],\"predictions\":{}}}",
            labels.iter().map(|&l| if l { "true" } else { "false" }).collect::<Vec<_>>().join(","),
            json_nums(predictions.iter().map(|&p| f64::from(p)))
        ));
    }
    let raw = [
        vec![75.0, 64.0, 21.0, 5.0, 0.0],
        vec![150.0, 105.0, 18.0, 0.0, 0.0],
        vec![0.0, 45.0, 132.0, 150.0, 150.0],
        vec![0.0, 11.0, 54.0, 70.0, 75.0],
        vec![0.3333333, 0.3786982, 0.5384616, 1.0, 0.0],
        vec![1.0, 0.8533334, 0.28, 0.0666667, 0.0],
    ];
    let [tp, fp, tn, fn_, precision, recall] = raw.clone();
    summary.add_pr_curve_raw(
        "pr/raw",
        PrCurve::from_counts(tp, fp, tn, fn_, precision, recall)?,
        5,
    )?;
    manifest.add("pr_curves", json_list(pr_json));
    manifest.add(
        "pr_raw",
        format!(
            "{{\"tag\":\"pr/raw\",\"step\":5,\"rows\":{}}}",
            json_list(raw.iter().map(|r| json_nums(r.iter().copied())).collect())
        ),
    );

    // A quarter second sweeping 200 Hz to 2 kHz at 8 kHz, louder than full scale at its end so
    // that clipping shows.
    let rate = 8000u32;
    let samples: Vec<f32> = (0..rate / 4)
        .map(|i| {
            let t = i as f32 / rate as f32;
            let phase = 2.0 * std::f32::consts::PI * (200.0 * t + 3600.0 * t * t);
            (0.5 + 3.0 * t) * phase.sin()
        })
        .collect();
    summary.add_audio("audio/sweep", &samples, rate, 3)?;
    manifest.add(
        "audio",
        format!(
            "{{\"tag\":\"audio/sweep\",\"step\":3,\"sample_rate\":{rate},\"samples\":{}}}",
            json_nums(samples.iter().map(|&x| f64::from(x)))
        ),
    );

    let layout = CustomScalarLayout::new()
        .category(
            Category::new("losses")
                .multiline("train and valid", ["scalars/exact", "scalars/round.*"])
                .margin(
                    "band",
                    vec![MarginSeries {
                        value: "scalars/exact".into(),
                        lower: "scalars/lower".into(),
                        upper: "scalars/upper".into(),
                    }],
                ),
        )
        .category(Category {
            closed: true,
            ..Category::new("closed")
        });
    // An embedding for the projector: 20 points of 5 dimensions (multiples of 1/8, exact in
    // f32 and in decimal), a label each, and 8×8 gray thumbnails of distinct shades, tiled
    // 5 to a side in the sprite.
    let (n, d) = (20usize, 5usize);
    let points: Vec<f32> = (0..n * d)
        .map(|i| ((i * 7) % 23) as f32 * 0.125 - 1.5)
        .collect();
    let point_labels: Vec<String> = (0..n).map(|i| format!("point {i}")).collect();
    let thumbnails: Vec<ember::pack::Image> = (0..n)
        .map(|i| {
            ember::pack::Image::new(
                TensorValue::from_slice(&[(i * 12) as u8; 64], vec![1, 8, 8]),
                ImageLayout::Chw,
            )
        })
        .collect();
    summary.add_embedding(
        "projector/points",
        TensorValue::from_slice(&points, vec![n, d]),
        Some(point_labels.clone()),
        Some(thumbnails),
        4,
    )?;
    manifest.add(
        "embedding",
        format!(
            "{{\"tag\":\"projector/points\",\"step\":4,\"tensor_name\":\"projector/points:00004\",\"shape\":[{n},{d}],\"values\":{},\"labels\":{},\"single_image_dim\":[8,8]}}",
            json_nums(points.iter().map(|&v| f64::from(v))),
            json_strs(&point_labels)
        ),
    );

    summary.add_custom_scalars(layout)?;
    // As the plugin's `layout_impl` returns it: default fields included.
    manifest.add(
        "custom_scalars",
        r#"{"version":0,"category":[{"title":"losses","closed":false,"chart":[{"title":"train and valid","multiline":{"tag":["scalars/exact","scalars/round.*"]}},{"title":"band","margin":{"series":[{"value":"scalars/exact","lower":"scalars/lower","upper":"scalars/upper"}]}}]},{"title":"closed","closed":true,"chart":[]}]}"#.to_string(),
    );
    Ok(())
}

/// Histogram inputs, as `(tag, step, values)`: a spread at three steps, a skewed small set and
/// a constant.
fn histogram_inputs() -> Vec<(&'static str, i64, Vec<f32>)> {
    let mut hists = Vec::new();
    for step in [0i64, 5, 10] {
        let values: Vec<f32> = (0..1000)
            .map(|i| {
                let x = ((i * 7919 + step as usize * 104_729) % 1000) as f32 / 100.0 - 3.0;
                x * (1.0 + step as f32 / 10.0)
            })
            .collect();
        hists.push(("hist/spread", step, values));
    }
    hists.push((
        "hist/small",
        3,
        vec![1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0, -1.5],
    ));
    hists.push(("hist/constant", 7, vec![2.5; 17]));
    hists
}

/// The nested-scope graph both dashboards must resolve: nodes that are also scopes of others
/// (`net/block`, `net/block/op`), names holding `op` and sharing a last segment (`op12`), a
/// parameter fed to two nodes, and a node with two inputs.
fn nested_graph() -> Graph {
    Graph {
        name: "nested".into(),
        nodes: vec![
            GraphNode::new("input", "Placeholder"),
            GraphNode::new("net/block/weight", "Parameter")
                .attr("shape", ember::pack::AttrValue::Ints(vec![4, 4])),
            GraphNode::new("net/block", "Block").input("input"),
            GraphNode::new("net/block/op", "MatMul")
                .input("net/block")
                .input("net/block/weight"),
            GraphNode::new("net/block/op/op12", "Add").input("net/block/op"),
            GraphNode::new("net/head/op12", "Mul")
                .input("net/block/op/op12")
                .input("net/block/weight"),
            GraphNode::new("loss", "CrossEntropy")
                .input("net/head/op12")
                .input("input"),
        ],
    }
}

fn graph_json(graph: &Graph) -> String {
    let nodes: Vec<String> = graph
        .nodes
        .iter()
        .map(|n| {
            format!(
                "{{\"name\":{},\"op\":{},\"inputs\":{}}}",
                json_str(&n.name),
                json_str(&n.op),
                json_strs(&n.inputs)
            )
        })
        .collect();
    json_list(nodes)
}

/// Writes the MindInsight base directory `base`: the job `ember-kinds` (every kind MindInsight
/// holds, and text refused with a typed error) and the job `mindspore-job`, and the manifest of
/// `ember-kinds`'s raw inputs in `base/manifest.json`.
fn write_mindinsight(base: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let job = base.join("ember-kinds");
    std::fs::create_dir_all(&job)?;
    let mut summary = SummaryRecord::builder(&job)
        .format(Format::MindInsight)
        .export_tensors(true)
        .build()?;
    let mut manifest = Manifest::default();

    let mut scalar_json = Vec::new();
    let points: Vec<(i64, f64)> = (0..12)
        .map(|s| (s, 0.1 * (s as f64) - 0.4))
        .chain([(12, f64::NAN), (13, f64::INFINITY), (14, 1e-40)])
        .collect();
    for &(step, value) in &points {
        summary.add_scalar("scalars/loss", value, step)?;
    }
    scalar_json.push(format!(
        "{{\"tag\":\"scalars/loss\",\"steps\":[{}],\"values\":{}}}",
        points
            .iter()
            .map(|p| p.0.to_string())
            .collect::<Vec<_>>()
            .join(","),
        json_nums(points.iter().map(|p| p.1))
    ));
    manifest.add("scalars", json_list(scalar_json));

    let mut hist_json = Vec::new();
    for (tag, step, values) in histogram_inputs() {
        hist_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"values\":{}}}",
            json_str(tag),
            step,
            json_nums(values.iter().map(|&v| v as f64))
        ));
        summary.add_histogram(tag, values, step)?;
    }
    manifest.add("histograms", json_list(hist_json));

    // Images in MindSpore's NCHW layout (MindInsight reads every image so): values in [0, 1],
    // then values beyond it, which MindSpore rescales by the canvas's range.
    let mut image_json = Vec::new();
    let images: [(&str, i64, Vec<usize>, usize, bool); 3] = [
        ("image/rgb", 2, vec![1, 3, 6, 9], 1, false),
        ("image/gray", 4, vec![1, 1, 5, 4], 2, false),
        ("image/batch", 6, vec![10, 3, 4, 5], 3, true),
    ];
    for (tag, step, shape, salt, out_of_range) in images {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = image_values(n, salt)
            .into_iter()
            .map(|v| if out_of_range { v } else { v.clamp(0.0, 1.0) })
            .collect();
        summary.add_images(
            tag,
            TensorValue::from_slice(&values, shape.clone()),
            ImageLayout::Nchw,
            step,
        )?;
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        image_json.push(format!(
            "{{\"tag\":{},\"step\":{},\"shape\":[{}],\"values\":{}}}",
            json_str(tag),
            step,
            dims.join(","),
            json_nums(values.iter().map(|&v| v as f64))
        ));
    }
    manifest.add("images", json_list(image_json));

    // Tensors, also exported as .npy (export is on).
    let weights: Vec<f32> = (0..24).map(|i| (i as f32 - 11.5) / 8.0).collect();
    summary.add_tensor(
        "tensor/weights",
        TensorValue::from_slice(&weights, vec![2, 3, 4]),
        1,
    )?;
    let counts: Vec<i32> = vec![-3, 0, 7, 1 << 20];
    summary.add_tensor(
        "tensor/counts",
        TensorValue::from_slice(&counts, vec![4]),
        8,
    )?;
    manifest.add(
        "tensors",
        json_list(vec![
            format!(
                "{{\"tag\":\"tensor/weights\",\"step\":1,\"dtype\":\"float32\",\"shape\":[2,3,4],\"values\":{}}}",
                json_nums(weights.iter().map(|&v| v as f64))
            ),
            format!(
                "{{\"tag\":\"tensor/counts\",\"step\":8,\"dtype\":\"int32\",\"shape\":[4],\"values\":{}}}",
                json_nums(counts.iter().map(|&v| v as f64))
            ),
        ]),
    );

    // Text: MindInsight has no text dashboard, so ember refuses it with a typed error.
    let refused = match summary.add_text("notes", "**ember**", 0) {
        Err(SummaryError::Rejected(e)) => e.to_string(),
        other => {
            return Err(
                format!("text for MindInsight: expected a pack error, got {other:?}").into(),
            );
        }
    };
    manifest.add("text_refused", json_str(&refused));

    // Hyper-parameters (custom lineage) with a status, then train and evaluation lineage and a
    // dataset graph, as MindSpore's SummaryCollector fills them.
    let mut hparams = HParams::new()
        .with("lr", 0.125)
        .with("optimizer", "adam")
        .with("batch_size", 32i64)
        .with("use_bn", true);
    hparams.status = Some(SessionStatus::Success);
    summary.add_value(Plugin::HParams, "hparams", hparams)?;
    let train = msp::TrainLineage {
        hyper_parameters: Some(msp::train_lineage::HyperParameters {
            optimizer: Some("Adam".into()),
            learning_rate: Some(0.125),
            loss_function: Some("CrossEntropyLoss".into()),
            epoch: Some(3),
            parallel_mode: Some("stand_alone".into()),
            device_num: Some(1),
            batch_size: Some(32),
        }),
        train_dataset: Some(msp::train_lineage::TrainDataset {
            train_dataset_path: Some("/data/digits/train".into()),
            train_dataset_size: Some(1437),
        }),
        algorithm: Some(msp::train_lineage::Algorithm {
            network: Some("Mlp".into()),
            loss: Some(0.25),
        }),
        model: Some(msp::train_lineage::Model {
            path: Some(r#"{"ckpt": null}"#.into()),
            size: Some(0),
        }),
    };
    summary.add_value(Plugin::TrainLineage, "train_lineage", Lineage::from(train))?;
    let eval = msp::EvaluationLineage {
        metric: Some(r#"{"accuracy": 0.875, "loss": 0.5}"#.into()),
        valid_dataset: Some(msp::evaluation_lineage::ValidDataset {
            valid_dataset_path: Some("/data/digits/test".into()),
            valid_dataset_size: Some(360),
        }),
    };
    summary.add_value(Plugin::EvalLineage, "eval_lineage", Lineage::from(eval))?;
    let mut parameter = msp::OperationParameter::default();
    parameter
        .map_str
        .insert("op_type".into(), "BatchDataset".into());
    parameter.map_int.insert("batch_size".into(), 32);
    let dataset = msp::DatasetGraph {
        parameter: Some(parameter),
        ..Default::default()
    };
    summary.add_value(
        Plugin::DatasetGraph,
        "train_dataset",
        Lineage::from(dataset),
    )?;
    summary.record(11)?;
    manifest.add(
        "lineage",
        "{\"job\":\"./ember-kinds\",\"user_defined\":{\"lr\":0.125,\"optimizer\":\"adam\",\"batch_size\":32,\"use_bn\":\"true\",\"session_status\":\"success\"},\"metric\":{\"accuracy\":0.875,\"loss\":0.5},\"model\":{\"network\":\"Mlp\",\"optimizer\":\"Adam\",\"learning_rate\":0.125,\"loss_function\":\"CrossEntropyLoss\",\"epoch\":3,\"batch_size\":32,\"device_num\":1,\"loss\":0.25,\"model_size\":0,\"train_dataset_count\":1437,\"test_dataset_count\":360},\"dataset_op\":\"BatchDataset\"}".into(),
    );

    let graph = nested_graph();
    manifest.add("graph", graph_json(&graph));
    summary.add_graph(graph, 0)?;
    summary.close()?;
    std::fs::write(base.join("manifest.json"), manifest.render())?;

    write_mindspore_job(&base.join("mindspore-job"))
}

/// A job laid out as MindSpore 2.10's `SummaryCollector` writes one: a `loss/auto` scalar each
/// step, custom lineage data at the first step (`_package_custom_lineage_data`: one `user_info`
/// entry per key, ints in `map_int32`), train lineage at the end (`_package_train_lineage_message`)
/// and evaluation lineage after `model.eval` (`_package_eval_lineage_message`).
fn write_mindspore_job(job: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(job)?;
    let mut summary = SummaryRecord::builder(job)
        .format(Format::MindInsight)
        .build()?;
    let mut custom = msp::UserDefinedInfo::default();
    let mut version = msp::UserDefinedInfo::default();
    version.map_str.insert("version".into(), "v1".into());
    custom.user_info.push(version);
    let mut epochs = msp::UserDefinedInfo::default();
    epochs.map_int32.insert("epochs".into(), 10);
    custom.user_info.push(epochs);
    let mut dropout = msp::UserDefinedInfo::default();
    dropout.map_double.insert("dropout".into(), 0.5);
    custom.user_info.push(dropout);
    for step in 1..=3i64 {
        summary.add_scalar("loss/auto", 2.0 / step as f64, step)?;
        if step == 1 {
            summary.add_value(
                Plugin::CustomLineage,
                "custom_lineage_data",
                Lineage::from(custom.clone()),
            )?;
            summary.record(step)?;
        }
    }
    let train = msp::TrainLineage {
        hyper_parameters: Some(msp::train_lineage::HyperParameters {
            optimizer: Some("Momentum".into()),
            learning_rate: Some(0.01),
            loss_function: Some("SoftmaxCrossEntropyWithLogits".into()),
            epoch: Some(10),
            parallel_mode: Some("stand_alone".into()),
            device_num: Some(1),
            batch_size: Some(32),
        }),
        train_dataset: Some(msp::train_lineage::TrainDataset {
            train_dataset_path: Some("/data/mnist/train".into()),
            train_dataset_size: Some(60000),
        }),
        algorithm: Some(msp::train_lineage::Algorithm {
            network: Some("LeNet5".into()),
            loss: Some(0.0625),
        }),
        model: Some(msp::train_lineage::Model {
            path: Some(r#"{"ckpt": "/ckpt/lenet-10_1875.ckpt"}"#.into()),
            size: Some(494_192),
        }),
    };
    summary.add_value(Plugin::TrainLineage, "train_lineage", Lineage::from(train))?;
    summary.record(0)?;
    let eval = msp::EvaluationLineage {
        metric: Some(r#"{"Accuracy": 0.9875}"#.into()),
        valid_dataset: Some(msp::evaluation_lineage::ValidDataset {
            valid_dataset_path: Some("/data/mnist/test".into()),
            valid_dataset_size: Some(10000),
        }),
    };
    summary.add_value(Plugin::EvalLineage, "eval_lineage", Lineage::from(eval))?;
    summary.record(0)?;
    summary.close()?;
    Ok(())
}
