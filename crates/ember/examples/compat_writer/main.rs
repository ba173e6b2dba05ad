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
//! `manifest.rs` holds the manifest, `values.rs` the inputs both formats share, `plugins.rs`
//! TensorBoard's plugin kinds and `mindinsight.rs` the MindInsight base directory.

use std::path::PathBuf;

use ember::SummaryRecord;
use ember::pack::{Graph, GraphNode, HParams, ImageLayout, SessionStatus, TensorValue};

mod manifest;
mod mindinsight;
mod plugins;
mod values;

use manifest::{Manifest, json_list, json_num, json_nums, json_str, json_strs};
use mindinsight::write_mindinsight;
use plugins::write_plugins;
use values::{graph_json, histogram_inputs, image_values, nested_graph};

#[expect(
    clippy::too_many_lines,
    reason = "the example users read as one program, top to bottom"
)]
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
