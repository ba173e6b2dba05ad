//! burn-train's `SupervisedTraining` with ember's `SummaryLogger` and `PoolStrategy` on two
//! workers of the flex device: the TensorBoard files hold the expected tags and steps, the
//! logger works under burn's own multi-device strategy, the pool strategy trains like burn's
//! when it sums, and a poisoned batch ends training with an error naming the device.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use burn::optim::SgdConfig;
use burn::tensor::Device;
use burn::train::logger::FileMetricLogger;
use burn::train::metric::{LearningRateMetric, LossMetric};
use burn::train::{
    ExecutionStrategy, Interrupter, Learner, LearningResult, MultiDeviceOptim, SupervisedTraining,
    TrainingError, TrainingStrategy,
};
use ember::burn_train::{PoolStrategy, PoolStrategyError, SummaryLogger, XAxis};
use ember::pack::proto::tensorboard::{Event, event, summary};
use ember::read::Scan;
use ember::step::burn::Reduction;
use ember::{ErrorPolicy, SummaryRecord};
use ember_tests::{Mlp, PoisonedLoader, max_difference, parameters, regression_loader};
use prost::Message;

const LR: f64 = 0.05;

fn device() -> Device {
    Device::flex().autodiff()
}

/// Every scalar in every event file under `dir`: tag -> [(step, value)] in file order.
fn scalars(dir: &Path) -> BTreeMap<String, Vec<(i64, f32)>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no event files under {dir:?}");
    let mut tags: BTreeMap<String, Vec<(i64, f32)>> = BTreeMap::new();
    for path in paths {
        let scan = Scan::file(&path).unwrap();
        assert!(scan.problems.is_empty(), "{path:?}: {:?}", scan.problems);
        for record in scan.records {
            let event = Event::decode(record.data.as_slice()).unwrap();
            if let Some(event::What::Summary(s)) = &event.what {
                for value in &s.value {
                    if let Some(summary::value::Value::SimpleValue(v)) = value.value {
                        tags.entry(value.tag.clone())
                            .or_default()
                            .push((event.step, v));
                    }
                }
            }
        }
    }
    tags
}

fn steps(series: &[(i64, f32)]) -> Vec<i64> {
    series.iter().map(|(step, _)| *step).collect()
}

fn mean(values: &[(i64, f32)]) -> f64 {
    values.iter().map(|(_, v)| f64::from(*v)).sum::<f64>() / values.len() as f64
}

/// A training on 64 train rows and 16 valid rows in batches of 8, with loss on both splits and
/// the learning rate on train; burn's file logger first, then ember's logger.
fn training(dir: &Path, train_rows: usize, epochs: usize) -> SupervisedTraining<Mlp> {
    let device = device();
    let tb = SummaryRecord::new(dir.join("tb")).unwrap();
    training_with(dir, train_rows, epochs, SummaryLogger::new(tb), &device)
}

fn training_with(
    dir: &Path,
    train_rows: usize,
    epochs: usize,
    logger: SummaryLogger,
    device: &Device,
) -> SupervisedTraining<Mlp> {
    SupervisedTraining::new(
        dir.join("burn"),
        regression_loader(1, train_rows, 8, device),
        regression_loader(2, 16, 8, device),
    )
    .num_epochs(epochs)
    .metrics((LossMetric::new(),))
    .metric_train_numeric(LearningRateMetric::new())
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(dir.join("burn")))
    .with_metric_logger(logger)
}

fn learner(model: Mlp) -> Learner<Mlp> {
    Learner::new(model, SgdConfig::new().init(), LR)
}

fn pool(reduction: Reduction) -> Arc<PoolStrategy> {
    Arc::new(PoolStrategy::new(vec![device(); 2], reduction))
}

/// 64 rows in batches of 8 on 2 devices: 8 train batches per epoch; 16 valid rows: 2 batches.
/// The default x-axis is the global training iteration: train batches at 1..=16, every
/// end-of-epoch value at the iteration reached (8, 16).
fn assert_two_epochs_of_summaries(dir: &Path) {
    let tags = scalars(&dir.join("tb"));
    let names: Vec<&str> = tags.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "train/learning_rate",
            "train/learning_rate/epoch",
            "train/loss",
            "train/loss/epoch",
            "valid/loss",
        ]
    );
    assert_eq!(steps(&tags["train/loss"]), (1..=16).collect::<Vec<_>>());
    assert_eq!(
        steps(&tags["train/learning_rate"]),
        (1..=16).collect::<Vec<_>>()
    );
    for tag in [
        "train/loss/epoch",
        "valid/loss",
        "train/learning_rate/epoch",
    ] {
        assert_eq!(steps(&tags[tag]), [8, 16], "{tag}");
    }
    // The learning rate reaches the metrics with every device output.
    for (_, lr) in &tags["train/learning_rate"] {
        assert!((f64::from(*lr) - LR).abs() < 1e-6, "learning rate {lr}");
    }
    // Equal batch sizes: each epoch's final loss is the mean of its batch losses, so the final
    // values were told apart from the batch values.
    assert_finals_are_batch_means(&tags["train/loss"], &tags["train/loss/epoch"], 8);
    // Training worked: the second epoch's loss is below the first's.
    let train = &tags["train/loss/epoch"];
    assert!(train[1].1 < train[0].1, "{train:?}");
}

fn assert_finals_are_batch_means(batches: &[(i64, f32)], finals: &[(i64, f32)], per_epoch: usize) {
    for (epoch, (_, final_loss)) in finals.iter().enumerate() {
        let expected = mean(&batches[epoch * per_epoch..(epoch + 1) * per_epoch]);
        let final_loss = f64::from(*final_loss);
        assert!(
            (final_loss - expected).abs() <= 1e-5 * expected.abs().max(1.0),
            "epoch {}: final {final_loss}, mean of batches {expected}",
            epoch + 1
        );
    }
}

#[test]
fn split_batches_count_each_split_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let logger = SummaryLogger::new(SummaryRecord::new(dir.path().join("tb")).unwrap())
        .x_axis(XAxis::SplitBatches);
    let result = training_with(dir.path(), 64, 2, logger, &device)
        .with_training_strategy(TrainingStrategy::Custom(pool(Reduction::Mean)))
        .launch(learner(Mlp::new(8, &device)));
    assert_no_error(&result);
    let tags = scalars(&dir.path().join("tb"));
    assert_eq!(steps(&tags["train/loss"]), (1..=16).collect::<Vec<_>>());
    assert_eq!(steps(&tags["valid/loss"]), [1, 2, 3, 4]);
    for tag in ["train/loss/epoch", "valid/loss/epoch"] {
        assert_eq!(steps(&tags[tag]), [1, 2], "{tag}");
    }
    assert_finals_are_batch_means(&tags["train/loss"], &tags["train/loss/epoch"], 8);
    assert_finals_are_batch_means(&tags["valid/loss"], &tags["valid/loss/epoch"], 2);
}

#[test]
fn accuracy_in_percent_is_written_as_a_fraction_like_the_trainer_s() {
    // burn's AccuracyMetric reports percent; the Trainer writes accuracy as a fraction.
    use burn::train::metric::AccuracyMetric;
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let result = SupervisedTraining::new(
        dir.path().join("burn"),
        ember_tests::classification_loader(3, 32, 8, &device),
        ember_tests::classification_loader(4, 16, 8, &device),
    )
    .num_epochs(1)
    .metrics((AccuracyMetric::new(),))
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(dir.path().join("burn")))
    .with_metric_logger(SummaryLogger::new(
        SummaryRecord::new(dir.path().join("tb")).unwrap(),
    ))
    .launch(Learner::new(
        ember_tests::Classifier::new(&device),
        SgdConfig::new().init(),
        LR,
    ));
    assert_no_error(&result);
    let tags = scalars(&dir.path().join("tb"));
    let accuracy = &tags["valid/accuracy"];
    assert_eq!(accuracy.len(), 1);
    assert!((0.0..=1.0).contains(&accuracy[0].1), "{accuracy:?}");
}

fn assert_no_error<M: burn::train::LearnerModel>(result: &LearningResult<M>) {
    if let Some(error) = &result.error {
        panic!("training failed: {error}");
    }
}

#[test]
fn pool_strategy_with_the_summary_logger_writes_every_metric_at_counted_steps() {
    let dir = tempfile::tempdir().unwrap();
    let tb = SummaryRecord::new(dir.path().join("tb")).unwrap();
    let logger = SummaryLogger::new(tb);
    let errors = logger.errors();
    let device = device();
    let strategy = pool(Reduction::Mean);
    let result = training_with(dir.path(), 64, 2, logger, &device)
        .with_default_checkpointers()
        .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
        .launch(learner(Mlp::new(8, &device)));
    assert_no_error(&result);
    assert!(strategy.take_error().is_none());
    assert_eq!(errors.count(), 0, "{:?}", errors.last());
    assert_two_epochs_of_summaries(dir.path());

    // burn's checkpointer ran after each epoch.
    let checkpoints: Vec<String> = std::fs::read_dir(dir.path().join("burn/checkpoint"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        checkpoints.iter().any(|name| name.starts_with("model-")),
        "{checkpoints:?}"
    );
}

#[test]
fn the_summary_logger_works_under_burns_own_multi_device_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let result = training(dir.path(), 64, 2)
        .with_training_strategy(
            ExecutionStrategy::multi(vec![device.clone(); 2], MultiDeviceOptim::OptimMainDevice)
                .into(),
        )
        .launch(learner(Mlp::new(8, &device)));
    assert_no_error(&result);
    assert_two_epochs_of_summaries(dir.path());
}

#[test]
fn the_summary_logger_works_on_a_single_device() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let result = training(dir.path(), 32, 1)
        .with_training_strategy(ExecutionStrategy::single(device.clone()).into())
        .launch(learner(Mlp::new(8, &device)));
    assert_no_error(&result);
    let tags = scalars(&dir.path().join("tb"));
    // 32 rows in batches of 8 on one device.
    assert_eq!(steps(&tags["train/loss"]), [1, 2, 3, 4]);
    assert_eq!(steps(&tags["train/loss/epoch"]), [4]);
    assert_eq!(steps(&tags["valid/loss"]), [4]);
}

#[test]
fn summing_pool_strategy_trains_like_burns_multi_device_strategy() {
    let device = device();
    let model = Mlp::new(8, &device);

    let dir = tempfile::tempdir().unwrap();
    let ours = training(dir.path(), 64, 2)
        .with_training_strategy(TrainingStrategy::Custom(pool(Reduction::Sum)))
        .launch(learner(model.clone()));
    assert_no_error(&ours);

    let dir = tempfile::tempdir().unwrap();
    let burns = training(dir.path(), 64, 2)
        .with_training_strategy(
            ExecutionStrategy::multi(vec![device.clone(); 2], MultiDeviceOptim::OptimMainDevice)
                .into(),
        )
        .launch(learner(model.clone()));
    assert_no_error(&burns);

    let dir = tempfile::tempdir().unwrap();
    let mean = training(dir.path(), 64, 2)
        .with_training_strategy(TrainingStrategy::Custom(pool(Reduction::Mean)))
        .launch(learner(model.clone()));
    assert_no_error(&mean);

    let (ours, burns, mean, start) = (
        parameters(&ours.model),
        parameters(&burns.model),
        parameters(&mean.model),
        parameters(&model),
    );
    assert!(max_difference(&ours, &burns) < 1e-5);
    // The reduction matters: the mean takes half the sum's steps.
    assert!(max_difference(&ours, &mean) > 1e-4);
    assert!(max_difference(&mean, &start) > 1e-4);
}

#[test]
fn a_poisoned_batch_ends_pool_training_with_an_error_naming_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let tb = SummaryRecord::new(dir.path().join("tb")).unwrap();
    let strategy = pool(Reduction::Mean);
    // Rows 32..64 go to device 1, in batches of 8: row 40 is in its second batch.
    let train = PoisonedLoader::wrap(regression_loader(1, 64, 8, &device), 40, "poisoned batch");
    let result = SupervisedTraining::new(
        dir.path().join("burn"),
        train,
        regression_loader(2, 16, 8, &device),
    )
    .num_epochs(2)
    .metrics((LossMetric::new(),))
    .with_application_logger(None)
    .with_metric_logger(FileMetricLogger::new(dir.path().join("burn")))
    .with_metric_logger(SummaryLogger::new(tb))
    .with_training_strategy(TrainingStrategy::Custom(strategy.clone()))
    .launch(learner(Mlp::new(8, &device)));

    let error = result.error.expect("training must fail");
    let message = error.to_string();
    assert!(message.contains("device 1"), "{message}");
    assert!(message.contains("poisoned batch"), "{message}");
    assert!(!message.contains("device 0"), "{message}");
    match error.as_ref() {
        TrainingError::Workers(failures) => {
            assert_eq!(failures.len(), 1);
            assert_eq!(failures[0].device_id, 1);
        }
        other => panic!("expected a worker failure, got {other}"),
    }
    match strategy.take_error() {
        Some(PoolStrategyError::Step {
            epoch: 1,
            step: 2,
            source,
        }) => {
            let devices: Vec<usize> = source.failures().iter().map(|f| f.device).collect();
            assert_eq!(devices, [1]);
        }
        other => panic!("expected step 2 of epoch 1 to fail, got {other:?}"),
    }

    // What ran before the failure was logged: the first step's two device batches, and the
    // train split's end; no validation ran.
    let tags = scalars(&dir.path().join("tb"));
    assert_eq!(steps(&tags["train/loss"]), [1, 2]);
    assert!(
        !tags.keys().any(|tag| tag.starts_with("valid/")),
        "{tags:?}"
    );
}

#[test]
fn the_summary_logger_counts_record_failures_instead_of_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let device = device();
    let record = Arc::new(Mutex::new(
        SummaryRecord::new(dir.path().join("tb")).unwrap(),
    ));
    record.lock().unwrap().close().unwrap();
    let logger = SummaryLogger::shared(record.clone());
    let errors = logger.errors();
    let result = training_with(dir.path(), 32, 1, logger, &device)
        .with_training_strategy(TrainingStrategy::Custom(pool(Reduction::Mean)))
        .launch(learner(Mlp::new(8, &device)));
    assert_no_error(&result);
    // Every write and flush failed: at least one per train batch.
    assert!(errors.count() >= 4, "{}", errors.count());
    assert!(
        errors.last().unwrap().contains("closed"),
        "{:?}",
        errors.last()
    );
}

#[test]
fn only_a_raise_record_stops_burn_training_through_the_interrupter() {
    for (policy, stops) in [(ErrorPolicy::Log, false), (ErrorPolicy::Raise, true)] {
        let dir = tempfile::tempdir().unwrap();
        let device = device();
        let mut record = SummaryRecord::builder(dir.path().join("tb"))
            .error_policy(policy)
            .build()
            .unwrap();
        record.close().unwrap();
        let interrupter = Interrupter::new();
        let logger = SummaryLogger::new(record).with_interrupter(interrupter.clone());
        let errors = logger.errors();
        let result = training_with(dir.path(), 64, 2, logger, &device)
            .with_interrupter(interrupter)
            .with_training_strategy(TrainingStrategy::Custom(pool(Reduction::Mean)))
            .launch(learner(Mlp::new(8, &device)));
        assert!(errors.count() >= 1, "{policy:?}");
        match (stops, result.error) {
            (false, None) => {}
            (true, Some(error)) => {
                let message = error.to_string();
                assert!(message.contains("summary logger"), "{message}");
                assert!(message.contains("closed"), "{message}");
            }
            (_, error) => panic!("{policy:?}: unexpected end of training: {error:?}"),
        }
    }
}
