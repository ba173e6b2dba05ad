//! `ember train`: a digit classifier trained data-parallel on several workers with ember's
//! Trainer, recording its summaries, with a progress bar. At the end, in TensorBoard's format,
//! the hidden-layer activations of the held-out digits go to the projector as an embedding.
//!
//! Built with the `mpi` feature and started by `mpirun -n N`, each process is one rank of a
//! data-parallel job (see [`ember::Trainer`]): each trains its shard on its own workers, rank
//! 0 prints, draws the bar and records the run, and every rank records its workers' step
//! times in its own event file of the same run.
//!
//! Ctrl-C (SIGINT), SIGTERM and SIGHUP stop training after the current step: a checkpoint is
//! written, the summaries are completed and closed (the hyper-parameters with TensorBoard's
//! failure status, which MindInsight's lineage file gets too), and the command exits with code
//! 128 + the signal (130, 143, 129). A second signal exits at once.
//!
//! The trained model is saved before the log is closed: a log writer that fails (a full disk)
//! costs the log, never the model. Its failure is printed when it happens, with the step, and
//! the run ends with exit code 3 and a last line saying from which step the log is incomplete.
//!
//! Checkpoints go to `<logdir>/checkpoints` (every `--checkpoint-every` optimizer steps and at
//! each epoch's end), with the command line the run was started with. `ember train --resume
//! [RUN_DIR]` goes on from the newest whole one, after Ctrl-C or `kill -9` alike, with the
//! run's own arguments, and rolls the log back to it, so the run's curves show every step once.
//! A run with no whole checkpoint is refused and left as it is; `ember train --restart
//! [RUN_DIR]` trains it again from its first step, its log and checkpoints discarded. A log
//! directory another run is writing is refused at once, naming that run's pid. `ember train
//! --resume-if-any --logdir R ARGS` is one command line for a run's first start and every
//! start after it (a batch script a scheduler requeues): fresh, resumed, or, finished, nothing
//! done (see `train/if_any.rs`).

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::optim::AdamConfig;
use burn::tensor::Device;
use ember::devices::{OpenedDevice, open_devices};
use ember::pack::{Category, CustomScalarLayout, Format, HParams};
use ember::run::{Begin, DataLayout, Run};
use ember::{CheckpointConfig, SummaryRecord, TrainReport, Trainer, TrainerConfig};
use indicatif::{ProgressBar, ProgressStyle};

use crate::devices::{DeviceList, default_devices, worker_devices};
use crate::digits::{self, Digit, DigitBatch, DigitBatcher, DigitMlp, PIXELS};
use crate::job::Job;

mod args;
mod command;
mod if_any;
mod logdir;
mod plan;
mod records;
mod report;
mod signals;
mod steps;

pub(crate) use args::TrainArgs;
use command::{given_args, resumed_args};
use plan::Plan;
use records::{record_embedding, record_pr_curves, record_samples};
use steps::run_steps;

/// The seed of the train/test split and of the training shuffle.
pub(crate) const SPLIT_SEED: u64 = 1998;

/// The seed of the weight initialisation.
const INIT_SEED: u64 = 42;

/// The share of the data held out for testing.
pub(crate) const TEST_FRACTION: f64 = 0.2;

/// Test digits shown with their predictions each epoch.
const SAMPLES: usize = 16;

/// How long a run stopped by a signal waits at most for an MLflow server to take what is
/// spooled: the grace after SIGTERM (Slurm's KillWait, 30 s by default) is shared with the stop
/// checkpoint and the logs, and what is left goes with `--resume`.
const STOPPED_TRACKER_WAIT: Duration = Duration::from_secs(5);

/// How long a record waits at most for an object store that is down to take the backlog.
const REMOTE_BLOCK_DEADLINE: Duration = Duration::from_secs(300);

fn loader(
    digits: Vec<Digit>,
    batch_size: usize,
    shuffle: Option<u64>,
    device: &Device,
) -> Arc<dyn DataLoader<DigitBatch>> {
    let builder = DataLoaderBuilder::new(DigitBatcher)
        .batch_size(batch_size)
        .set_device(device.clone());
    let builder = match shuffle {
        Some(seed) => builder.shuffle(seed),
        None => builder,
    };
    builder.build(InMemDataset::new(digits))
}

pub(crate) fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let given = given_args();
    let mut plan = prepare(args, &given)?;
    let data = Data::load(&plan)?;
    let hparams = run_hparams(&plan, &data);
    // Everything that can fail before training does before the run is opened, which records it.
    let opened = open_devices(&plan.specs)?;
    let examples = (data.train.len(), data.test.len());
    let Some(run) = command::open_run(&plan, &given, &hparams, examples)? else {
        if plan.job.lead() {
            crate::output::err(format!(
                "{}: the run has trained all its {} epoch(s); nothing to do",
                crate::output::shown(&plan.logdir),
                plan.epochs()
            ));
        }
        return Ok(ExitCode::SUCCESS);
    };
    plan.begin = run.begin();
    let main = opened[0].device.clone();
    main.seed(INIT_SEED);
    // Set by the first stop signal: training stops after its step, and a record waiting for an
    // object store that is down stops waiting.
    let stop = Arc::new(AtomicBool::new(false));
    let mut summary = open_summary(&plan, &run, &stop)?;
    let bar = progress_bar(&plan, data.train.len(), run.layout())?;
    let signal = signals::stop_on_signals(stop.clone());
    announce(&plan, &data, &opened);
    let step_times = Arc::new(Mutex::new(ember::StepTimes::new()));
    let trainer = build_trainer(&mut plan, &data, &opened, &bar, &step_times, stop)
        .hparams(hparams)
        .in_run(run);
    write_layout(&plan, &mut summary)?;
    let test_len = data.test.len();
    let projected = data.test.clone();
    let trained = train(&plan, trainer, data, &main, &mut summary, &bar);
    let (model, report, run) =
        trained.with_context(|| format!("{}training failed", plan.job.prefix()))?;
    // What the end records (the embedding, the log's close) logs is at the run's last step.
    let log = finish(&plan, &model, &report, summary, run, &projected, &main);
    crate::logger::training_done();
    let log = log?;
    let ending = report::Ending {
        report: &report,
        log,
        signal,
        test_len,
        started,
        opened: &opened,
        step_times: &step_times,
    };
    report::report(&mut plan, ending)
}

/// Settles the command line into a [`Plan`], refusing bad values before anything is read or
/// written.
fn prepare(args: TrainArgs, given: &[String]) -> anyhow::Result<Plan> {
    let (args, begin) = match (args.resume.clone(), args.restart.clone()) {
        (Some(dir), _) => (
            resumed_args("--resume", dir.as_deref(), given)?.0,
            Begin::Resume,
        ),
        (None, Some(dir)) => (
            resumed_args("--restart", dir.as_deref(), given)?.0,
            Begin::Restart,
        ),
        (None, None) => (args, Begin::Fresh),
    };
    let listed = match args.device.clone() {
        Some(DeviceList(listed)) => listed,
        None => default_devices()?,
    };
    let specs = worker_devices(&listed, args.devices.map(usize::from), args.share_devices)?;
    ensure!(
        args.lr.is_finite() && args.lr > 0.0,
        "--lr must be a positive number, got {}",
        args.lr
    );
    ensure!(
        !args.mlflow_event_files
            || args.mlflow.is_some()
            || std::env::var_os("MLFLOW_TRACKING_URI").is_some(),
        "--mlflow-event-files uploads to an MLflow server: give --mlflow URI or set \
         MLFLOW_TRACKING_URI"
    );

    #[cfg(feature = "mpi")]
    let collective_timeout = args.collective_timeout;
    #[cfg(not(feature = "mpi"))]
    let collective_timeout = Duration::ZERO;
    let mut job = Job::start(collective_timeout)?;

    let logdir = match args.logdir.clone() {
        Some(logdir) => logdir,
        None => {
            // Rank 0 claims the directory; every rank names the one it claimed.
            let runs = Path::new(logdir::RUNS);
            let secs = job.rank_zero_s(logdir::now_secs())?;
            let claimed = if job.lead() {
                logdir::claim_default_logdir(runs, secs)?
            } else {
                0
            };
            logdir::default_logdir_at(runs, secs, job.rank_zero_s(claimed)?)
        }
    };
    let begin = if args.resume_if_any && begin == Begin::Fresh {
        if_any::refuse_another_run(&args, &logdir)?;
        Begin::ResumeIfAny
    } else {
        begin
    };
    Ok(Plan {
        args,
        begin,
        specs,
        job,
        logdir,
    })
}

/// The digits, split: what trains, and what is held out for testing, shown as samples and
/// projected at the end.
struct Data {
    train: Vec<Digit>,
    test: Vec<Digit>,
}

impl Data {
    fn load(plan: &Plan) -> anyhow::Result<Self> {
        let subset = plan.args.subset.map(|n| n as usize);
        let (train, test) = digits::split(digits::load()?, SPLIT_SEED, subset, TEST_FRACTION);
        let (workers, ranks) = (plan.specs.len(), plan.job.size());
        ensure!(
            train.len() >= workers * ranks,
            "{} training examples cannot feed {workers} workers on each of {ranks} rank(s); use \
             a larger --subset or fewer --devices",
            train.len(),
        );
        Ok(Self { train, test })
    }
}

/// Opens the run's summary record, its lease in a bucket naming the run.
fn open_summary(plan: &Plan, run: &Run, stop: &Arc<AtomicBool>) -> anyhow::Result<SummaryRecord> {
    let mut builder = SummaryRecord::builder(&plan.logdir)
        .format(plan.args.format.format())
        .rank(plan.job.rank() as u32, plan.job.size() as u32)
        .remote_block_wait(REMOTE_BLOCK_DEADLINE, Some(stop.clone()));
    if let Some(id) = run.id() {
        builder = builder.run_id(id.as_str());
    }
    if let Some(config) = ember::track::MlflowConfig::from_env(plan.args.mlflow.as_deref())? {
        let continuing = match run.begin() {
            ember::run::Begin::Resume => ember::track::Continue::Yes,
            _ => ember::track::Continue::No,
        };
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let run_id = run
            .id()
            .map(|id| id.as_str().to_owned())
            .unwrap_or_default();
        let tags = [
            ("ember.version", env!("CARGO_PKG_VERSION")),
            ("ember.run_id", run_id.as_str()),
            ("ember.command", command.as_str()),
        ];
        builder = builder.mlflow(config, continuing, &tags);
        if plan.args.mlflow_event_files {
            builder = builder.mlflow_event_files();
        }
    }
    builder.build().map_err(|error| match error {
        // Its own message says what is wrong with the server, and where.
        ember::SummaryError::Tracker(_) => anyhow::Error::new(error),
        error => anyhow::Error::new(error).context(format!(
            "cannot create log dir {}",
            crate::output::shown(&plan.logdir)
        )),
    })
}

/// Rank 0's progress bar over the run's steps (hidden on other ranks, and where stderr is no
/// terminal), with the lines printed meanwhile drawn above it; `began`, a resumed run's layout.
fn progress_bar(
    plan: &Plan,
    train_len: usize,
    began: Option<DataLayout>,
) -> anyhow::Result<ProgressBar> {
    let job = &plan.job;
    let total_steps = run_steps(
        (plan.epochs(), train_len, usize::from(plan.args.batch_size)),
        (plan.specs.len(), job.size()),
        job.rank(),
        began,
    );
    let bar = if job.lead() {
        ProgressBar::new(total_steps as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] step {pos}/{len} {msg} ({elapsed})")
            .map_err(|e| anyhow::anyhow!("progress bar template: {e}"))?
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    crate::output::draw_above(Some(bar.clone()));
    Ok(bar)
}

/// Rank 0 says what it trains, where.
fn announce(plan: &Plan, data: &Data, opened: &[OpenedDevice]) {
    if !plan.job.lead() {
        return;
    }
    let ranks = if plan.job.size() > 1 {
        format!(" on each of {} ranks", plan.job.size())
    } else {
        String::new()
    };
    crate::output::err(format!(
        "training a {PIXELS}-{}-10 MLP on {} digits ({} held out for testing), {} worker(s)\
         {ranks}, {} epoch(s)",
        plan.args.hidden,
        data.train.len(),
        data.test.len(),
        opened.len(),
        plan.epochs(),
    ));
    for (worker, device) in opened.iter().enumerate() {
        crate::output::err(format!(
            "  worker {worker}: {} ({})",
            device.spec, device.description
        ));
    }
}

/// The run's Trainer: its configuration, hyper-parameters, the bar moved at each step, and at
/// each epoch's end a line and the samples' and PR curves' summaries; a rank of the job,
/// resumed or restarted as asked.
fn build_trainer(
    plan: &mut Plan,
    data: &Data,
    opened: &[OpenedDevice],
    bar: &ProgressBar,
    step_times: &Arc<Mutex<ember::StepTimes>>,
    stop: Arc<AtomicBool>,
) -> Trainer<DigitMlp> {
    let args = &plan.args;
    let (epochs, lead, format) = (plan.epochs(), plan.job.lead(), args.format.format());
    let devices: Vec<Device> = opened.iter().map(|o| o.device.clone()).collect();
    let sample_device = devices[0].clone();
    let samples: Vec<Digit> = data.test.iter().take(SAMPLES).cloned().collect();
    let held_out = data.test.clone();
    let (step_bar, step_times) = (bar.clone(), step_times.clone());
    let trainer = Trainer::new(
        devices,
        AdamConfig::new().init(),
        args.lr,
        trainer_config(plan),
    )
    .stop_when(stop)
    .on_step(move |step| {
        crate::logger::at_step(step.step.max(0) as u64);
        if let Ok(mut times) = step_times.lock() {
            times.add_report(step);
        }
        step_bar.set_prefix(format!("epoch {}/{epochs}", step.epoch));
        step_bar.set_message(format!(
            "loss {:.4} {:.0} ex/s",
            step.loss, step.examples_per_second
        ));
        step_bar.set_position(step.step as u64);
    })
    .on_epoch(move |model: &DigitMlp, report, step, summary| {
        // The run's own summaries and lines are rank 0's.
        if !lead {
            return Ok(());
        }
        crate::output::err(report::epoch_line(report, epochs));
        match summary {
            Some(summary) => {
                record_samples(model, &samples, &sample_device, format, summary, step)?;
                record_pr_curves(model, &held_out, &sample_device, format, summary, step)
            }
            None => Ok(()),
        }
    });
    plan.job.join(trainer)
}

/// The run's hyper-parameters: what it records for TensorBoard's and MindInsight's hparams, and
/// the settings its checkpoints hold, which a resume must have the same.
fn run_hparams(plan: &Plan, data: &Data) -> HParams {
    let args = &plan.args;
    HParams::new()
        .with("hidden", i64::from(args.hidden))
        .with("batch_size", i64::from(args.batch_size))
        .with("learning_rate", args.lr)
        .with("optimizer", "adam")
        .with("train_examples", data.train.len() as i64)
        .with("test_examples", data.test.len() as i64)
        .with("init_seed", INIT_SEED as i64)
        .with("split_seed", SPLIT_SEED as i64)
}

/// Each worker's share of the cores when several workers share the CPU backend and the user
/// did not say (`--worker-threads`): the cores this process may run on, divided among them, at
/// least one each. Otherwise every worker would run its products over every core of the
/// process's one pool, and the workers would fight for the same cores. One worker keeps the
/// pool over every core; workers on GPUs have no compute pool to share.
fn cpu_share(specs: &[ember::devices::DeviceSpec]) -> Option<std::num::NonZeroUsize> {
    let all_cpu = specs.iter().all(|s| *s == ember::devices::DeviceSpec::Cpu);
    if specs.len() < 2 || !all_cpu {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    std::num::NonZeroUsize::new((cores / specs.len()).max(1))
}

fn trainer_config(plan: &Plan) -> TrainerConfig {
    let args = &plan.args;
    TrainerConfig {
        epochs: plan.epochs(),
        histogram_every: Some(50),
        grad_accumulation: usize::from(args.grad_accumulation),
        step_timeout: args.step_timeout,
        worker_threads: args.worker_threads.or_else(|| cpu_share(&plan.specs)),
        system_every: Some(args.system_every),
        checkpoints: plan.checkpointing().then(|| CheckpointConfig {
            dir: plan.checkpoints(),
            every: Some(args.checkpoint_every as usize),
            keep: usize::from(args.keep_checkpoints),
        }),
        ..TrainerConfig::default()
    }
}

/// TensorBoard's layout of a new run: one chart per metric with both splits on it; written
/// first, as TensorBoard reads the first layout of a run. A run that goes on from a
/// checkpoint has it in its log already.
fn write_layout(plan: &Plan, summary: &mut SummaryRecord) -> anyhow::Result<()> {
    if plan.job.lead()
        && plan.args.format.format() == Format::TensorBoard
        && plan.begin != Begin::Resume
    {
        summary.add_custom_scalars(
            CustomScalarLayout::new().category(
                Category::new("train vs valid")
                    .multiline("loss", ["train/loss", "valid/loss"])
                    .multiline("accuracy", ["train/accuracy", "valid/accuracy"]),
            ),
        )?;
    }
    Ok(())
}

/// Trains the model on `data`, the bar cleared at the end.
fn train(
    plan: &Plan,
    trainer: Trainer<DigitMlp>,
    data: Data,
    main: &Device,
    summary: &mut SummaryRecord,
    bar: &ProgressBar,
) -> Result<(DigitMlp, TrainReport, Option<Run>), ember::TrainError> {
    let batch_size = usize::from(plan.args.batch_size);
    let model = DigitMlp::new(plan.args.hidden as usize, main);
    let train_loader = loader(data.train, batch_size, Some(SPLIT_SEED), main);
    let test_loader = loader(data.test, batch_size, None, main);
    // The run comes back still claimed, to be held until the model is saved: no other run may
    // take the directory before it is.
    let result = trainer.fit_holding_run(model, train_loader, Some(test_loader), Some(summary));
    bar.finish_and_clear();
    crate::output::draw_above(None);
    result
}

/// Saves the model (rank 0) through its run, before anything else can fail: the embedding's
/// summary, the closing of the log, which lets the log's claim go. A run trained to its end
/// saves its trained model, one stopped before it its interrupted model (see [`ember::run`]).
/// Returns what the log lost, if a log writer failed.
fn finish(
    plan: &Plan,
    model: &DigitMlp,
    report: &TrainReport,
    mut summary: SummaryRecord,
    run: Option<Run>,
    projected: &[Digit],
    main: &Device,
) -> anyhow::Result<Option<String>> {
    let lead = plan.job.lead();
    if lead {
        if let Some(path) = &report.resumed_from {
            crate::output::err(format!("resumed from {}", crate::output::shown(path)));
        }
        let mut run = run.context("the run came back from training without its directory")?;
        let saved = run.save_model(model, report.steps, !report.interrupted);
        let saved = saved.with_context(|| {
            format!(
                "saving the trained model to {}",
                crate::output::shown(&plan.logdir)
            )
        })?;
        if let Some(file) = saved.file_name() {
            summary.log_artifact(&saved, &format!("model/{}", file.to_string_lossy()));
        }
    }
    let embedded = if lead {
        let (format, step) = (plan.args.format.format(), report.steps as i64);
        record_embedding(model, projected, main, format, &mut summary, step)
            .context("recording the hidden-layer embedding")
    } else {
        Ok(())
    };
    if report.interrupted {
        summary.limit_tracker_close_wait(STOPPED_TRACKER_WAIT);
    }
    let closed = summary.close().with_context(|| {
        format!(
            "writing summaries under {}",
            crate::output::shown(&plan.logdir)
        )
    });
    let lost = [embedded.err(), closed.err()]
        .into_iter()
        .flatten()
        .map(|error| crate::output::error_line(&error))
        .collect::<Vec<_>>();
    Ok(if !lost.is_empty() {
        Some(lost.join("; "))
    } else {
        crate::logger::log_failed_at().map(|_| "a log writer failed (see above)".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::records::predictions_table;
    use super::*;

    #[test]
    fn workers_sharing_the_cpu_split_its_cores_and_nothing_else_is_limited() {
        use ember::devices::DeviceSpec::{Cpu, Wgpu};
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(cpu_share(&[Cpu]), None);
        assert_eq!(cpu_share(&[Cpu, Wgpu(0)]), None);
        assert_eq!(cpu_share(&[Wgpu(0), Wgpu(1)]), None);
        let share =
            |workers: usize| cpu_share(&vec![Cpu; workers]).map(std::num::NonZeroUsize::get);
        assert_eq!(share(2), Some((cores / 2).max(1)));
        // More workers than cores: one thread each, never none.
        assert_eq!(share(cores + 1), Some(1));
    }

    #[test]
    fn the_predictions_table_marks_each_sample() {
        let digit = |label| Digit {
            pixels: [0.0; PIXELS],
            label,
        };
        let table = predictions_table(&[digit(3), digit(7)], &[3, 1]);
        assert!(table.contains("| 0 | 3 | 3 | ✓ |"), "{table}");
        assert!(table.contains("| 1 | 7 | 1 | ✗ |"), "{table}");
        assert!(table.contains("1 of 2 right."), "{table}");
    }
}
