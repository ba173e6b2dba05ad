//! The one data-parallel epoch both the [`Trainer`](crate::Trainer) and burn-train's
//! [`PoolStrategy`](crate::burn_train::PoolStrategy) run on a [`DevicePool`].
//!
//! Each epoch gives every device a contiguous slice of the training loader (burn's
//! `split_dataloader`, as burn-train's multi-device strategy does); each step runs one batch per
//! device. Gradients are reduced as they arrive, in device order, into one
//! [`GradientWindow`] on the main device, so accumulating `devices × accumulation` steps holds
//! one reduced gradient set plus the one being added, never all of them; when the window is
//! full (or the epoch ends with a partial one, as burn-train does) the caller's [`Optimize`]
//! steps the model. What to record and report stays with the callers, which see every step's
//! device outputs. A run resumed on other devices keeps the job's slices ([`Cut`]): on fewer,
//! each device runs several a step; on more, each slice's devices run consecutive steps of a
//! window at once (`slices.rs`), handed back to be recorded one by one.
//!
//! Across processes (a [`Ranks`] given), the training loader is first cut into one contiguous
//! shard per rank, and each full window (or a rank's last, partial one) becomes one round
//! that sums every rank's window; each rank then steps the parameters it owns and the ranks
//! gather each other's (ZeRO-1), so every rank holds the same parameters. A rank whose
//! shard is done joins the others' rounds with no gradients until every rank's is, so every
//! rank makes the same sequence of rounds and the epoch ends on all of them at the same round.
//!
//! Validation runs on the main device, batch by batch; a batch the loader fails to give and a
//! panicking inference step are [`ValidationError`]s naming the device and the batch, never
//! skipped and never retried.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::module::{Module, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Device;
use burn::train::{TrainOutput, TrainStep};
use ember_pool::step::StepError;
use ember_pool::step::burn::{BurnStep, GradientWindow, Reduction};
use ember_pool::{DevicePool, PoolOptions, SpawnError};

use crate::collective::{CollectiveError, Ranks, Round, RoundState};

mod cut;
mod lookahead;
mod slices;
mod validation;

use cut::Cut;
use lookahead::Lookahead;
pub use validation::ValidationError;
pub(crate) use validation::validate;

/// What steps a model with reduced gradients: the Trainer's optimizer and scheduler, or
/// burn-train's `Learner`.
pub(crate) trait Optimize<M> {
    /// The model the next step runs (a cheap handle copy for Burn modules).
    fn model(&self) -> M;
    /// Steps the optimizer with `grads`, reduced over the window; returns the learning rate
    /// used.
    fn step(&mut self, grads: GradientsParams) -> f64;
    /// Whether the next step across ranks needs every parameter's gradient, not only those
    /// of the parameters this rank steps.
    fn wants_every_gradient(&self) -> bool;
    /// Across ranks: steps the parameters this rank owns with `grads` (the reduced gradients
    /// of those, or of every parameter when [`Optimize::wants_every_gradient`]), then gathers
    /// every rank's stepped parameters ([`Ranks::gather_parameters`]); returns the learning
    /// rate used.
    fn step_shared(
        &mut self,
        grads: GradientsParams,
        ranks: &mut Ranks,
    ) -> Result<f64, CollectiveError>;
}

/// One device's part of a step.
pub(crate) struct DeviceItem<O> {
    /// The device's public index.
    pub(crate) device: usize,
    /// Which of the step's job steps it ran (0 unless the step spread a slice's batches
    /// over several devices).
    pub(crate) substep: usize,
    /// Its step's wall time.
    pub(crate) elapsed: Duration,
    /// The train step's output item (loss, predictions, ...).
    pub(crate) item: O,
}

/// A step that ran on the pool: one step of the job, or several at once where a slice's
/// batches were spread over several devices ([`StepDone::into_job_steps`] parts them).
pub(crate) struct StepDone<O> {
    /// The step within the epoch, from 1: the last of those it ran.
    pub(crate) step: usize,
    /// The job steps it ran.
    pub(crate) steps: usize,
    /// Every device's output, in device order.
    pub(crate) items: Vec<DeviceItem<O>>,
    /// The learning rate, when this step closed an accumulation window and the model stepped.
    pub(crate) learning_rate: Option<f64>,
    /// Where the step's wall time went on the calling thread.
    pub(crate) timing: StepTiming,
}

/// Where one step's wall time went on the calling thread: waiting for the devices (from the
/// first batch sent to the last answer), adding their gradients into the window, and the
/// round across ranks with the optimizer step, when the window closed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StepTiming {
    /// Pulling batches, sending them and waiting for every device's answer.
    pub(crate) devices: Duration,
    /// Moving the devices' gradients to the main device and adding them up.
    pub(crate) reduce: Duration,
    /// The round across ranks (if any) and the optimizer step (if the window closed).
    pub(crate) optimize: Duration,
}

/// A training step that failed, with where.
#[derive(Debug)]
pub(crate) struct StepFailure {
    /// The step within the epoch, from 1.
    pub(crate) step: usize,
    /// What failed.
    pub(crate) source: StepFailureSource,
}

/// What failed in a step.
#[derive(Debug)]
pub(crate) enum StepFailureSource {
    /// One or more of this process's devices.
    Devices(StepError),
    /// Another rank, or the round across ranks.
    Ranks(CollectiveError),
}

/// The pool and the per-device loaders of a run.
pub(crate) struct Driver<M: TrainStep + Module + 'static>
where
    M::Input: Send + 'static,
    TrainOutput<M::Output>: Send,
{
    pool: DevicePool<BurnStep<M>>,
    /// The job's training data, every rank's, which `loaders` cut.
    train: Arc<dyn DataLoader<M::Input>>,
    /// How `train` is cut into this process's slices and spread over its devices.
    cut: Cut,
    /// One slice of `train` per shard of the data this process runs, cut at their first use
    /// (see [`Cut`]).
    loaders: Vec<Arc<dyn DataLoader<M::Input>>>,
    devices: Vec<Device>,
    main: Device,
    reduction: Reduction,
    accumulation: usize,
}

impl<M> Driver<M>
where
    M: TrainStep + Module + 'static,
    M::Input: Send + 'static,
    TrainOutput<M::Output>: Send,
{
    /// A pool on `devices` (the first is the main device) and the training loader split
    /// between them. `accumulation` is clamped to at least 1.
    pub(crate) fn new(
        devices: &[Device],
        train: Arc<dyn DataLoader<M::Input>>,
        ranks: Option<&Ranks>,
        options: PoolOptions,
        max_abandoned_workers: Option<usize>,
        reduction: Reduction,
        accumulation: usize,
    ) -> Result<Option<Self>, SpawnError> {
        let Some(main) = devices.first().cloned() else {
            return Ok(None);
        };
        let pool = DevicePool::new(devices.to_vec(), options)?
            .with_max_abandoned_workers(max_abandoned_workers);
        let (rank, world) = ranks.map_or((0, 1), |ranks| (ranks.rank(), ranks.size()));
        Ok(Some(Self {
            pool,
            train,
            cut: Cut {
                in_ranks: ranks.is_some(),
                data_ranks: world,
                rank,
                world,
                slices: devices.len(),
                spread: 1,
            },
            loaders: Vec::new(),
            devices: devices.to_vec(),
            main,
            reduction,
            accumulation: accumulation.max(1),
        }))
    }

    /// How many slices each rank shard of the data is split into (one per device, unless
    /// resharded).
    pub(crate) fn shards(&self) -> usize {
        self.cut.slices
    }

    /// Cuts the data as a job of `data_ranks` ranks on `shards` devices each did, to go on
    /// with it as rank `rank` of `world` on these devices: this rank runs the rank shards of
    /// `data_ranks / world` of those ranks, each split into `shards` slices. Each step then
    /// runs every slice's batch, `devices` at a time (slice `k` on device `k % devices`), and
    /// sums their gradients in slice order, so a step trains on the batches and sums the
    /// gradients that step did on the job's devices. With more devices than slices, each
    /// slice's next batches go one to each of its devices instead (see [`Cut`]): the device
    /// count is then a multiple of the slices'. Before the first epoch is begun.
    pub(crate) fn reshard(
        &mut self,
        shards: usize,
        (data_ranks, rank, world): (usize, usize, usize),
    ) {
        let mut cut = Cut {
            in_ranks: self.cut.in_ranks || data_ranks > 1,
            data_ranks: data_ranks.max(1),
            rank,
            world: world.max(1),
            slices: shards.max(1),
            spread: 1,
        };
        cut.spread = cut.spread_over(self.devices.len());
        self.cut = cut;
        self.loaders.clear();
    }

    /// The devices each slice's batches are spread over: more than 1 when this process has
    /// more devices than slices, each then running one of a slice's consecutive batches, as
    /// many steps of the job at once.
    pub(crate) fn spread(&self) -> usize {
        self.cut.spread
    }

    /// Two devices (public indices) that share a slice's batches, spread over them, yet are
    /// not the same device: a batch is drawn on the first, where the other cannot read it.
    pub(crate) fn spread_apart(&self) -> Option<(usize, usize)> {
        let spread = self.cut.spread;
        (spread > 1).then_some(())?;
        self.devices
            .chunks(spread)
            .enumerate()
            .find_map(|(slice, devices)| {
                let other = devices.iter().position(|device| *device != devices[0])?;
                Some((slice * spread, slice * spread + other))
            })
    }

    /// The slices this process runs, cut at the first call.
    fn loaders(&mut self) -> &[Arc<dyn DataLoader<M::Input>>] {
        if self.loaders.is_empty() {
            self.loaders = self.cut.slices_of(&self.train, &self.devices);
        }
        &self.loaders
    }

    /// How many devices the pool runs on.
    pub(crate) fn devices(&self) -> usize {
        self.devices.len()
    }

    /// The main device.
    pub(crate) fn main(&self) -> &Device {
        &self.main
    }

    /// Begins `epochs` epochs on every device's slice without drawing a batch, as a resumed
    /// run does for the epochs before its checkpoint: each begin shuffles a shuffling loader
    /// once, advancing its generator as the epoch did.
    pub(crate) fn begin_epochs(&mut self, epochs: usize) {
        for loader in self.loaders() {
            for _ in 0..epochs {
                drop(loader.iter());
            }
        }
    }

    /// Starts an epoch: a fresh iterator on every device's slice. With `ranks`, windows are
    /// reduced across every rank. Without, the gradients of the parameters in `homes` are
    /// summed on the device given there (where an optimizer split by device steps them).
    pub(crate) fn epoch<'d>(
        &'d mut self,
        ranks: Option<&'d mut Ranks>,
        homes: HashMap<ParamId, Device>,
    ) -> Epoch<'d, M> {
        // The pool skips sources it saw run dry; a run that left the last epoch early (a stop)
        // must not carry that over.
        self.pool.new_epoch();
        self.loaders();
        let sources = self
            .loaders
            .iter()
            .map(|loader| Lookahead::new(loader.iter()))
            .collect();
        // One window for each rank shard this process runs, added up as the ranks' all-reduce
        // added theirs. A round across ranks sums each as it is, on its main device.
        let in_ranks = ranks.is_some();
        let windows = (0..self.cut.rank_shards())
            .map(|_| {
                let mut window = GradientWindow::new(self.reduction);
                if !in_ranks {
                    window.set_homes(homes.clone());
                }
                window
            })
            .collect();
        Epoch {
            devices: self.devices.len(),
            spread: self.cut.spread,
            pool: &mut self.pool,
            sources,
            main: &self.main,
            windows,
            window_steps: 0,
            accumulation: self.accumulation,
            step: 0,
            ranks,
            shard_done: false,
            ended: false,
            stopped_by_peer: false,
            stop_asked: false,
        }
    }
}

/// One training epoch in progress; see the module docs.
pub(crate) struct Epoch<'d, M: TrainStep + Module + 'static>
where
    M::Input: Send + 'static,
    TrainOutput<M::Output>: Send,
{
    pool: &'d mut DevicePool<BurnStep<M>>,
    /// One per shard of the data; the pool runs `devices` of them at a time.
    sources: Vec<Lookahead<'d, M::Input>>,
    devices: usize,
    /// The devices each source's batches are spread over, one batch each (see [`Cut`]).
    spread: usize,
    main: &'d Device,
    /// The accumulation window: one for each rank shard of the data this process runs
    /// across ranks (see [`Ranks::round`]), one otherwise.
    windows: Vec<GradientWindow<M>>,
    window_steps: usize,
    accumulation: usize,
    step: usize,
    ranks: Option<&'d mut Ranks>,
    /// This rank's shard gave its last batch.
    shard_done: bool,
    /// A round ended the epoch on every rank; nothing is left to reduce.
    ended: bool,
    /// Another rank was asked to stop.
    stopped_by_peer: bool,
    /// This rank was asked to stop: its next round tells every rank.
    stop_asked: bool,
}

impl<M> Epoch<'_, M>
where
    M: TrainStep + Module + 'static,
    M::Input: Send + 'static,
    TrainOutput<M::Output>: Send,
{
    /// The progress of every device's slice together.
    pub(crate) fn progress(&self) -> Progress {
        Progress::aggregate(self.sources.iter().map(|source| source.progress()))
    }

    /// Draws and drops the first `steps` batches of every device's slice, which a resumed
    /// run trained on before its checkpoint; the next step is then step `steps + 1`. Returns
    /// the steps the longest slice holds when that is fewer than `steps` (a checkpoint of
    /// other data), having skipped none of the rest.
    pub(crate) fn skip(&mut self, steps: usize) -> Result<(), usize> {
        let mut longest = 0;
        for source in &mut self.sources {
            let mut skipped = 0;
            while skipped < steps && source.next().is_some() {
                skipped += 1;
            }
            longest = longest.max(skipped);
        }
        if longest < steps {
            return Err(longest);
        }
        self.step += steps;
        Ok(())
    }

    /// Pool steps of this epoch taken so far (skipped ones included).
    pub(crate) fn steps_taken(&self) -> usize {
        self.step
    }

    /// Whether a device's slice holds another batch: whether the step just taken was not the
    /// epoch's last. The next batch is drawn for this, and kept for the step that trains on it.
    pub(crate) fn has_next(&mut self) -> bool {
        self.sources.iter_mut().any(Lookahead::has_next)
    }

    /// Whether no gradients wait in the accumulation window: a checkpoint may be taken.
    pub(crate) fn window_is_empty(&self) -> bool {
        self.window_steps == 0
    }

    /// Whether the epoch ended because another rank was asked to stop: the run stops too.
    pub(crate) fn stopped_by_peer(&self) -> bool {
        self.stopped_by_peer
    }

    /// Across ranks: whether a round ended the epoch on every rank (every shard done, or a
    /// stop); no round follows it in this epoch.
    pub(crate) fn rounds_over(&self) -> bool {
        self.ended
    }

    /// Across ranks: asks every rank to stop. The rank goes on to the end of its window (the
    /// others are computing theirs), and that window's round, which carries the stop, is the
    /// epoch's last on every rank: all end at the same optimizer step, with nothing left in a
    /// window, where each may checkpoint.
    pub(crate) fn ask_stop(&mut self) {
        self.stop_asked = true;
    }

    /// The rounds across ranks this epoch runs, for a round of the job's own (a checkpoint's).
    pub(crate) fn ranks(&mut self) -> Option<&mut Ranks> {
        self.ranks.as_deref_mut()
    }

    /// Runs the next step on every device that still has a batch, adds their gradients to the
    /// window and steps the model when the window is full. `None` when every slice is done
    /// (on every rank).
    ///
    /// Across ranks, a window's round says whether it held this rank's last batch (drawn
    /// ahead), so the round that uses up the last shard ends the epoch on every rank at once.
    /// A rank whose shard is done joins the others' rounds with nothing; each round that steps
    /// the model comes back as a step without items, so that every rank sees every optimizer
    /// step of the job and all can checkpoint at the same one.
    pub(crate) fn step(
        &mut self,
        optimizer: &mut impl Optimize<M>,
    ) -> Result<Option<StepDone<M::Output>>, StepFailure> {
        if self.ended {
            return Ok(None);
        }
        if self.shard_done {
            return self.empty_rounds(optimizer);
        }
        self.step += 1;
        let model = optimizer.model();
        let started = Instant::now();
        let ran = if self.spread > 1 {
            self.run_spread(&model)?
        } else {
            self.run_devices(&model)?
        };
        let Some((mut outputs, steps)) = ran else {
            if self.ranks.is_none() {
                return Ok(None);
            }
            self.step -= 1;
            self.shard_done = true;
            return self.step(optimizer);
        };
        self.step += steps - 1;
        let devices_done = Instant::now();
        // Added step after step, each step's slices in order, as the job added them.
        outputs.sort_by_key(|(slice, substep, _)| (*substep, *slice));
        let mut items = Vec::with_capacity(outputs.len());
        let slices_per_window = self.sources.len().div_ceil(self.windows.len());
        for (slice, substep, output) in outputs {
            let window = &mut self.windows[slice / slices_per_window];
            window.add(output.output.grads, self.main, &model);
            items.push(DeviceItem {
                device: output.device,
                substep,
                elapsed: output.elapsed,
                item: output.output.item,
            });
        }
        self.window_steps += steps;
        let reduced = Instant::now();
        let learning_rate = if self.ranks.is_some() {
            let last = !self.has_next();
            self.shard_done = last;
            if self.window_steps >= self.accumulation || last {
                let stop = self.stop_asked;
                self.round(optimizer, RoundState { done: last, stop })?
            } else {
                None
            }
        } else if self.window_steps >= self.accumulation {
            self.window_steps = 0;
            Some(optimizer.step(self.take_windows(&model)))
        } else {
            None
        };
        Ok(Some(StepDone {
            step: self.step,
            steps,
            items,
            learning_rate,
            timing: StepTiming {
                devices: devices_done - started,
                reduce: reduced - devices_done,
                optimize: reduced.elapsed(),
            },
        }))
    }

    /// Rounds with nothing of this rank's, its shard done, until one steps the model (a step
    /// without items) or the epoch ends on every rank (`None`).
    fn empty_rounds(
        &mut self,
        optimizer: &mut impl Optimize<M>,
    ) -> Result<Option<StepDone<M::Output>>, StepFailure> {
        while !self.ended {
            let started = Instant::now();
            let state = RoundState {
                done: true,
                stop: self.stop_asked,
            };
            if let Some(learning_rate) = self.round(optimizer, state)? {
                return Ok(Some(StepDone {
                    step: self.step,
                    steps: 1,
                    items: Vec::new(),
                    learning_rate: Some(learning_rate),
                    timing: StepTiming {
                        optimize: started.elapsed(),
                        ..StepTiming::default()
                    },
                }));
            }
        }
        Ok(None)
    }

    /// One round across ranks with this rank's window and `state`; steps the model when any
    /// rank had gradients, and returns the learning rate then.
    fn round(
        &mut self,
        optimizer: &mut impl Optimize<M>,
        state: RoundState,
    ) -> Result<Option<f64>, StepFailure> {
        let Some(ranks) = self.ranks.as_deref_mut() else {
            return Ok(None);
        };
        let model = optimizer.model();
        let step = self.step;
        let failed = |source| StepFailure {
            step,
            source: StepFailureSource::Ranks(source),
        };
        let round: Round = ranks
            .round(
                &mut self.windows,
                &model,
                state,
                optimizer.wants_every_gradient(),
            )
            .map_err(failed)?;
        self.window_steps = 0;
        if round.all_done || round.stopped {
            self.ended = true;
            self.stopped_by_peer = round.stopped && !state.stop;
        }
        round
            .gradients
            .map(|grads| optimizer.step_shared(grads, ranks))
            .transpose()
            .map_err(failed)
    }

    /// Ends the epoch: a partial accumulation window still steps the model, as burn-train
    /// does. Returns the learning rate when it did. Across ranks, an epoch left early (a stop)
    /// tells the other ranks in one last round, which ends the epoch on every rank.
    pub(crate) fn finish(
        mut self,
        optimizer: &mut impl Optimize<M>,
    ) -> Result<Option<f64>, StepFailure> {
        if self.ranks.is_some() {
            if self.ended {
                return Ok(None);
            }
            return self.round(
                optimizer,
                RoundState {
                    done: true,
                    stop: true,
                },
            );
        }
        if self.windows.iter().all(GradientWindow::is_empty) {
            return Ok(None);
        }
        let model = optimizer.model();
        Ok(Some(optimizer.step(self.take_windows(&model))))
    }

    /// The reduced gradients of every window, emptied: each window's sum added in order, as
    /// the ranks' all-reduce adds them, then reduced.
    fn take_windows(&mut self, model: &M) -> GradientsParams {
        let (first, others) = self.windows.split_at_mut(1);
        for window in others {
            let (sum, count) = window.take_sum();
            first[0].add_sum(sum, count, self.main, model);
        }
        first[0].take(model)
    }
}
