//! A training program that can be killed at any moment and started again with `--resume`:
//! what `cargo xtask resume` kills with SIGKILL, for the two ways a library user trains.
//!
//! `cargo run -p ember --example resumable -- <trainer|burn-train> <run dir> [--resume]`
//!
//! - `trainer`: ember's Trainer on 2 workers with gradient accumulation over 2 steps, a
//!   shuffling loader, Adam and a linear learning-rate schedule, validation and histograms,
//!   with a checkpoint every optimizer step; `--resume` is `Trainer::resume_from`.
//! - `burn-train`: burn's `SupervisedTraining` on ember's `PoolStrategy` with burn's own
//!   checkpointers (one per epoch) and ember's `SummaryLogger`; `--resume` goes on from the
//!   newest epoch whose three burn checkpoint files load (burn writes them in place, so a kill
//!   may tear the newest) and whose log snapshot the logger kept: `checkpoint(n)` for burn,
//!   `SummaryLogger::resume_from(dir, n)` for the log. Its loader does not shuffle: burn resumes
//!   at an epoch's start with a fresh loader, whose shuffle would start over.
//!
//! Either way the run ends by writing its parameters, as little-endian `f32`s in visiting
//! order, to `<run dir>/params.bin`, and summaries go to `<run dir>/log`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::optim::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::optim::{AdamConfig, OptimizerRecord};
use burn::store::ModuleRecord;
use burn::tensor::Device;
use burn::train::logger::FileMetricLogger;
use burn::train::metric::{LearningRateMetric, LossMetric};
use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
use ember::burn_train::{PoolStrategy, SummaryLogger};
use ember::step::burn::Reduction;
use ember::{CheckpointConfig, SummaryRecord, Trainer, TrainerConfig};
use ember_tests::{parameters, seeded_mlp, shuffled_loader};

const EPOCHS: usize = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, run) = match args.as_slice() {
        [mode, run, ..] => (mode.as_str(), PathBuf::from(run)),
        _ => return Err("usage: resumable <trainer|burn-train> <run dir> [--resume]".into()),
    };
    let resume = args.iter().any(|a| a == "--resume");
    let params = match mode {
        "trainer" => trainer(&run, resume)?,
        "burn-train" => burn_train(&run, resume)?,
        other => return Err(format!("unknown mode {other}").into()),
    };
    let bytes: Vec<u8> = params.iter().flat_map(|p| p.to_le_bytes()).collect();
    std::fs::write(run.join("params.bin"), bytes)?;
    Ok(())
}

fn trainer(run: &Path, resume: bool) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let device = Device::flex().autodiff();
    let checkpoints = run.join("checkpoints");
    let mut trainer = Trainer::new(
        vec![device.clone(), device.clone()],
        AdamConfig::new().init(),
        LinearLrSchedulerConfig::new(0.02, 0.002, 100).init()?,
        TrainerConfig {
            epochs: EPOCHS,
            grad_accumulation: 2,
            histogram_every: Some(8),
            checkpoints: Some(CheckpointConfig::new(&checkpoints, 1)),
            ..TrainerConfig::default()
        },
    );
    if resume {
        trainer = trainer.resume_from(&checkpoints);
    }
    let mut summary = SummaryRecord::new(run.join("log"))?;
    let (model, _) = trainer.fit(
        seeded_mlp(16, 1, &device),
        shuffled_loader(2048, true, &device),
        Some(shuffled_loader(64, false, &device)),
        Some(&mut summary),
    )?;
    summary.close()?;
    Ok(parameters(&model))
}

fn burn_train(run: &Path, resume: bool) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let device = Device::flex().autodiff();
    let artifacts = run.join("burn");
    let checkpoints = artifacts.join("checkpoint");
    let record = SummaryRecord::new(run.join("log"))?;
    let from = if resume {
        resumable_epoch(&checkpoints)
    } else {
        None
    };
    let logger = match (resume, from) {
        (true, epoch) => {
            SummaryLogger::new(record).resume_from(&checkpoints, epoch.unwrap_or(0))?
        }
        (false, _) => SummaryLogger::new(record).checkpointed(&checkpoints),
    };
    let mut training = SupervisedTraining::new(
        &artifacts,
        shuffled_loader(2048, false, &device),
        shuffled_loader(64, false, &device),
    )
    .num_epochs(EPOCHS)
    .metrics((LossMetric::new(),))
    .metric_train_numeric(LearningRateMetric::new())
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(&artifacts))
    .with_metric_logger(logger)
    .with_default_checkpointers()
    .with_training_strategy(TrainingStrategy::Custom(Arc::new(PoolStrategy::new(
        vec![device.clone(); 2],
        Reduction::Mean,
    ))));
    if let Some(epoch) = from {
        training = training.checkpoint(epoch);
    }
    let result = training.launch(Learner::new(
        seeded_mlp(16, 1, &device),
        AdamConfig::new().init(),
        LinearLrSchedulerConfig::new(0.02, 0.002, 100).init()?,
    ));
    if let Some(error) = result.error {
        return Err(error.to_string().into());
    }
    Ok(parameters(&result.model))
}

/// The newest epoch whose model, optimizer and scheduler checkpoints all load, and whose log
/// snapshot the summary logger kept.
fn resumable_epoch(dir: &Path) -> Option<usize> {
    let mut epochs: Vec<usize> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("model-")?
                .strip_suffix(".bpk")?
                .parse()
                .ok()
        })
        .collect();
    epochs.sort_unstable();
    epochs.into_iter().rev().find(|epoch| {
        let file = |name: &str| dir.join(format!("{name}-{epoch}.bpk"));
        ModuleRecord::load(file("model")).is_ok()
            && OptimizerRecord::load(file("optim")).is_ok()
            && LrSchedulerRecord::load(file("scheduler")).is_ok()
            && dir
                .join(format!("ember-log-epoch-{epoch:06}-valid.ember"))
                .is_file()
    })
}
