//! A training program that can be killed at any moment and started again with `--resume`:
//! what `cargo xtask resume` kills with SIGKILL, for the two ways a library user trains.
//!
//! `cargo run -p ember --example resumable -- <trainer|burn-train> <run dir> [--resume|--restart]`
//!
//! A run killed before its first checkpoint has nothing to resume from: `--resume` refuses it
//! (exit code 3, the run left as it was), and `--restart` trains it again from its first step.
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
use ember::run::Begin;
use ember::step::burn::Reduction;
use ember::{CheckpointConfig, SummaryRecord, Trainer, TrainerConfig};
use ember_tests::{parameters, seeded_mlp, shuffled_loader};

const EPOCHS: usize = 4;

/// The exit code of a `--resume` that found nothing to go on from.
const NOTHING_TO_RESUME: i32 = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, run) = match args.as_slice() {
        [mode, run, ..] => (mode.as_str(), PathBuf::from(run)),
        _ => return Err("usage: resumable <trainer|burn-train> <run dir> [--resume]".into()),
    };
    let begin = if args.iter().any(|a| a == "--resume") {
        Begin::Resume
    } else if args.iter().any(|a| a == "--restart") {
        Begin::Restart
    } else {
        Begin::Fresh
    };
    let trained = match mode {
        "trainer" => trainer(&run, begin),
        "burn-train" => burn_train(&run, begin),
        other => return Err(format!("unknown mode {other}").into()),
    };
    let params = match trained {
        Ok(params) => params,
        Err(error) if error.to_string().contains("no checkpoint to resume from") => {
            eprintln!("error: {error}");
            std::process::exit(NOTHING_TO_RESUME);
        }
        Err(error) => return Err(error),
    };
    let bytes: Vec<u8> = params.iter().flat_map(|p| p.to_le_bytes()).collect();
    std::fs::write(run.join("params.bin"), bytes)?;
    Ok(())
}

fn trainer(run: &Path, begin: Begin) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
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
    match begin {
        Begin::Resume => trainer = trainer.resume_from(&checkpoints),
        Begin::Restart => trainer = trainer.restart(&checkpoints),
        Begin::ResumeIfAny => trainer = trainer.resume_if_any(&checkpoints),
        Begin::Fresh => {}
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

fn burn_train(run: &Path, begin: Begin) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let device = Device::flex().autodiff();
    let artifacts = run.join("burn");
    let checkpoints = artifacts.join("checkpoint");
    let from = match begin {
        Begin::Resume => Some(resumable_epoch(&checkpoints).ok_or_else(|| {
            format!(
                "no checkpoint to resume from in {}: no epoch whose burn checkpoints load and \
                 whose log snapshot was kept",
                checkpoints.display()
            )
        })?),
        // Epoch 0 is the start: the logger discards what the log holds.
        Begin::Restart => Some(0),
        Begin::Fresh | Begin::ResumeIfAny => None,
    };
    let record = SummaryRecord::new(run.join("log"))?;
    let logger = match from {
        Some(epoch) => SummaryLogger::new(record).resume_from(&checkpoints, epoch)?,
        None => SummaryLogger::new(record).checkpointed(&checkpoints),
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
    if let Some(epoch) = from.filter(|epoch| *epoch > 0) {
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
