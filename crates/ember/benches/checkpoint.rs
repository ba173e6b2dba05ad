//! What a Trainer checkpoint costs.
//!
//! 1. One checkpoint of `ember train`'s digits model (a 64-64-10 MLP) and of a 10 M-parameter
//!    MLP (64-3136-3136-10), each with Adam's state after a step, taken as the Trainer takes
//!    it: the model and optimizer as Burn shares them and the scheduler's record, on the
//!    training thread (what holds training up), beside the copy out of Burn the training
//!    thread made before; the next Adam step with that snapshot held and with none; then read
//!    out of Burn, into bytes, written whole, fsynced and renamed, the directory fsynced (what
//!    the checkpoint thread does while training goes on). Median and range of several rounds,
//!    with the file's bytes.
//! 2. The Trainer's step time with a checkpoint every 50 optimizer steps (`ember train`'s
//!    default) and at the epoch's end, against none: the run of `overhead_paired` (200 steps on
//!    2 workers), in pairs whose order alternates; the median ratio with its quartiles. And a
//!    checkpoint after every step of a run whose steps take 10 ms or more, against none
//!    (CheckFreq's measure: at most 3.5% for checkpoints every iteration).
//! 3. With the `object-store` feature and `EMBER_BENCH_URL=s3://bucket/prefix` (and the store's
//!    `AWS_*` settings): each checkpoint of 1. also PUT into the bucket, the time until the
//!    PUT returns, when the object is whole; and 2. with the log and the checkpoints in the
//!    bucket, where a checkpoint also waits until every record before it is in the bucket; and
//!    the every-step run with its checkpoints in the bucket. `cargo xtask objects --bench` starts a loopback S3 server (moto) and runs it so.
//!
//! `cargo bench -p ember --bench checkpoint [-- PAIRS] [trainer]` (`trainer`: 2. and 3.'s Trainer
//! runs alone)

#[path = "support/stats.rs"]
mod stats;
#[path = "support/trainer_run.rs"]
mod trainer_run;

use std::cell::Cell;
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Bytes, Device, Tensor};
use ember::checkpoint::{Checkpoint, write_durably};
use ember::{CheckpointConfig, SummaryRecord};
use stats::quantile;
use trainer_run::{SMALL, Size, run_reported};

/// An MLP of the given widths, ReLU between layers.
#[derive(Module, Debug)]
struct Mlp {
    layers: Vec<Linear>,
    act: Relu,
}

impl Mlp {
    fn new(widths: &[usize], device: &Device) -> Self {
        Self {
            layers: widths
                .windows(2)
                .map(|w| LinearConfig::new(w[0], w[1]).init(device))
                .collect(),
            act: Relu::new(),
        }
    }

    fn forward(&self, mut x: Tensor<2>) -> Tensor<2> {
        for (i, layer) in self.layers.iter().enumerate() {
            if i > 0 {
                x = self.act.forward(x);
            }
            x = layer.forward(x);
        }
        x
    }
}

fn median(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

/// One Adam step of `model` on a batch of ones.
fn adam_step(model: Mlp, optimizer: &mut ModuleOptimizer, device: &Device) -> Mlp {
    let x = Tensor::<2>::ones([8, 64], device);
    let loss = model.forward(x).sum();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    optimizer.step(1e-3, model, grads)
}

/// [`adam_step`], its time pushed onto `times`.
fn timed_step(
    model: Mlp,
    optimizer: &mut ModuleOptimizer,
    device: &Device,
    times: &mut Vec<f64>,
) -> Mlp {
    let started = Instant::now();
    let model = adam_step(model, optimizer, device);
    times.push(ms(started));
    model
}

/// Milliseconds since `started`.
fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

/// Checkpoint rounds of `model`, each after an Adam step, side by side in each round:
///
/// - *snapshot*: what the Trainer's training thread does now: the model and the optimizer
///   taken as Burn shares them (clones of their tensors), the scheduler's record;
/// - *copy*: what it did before, and what the checkpoint thread now does first: the state read
///   out of Burn into records (`into_record`, `to_record`: a copy of every tensor's bytes);
/// - the next Adam step with the snapshot still held (the checkpoint thread still reading it)
///   against one with none held, in alternating order: what sharing costs the steps after it;
/// - the checkpoint thread's whole part: the records, into bytes, written, fsynced, renamed;
///   and, given one, the same bytes whole into `bucket`.
fn checkpoint_cost(name: &str, mut model: Mlp, rounds: usize, bucket: Option<&Store>) {
    let device = Device::flex().autodiff();
    let mut optimizer = AdamConfig::new().init();
    let mut scheduler = ModuleLrScheduler::from(1e-3);
    model = adam_step(model, &mut optimizer, &device);
    let _ = scheduler.step();
    let parameters = model.num_params();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut figures: [Vec<f64>; 8] = Default::default();
    let [
        snapshots,
        copies,
        held,
        beside,
        free,
        writes,
        beside_writes,
        puts,
    ] = &mut figures;
    let mut bytes = 0;
    for round in 0..rounds {
        let started = Instant::now();
        let copied = (model.clone().into_record(), optimizer.to_record());
        copies.push(ms(started));
        drop(copied);

        // The next step three ways, in rotating order: with the snapshot held all through it
        // (the checkpoint thread's part after it, on this thread), with the checkpoint thread
        // reading and writing the snapshot beside it (as in the Trainer), and with none.
        for way in 0..3 {
            match (round + way) % 3 {
                0 => {
                    let snapshot = snapshot_of(&model, &optimizer, &scheduler, snapshots);
                    model = timed_step(model, &mut optimizer, &device, held);
                    let (checkpoint, converted) = checkpoint_of(snapshot);
                    let written = (&checkpoint, converted);
                    bytes = write_one(dir.path(), round, written, bucket, (writes, puts));
                }
                1 => {
                    let snapshot = snapshot_of(&model, &optimizer, &scheduler, snapshots);
                    let path = dir.path().to_path_buf();
                    let thread = std::thread::spawn(move || {
                        let started = Instant::now();
                        let (checkpoint, _) = checkpoint_of(snapshot);
                        let file =
                            write_durably(&path, &format!("beside-{round}.ember"), &checkpoint)
                                .expect("checkpoint written");
                        std::fs::remove_file(file).expect("checkpoint removed");
                        ms(started)
                    });
                    model = timed_step(model, &mut optimizer, &device, beside);
                    beside_writes.push(thread.join().expect("checkpoint thread"));
                }
                _ => model = timed_step(model, &mut optimizer, &device, free),
            }
        }
    }
    let figure = |xs: &[f64]| {
        let (median, min, max) = median(xs.to_vec());
        format!("{median:.2} ms ({min:.2}-{max:.2})")
    };
    println!(
        "{name}: {parameters} parameters, checkpoint {bytes} bytes; training thread: snapshot \
         {}, copy as before {}; the next Adam step: with the checkpoint thread beside it {}, \
         with the snapshot held all through it {}, with no checkpoint {}; checkpoint thread \
         (read out, into bytes, written and fsynced) alone {}, beside the step {}; median \
         (min-max) of {rounds}",
        figure(snapshots),
        figure(copies),
        figure(beside),
        figure(held),
        figure(free),
        figure(writes),
        figure(beside_writes),
    );
    if !puts.is_empty() {
        println!(
            "{name}: the same checkpoint into bytes and whole in the bucket (one PUT returned) \
             {}, {:.1}x the local disk; median (min-max) of {rounds}",
            figure(puts),
            median(puts.clone()).0 / median(writes.clone()).0
        );
    }
}

/// What the Trainer's training thread takes at a checkpoint: the model and the optimizer as
/// Burn shares them, the scheduler's record; its time pushed onto `times`.
fn snapshot_of(
    model: &Mlp,
    optimizer: &ModuleOptimizer,
    scheduler: &ModuleLrScheduler,
    times: &mut Vec<f64>,
) -> Snapshot {
    let started = Instant::now();
    let snapshot = (model.clone(), optimizer.clone(), scheduler.to_record());
    times.push(ms(started));
    snapshot
}

/// A checkpoint's state as the training thread takes it.
type Snapshot = (Mlp, ModuleOptimizer, LrSchedulerRecord);

/// The checkpoint thread's first part: the snapshot read out of Burn and into bytes; with its
/// milliseconds.
fn checkpoint_of((model, optimizer, scheduler): Snapshot) -> (Checkpoint, f64) {
    let started = Instant::now();
    let vec = |b: Bytes| b.try_into_vec::<u8>().unwrap_or_else(|b| b.to_vec());
    let model = model.into_record();
    let optimizer = optimizer.to_record();
    let checkpoint = Checkpoint::new()
        .with("model", vec(model.into_bytes().expect("model bytes")))
        .with(
            "optimizer",
            vec(optimizer.into_bytes().expect("optimizer bytes")),
        )
        .with(
            "scheduler",
            vec(scheduler.into_bytes().expect("scheduler bytes")),
        );
    (checkpoint, ms(started))
}

/// Writes `checkpoint` durably and, given a bucket, whole into it; each time, with the
/// `converted` milliseconds it took to make, pushed onto `writes` and `puts`.
fn write_one(
    dir: &std::path::Path,
    round: usize,
    (checkpoint, converted): (&Checkpoint, f64),
    bucket: Option<&Store>,
    (writes, puts): (&mut Vec<f64>, &mut Vec<f64>),
) -> u64 {
    let started = Instant::now();
    let path =
        write_durably(dir, &format!("ckpt-{round}.ember"), checkpoint).expect("checkpoint written");
    writes.push(converted + ms(started));
    if let Some(bucket) = bucket {
        puts.push(converted + put_whole(bucket, round, checkpoint) * 1e3);
    }
    let bytes = std::fs::metadata(&path).expect("checkpoint size").len();
    std::fs::remove_file(&path).expect("checkpoint removed");
    bytes
}

fn main() {
    let pairs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(40);
    // `trainer`: the Trainer runs (2.) alone.
    let trainer_only = std::env::args().any(|a| a == "trainer");
    let device = Device::flex().autodiff();
    let bucket = bucket();
    if !trainer_only {
        checkpoint_cost(
            "digits MLP 64-64-10",
            Mlp::new(&[64, 64, 10], &device),
            50,
            bucket.as_ref(),
        );
        checkpoint_cost(
            "MLP 64-3136-3136-10",
            Mlp::new(&[64, 3136, 3136, 10], &device),
            7,
            bucket.as_ref(),
        );
    }
    if let Some(bucket) = &bucket {
        in_the_bucket(pairs, bucket);
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let checkpoints = dir.path().join("checkpoints");
    let every = |n| {
        let checkpoints = checkpoints.clone();
        move || fresh_checkpoints(checkpoints.clone(), n)
    };
    paired(pairs, "no summaries", None, (SMALL, 50), every(50));
    let mut summary = SummaryRecord::new(dir.path().join("log")).expect("summary record");
    paired(
        pairs,
        "summaries recorded",
        Some(&mut summary),
        (SMALL, 50),
        every(50),
    );
    summary.close().expect("summaries close");
    paired(pairs, "no summaries", None, (EVERY_STEP, 1), every(1));
    if let Some(bucket) = &bucket {
        every_step_in_the_bucket(pairs, bucket);
    }
}

/// Checkpoints every `every` optimizer steps in `dir`, emptied first: a fresh run is not
/// admitted where another run left its checkpoints.
fn fresh_checkpoints(dir: std::path::PathBuf, every: usize) -> Option<CheckpointConfig> {
    ember::checkpoint::Checkpoints::new(&dir, 1)
        .remove_all()
        .expect("the last run's checkpoints removed");
    Some(CheckpointConfig::new(dir, every))
}

/// Steps of 10 ms or more (2 devices of 1,024 rows through a 2-1024-1 MLP, SGD's state of 3,073
/// parameters): the run CheckFreq's figure is for, a checkpoint after every step.
const EVERY_STEP: Size = Size {
    steps: 100,
    batch: 1024,
    hidden: 1024,
};

/// The Trainer run of `size` with `checkpoints` (made fresh for each run) against none,
/// `pairs` times in alternating order after 2 pairs to warm up; prints the median ratio, its
/// quartiles, the totals and the cost a checkpoint.
fn paired(
    pairs: usize,
    what: &str,
    mut summary: Option<&mut SummaryRecord>,
    (size, every): (Size, usize),
    checkpoints: impl Fn() -> Option<CheckpointConfig>,
) {
    let (stall, end_wait) = (Cell::new(Duration::ZERO), Cell::new(Duration::ZERO));
    let queued = Cell::new(Duration::ZERO);
    let mut run = |on: bool| {
        let (took, report) = run_reported(
            summary.as_deref_mut(),
            on.then(&checkpoints).flatten(),
            size,
        );
        stall.set(stall.get() + report.checkpoint_stall);
        queued.set(queued.get() + report.checkpoint_queue_wait);
        end_wait.set(end_wait.get() + report.checkpoint_end_wait);
        took
    };
    for _ in 0..2 {
        run(false);
        run(true);
    }
    stall.set(Duration::ZERO);
    end_wait.set(Duration::ZERO);
    queued.set(Duration::ZERO);
    let mut ratios = Vec::with_capacity(pairs);
    let (mut off_total, mut on_total) = (Duration::ZERO, Duration::ZERO);
    for pair in 0..pairs {
        let (off, on) = if pair % 2 == 0 {
            let off = run(false);
            (off, run(true))
        } else {
            let on = run(true);
            (run(false), on)
        };
        off_total += off;
        on_total += on;
        ratios.push(on.as_secs_f64() / off.as_secs_f64());
    }
    let (stall, end_wait, queued) = (stall.get(), end_wait.get(), queued.get());
    ratios.sort_by(f64::total_cmp);
    // Every `every` steps, and at the epoch's end unless a step's checkpoint is there already.
    let per_run = size.steps / every + usize::from(size.steps % every != 0) + 1;
    println!(
        "Trainer, {} steps on 2 workers, {what}, checkpoints every {every} optimizer step(s) \
         and at the epoch's end ({per_run} a run) vs none, {pairs} pairs: on/off median {:.3} \
         (quartiles {:.3}-{:.3}); totals off {:.1} ms ({:.2} ms a step), on {:.1} ms ({:.3}), \
         {:.2} ms a checkpoint; the training thread held up {:.2} ms a checkpoint while it \
         trained ({:.2} ms taking it, {:.2} ms waiting for older ones to be written), and \
         {:.1} ms a run at its end for the last to be written",
        size.steps,
        quantile(&ratios, 0.5),
        quantile(&ratios, 0.25),
        quantile(&ratios, 0.75),
        off_total.as_secs_f64() * 1e3,
        off_total.as_secs_f64() * 1e3 / (pairs * size.steps) as f64,
        on_total.as_secs_f64() * 1e3,
        on_total.as_secs_f64() / off_total.as_secs_f64(),
        (on_total.as_secs_f64() - off_total.as_secs_f64()) * 1e3 / (pairs * per_run) as f64,
        stall.as_secs_f64() * 1e3 / (pairs * per_run) as f64,
        stall.saturating_sub(queued).as_secs_f64() * 1e3 / (pairs * per_run) as f64,
        queued.as_secs_f64() * 1e3 / (pairs * per_run) as f64,
        end_wait.as_secs_f64() * 1e3 / pairs as f64
    );
}

/// Where bucket checkpoints go: the bucket and its URL.
#[cfg(feature = "object-store")]
struct Store {
    bucket: ember::Bucket,
    url: String,
}

#[cfg(not(feature = "object-store"))]
enum Store {}

/// The bucket `EMBER_BENCH_URL` names, with the `object-store` feature; `None` otherwise.
fn bucket() -> Option<Store> {
    let url = std::env::var("EMBER_BENCH_URL").ok()?;
    #[cfg(feature = "object-store")]
    {
        let url = format!("{}/checkpoint-bench", url.trim_end_matches('/'));
        let bucket = ember::Bucket::open(&url).expect("the bench's bucket opens");
        Some(Store { bucket, url })
    }
    #[cfg(not(feature = "object-store"))]
    {
        println!("checkpoint: {url} needs the object-store feature; the bucket side is left out");
        None
    }
}

/// Seconds until `checkpoint`, turned into bytes, is whole in the bucket: one PUT, which a
/// store takes whole or not at all.
fn put_whole(bucket: &Store, round: usize, checkpoint: &Checkpoint) -> f64 {
    #[cfg(feature = "object-store")]
    {
        let started = Instant::now();
        let name = format!("ckpt-{round}.ember");
        bucket
            .bucket
            .put(&name, checkpoint.encode())
            .expect("checkpoint PUT");
        let whole = started.elapsed().as_secs_f64();
        bucket.bucket.delete(&name).expect("checkpoint removed");
        whole
    }
    #[cfg(not(feature = "object-store"))]
    {
        let _ = (round, checkpoint);
        match *bucket {}
    }
}

/// The Trainer run with its log and its checkpoints in the bucket, checkpoints every 50
/// optimizer steps against none, as [`paired`] does locally.
fn in_the_bucket(pairs: usize, bucket: &Store) {
    #[cfg(feature = "object-store")]
    {
        let mut summary = SummaryRecord::new(format!("{}/log", bucket.url))
            .expect("summary record in the bucket");
        let every_50 = || fresh_checkpoints(format!("{}/checkpoints", bucket.url).into(), 50);
        paired(
            pairs,
            "summaries and checkpoints in the bucket",
            Some(&mut summary),
            (SMALL, 50),
            every_50,
        );
        summary.close().expect("summaries close");
    }
    #[cfg(not(feature = "object-store"))]
    let _ = (pairs, bucket);
}

/// [`EVERY_STEP`]'s run with its checkpoints in the bucket, beside the local figure.
fn every_step_in_the_bucket(pairs: usize, bucket: &Store) {
    #[cfg(feature = "object-store")]
    {
        let every_step = || fresh_checkpoints(format!("{}/every-step", bucket.url).into(), 1);
        paired(
            pairs,
            "checkpoints in the bucket",
            None,
            (EVERY_STEP, 1),
            every_step,
        );
    }
    #[cfg(not(feature = "object-store"))]
    let _ = (pairs, bucket);
}
