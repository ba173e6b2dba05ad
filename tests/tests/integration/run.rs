//! A run's one owner, `ember::run::Run`, as the Trainer meets it: refused by the same admission
//! `ember train` is, and never resumed from another run's checkpoint or with other settings.
//! (Admission's own cases are `run::tests`, in the crate.)

use std::path::Path;

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::checkpoint::{CheckpointError, Checkpoints};
use ember::pack::HParams;
use ember::run::{Begin, Run, RunRecord};
use ember::{CheckpointConfig, DirLock, SummaryRecord, TrainError, Trainer, TrainerConfig};
use ember_tests::{Mlp, files_under, regression_loader};

fn trainer(checkpoints: &Path, hparams: HParams) -> Trainer<Mlp> {
    let device = Device::flex().autodiff();
    Trainer::new(
        vec![device.clone(), device],
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs: 2,
            histogram_every: None,
            checkpoints: Some(CheckpointConfig::new(checkpoints, 2)),
            ..TrainerConfig::default()
        },
    )
    .hparams(hparams)
}

fn fit(
    trainer: Trainer<Mlp>,
    summary: Option<&mut SummaryRecord>,
) -> Result<ember::TrainReport, TrainError> {
    let device = Device::flex().autodiff();
    let loader = regression_loader(1, 64, 8, &device);
    trainer
        .fit(Mlp::new(4, &device), loader, None, summary)
        .map(|(_, report)| report)
}

fn lr(lr: f64) -> HParams {
    HParams::new().with("learning_rate", lr).with("seed", 7i64)
}

#[test]
fn the_trainer_is_refused_by_the_same_admission() {
    let root = tempfile::tempdir().unwrap();
    let checkpoints = root.path().join("checkpoints");
    let refusal = |trainer: Trainer<Mlp>| match fit(trainer, None) {
        Err(TrainError::Checkpoint(error)) => error,
        other => panic!("not refused: {other:?}"),
    };
    let admission = |begin| {
        Run::builder(begin, &checkpoints)
            .admit()
            .unwrap_err()
            .to_string()
    };
    fit(trainer(&checkpoints, lr(0.05)), None).unwrap();
    let finished = files_under(&checkpoints, false);

    // A fresh run where another run left its checkpoints: refused as the one admission refuses
    // it, the first run's files as they were.
    let error = refusal(trainer(&checkpoints, lr(0.05)));
    assert!(
        matches!(error, CheckpointError::AnotherRun { .. }),
        "{error}"
    );
    assert_eq!(error.to_string(), admission(Begin::Fresh));
    assert!(files_under(&checkpoints, false) == finished);

    // A directory another writer holds, even to restart.
    let held = DirLock::acquire(&checkpoints, 0).unwrap();
    let error = refusal(trainer(&checkpoints, lr(0.05)).restart(&checkpoints));
    assert!(matches!(error, CheckpointError::Locked(_)), "{error}");
    assert_eq!(error.to_string(), admission(Begin::Restart));
    drop(held);
    assert!(files_under(&checkpoints, false) == finished);

    let report = fit(trainer(&checkpoints, lr(0.05)).restart(&checkpoints), None).unwrap();
    assert_eq!(report.steps, 8);
}

/// Issue 52: a resume from another run's checkpoint, or with other settings, used to go on
/// without a word (and its rollback removed the run's own event file).
#[test]
fn a_checkpoint_of_another_run_or_of_other_settings_is_refused_with_both_runs_unchanged() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    for run in [&a, &b] {
        let mut summary = SummaryRecord::new(run.join("log")).unwrap();
        let checkpoints = run.join("checkpoints");
        fit(trainer(&checkpoints, lr(0.05)), Some(&mut summary)).unwrap();
        summary.close().unwrap();
    }
    let id = |run: &Path| {
        RunRecord::read(&run.join("checkpoints"))
            .unwrap()
            .unwrap()
            .id
            .unwrap()
    };
    let (id_a, id_b) = (id(&a), id(&b));
    assert_ne!(id_a, id_b);
    // Run A's newest checkpoint copied into run B's directory, as its newest.
    let newest_a = Checkpoints::new(a.join("checkpoints"), 1).list().unwrap()[0]
        .1
        .clone();
    let next_b = Checkpoints::new(b.join("checkpoints"), 1)
        .next_seq()
        .unwrap();
    let copied = b.join(format!("checkpoints/ckpt-{next_b:012}.ember"));
    std::fs::copy(&newest_a, &copied).unwrap();
    let (before_a, before_b) = (files_under(&a, false), files_under(&b, false));
    let mut summary = SummaryRecord::new(b.join("log")).unwrap();
    let resumed = fit(
        trainer(&b.join("checkpoints"), lr(0.05)).resume_from(b.join("checkpoints")),
        Some(&mut summary),
    );
    drop(summary);
    let error = match resumed {
        Err(TrainError::Checkpoint(error)) => error,
        other => panic!("another run's checkpoint was resumed: {other:?}"),
    };
    let message = error.to_string();
    assert!(
        matches!(error, CheckpointError::OtherRun { .. })
            && message.contains(id_a.as_str())
            && message.contains(id_b.as_str()),
        "{message}"
    );
    assert_eq!(files_under(&a, false), before_a);
    // Every file of B is as it was; the caller's record, opened to resume, made its own.
    let after_b = files_under(&b, false);
    for (path, bytes) in &before_b {
        assert!(
            after_b.get(path) == Some(bytes),
            "{} changed or went",
            path.display()
        );
    }
    for made in after_b.keys().filter(|path| !before_b.contains_key(*path)) {
        assert!(made.starts_with("log"), "{} was made", made.display());
    }
    std::fs::remove_file(&copied).unwrap();

    // Its own checkpoint, resumed with another learning rate: refused, naming it.
    let resumed = trainer(&b.join("checkpoints"), lr(0.02)).resume_from(b.join("checkpoints"));
    let error = match fit(resumed, None) {
        Err(TrainError::Checkpoint(error)) => error.to_string(),
        other => panic!("other settings were resumed: {other:?}"),
    };
    assert!(
        error.contains("learning_rate: 0.05 there, 0.02 here"),
        "{error}"
    );
    // With its own settings it goes on (trained to its end, it trains nothing more).
    let report = fit(
        trainer(&b.join("checkpoints"), lr(0.05)).resume_from(b.join("checkpoints")),
        None,
    )
    .unwrap();
    assert_eq!(report.steps, 8);
}
