//! The facade as a Burn user meets it: each friction point the review found, with what it does
//! now, read back with ember's typed reader.

use std::path::Path;

use burn::optim::SgdConfig;
use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::tensor::{Device, Tensor};
use ember::pack::Format;
use ember::read::{Summaries, histograms, scalars};
use ember::{
    DevicePool, HistogramRule, PoolOptions, Reduction, SummaryError, SummaryRecord, Trainer,
    TrainerConfig,
};
use ember_tests::{Mlp, regression_loader};

#[test]
fn the_trainer_takes_a_burn_scheduler_config_init_as_learner_does() {
    // Before: every scheduler config's `init()` returned a type `impl LrScheduler` rejected.
    let device = Device::flex().autodiff();
    let scheduler = CosineAnnealingLrSchedulerConfig::new(0.1, 8)
        .init()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let (_model, report) = Trainer::new(
        vec![device.clone(), device.clone()],
        SgdConfig::new().init(),
        scheduler,
        TrainerConfig {
            epochs: 2,
            ..TrainerConfig::default()
        },
    )
    .fit(
        Mlp::new(8, &device),
        regression_loader(1, 64, 8, &device),
        None,
        Some(&mut summary),
    )
    .unwrap();
    summary.close().unwrap();
    assert_eq!(report.steps, 8);
    let lr: Vec<f64> = scalars(dir.path()).unwrap()["train/learning_rate"]
        .iter()
        .map(|p| p.value)
        .collect();
    // Cosine annealing from 0.1 over 8 steps: each step's rate as Burn computes it, as f32.
    let mut reference = CosineAnnealingLrSchedulerConfig::new(0.1, 8)
        .init()
        .unwrap();
    let expected: Vec<f64> = (0..8)
        .map(|_| f64::from(reference.step().base() as f32))
        .collect();
    assert_eq!(lr, expected);
    assert!(lr.windows(2).all(|w| w[1] <= w[0]), "{lr:?}");
}

#[test]
fn a_module_s_histograms_and_graph_take_one_call_each() {
    let device = Device::flex();
    let model = Mlp::new(8, &device);
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    summary.add_module_histograms("weights", &model, 3).unwrap();
    summary.add_module_graph(&model, 0).unwrap();
    summary.close().unwrap();
    let read = histograms(dir.path()).unwrap();
    let tags: Vec<&str> = read.keys().map(String::as_str).collect();
    assert_eq!(
        tags,
        [
            "weights/l1.bias",
            "weights/l1.weight",
            "weights/l2.bias",
            "weights/l2.weight"
        ]
    );
    // l1 maps 2 inputs to 8 hidden units: 16 weights, counted in its histogram.
    assert_eq!(read["weights/l1.weight"][0].count, 16.0);
    assert_eq!(read["weights/l1.weight"][0].step, 3);
}

#[test]
fn add_scalar_takes_numbers_and_burn_scalar_tensors_at_a_chosen_wall_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    let loss = Tensor::<1>::from_data([0.75f32], &Device::flex());
    summary.add_scalar("loss", loss, 1).unwrap();
    summary.add_scalar("count", 7u32, 1).unwrap();
    summary.add_scalar("big", 1i64 << 40, 1).unwrap();
    summary.set_wall_time(Some(1_600_000_000.5));
    summary.add_scalar("loss", 0.5f32, 2).unwrap();
    let two = Tensor::<1>::from_data([1.0f32, 2.0], &Device::flex());
    assert!(matches!(
        summary.add_scalar("loss", two, 3),
        Err(SummaryError::NotAScalar { .. })
    ));
    summary.close().unwrap();
    let read = scalars(dir.path()).unwrap();
    assert_eq!(read["loss"][0].value, 0.75);
    assert_eq!(read["loss"][1].value, 0.5);
    assert_eq!(read["loss"][1].wall_time, 1_600_000_000.5);
    assert_eq!(read["count"][0].value, 7.0);
    assert_eq!(read["big"][0].value, (1u64 << 40) as f64);
}

#[test]
fn a_histogram_rule_can_be_chosen_per_call_and_per_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(dir.path())
        .writer_options(|o| o.pack.histogram = HistogramRule::EqualWidth(4))
        .build()
        .unwrap();
    let values: Vec<f32> = (0..100).map(|i| i as f32).collect();
    summary
        .add_histogram("default", values.as_slice(), 0)
        .unwrap();
    summary
        .add_histogram_with("ten", values.as_slice(), HistogramRule::EqualWidth(10), 0)
        .unwrap();
    summary.close().unwrap();
    let read = histograms(dir.path()).unwrap();
    assert_eq!(read["default"][0].buckets.len(), 4);
    assert_eq!(read["ten"][0].buckets.len(), 10);
    assert_eq!(
        read["ten"][0]
            .buckets
            .iter()
            .map(|b| b.2)
            .collect::<Vec<_>>(),
        [10.0; 10]
    );
}

#[test]
fn add_scalars_draws_one_chart_with_a_run_per_name_as_tensorboardx_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    for step in 0..3 {
        summary
            .add_scalars(
                "run/loss",
                &[("train", 1.0 / (step as f64 + 1.0)), ("valid", 2.0)],
                step,
            )
            .unwrap();
    }
    assert!(matches!(
        summary.add_scalars("loss", &[("../escape", 1.0)], 0),
        Err(SummaryError::SubRunName(_))
    ));
    summary.close().unwrap();
    // tensorboardX's layout: <log dir>/<main tag, `/` as `_`>_<name>, the value under the main tag.
    let train = scalars(dir.path().join("run_loss_train")).unwrap();
    let valid = scalars(dir.path().join("run_loss_valid")).unwrap();
    assert_eq!(train.keys().collect::<Vec<_>>(), ["run/loss"]);
    assert_eq!(
        train["run/loss"]
            .iter()
            .map(|p| p.value)
            .collect::<Vec<_>>(),
        [1.0, 0.5, f64::from(1.0f32 / 3.0)]
    );
    assert_eq!(valid["run/loss"].len(), 3);
    assert!(
        scalars(dir.path()).unwrap().is_empty(),
        "nothing in the parent run"
    );
    assert!(!Path::new(&dir.path().join("escape")).exists());
}

#[test]
fn add_scalars_in_mindinsight_format_stays_in_the_record_s_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::builder(dir.path())
        .format(Format::MindInsight)
        .build()
        .unwrap();
    summary
        .add_scalars("loss", &[("train", 1.0), ("valid", 2.0)], 1)
        .unwrap();
    summary.close().unwrap();
    let read = Summaries::read_dir(dir.path()).unwrap();
    assert_eq!(read.scalars["loss/train"][0].value, 1.0);
    assert_eq!(read.scalars["loss/valid"][0].value, 2.0);
}

#[test]
fn the_value_decides_its_plugin_and_pool_types_are_at_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = SummaryRecord::new(dir.path()).unwrap();
    summary.add("loss", 0.5).unwrap();
    summary
        .add("w", ember::Value::histogram(vec![1.0f32, 2.0, 3.0]))
        .unwrap();
    summary.record(1).unwrap();
    summary.close().unwrap();
    let read = Summaries::read_dir(dir.path()).unwrap();
    assert_eq!(read.scalars["loss"][0].value, 0.5);
    assert_eq!(read.histograms["w"][0].count, 3.0);
    // Users name the pool's types from `ember` itself.
    let _options = PoolOptions::default();
    let _reduction = Reduction::Mean;
    let _type_name = std::any::type_name::<DevicePool<ember::BurnStep<Mlp>>>();
}
