//! Logging only: record scalars, a histogram, an image batch, text and hyper-parameters with
//! `SummaryRecord`, then print where the files are.
//!
//! `cargo run -p ember --example logging [-- <log dir>]`

use ember::pack::{HParams, ImageLayout};
use ember::{Plugin, SummaryRecord};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let log_dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "runs/logging-example".into());
    // With MLFLOW_TRACKING_URI set, the scalars and hyper-parameters go to MLflow as well.
    let mut summary = SummaryRecord::builder(&log_dir)
        .mlflow_from_env()?
        .build()?;

    // MindSpore's way: add values, then record them together at a step.
    for step in 0..100i64 {
        let loss = 2.0 * (-(step as f64) / 30.0).exp() + 0.05 * ((step as f64) * 0.7).sin();
        summary.add_value(Plugin::Scalar, "train/loss", loss)?;
        summary.add_value(
            Plugin::Scalar,
            "train/learning_rate",
            0.1 * 0.98f64.powi(step as i32),
        )?;
        summary.record(step)?;
    }

    // tensorboardX's way: one call per value, recorded at once.
    let weights: Vec<f32> = (0..10_000)
        .map(|i| ((i as f32 * 0.618).fract() - 0.5) * 2.0)
        .collect();
    summary.add_histogram("weights/layer1", weights, 100)?;
    let gradient_image: Vec<f32> = (0..4 * 3 * 16 * 16)
        .map(|i| (i % 256) as f32 / 255.0)
        .collect();
    summary.add_images(
        "samples",
        ember::pack::TensorValue::from_slice(&gradient_image, vec![4, 3, 16, 16]),
        ImageLayout::Nchw,
        100,
    )?;
    summary.add_text("notes", "**ember** logging example", 100)?;
    summary.add_hparams(
        HParams::new().with("optimizer", "sgd").with("lr", 0.1),
        &[("final/loss", 0.07)],
        100,
    )?;
    summary.close()?;

    println!("wrote summaries under {log_dir}; view them with: tensorboard --logdir {log_dir}");
    Ok(())
}
