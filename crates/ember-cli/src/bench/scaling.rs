//! `ember bench scaling`: one data-parallel training run, by ember's Trainer or by one of
//! burn-train 0.23's own strategies, on the same model, data and batches, reported as one JSON
//! line; `cargo xtask scaling` runs the sides against one another and reports the ratios.
//!
//! Both sides train the digits (the same shuffled split as `ember train`) with Adam, every
//! worker taking batches of `--batch-size` from its own slice of the training set (burn's
//! `split_dataloader`, on both sides), with a validation pass over the held-out digits each
//! epoch. The time is the whole `fit` or `launch`, start-up of the strategy included, from
//! after the data and the model are made until training returns.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, bail};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::AdamConfig;
use burn::tensor::Tensor;
use burn::tensor::distributed::{DistributedConfig, ReduceOperation};
use burn::train::logger::MetricLogger;
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{MetricDefinition, NumericEntry};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, MultiDeviceOptim,
    SupervisedTraining, TrainOutput, TrainStep,
};
use clap::{Args, ValueEnum};
use ember::devices::open_devices;
use ember::{StepReport, SummaryRecord, Trainer, TrainerConfig};
use serde_json::json;

use crate::devices::{DeviceList, default_devices, parse_device_list, worker_devices};
use crate::digits::{self, CLASSES, DigitBatch, DigitBatcher, PIXELS};

/// Who runs the data-parallel step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Side {
    /// ember's Trainer: the device pool, gradients reduced as they arrive, the optimizer
    /// step split between the devices (a thread each on the CPU).
    Ember,
    /// burn-train's `ExecutionStrategy::single` (one worker only).
    BurnSingle,
    /// burn-train's `ExecutionStrategy::multi` with `MultiDeviceOptim::OptimMainDevice`.
    BurnMulti,
    /// burn-train's `ExecutionStrategy::multi` with `MultiDeviceOptim::OptimSharded`.
    BurnSharded,
    /// burn-train's `ExecutionStrategy::ddp` (mean all-reduce).
    BurnDdp,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Ember => "ember",
            Side::BurnSingle => "burn-single",
            Side::BurnMulti => "burn-multi",
            Side::BurnSharded => "burn-sharded",
            Side::BurnDdp => "burn-ddp",
        }
    }
}

/// The model trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModelArg {
    /// `ember train`'s two-layer perceptron: 64 pixels, `--width` ReLU units, 10 logits.
    Digits,
    /// Three hidden layers of `--width` ReLU units: most parameters in square matrices, which
    /// split evenly over optimizer shards. At 128 examples a batch its step is a third Adam
    /// (memory traffic), not matrix products: six FLOP per parameter and example is too few.
    Deep,
    /// A convolutional net (as the scaling studies of PyTorch DDP and Horovod train): the
    /// 8x8 digit through a 3x3 convolution of 64 channels, a strided one to 4x4 with `--width`
    /// / 2, and three 3x3 convolutions of `--width` channels, then one linear layer to the
    /// logits. Every weight is used at each of the 16 or 64 positions, so a step does about
    /// 100 FLOP per parameter and example: compute-bound, as the models are whose scaling
    /// data parallelism is for.
    Conv,
}

impl ModelArg {
    fn name(self) -> &'static str {
        match self {
            ModelArg::Digits => "digits",
            ModelArg::Deep => "deep",
            ModelArg::Conv => "conv",
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ScalingArgs {
    /// Who runs the step.
    #[arg(long, value_enum)]
    side: Side,
    /// Workers, each with its own slice of the training set.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
    /// The devices to spread the workers over (as `ember train --device`); the build's
    /// default when left out.
    #[arg(long, value_parser = parse_device_list)]
    device: Option<DeviceList>,
    /// The model.
    #[arg(long, value_enum, default_value = "digits")]
    model: ModelArg,
    /// Units of each hidden layer (the convolutional net: channels of its wide layers).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    width: u32,
    /// Examples per batch on each worker.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..))]
    batch_size: u16,
    /// Epochs to train.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    epochs: u16,
    /// Only the first N digits of the shuffled set (for quick runs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(20..))]
    subset: Option<u64>,
    /// ember only: threads of each worker's own compute pool (see `ember train`).
    #[arg(long, value_name = "N")]
    worker_threads: Option<NonZeroUsize>,
    /// Record summaries into this directory (ember: the Trainer's own; burn-train: ember's
    /// `SummaryLogger` beside burn's metric store). Without it, neither side records any.
    #[arg(long)]
    summaries: Option<PathBuf>,
}

/// Convolutions (none for the perceptrons) and then linear layers: `widths[0]` inputs, ReLU
/// between layers and `widths.last()` logits.
#[derive(Module, Debug)]
pub(crate) struct ScalingModel {
    convs: Vec<Conv2d>,
    layers: Vec<Linear>,
    act: Relu,
}

/// The digits' side in pixels: the convolutional net sees each as one 8x8 channel.
const SIDE: usize = 8;

impl ScalingModel {
    fn perceptron(widths: &[usize], device: &burn::tensor::Device) -> Self {
        Self {
            convs: Vec::new(),
            layers: widths
                .windows(2)
                .map(|pair| LinearConfig::new(pair[0], pair[1]).init(device))
                .collect(),
            act: Relu::new(),
        }
    }

    fn convolutional(width: usize, device: &burn::tensor::Device) -> Self {
        let half = (width / 2).max(1);
        let conv = |from: usize, to: usize, stride: usize| {
            Conv2dConfig::new([from, to], [3, 3])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        // 8x8 → (stride 2) 4x4, where the wide layers work.
        let positions = (SIDE / 2) * (SIDE / 2);
        Self {
            convs: vec![
                conv(1, 64, 1),
                conv(64, half, 2),
                conv(half, width, 1),
                conv(width, width, 1),
                conv(width, width, 1),
            ],
            layers: vec![LinearConfig::new(width * positions, CLASSES).init(device)],
            act: Relu::new(),
        }
    }

    fn classify(&self, batch: DigitBatch) -> ClassificationOutput {
        let device = batch.pixels.device();
        let mut x: Tensor<2> = batch.pixels;
        if !self.convs.is_empty() {
            let [examples, _] = x.dims();
            let mut image: Tensor<4> = x.reshape([examples, 1, SIDE, SIDE]);
            for conv in &self.convs {
                image = self.act.forward(conv.forward(image));
            }
            x = image.flatten(1, 3);
        }
        let last = self.layers.len() - 1;
        for (index, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if index < last {
                x = self.act.forward(x);
            }
        }
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(x.clone(), batch.labels.clone());
        ClassificationOutput::new(loss, x, batch.labels)
    }
}

impl TrainStep for ScalingModel {
    type Input = DigitBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: DigitBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.classify(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for ScalingModel {
    type Input = DigitBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: DigitBatch) -> ClassificationOutput {
        self.classify(batch)
    }
}

/// Draws every parameter of a module that Burn initialises lazily.
struct Materialize;

impl ModuleVisitor for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

/// A metric logger that keeps nothing: burn-train registers a file logger of its own when
/// given none, and a run without summaries must not pay for one.
struct NoMetrics;

impl MetricLogger for NoMetrics {
    fn log(&mut self, _update: MetricsUpdate, _epoch: usize, _split: &Split) {}

    fn read_numeric(
        &mut self,
        name: &str,
        epoch: usize,
        split: &Split,
    ) -> Result<Vec<NumericEntry>, String> {
        Err(format!(
            "no metrics are kept ({split}/{name}, epoch {epoch})"
        ))
    }

    fn log_metric_definition(&mut self, _definition: MetricDefinition) {}

    fn log_epoch_summary(&mut self, _summary: EpochSummary) {}
}

/// Where the Trainer's steps spent their time on the training thread, summed over steps.
#[derive(Debug, Default)]
struct StepTotals {
    steps: usize,
    /// The whole step: devices, reduction and optimizer.
    step: f64,
    /// The mean device's own step (fork, forward and backward).
    device: f64,
    reduce: f64,
    optimizer: f64,
}

impl StepTotals {
    fn add(&mut self, report: &StepReport) {
        let devices = report.device_seconds.len().max(1) as f64;
        self.steps += 1;
        self.step += report.devices_seconds + report.reduce_seconds + report.optimizer_seconds;
        self.device += report.device_seconds.iter().sum::<f64>() / devices;
        self.reduce += report.reduce_seconds;
        self.optimizer += report.optimizer_seconds;
    }
}

pub(crate) fn scaling(args: ScalingArgs) -> anyhow::Result<ExitCode> {
    // Under mpirun (the `mpi` feature), this process is one rank of the job: every rank trains
    // its shard of the digits on its workers, and rank 0 reports the job's examples per second.
    let job = crate::job::Job::start(std::time::Duration::from_secs(300))?;
    let listed = match args.device.clone() {
        Some(DeviceList(listed)) => listed,
        None => default_devices()?,
    };
    let workers = usize::from(args.workers);
    if args.side == Side::BurnSingle && workers != 1 {
        bail!("burn-single runs one worker; use burn-multi for more");
    }
    let specs = worker_devices(&listed, Some(workers), false)?;
    let opened = open_devices(&specs)?;
    let devices: Vec<burn::tensor::Device> = opened.iter().map(|o| o.device.clone()).collect();
    let main = devices[0].clone();

    let batch_size = usize::from(args.batch_size);
    let (train_examples, train_loader, valid_loader) = digit_loaders(&args, &main)?;
    let width = args.width as usize;
    let model = scaling_model(args.model, width, &main);
    let parameters = model.num_params();
    let epochs = usize::from(args.epochs);
    let lr = 1e-3;

    let mut totals = None;
    let started = Instant::now();
    let outcome: anyhow::Result<()> = match args.side {
        Side::Ember => {
            let (result, steps) = ember_side(
                &args,
                devices,
                (epochs, lr),
                model,
                (train_loader, valid_loader),
                &job,
            )?;
            totals = steps;
            result
        }
        side if job.size() > 1 => Err(anyhow::anyhow!(
            "{} runs in one process; only ember's side runs under mpirun",
            side.name()
        )),
        side => burn_train(
            side,
            devices,
            &args,
            epochs,
            lr,
            model,
            train_loader,
            valid_loader,
        ),
    };
    let seconds = started.elapsed().as_secs_f64();
    let examples = train_examples * epochs;
    let mut line = json!({
        "side": args.side.name(),
        "workers": workers,
        "model": args.model.name(),
        "width": width,
        "parameters": parameters,
        "batch_size": batch_size,
        "epochs": epochs,
        "examples": examples,
        "summaries": args.summaries.is_some(),
        "worker_threads": args.worker_threads.map(NonZeroUsize::get),
        "ranks": job.size(),
    });
    match outcome {
        Ok(()) => add_figures(&mut line, seconds, examples, totals),
        Err(error) => line["error"] = json!(format!("{error:#}")),
    }
    // Every rank trained the job's examples together; rank 0 reports them.
    if job.lead() {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The digits split into training and test sets (the first `--subset` of them), each in a
/// loader of `--batch-size` batches on `main`, the training set's shuffled; and how many
/// examples the training set holds.
fn digit_loaders(
    args: &ScalingArgs,
    main: &burn::tensor::Device,
) -> anyhow::Result<(usize, Loader, Loader)> {
    let subset = args.subset.map(|n| n as usize);
    let (train, test) = digits::split(
        digits::load()?,
        crate::train::SPLIT_SEED,
        subset,
        crate::train::TEST_FRACTION,
    );
    let batch_size = usize::from(args.batch_size);
    let loader = |digits: Vec<digits::Digit>, shuffle: bool| -> Loader {
        let builder = DataLoaderBuilder::new(DigitBatcher)
            .batch_size(batch_size)
            .set_device(main.clone());
        let builder = if shuffle {
            builder.shuffle(crate::train::SPLIT_SEED)
        } else {
            builder
        };
        builder.build(InMemDataset::new(digits))
    };
    let train_examples = train.len();
    Ok((train_examples, loader(train, true), loader(test, false)))
}

/// The model `--model` names at `width`, its parameters drawn.
fn scaling_model(model: ModelArg, width: usize, main: &burn::tensor::Device) -> ScalingModel {
    let model = match model {
        ModelArg::Digits => ScalingModel::perceptron(&[PIXELS, width, CLASSES], main),
        ModelArg::Deep => ScalingModel::perceptron(&[PIXELS, width, width, width, CLASSES], main),
        ModelArg::Conv => ScalingModel::convolutional(width, main),
    };
    // Burn draws parameters on first use: drawn here, outside the time, for every side.
    model.visit(&mut Materialize);
    model
}

/// A loader of digit batches.
type Loader = Arc<dyn DataLoader<DigitBatch>>;

/// ember's side: the Trainer, with its own summaries where asked; how the training went, and
/// the totals of its step reports. Opening or closing the summaries fails the whole run.
fn ember_side(
    args: &ScalingArgs,
    devices: Vec<burn::tensor::Device>,
    (epochs, lr): (usize, f64),
    model: ScalingModel,
    (train, valid): (Loader, Loader),
    job: &crate::job::Job,
) -> anyhow::Result<(anyhow::Result<()>, Option<StepTotals>)> {
    let mut summary = args
        .summaries
        .as_ref()
        .map(SummaryRecord::new)
        .transpose()
        .context("cannot open the summary directory")?;
    let steps = Arc::new(Mutex::new(StepTotals::default()));
    let seen = steps.clone();
    let trainer = Trainer::new(
        devices,
        AdamConfig::new().init(),
        lr,
        TrainerConfig {
            epochs,
            histogram_every: summary.is_some().then_some(50),
            worker_threads: args.worker_threads,
            ..TrainerConfig::default()
        },
    )
    .on_step(move |report| {
        if let Ok(mut steps) = seen.lock() {
            steps.add(report);
        }
    });
    let trainer = job.join(trainer);
    let result = trainer
        .fit(model, train, Some(valid), summary.as_mut())
        .map(drop)
        .map_err(anyhow::Error::from);
    if let Some(mut summary) = summary {
        summary.close()?;
    }
    let totals = steps
        .lock()
        .ok()
        .map(|mut steps| std::mem::take(&mut *steps));
    Ok((result, totals))
}

/// A finished run's figures: its time, its examples per second and, where the Trainer reported
/// its steps, the shares of a step outside the devices, in the reduction and in the optimizer.
fn add_figures(
    line: &mut serde_json::Value,
    seconds: f64,
    examples: usize,
    totals: Option<StepTotals>,
) {
    line["seconds"] = json!(seconds);
    line["examples_per_second"] = json!(examples as f64 / seconds);
    if let Some(totals) = totals.filter(|t| t.steps > 0 && t.step > 0.0) {
        line["steps"] = json!(totals.steps);
        line["step_seconds"] = json!(totals.step);
        line["outside_share"] = json!(1.0 - totals.device / totals.step);
        line["reduce_share"] = json!(totals.reduce / totals.step);
        line["optimizer_share"] = json!(totals.optimizer / totals.step);
    }
}

/// One of burn-train's own strategies, as a Burn user starts it: `SupervisedTraining` with
/// the strategy, launched on a `Learner`. A panic (DDP on a backend without collectives
/// panics) comes back as the error it says.
#[allow(clippy::too_many_arguments)]
fn burn_train(
    side: Side,
    devices: Vec<burn::tensor::Device>,
    args: &ScalingArgs,
    epochs: usize,
    lr: f64,
    model: ScalingModel,
    train: Arc<dyn DataLoader<DigitBatch>>,
    valid: Arc<dyn DataLoader<DigitBatch>>,
) -> anyhow::Result<()> {
    let artifacts =
        tempfile::tempdir().context("cannot make a directory for burn-train's artifacts")?;
    let run = || -> anyhow::Result<()> {
        let strategy = match side {
            Side::BurnSingle => ExecutionStrategy::single(devices[0].clone()),
            Side::BurnMulti => ExecutionStrategy::multi(devices, MultiDeviceOptim::OptimMainDevice),
            Side::BurnSharded => ExecutionStrategy::multi(devices, MultiDeviceOptim::OptimSharded),
            Side::BurnDdp => ExecutionStrategy::ddp(
                devices,
                DistributedConfig {
                    all_reduce_op: ReduceOperation::Mean,
                },
            ),
            Side::Ember => unreachable!("ember is not a burn-train strategy"),
        };
        let training = SupervisedTraining::new(artifacts.path(), train, valid)
            .num_epochs(epochs)
            .with_application_logger(None)
            .with_training_strategy(strategy.into());
        let training = match &args.summaries {
            Some(dir) => training.with_metric_logger(ember::burn_train::SummaryLogger::new(
                SummaryRecord::new(dir).context("cannot open the summary directory")?,
            )),
            None => training.with_metric_logger(NoMetrics),
        };
        let result = training.launch(Learner::new(model, AdamConfig::new().init(), lr));
        drop(result.model);
        Ok(())
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            bail!("{} panicked: {message}", side.name())
        }
    }
}
