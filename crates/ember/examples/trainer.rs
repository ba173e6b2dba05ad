//! The Trainer: data-parallel training of a small Burn model on two workers of the flex device,
//! with summaries recorded as it goes.
//!
//! `cargo run -p ember --example trainer [-- <log dir>]`

use burn::optim::AdamConfig;
use burn::tensor::Device;
use common::{Curve, loader};
use ember::{SummaryRecord, Trainer, TrainerConfig};

mod common;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let log_dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "runs/trainer-example".into());
    let device = Device::flex().autodiff();
    let mut summary = SummaryRecord::new(&log_dir)?;
    let trainer = Trainer::new(
        vec![device.clone(), device.clone()],
        AdamConfig::new().init(),
        1e-2,
        TrainerConfig {
            epochs: 5,
            histogram_every: Some(20),
            ..TrainerConfig::default()
        },
    );
    let (_model, report) = trainer.fit(
        Curve::new(&device),
        loader(2048, 0.0, &device),
        Some(loader(256, 0.5, &device)),
        Some(&mut summary),
    )?;
    summary.close()?;
    for epoch in &report.epochs {
        println!(
            "epoch {}: train loss {:.4}, valid loss {:.4}, {:.0} examples/s",
            epoch.epoch,
            epoch.train_loss,
            epoch.valid_loss.unwrap_or(f64::NAN),
            epoch.examples_per_second
        );
    }
    println!("summaries under {log_dir}; view them with: tensorboard --logdir {log_dir}");
    Ok(())
}
