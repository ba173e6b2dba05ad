//! `ember train`: a digit classifier trained data-parallel on several workers with ember's
//! Trainer, recording its summaries, with a progress bar. At the end, in TensorBoard's format,
//! the hidden-layer activations of the held-out digits go to the projector as an embedding.
//!
//! Built with the `mpi` feature and started by `mpirun -n N`, each process is one rank of a
//! data-parallel job (see [`ember::Trainer`]): each trains its shard on its own workers, rank
//! 0 prints, draws the bar and records the run, and every rank records its workers' step
//! times in its own event file of the same run.
//!
//! Ctrl-C (SIGINT) stops training after the current step: a checkpoint is written, the
//! summaries are completed and closed (the hyper-parameters with TensorBoard's failure status,
//! which MindInsight's lineage file gets too), and the command exits with code 130. A second
//! Ctrl-C exits at once.
//!
//! Checkpoints go to `<logdir>/checkpoints` (every `--checkpoint-every` optimizer steps and at
//! each epoch's end), with the command line the run was started with. `ember train --resume
//! [RUN_DIR]` goes on from the newest whole one, after Ctrl-C or `kill -9` alike, with the
//! run's own arguments, and rolls the log back to it, so the run's curves show every step once.
//! A run with no whole checkpoint is refused and left as it is; `ember train --restart
//! [RUN_DIR]` trains it again from its first step, its log and checkpoints discarded. A log
//! directory another run is writing is refused at once, naming that run's pid.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::optim::AdamConfig;
use burn::tensor::Device;
use ember::checkpoint::Begin;
use ember::devices::open_devices;
use ember::pack::{Category, CustomScalarLayout, Format, HParams};
use ember::{CheckpointConfig, EpochReport, SummaryRecord, Trainer, TrainerConfig};
use indicatif::{ProgressBar, ProgressStyle};

use crate::devices::{DeviceList, default_devices, print_device_memory, worker_devices};
use crate::digits::{self, Digit, DigitBatch, DigitBatcher, DigitMlp, PIXELS};
use crate::job::Job;

mod args;
mod command;
mod logdir;
mod records;

pub(crate) use args::TrainArgs;
use command::{given_args, resumed_args, save_command};
use logdir::CHECKPOINTS;
use records::{record_embedding, record_pr_curves, record_samples};

/// The seed of the train/test split and of the training shuffle.
pub(crate) const SPLIT_SEED: u64 = 1998;

/// The seed of the weight initialisation.
const INIT_SEED: u64 = 42;

/// The share of the data held out for testing.
pub(crate) const TEST_FRACTION: f64 = 0.2;

/// Test digits shown with their predictions each epoch.
const SAMPLES: usize = 16;

/// The exit code of a run stopped by Ctrl-C: 128 + SIGINT, as shells report a process that
/// SIGINT ended.
const INTERRUPTED: u8 = 130;

/// How long a record waits at most for an object store that is down to take the backlog.
#[cfg(feature = "object-store")]
const REMOTE_BLOCK_DEADLINE: Duration = Duration::from_secs(300);

/// The trained model, in the log directory: Burn's burnpack of its parameters.
const MODEL_FILE: &str = "model.bpk";

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

/// Pool steps in one epoch: the loader is split into one contiguous slice per worker (the last
/// takes the remainder), and each step runs one batch on every worker that has one left.
fn steps_per_epoch(train: usize, workers: usize, batch: usize) -> usize {
    let largest = train - train / workers * (workers - 1);
    largest.div_ceil(batch)
}

pub(crate) fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let given = given_args();
    let (args, begin) = match (args.resume.clone(), args.restart.clone()) {
        (Some(dir), _) => (
            resumed_args("--resume", dir.as_deref(), &given)?.0,
            Begin::Resume,
        ),
        (None, Some(dir)) => (
            resumed_args("--restart", dir.as_deref(), &given)?.0,
            Begin::Restart,
        ),
        (None, None) => (args, Begin::Fresh),
    };
    let listed = match args.device.clone() {
        Some(DeviceList(listed)) => listed,
        None => default_devices()?,
    };
    let specs = worker_devices(&listed, args.devices.map(usize::from), args.share_devices)?;
    let workers = specs.len();
    let batch_size = usize::from(args.batch_size);
    let hidden = usize::from(args.hidden);
    let epochs = usize::from(args.epochs);
    ensure!(
        args.lr.is_finite() && args.lr > 0.0,
        "--lr must be a positive number, got {}",
        args.lr
    );

    #[cfg(feature = "mpi")]
    let collective_timeout = args.collective_timeout;
    #[cfg(not(feature = "mpi"))]
    let collective_timeout = Duration::ZERO;
    let mut job = Job::start(collective_timeout)?;
    let lead = job.lead();

    let logdir = match args.logdir.clone() {
        Some(logdir) => logdir,
        None => logdir::default_logdir_at(job.rank_zero_s(logdir::now_secs())?),
    };
    let checkpointing = !args.no_checkpoints;
    let checkpoints = logdir.join(CHECKPOINTS);
    // A live run's directory, another run's, a finished run's or one whose recorded settings
    // its checkpoint contradicts is refused before anything is read into it or changed.
    let world = (job.rank(), job.size());
    command::admit(
        begin,
        &args,
        (&logdir, &checkpoints),
        world,
        (workers, TEST_FRACTION),
    )?;
    if begin == Begin::Restart && lead && !command::command_saved(&checkpoints) {
        save_command(
            &checkpoints,
            &command::without_flag(&given, "--restart"),
            &logdir,
        )?;
    }
    let continues = begin == Begin::Resume;

    let subset = args.subset.map(|n| n as usize);
    let (train, test) = digits::split(digits::load()?, SPLIT_SEED, subset, TEST_FRACTION);
    ensure!(
        train.len() >= workers * job.size(),
        "{} training examples cannot feed {workers} workers on each of {} rank(s); use a larger \
         --subset or fewer --devices",
        train.len(),
        job.size()
    );
    let samples: Vec<Digit> = test.iter().take(SAMPLES).cloned().collect();
    let held_out: Vec<Digit> = test.clone();
    let projected: Vec<Digit> = test.clone();
    let (train_len, test_len) = (train.len(), test.len());

    let opened = open_devices(&specs)?;
    let devices: Vec<Device> = opened.iter().map(|o| o.device.clone()).collect();
    let main = devices[0].clone();
    main.seed(INIT_SEED);

    let format = args.format.format();
    // Set by the first Ctrl-C: training stops after its step, and a record waiting for an
    // object store that is down stops waiting.
    let stop = Arc::new(AtomicBool::new(false));
    let builder = SummaryRecord::builder(&logdir)
        .format(format)
        .rank(job.rank() as u32, job.size() as u32);
    #[cfg(feature = "object-store")]
    let builder = builder.remote_block_wait(REMOTE_BLOCK_DEADLINE, Some(stop.clone()));
    let mut summary = builder
        .build()
        .with_context(|| format!("cannot create log dir {}", crate::output::shown(&logdir)))?;
    if begin == Begin::Fresh && lead && checkpointing {
        save_command(&checkpoints, &given, &logdir)?;
    }

    let shard = ember::collective::shard_range(train_len, job.size(), job.rank()).len();
    let total_steps = epochs * steps_per_epoch(shard, workers, batch_size);
    let bar = if lead {
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
    stop_on_ctrl_c(bar.clone(), stop.clone());
    if lead {
        let ranks = if job.size() > 1 {
            format!(" on each of {} ranks", job.size())
        } else {
            String::new()
        };
        eprintln!(
            "training a {PIXELS}-{hidden}-10 MLP on {train_len} digits ({test_len} held out for \
             testing), {workers} worker(s){ranks}, {epochs} epoch(s)",
        );
        for (worker, device) in opened.iter().enumerate() {
            eprintln!(
                "  worker {worker}: {} ({})",
                device.spec, device.description
            );
        }
    }

    let step_bar = bar.clone();
    let step_times = Arc::new(Mutex::new(ember::StepTimes::new()));
    let step_times_seen = step_times.clone();
    let epoch_bar = bar.clone();
    let sample_device = main.clone();
    let trainer = Trainer::new(
        devices,
        AdamConfig::new().init(),
        args.lr,
        TrainerConfig {
            epochs,
            histogram_every: Some(50),
            step_timeout: args.step_timeout,
            worker_threads: args.worker_threads,
            system_every: Some(args.system_every),
            checkpoints: checkpointing.then(|| CheckpointConfig {
                dir: checkpoints.clone(),
                every: Some(args.checkpoint_every as usize),
                keep: usize::from(args.keep_checkpoints),
            }),
            ..TrainerConfig::default()
        },
    )
    .stop_when(stop)
    .hparams(
        HParams::new()
            .with("hidden", i64::from(args.hidden))
            .with("batch_size", i64::from(args.batch_size))
            .with("learning_rate", args.lr)
            .with("optimizer", "adam")
            .with("train_examples", train_len as i64)
            .with("test_examples", test_len as i64),
    )
    .on_step(move |step| {
        if let Ok(mut times) = step_times_seen.lock() {
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
        let line = epoch_line(report, epochs);
        if epoch_bar.is_hidden() {
            eprintln!("{line}");
        } else {
            epoch_bar.println(line);
        }
        match summary {
            Some(summary) => {
                record_samples(model, &samples, &sample_device, format, summary, step)?;
                record_pr_curves(model, &held_out, &sample_device, format, summary, step)
            }
            None => Ok(()),
        }
    });
    let mut trainer = job.join(trainer);
    match begin {
        Begin::Resume => trainer = trainer.resume_from(&checkpoints),
        Begin::Restart => trainer = trainer.start_over(&checkpoints),
        Begin::Fresh => {}
    }
    // A run that goes on from a checkpoint has its layout in the log already.
    if lead && format == Format::TensorBoard && !continues {
        // One chart per metric with both splits on it; written first, as TensorBoard reads the
        // first layout of a run.
        summary.add_custom_scalars(
            CustomScalarLayout::new().category(
                Category::new("train vs valid")
                    .multiline("loss", ["train/loss", "valid/loss"])
                    .multiline("accuracy", ["train/accuracy", "valid/accuracy"]),
            ),
        )?;
    }

    let model = DigitMlp::new(hidden, &main);
    let train_loader = loader(train, batch_size, Some(SPLIT_SEED), &main);
    let test_loader = loader(test, batch_size, None, &main);
    let result =
        trainer.fit_holding_lock(model, train_loader, Some(test_loader), Some(&mut summary));
    bar.finish_and_clear();
    // Held until the model is saved: no other run may take the directory before it is.
    let (model, report, mut checkpoints_lock) =
        result.with_context(|| format!("{}training failed", job.prefix()))?;
    if lead {
        for (path, reason) in &report.checkpoints_skipped {
            eprintln!(
                "warning: passed over checkpoint {}: {reason}",
                crate::output::shown(path)
            );
        }
        if let Some(path) = &report.resumed_from {
            eprintln!("resumed from {}", crate::output::shown(path));
        }
    }
    if lead {
        record_embedding(
            &model,
            &projected,
            &main,
            format,
            &mut summary,
            report.steps as i64,
        )
        .context("recording the hidden-layer embedding")?;
    }
    summary
        .close()
        .with_context(|| format!("writing summaries under {}", crate::output::shown(&logdir)))?;
    if lead {
        if let Some(lock) = checkpoints_lock.as_mut() {
            lock.check().context("saving the trained model")?;
        }
        save_model(&model, &logdir)?;
    }
    if !lead {
        return Ok(if report.interrupted {
            ExitCode::from(INTERRUPTED)
        } else {
            ExitCode::SUCCESS
        });
    }
    if report.interrupted {
        eprintln!(
            "interrupted after {} step(s), {} of {epochs} epoch(s) finished; the logs are \
             complete up to there",
            report.steps,
            report.epochs.len()
        );
        if checkpointing {
            eprintln!(
                "go on with: ember train --resume {}",
                crate::output::shown(&logdir)
            );
        }
        print_logdir(&logdir, format);
        return Ok(ExitCode::from(INTERRUPTED));
    }

    let last = report.last().context("training ran no epoch")?;
    let accuracy = last
        .valid_accuracy
        .context("no test accuracy: the test set is empty; use a larger --subset")?;
    let seconds = started.elapsed().as_secs_f64();
    print_device_memory(&opened);
    if let Ok(times) = step_times.lock() {
        eprint!("{times}");
    }
    crate::output::out(format!(
        "test accuracy: {:.2}% ({test_len} held-out digits) after {epochs} epoch(s), \
         {} steps, {seconds:.1} s",
        accuracy * 100.0,
        report.steps
    ));
    print_logdir(&logdir, format);
    Ok(ExitCode::SUCCESS)
}

/// Saves the trained model's parameters as Burn's burnpack file `model.bpk` in the run
/// directory `dir` (a bucket's object when it is a URL), replacing an earlier one (a resumed
/// run saves its model again).
fn save_model(model: &DigitMlp, dir: &Path) -> anyhow::Result<()> {
    let record = || model.clone().into_record();
    let saved = if dir.to_str().is_some_and(ember::is_remote) {
        let local = tempfile::tempdir()?;
        let path = local.path().join(MODEL_FILE);
        record()
            .save(&path)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .and_then(|()| Ok(std::fs::read(&path)?))
            .and_then(|bytes| command::write_file(dir, MODEL_FILE, &bytes))
    } else {
        ember::durable::replace_with(&dir.join(MODEL_FILE), |tmp| {
            record().save(tmp).map_err(std::io::Error::other)
        })
        .map_err(Into::into)
    };
    saved.with_context(|| {
        format!(
            "saving the trained model to {}",
            crate::output::shown(&dir.join(MODEL_FILE))
        )
    })
}

/// Has the first Ctrl-C (SIGINT) set `flag`, for the trainer to stop after the current step
/// with the logs complete; a second Ctrl-C exits at once.
fn stop_on_ctrl_c(bar: ProgressBar, flag: Arc<AtomicBool>) {
    let installed = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::AcqRel) {
            std::process::exit(i32::from(INTERRUPTED));
        }
        bar.suspend(|| {
            eprintln!("stopping after the current step (Ctrl-C again to quit at once)");
        });
    });
    if let Err(error) = installed {
        eprintln!("warning: Ctrl-C will end training at once, losing the latest logs: {error}");
    }
}

/// Where the logs are, and how to view them.
fn print_logdir(logdir: &std::path::Path, format: Format) {
    crate::output::out(format!("logs: {}", crate::output::shown(logdir)));
    let remote = logdir.to_str().filter(|l| ember::is_remote(l));
    crate::output::out(match (format, remote) {
        // MindInsight reads local directories only.
        (Format::MindInsight, Some(url)) => {
            let run = url
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("run");
            format!(
                "view: ember pull {url} pulled/{run} && mindinsight start --summary-base-dir pulled"
            )
        }
        // MindInsight lists every directory of summaries under its base directory as a run.
        (Format::MindInsight, None) => format!(
            "view: mindinsight start --summary-base-dir {}",
            crate::output::shown(match logdir.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => std::path::Path::new("."),
            })
        ),
        _ => format!(
            "view: tensorboard --logdir {}",
            crate::output::shown(logdir)
        ),
    });
}

fn epoch_line(report: &EpochReport, epochs: usize) -> String {
    let percent = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    format!(
        "epoch {}/{epochs}: train loss {:.4}, train accuracy {}, test loss {}, test accuracy {}",
        report.epoch,
        report.train_loss,
        percent(report.train_accuracy),
        report
            .valid_loss
            .map_or("-".to_string(), |v| format!("{v:.4}")),
        percent(report.valid_accuracy),
    )
}

#[cfg(test)]
mod tests {
    use super::records::predictions_table;
    use super::*;

    #[test]
    fn steps_per_epoch_follows_the_split() {
        // 1438 examples on 2 workers: 719 each, batches of 32: 23 steps.
        assert_eq!(steps_per_epoch(1438, 2, 32), 23);
        // 10 on 3 workers: 3, 3 and 4; batches of 2: the last needs 2 steps.
        assert_eq!(steps_per_epoch(10, 3, 2), 2);
        assert_eq!(steps_per_epoch(240, 1, 32), 8);
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
