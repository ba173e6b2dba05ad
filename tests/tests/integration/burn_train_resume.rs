//! burn-train's own checkpoints with ember's `SummaryLogger` and `PoolStrategy`: a run that
//! fails part way through its third epoch, resumed from burn's checkpoint of the second
//! (`SupervisedTraining::checkpoint(2)`, `SummaryLogger::resume_from`), leaves the log of a run
//! that never failed, each step once, and the same parameters.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use burn::optim::AdamConfig;
use burn::tensor::Device;
use burn::train::logger::FileMetricLogger;
use burn::train::metric::{LearningRateMetric, LossMetric};
use burn::train::{Learner, SupervisedTraining, TrainingStrategy};
use ember::SummaryRecord;
use ember::burn_train::{PoolStrategy, SummaryLogger};
use ember::read::Summaries;
use ember::step::burn::Reduction;
use ember_tests::{PoisonedLoader, parameters, regression_loader, seeded_mlp};

const EPOCHS: usize = 3;

/// Trains `EPOCHS` epochs on 2 workers with burn's default checkpointers; `fail_in` poisons a
/// batch of that epoch, `resume` goes on from burn's checkpoint of that epoch.
fn train(dir: &Path, fail_in: Option<usize>, resume: Option<usize>) -> (Option<String>, Vec<f32>) {
    let device = Device::flex().autodiff();
    let checkpoints = dir.join("burn").join("checkpoint");
    let record = SummaryRecord::new(dir.join("tb")).unwrap();
    let logger = match resume {
        Some(epoch) => SummaryLogger::new(record)
            .resume_from(&checkpoints, epoch)
            .unwrap(),
        None => SummaryLogger::new(record).checkpointed(&checkpoints),
    };
    let errors = logger.errors();
    let rows = regression_loader(1, 64, 8, &device);
    // Rows 32..64 are device 1's: row 40 is in its second batch of the epoch.
    let train = match fail_in {
        Some(epoch) => PoisonedLoader::in_epoch(rows, 40, epoch, "the machine went away"),
        None => rows,
    };
    let mut training = SupervisedTraining::new(
        dir.join("burn"),
        train,
        regression_loader(2, 16, 8, &device),
    )
    .num_epochs(EPOCHS)
    .metrics((LossMetric::new(),))
    .metric_train_numeric(LearningRateMetric::new())
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(dir.join("burn")))
    .with_metric_logger(logger)
    .with_default_checkpointers()
    .with_training_strategy(TrainingStrategy::Custom(Arc::new(PoolStrategy::new(
        vec![device.clone(); 2],
        Reduction::Mean,
    ))));
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    let result = training.launch(Learner::new(
        seeded_mlp(8, 1, &device),
        AdamConfig::new().init(),
        0.01,
    ));
    assert_eq!(errors.count(), 0, "{:?}", errors.last());
    (
        result.error.map(|e| e.to_string()),
        parameters(&result.model),
    )
}

fn series(dir: &Path) -> BTreeMap<String, Vec<(i64, f64)>> {
    Summaries::read_dir(dir.join("tb"))
        .unwrap()
        .scalars
        .into_iter()
        .map(|(tag, points)| (tag, points.iter().map(|p| (p.step, p.value)).collect()))
        .collect()
}

#[test]
fn a_burn_train_run_resumed_from_burns_checkpoint_leaves_one_curve() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let (error, expected) = train(&whole, None, None);
    assert_eq!(error, None);
    let expected_series = series(&whole);
    // 8 iterations an epoch: the train loss at 1..=24, once each.
    let steps: Vec<i64> = expected_series["train/loss"].iter().map(|p| p.0).collect();
    assert_eq!(steps, (1..=24).collect::<Vec<_>>());

    let run = dir.path().join("failed");
    let (error, _) = train(&run, Some(3), None);
    let error = error.expect("the third epoch fails");
    assert!(error.contains("the machine went away"), "{error}");
    // The failed run's log holds the start of its third epoch...
    let failed = series(&run);
    assert!(failed["train/loss"].len() > 16, "{failed:?}");

    // ... which the resumed run rolls back before writing it again.
    let (error, resumed) = train(&run, None, Some(2));
    assert_eq!(error, None);
    assert_eq!(series(&run), expected_series);
    assert_eq!(resumed, expected);
}

#[test]
fn resuming_from_an_epoch_without_a_snapshot_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let record = SummaryRecord::new(dir.path().join("tb")).unwrap();
    let error = SummaryLogger::new(record)
        .resume_from(dir.path().join("nothing"), 4)
        .unwrap_err()
        .to_string();
    assert!(error.contains("no log snapshot of epoch 4"), "{error}");
}
