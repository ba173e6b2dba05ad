//! The Trainer run both logging-overhead benchmarks time, with summaries off and on.

use std::time::{Duration, Instant};

use burn::optim::SgdConfig;
use burn::tensor::Device;
use ember::{CheckpointConfig, SummaryRecord, Trainer, TrainerConfig};
use ember_tests::{Mlp, regression_loader};

/// 200 steps of 2 devices x 128 rows through a 2-512-1 MLP: steps of about a millisecond, the
/// small end of real training. (With 2-64-1 and 16 rows, steps of ~0.1 ms, the summary record's
/// fixed cost of about 1 ms for creating and closing files alone is 4% of the run.)
const BATCH: usize = 128;
const ROWS: usize = 200 * 2 * BATCH;
const HIDDEN: usize = 512;

/// One training run, scalars every step and histograms every 50 optimizer steps; with
/// `summary`, recording into it. Returns the run's wall time.
#[allow(dead_code)]
pub(crate) fn run(summary: Option<&mut SummaryRecord>) -> Duration {
    run_with(summary, None)
}

/// The size of a benchmark run: steps of `batch` rows a device through a 2-`hidden`-1 MLP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Size {
    pub(crate) steps: usize,
    pub(crate) batch: usize,
    pub(crate) hidden: usize,
}

/// The logging-overhead benchmarks' run: 200 steps of about a millisecond.
pub(crate) const SMALL: Size = Size {
    steps: ROWS / (2 * BATCH),
    batch: BATCH,
    hidden: HIDDEN,
};

/// [`run`], writing checkpoints as `checkpoints` says.
pub(crate) fn run_with(
    summary: Option<&mut SummaryRecord>,
    checkpoints: Option<CheckpointConfig>,
) -> Duration {
    run_sized(summary, checkpoints, SMALL)
}

/// [`run_with`] of `size`.
pub(crate) fn run_sized(
    summary: Option<&mut SummaryRecord>,
    checkpoints: Option<CheckpointConfig>,
    size: Size,
) -> Duration {
    run_reported(summary, checkpoints, size).0
}

/// [`run_sized`], with the run's report.
pub(crate) fn run_reported(
    summary: Option<&mut SummaryRecord>,
    checkpoints: Option<CheckpointConfig>,
    size: Size,
) -> (Duration, ember::TrainReport) {
    let device = Device::flex().autodiff();
    let train = regression_loader(11, size.steps * 2 * size.batch, size.batch, &device);
    let trainer = Trainer::<Mlp>::new(
        vec![device.clone(), device.clone()],
        SgdConfig::new().init(),
        0.01,
        TrainerConfig {
            epochs: 1,
            histogram_every: Some(50),
            checkpoints,
            ..TrainerConfig::default()
        },
    );
    let model = Mlp::new(size.hidden, &device);
    let started = Instant::now();
    let (_, report) = trainer
        .fit(model, train, None, summary)
        .expect("training runs");
    (started.elapsed(), report)
}
