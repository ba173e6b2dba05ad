//! Peak memory of gradient accumulation: the Trainer on 4 workers with 8 accumulation steps,
//! a model of about 900k parameters (3.6 MB of gradients per set), one epoch. Run it under
//! `/usr/bin/time -v` and read "Maximum resident set size":
//!
//! `cargo build -p ember-tests --example accumulation_memory && /usr/bin/time -v
//! $CARGO_TARGET_DIR/debug/examples/accumulation_memory`
//!
//! Holding every device's gradients of a window until it is reduced takes 4 × 8 = 32 sets
//! (115 MB); reducing them as they arrive, one set plus the one being added.

#![allow(clippy::print_stdout)] // an example reports to its user

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::{Trainer, TrainerConfig};
use ember_tests::{Mlp, regression_loader};

fn main() {
    let device = Device::flex().autodiff();
    let (_, report) = Trainer::new(
        vec![device.clone(); 4],
        SgdConfig::new().init(),
        0.01,
        TrainerConfig {
            epochs: 1,
            grad_accumulation: 8,
            histogram_every: None,
            ..TrainerConfig::default()
        },
    )
    .fit(
        Mlp::new(300_000, &device),
        regression_loader(1, 4 * 8 * 4, 4, &device),
        None,
        None,
    )
    .expect("training runs");
    println!(
        "{} steps, {} optimizer step(s) on 4 workers",
        report.steps, report.optimizer_steps
    );
}
