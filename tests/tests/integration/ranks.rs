//! The Trainer across ranks, with ranks as threads of this process (`LocalGroup`): 2 ranks × 2
//! workers train as one process with 4 workers does, with parameters bit-identical across
//! ranks after every optimizer step; uneven shards end every rank's epoch together; a rank
//! that fails, stops, or leaves ends every rank, named. The same rounds under `mpirun`, with
//! `MpiComm`, are driven by `cargo xtask mpi`.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use burn::optim::{ModuleOptimizer, Optimizer, SgdConfig};
use burn::tensor::Device;
use ember::collective::{CollectiveError, LocalComm, LocalGroup};
use ember::read::Summaries;
use ember::{SummaryRecord, TrainError, TrainReport, Trainer, TrainerConfig};
use ember_tests::{Mlp, PoisonedLoader, max_difference, parameters, regression_loader, seeded_mlp};

const ROWS: usize = 64;
const BATCH: usize = 4;

fn trainer(workers: usize, epochs: usize) -> Trainer<Mlp> {
    let device = Device::flex().autodiff();
    Trainer::new(
        vec![device; workers],
        SgdConfig::new().init(),
        0.05,
        TrainerConfig {
            epochs,
            histogram_every: None,
            ..TrainerConfig::default()
        },
    )
}

/// Every optimizer step's parameters, in order.
type Snapshots = Arc<Mutex<Vec<Vec<f32>>>>;

fn recording(trainer: Trainer<Mlp>) -> (Trainer<Mlp>, Snapshots) {
    let snapshots: Snapshots = Arc::default();
    let seen = Arc::clone(&snapshots);
    let trainer = trainer.on_update(move |model, update| {
        let mut seen = seen.lock().unwrap();
        assert_eq!(seen.len() + 1, update);
        seen.push(parameters(model));
    });
    (trainer, snapshots)
}

/// Runs `rank_work` for each rank of a job of `ranks` on its own thread; results by rank.
fn job<T: Send + 'static>(
    ranks: usize,
    timeout: Duration,
    rank_work: impl Fn(LocalComm) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let handles: Vec<_> = LocalGroup::ranks(ranks, timeout)
        .into_iter()
        .map(|comm| {
            let work = rank_work.clone();
            thread::spawn(move || work(comm))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_ranks_of_two_workers_train_as_one_process_of_four() {
    let device = Device::flex().autodiff();
    let initial = Mlp::new(8, &device);

    let (single, single_steps) = recording(trainer(4, 2));
    let (single_model, single_report) = single
        .fit(
            initial.clone(),
            regression_loader(1, ROWS, BATCH, &device),
            None,
            None,
        )
        .unwrap();

    let start = initial.clone();
    let results = job(2, Duration::from_secs(60), move |comm| {
        let device = Device::flex().autodiff();
        // Rank 1 starts elsewhere: the broadcast makes it rank 0's.
        let model = if ember::collective::Communicator::rank(&comm) == 0 {
            start.clone()
        } else {
            Mlp::new(8, &device)
        };
        let (trainer, steps) = recording(trainer(2, 2).communicator(comm));
        let (model, report) = trainer
            .fit(
                model,
                regression_loader(1, ROWS, BATCH, &device),
                None,
                None,
            )
            .unwrap();
        let steps = steps.lock().unwrap().clone();
        (parameters(&model), report, steps)
    });

    let single_steps = single_steps.lock().unwrap().clone();
    // 64 rows over 4 workers in batches of 4: 4 steps an epoch, 2 epochs.
    assert_eq!(single_steps.len(), 8);
    assert_eq!(single_report.optimizer_steps, 8);
    let (rank0, rank1) = (&results[0], &results[1]);
    assert_eq!(rank0.2.len(), 8);
    for (step, ((a, b), one)) in rank0.2.iter().zip(&rank1.2).zip(&single_steps).enumerate() {
        assert_eq!(a, b, "ranks differ after optimizer step {}", step + 1);
        let difference = max_difference(a, one);
        assert!(
            difference <= 1e-5,
            "step {}: ranks and one process differ by {difference}",
            step + 1
        );
    }
    assert_eq!(rank0.0, rank1.0);
    assert!(max_difference(&rank0.0, &parameters(&single_model)) <= 1e-5);
    assert_ne!(rank0.0, parameters(&initial), "the model trained");
    for (_, report, _) in &results {
        assert_eq!(report.steps, 8);
        assert_eq!(report.optimizer_steps, 8);
        assert!(!report.interrupted);
    }
}

/// 2 ranks of one worker over 21 rows in batches of 5: rank 0's shard is rows 0..10 (2
/// batches), rank 1's rows 10..21 (3 batches, the last of one row). Parameters after every
/// optimizer step, per rank, and the steps each rank ran.
fn uneven_job(accumulation: usize) -> Vec<(Vec<f32>, TrainReport, Vec<Vec<f32>>)> {
    job(2, Duration::from_secs(60), move |comm| {
        let device = Device::flex().autodiff();
        let config = TrainerConfig {
            epochs: 2,
            grad_accumulation: accumulation,
            histogram_every: None,
            ..TrainerConfig::default()
        };
        let (trainer, steps) = recording(
            Trainer::new(vec![device.clone()], SgdConfig::new().init(), 0.05, config)
                .communicator(comm),
        );
        let (model, report) = trainer
            .fit(
                Mlp::new(4, &device),
                regression_loader(4, 21, 5, &device),
                None,
                None,
            )
            .unwrap();
        let steps = steps.lock().unwrap().clone();
        (parameters(&model), report, steps)
    })
}

#[test]
fn a_rank_with_more_batches_is_joined_by_the_others_until_it_is_done() {
    let results = uneven_job(1);
    let (rank0, rank1) = (&results[0], &results[1]);
    assert_eq!((rank0.1.steps, rank1.1.steps), (4, 6));
    // Three rounds an epoch, the third on rank 1's gradients alone: the same updates on both.
    assert_eq!(rank0.2.len(), 6);
    assert_eq!(rank0.2, rank1.2);
    assert_eq!(rank0.0, rank1.0);
}

#[test]
fn partial_windows_of_uneven_shards_reduce_in_one_last_round() {
    let results = uneven_job(2);
    let (rank0, rank1) = (&results[0], &results[1]);
    // An epoch: a full window on both ranks, then rank 0's empty one with rank 1's partial
    // one: two updates an epoch.
    assert_eq!(rank0.2.len(), 4);
    assert_eq!(rank0.2, rank1.2);
    assert_eq!(rank0.0, rank1.0);
    assert_eq!(rank0.1.optimizer_steps, 4);
    assert_eq!(rank1.1.optimizer_steps, 4);
}

fn failed_job(
    rank_train: impl Fn(usize, LocalComm) -> Result<(Mlp, TrainReport), TrainError>
    + Send
    + Sync
    + Clone
    + 'static,
) -> Vec<Result<(Mlp, TrainReport), TrainError>> {
    job(2, Duration::from_secs(60), move |comm| {
        let rank = ember::collective::Communicator::rank(&comm);
        rank_train(rank, comm)
    })
}

#[test]
fn a_rank_whose_step_fails_ends_every_rank_with_an_error_naming_it() {
    let results = failed_job(|rank, comm| {
        let device = Device::flex().autodiff();
        let loader = regression_loader(1, ROWS, BATCH, &device);
        // Row 40 is in rank 1's shard (rows 32..64): only its step panics.
        let loader = PoisonedLoader::wrap(loader, 40, "poisoned row 40");
        assert!(rank < 2);
        trainer(2, 1)
            .communicator(comm)
            .fit(Mlp::new(4, &device), loader, None, None)
    });
    let rank1 = results[1].as_ref().unwrap_err();
    assert!(
        matches!(rank1, TrainError::Step { epoch: 1, .. }),
        "{rank1}"
    );
    assert!(rank1.to_string().contains("poisoned row 40"), "{rank1}");
    let rank0 = results[0].as_ref().unwrap_err();
    match rank0 {
        TrainError::Ranks {
            epoch: 1,
            source: CollectiveError::PeersFailed { ranks },
            ..
        } => assert_eq!(ranks, &[1]),
        other => panic!("rank 0 ended with {other}"),
    }
    assert!(rank0.to_string().contains("rank 1 failed"), "{rank0}");
}

/// Plain SGD that panics in every step on the rank it is made for.
#[derive(Clone)]
struct SgdFailingOn {
    fails: bool,
}

impl Optimizer for SgdFailingOn {
    type State<const D: usize> = ();

    fn step<const D: usize>(
        &self,
        lr: f64,
        tensor: burn::tensor::Tensor<D>,
        grad: burn::tensor::Tensor<D>,
        _state: Option<()>,
    ) -> (burn::tensor::Tensor<D>, Option<()>) {
        assert!(!self.fails, "the optimizer's step failed on purpose");
        (tensor - grad.mul_scalar(lr), None)
    }

    fn to_device<const D: usize>(state: (), _device: &Device) {
        state
    }
}

#[test]
fn a_rank_whose_optimizer_step_panics_ends_every_rank_with_an_error_naming_it() {
    // Each rank steps its own parameters, then the ranks gather them: rank 1's step panics
    // between the round and the gather, and announces it in the gather rank 0 waits in.
    let results = job(2, Duration::from_secs(60), |comm| {
        let rank = ember::collective::Communicator::rank(&comm);
        let device = Device::flex().autodiff();
        let trainer = Trainer::new(
            vec![device.clone()],
            ModuleOptimizer::from(SgdFailingOn { fails: rank == 1 }),
            0.05,
            TrainerConfig {
                epochs: 1,
                histogram_every: None,
                ..TrainerConfig::default()
            },
        )
        .communicator(comm);
        let loader = regression_loader(1, ROWS, BATCH, &device);
        catch_unwind(AssertUnwindSafe(|| {
            trainer
                .fit(Mlp::new(4, &device), loader, None, None)
                .map(|_| ())
        }))
        .map_err(|payload| {
            let text = payload.downcast_ref::<&str>().map(|s| s.to_string());
            text.or_else(|| payload.downcast_ref::<String>().cloned())
        })
    });
    match &results[1] {
        Err(Some(message)) => assert!(message.contains("failed on purpose"), "{message}"),
        other => panic!("rank 1 ended with {other:?}"),
    }
    match &results[0] {
        Ok(Err(TrainError::Ranks {
            epoch: 1,
            step: 1,
            source: CollectiveError::PeersFailed { ranks },
        })) => assert_eq!(ranks, &[1]),
        other => panic!("rank 0 ended with {other:?}"),
    }
}

#[test]
fn a_rank_that_leaves_or_never_comes_is_named_or_timed_out() {
    // A rank gone before the start: the broadcast names it.
    let results = job(2, Duration::from_secs(60), |comm| {
        let rank = ember::collective::Communicator::rank(&comm);
        if rank == 1 {
            drop(comm);
            return None;
        }
        let device = Device::flex().autodiff();
        Some(trainer(1, 1).communicator(comm).fit(
            Mlp::new(4, &device),
            regression_loader(1, 16, 4, &device),
            None,
            None,
        ))
    });
    match results[0].as_ref().unwrap() {
        Err(TrainError::Ranks {
            source: CollectiveError::PeerGone { rank: 1, .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }

    // A rank that holds its place but never joins: a bounded wait.
    let mut comms = LocalGroup::ranks(2, Duration::from_millis(200));
    let silent = comms.pop().unwrap();
    let comm = comms.pop().unwrap();
    let device = Device::flex().autodiff();
    let result = trainer(1, 1).communicator(comm).fit(
        Mlp::new(4, &device),
        regression_loader(1, 16, 4, &device),
        None,
        None,
    );
    assert!(
        matches!(
            result,
            Err(TrainError::Ranks {
                source: CollectiveError::Timeout {
                    rank: 0,
                    size: 2,
                    ..
                },
                ..
            })
        ),
        "{result:?}"
    );
    drop(silent);
}

#[test]
fn a_stop_on_one_rank_stops_every_rank_after_the_same_round() {
    let results = job(2, Duration::from_secs(60), |comm| {
        let device = Device::flex().autodiff();
        let rank = ember::collective::Communicator::rank(&comm);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (trainer, steps) = recording(
            trainer(1, 3)
                .communicator(comm)
                .stop_when(Arc::clone(&stop))
                .on_step(move |step| {
                    if rank == 1 && step.step == 2 {
                        flag.store(true, Ordering::Release);
                    }
                }),
        );
        let (model, report) = trainer
            .fit(
                Mlp::new(4, &device),
                regression_loader(1, 32, 4, &device),
                None,
                None,
            )
            .unwrap();
        let steps = steps.lock().unwrap().clone();
        (parameters(&model), report, steps)
    });
    for (_, report, _) in &results {
        assert!(report.interrupted);
        assert!(report.epochs.is_empty());
    }
    assert_eq!(results[0].0, results[1].0);
    assert_eq!(results[0].2, results[1].2);
    // Rank 1 stopped after its step 2: rounds 1 and 2, then the stop round (with no
    // gradients from rank 1, rank 0's third step's) — three updates on both.
    assert_eq!(results[0].2.len(), 3);
}

#[test]
fn rank_zero_records_the_run_and_every_rank_its_step_times() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    job(2, Duration::from_secs(60), move |comm| {
        let device = Device::flex().autodiff();
        let rank = ember::collective::Communicator::rank(&comm);
        let mut summary = SummaryRecord::builder(&root)
            .rank(rank as u32, 2)
            .build()
            .unwrap();
        trainer(2, 1)
            .communicator(comm)
            .fit(
                Mlp::new(4, &device),
                regression_loader(1, 32, 4, &device),
                None,
                Some(&mut summary),
            )
            .unwrap();
        summary.close().unwrap();
    });
    let tags: Vec<String> = ember::read::scalars(dir.path())
        .unwrap()
        .into_keys()
        .collect();
    for rank in 0..2 {
        for device in 0..2 {
            let tag = format!("rank/{rank}/device/{device}/step_seconds");
            assert!(tags.contains(&tag), "{tag} missing from {tags:?}");
        }
    }
    assert!(tags.contains(&"train/loss".to_string()));
    assert!(!tags.iter().any(|t| t.starts_with("device/")), "{tags:?}");
}

/// Every `gradients/…` histogram of the run in `dir`: per tag, each step's (count, sum).
fn gradient_histograms(dir: &std::path::Path) -> BTreeMap<String, Vec<(i64, f64, f64)>> {
    Summaries::read_dir(dir)
        .unwrap()
        .histograms
        .into_iter()
        .filter(|(tag, _)| tag.starts_with("gradients/"))
        .map(|(tag, points)| {
            let points = points.iter().map(|p| (p.step, p.count, p.sum)).collect();
            (tag, points)
        })
        .collect()
}

#[test]
fn rank_zero_s_gradient_histograms_hold_every_parameter_s_reduced_gradient() {
    // Each rank steps only its own parameters, but on a histogram step rank 0 asks the round
    // for every gradient: its histograms are those of one process with one worker per rank.
    let record = |dir: &std::path::Path, workers: usize, comm: Option<LocalComm>| {
        let device = Device::flex().autodiff();
        let rank = comm
            .as_ref()
            .map_or(0, ember::collective::Communicator::rank);
        let mut builder = SummaryRecord::builder(dir);
        if comm.is_some() {
            builder = builder.rank(rank as u32, 2);
        }
        let mut summary = builder.build().unwrap();
        let mut trainer = Trainer::new(
            vec![device.clone(); workers],
            SgdConfig::new().init(),
            0.05,
            TrainerConfig {
                epochs: 1,
                histogram_every: Some(1),
                ..TrainerConfig::default()
            },
        );
        if let Some(comm) = comm {
            trainer = trainer.communicator(comm);
        }
        trainer
            .fit(
                seeded_mlp(4, 3, &device),
                regression_loader(1, 32, 4, &device),
                None,
                Some(&mut summary),
            )
            .unwrap();
        summary.close().unwrap();
    };
    let root = tempfile::tempdir().unwrap();
    let (ranks_dir, one_dir) = (root.path().join("ranks"), root.path().join("one"));
    let dir = ranks_dir.clone();
    job(2, Duration::from_secs(60), move |comm| {
        record(&dir, 1, Some(comm))
    });
    record(&one_dir, 2, None);
    let ranks = gradient_histograms(&ranks_dir);
    let one = gradient_histograms(&one_dir);
    // Mlp(4): two weights and two biases, 4 steps of 2 batches.
    assert_eq!(ranks.len(), 4, "{:?}", ranks.keys());
    assert_eq!(
        ranks.keys().collect::<Vec<_>>(),
        one.keys().collect::<Vec<_>>()
    );
    for (tag, points) in &ranks {
        let expected = &one[tag];
        assert_eq!(points.len(), 4, "{tag}");
        for ((step, count, sum), (one_step, one_count, one_sum)) in points.iter().zip(expected) {
            assert_eq!((step, count), (one_step, one_count), "{tag}");
            assert!(
                (sum - one_sum).abs() <= 1e-5 * (1.0 + one_sum.abs()),
                "{tag} step {step}: {sum} against {one_sum}"
            );
        }
    }
}

const VALID_ROWS: usize = 32;

#[test]
fn ranks_validate_a_share_each_and_report_what_one_process_validating_everything_does() {
    let device = Device::flex().autodiff();
    let initial = Mlp::new(8, &device);
    let (_, single) = trainer(2, 2)
        .fit(
            initial.clone(),
            regression_loader(1, ROWS, BATCH, &device),
            Some(regression_loader(2, VALID_ROWS, BATCH, &device)),
            None,
        )
        .unwrap();

    let results = job(2, Duration::from_secs(60), move |comm| {
        let device = Device::flex().autodiff();
        trainer(1, 2)
            .communicator(comm)
            .fit(
                initial.clone(),
                regression_loader(1, ROWS, BATCH, &device),
                Some(regression_loader(2, VALID_ROWS, BATCH, &device)),
                None,
            )
            .unwrap()
            .1
    });
    let (rank0, rank1) = (&results[0], &results[1]);
    assert_eq!(single.epochs.len(), 2);
    for (epoch, one) in single.epochs.iter().enumerate() {
        let (a, b) = (&rank0.epochs[epoch], &rank1.epochs[epoch]);
        let (a_loss, b_loss) = (a.valid_loss.unwrap(), b.valid_loss.unwrap());
        assert_eq!(a_loss.to_bits(), b_loss.to_bits(), "epoch {}", epoch + 1);
        // Rank 0 validated rows 0..16 and rank 1 rows 16..32, in the batches one process
        // runs: the same mean, added up in another order.
        let one_loss = one.valid_loss.unwrap();
        assert!(
            (a_loss - one_loss).abs() <= 1e-9 * one_loss.abs().max(1.0),
            "epoch {}: ranks {a_loss}, one process {one_loss}",
            epoch + 1
        );
    }
}

#[test]
fn a_rank_whose_validation_fails_ends_every_rank_with_an_error_naming_it() {
    let results = failed_job(|_, comm| {
        let device = Device::flex().autodiff();
        // Row 20 is in rank 1's share of the validation rows (16..32): only its pass panics.
        let valid = PoisonedLoader::wrap(
            regression_loader(2, VALID_ROWS, BATCH, &device),
            20,
            "poisoned validation row 20",
        );
        trainer(1, 1).communicator(comm).fit(
            Mlp::new(4, &device),
            regression_loader(1, ROWS, BATCH, &device),
            Some(valid),
            None,
        )
    });
    let rank1 = results[1].as_ref().unwrap_err();
    assert!(
        matches!(rank1, TrainError::Validation { epoch: 1, .. }),
        "{rank1}"
    );
    assert!(
        rank1.to_string().contains("poisoned validation row 20")
            || format!("{rank1:?}").contains("poisoned validation row 20"),
        "{rank1:?}"
    );
    let rank0 = results[0].as_ref().unwrap_err();
    match rank0 {
        TrainError::RanksValidating {
            epoch: 1,
            source: CollectiveError::PeersFailed { ranks },
        } => assert_eq!(ranks, &[1]),
        other => panic!("rank 0 ended with {other}"),
    }
    assert!(rank0.peers_failed());
}
