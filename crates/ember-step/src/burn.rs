//! Burn adapters: burn-train models, burn data-loader iterators, and gradient reduction.
//!
//! - [`BurnStep`] wraps any burn-train model (a `TrainStep` module, which every `LearnerModel`
//!   is) as a [`StepModel`] whose output is burn's `TrainOutput`.
//! - Burn's `DataLoaderIterator` is a [`BatchSource`], so `loader.iter()` plugs in as it is.
//! - [`reduce_gradients`] brings every device's `GradientsParams` to the main device and reduces
//!   them by [`Reduction::Mean`] (the default, as data-parallel training elsewhere does) or
//!   [`Reduction::Sum`] (burn-train's multi-device behaviour), in the order given, so that the
//!   pool's device-ordered outputs reduce to the same bits on every run.

use std::collections::HashMap;
use std::marker::PhantomData;

use ::burn::data::dataloader::DataLoaderIterator;
use ::burn::data::dataset::DatasetError;
use ::burn::module::{Module, ModuleVisitor, Param, ParamId};
use ::burn::optim::{GradientsAccumulator, GradientsParams};
use ::burn::tensor::{Device, Tensor};
use ::burn::train::{TrainOutput, TrainStep};

use crate::{BatchSource, Progress, StepModel};

/// A burn-train model as a [`StepModel`]: `fork` is `Module::fork`, `step` is `TrainStep::step`.
#[derive(Debug, Clone)]
pub struct BurnStep<M>(pub M);

impl<M> StepModel for BurnStep<M>
where
    M: TrainStep + Module + 'static,
    M::Input: Send,
    TrainOutput<M::Output>: Send,
{
    type Device = Device;
    type Input = M::Input;
    type Output = TrainOutput<M::Output>;

    fn fork(self, device: &Device) -> Self {
        BurnStep(self.0.fork(device))
    }

    fn step(&self, input: M::Input) -> TrainOutput<M::Output> {
        TrainStep::step(&self.0, input)
    }
}

impl<I> BatchSource<I, DatasetError> for dyn DataLoaderIterator<I> + '_ {
    fn progress(&self) -> Progress {
        let progress = DataLoaderIterator::progress(self);
        Progress::new(progress.items_processed, progress.total)
    }
}

/// How the gradients of several devices combine into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean over devices: with equal batch sizes and a mean loss this is the gradient of the
    /// concatenated batch, so N devices train like one device on N times the batch.
    #[default]
    Mean,
    /// The sum over devices, as burn-train's multi-device strategy does: the effective learning
    /// rate grows with the number of devices.
    Sum,
}

/// Moves every gradient set to `main`, then sums them in the order given and, for
/// [`Reduction::Mean`], divides by their count.
///
/// `model` names the parameters (any copy of the model: parameter ids are shared by forks).
/// Returns empty gradients for an empty input.
pub fn reduce_gradients<M, I>(
    gradients: I,
    main: &Device,
    model: &M,
    reduction: Reduction,
) -> GradientsParams
where
    M: Module,
    I: IntoIterator<Item = GradientsParams>,
{
    let mut window = GradientWindow::new(reduction);
    for grads in gradients {
        window.add(grads, main, model);
    }
    window.take(model)
}

/// Gradients reduced as they arrive: each set is moved to the main device and added to one
/// running sum at once, so a window of `devices × accumulation steps` sets holds one reduced set
/// (plus the one being added), not all of them. Adding in the pool's device order, step after
/// step, gives the same bits as [`reduce_gradients`] over the same sets.
pub struct GradientWindow<M: Module> {
    sum: GradientsAccumulator<M>,
    count: usize,
    reduction: Reduction,
    /// Parameters whose gradients are summed on a device other than the main one.
    homes: HashMap<ParamId, Device>,
}

impl<M: Module> std::fmt::Debug for GradientWindow<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradientWindow")
            .field("count", &self.count)
            .field("reduction", &self.reduction)
            .finish()
    }
}

impl<M: Module> GradientWindow<M> {
    /// An empty window reducing by `reduction`.
    pub fn new(reduction: Reduction) -> Self {
        Self {
            sum: GradientsAccumulator::new(),
            count: 0,
            reduction,
            homes: HashMap::new(),
        }
    }

    /// Sums the gradient of each parameter in `homes` on the device given there instead of
    /// the main device: where an optimizer split by device steps it, so that it moves once.
    /// Set it while the window is empty.
    pub fn set_homes(&mut self, homes: HashMap<ParamId, Device>) {
        self.homes = homes;
    }

    /// Moves `grads` to `main` (those of [`set_homes`](Self::set_homes)' parameters to their
    /// home) and adds them to the sum.
    pub fn add(&mut self, grads: GradientsParams, main: &Device, model: &M) {
        let grads = if self.homes.is_empty() {
            grads.to_device(main, model)
        } else {
            place_gradients(grads, model, &self.homes, main)
        };
        self.sum.accumulate(model, grads);
        self.count += 1;
    }

    /// Adds another window's plain sum of `count` sets ([`take_sum`](Self::take_sum)) as one
    /// contribution, the way an all-reduce adds each process's: a process that runs the data
    /// of several ranks sums each rank's sets in a window of its own, then the windows here.
    pub fn add_sum(&mut self, sum: GradientsParams, count: usize, main: &Device, model: &M) {
        if count == 0 {
            return;
        }
        self.add(sum, main, model);
        self.count += count - 1;
    }

    /// How many gradient sets were added since the last [`take`](Self::take).
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when no set was added since the last [`take`](Self::take).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// How the window reduces.
    pub fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// The plain sum of the sets added and their count, whatever the reduction; the window
    /// starts empty again. For reductions that go on elsewhere (across processes), which
    /// divide by the count of every process's sets together.
    pub fn take_sum(&mut self) -> (GradientsParams, usize) {
        let count = std::mem::take(&mut self.count);
        (self.sum.grads(), count)
    }

    /// The reduced gradients (the sum, divided by the count for [`Reduction::Mean`]); the
    /// window starts empty again.
    pub fn take(&mut self, model: &M) -> GradientsParams {
        let mut sum = self.sum.grads();
        if self.reduction == Reduction::Mean && self.count > 1 {
            let mut scale = ScaleGradients::<M> {
                grads: &mut sum,
                factor: 1.0 / self.count as f64,
                model: PhantomData,
            };
            model.visit(&mut scale);
        }
        self.count = 0;
        sum
    }
}

/// Moves the gradient of each parameter of `model` in `homes` to the device given there, and
/// every other one to `main` (a gradient already there stays as it is).
pub fn place_gradients<M: Module>(
    mut grads: GradientsParams,
    model: &M,
    homes: &HashMap<ParamId, Device>,
    main: &Device,
) -> GradientsParams {
    let mut placed = GradientsParams::new();
    model.visit(&mut PlaceGradients {
        from: &mut grads,
        into: &mut placed,
        homes,
        main,
    });
    placed
}

struct PlaceGradients<'a> {
    from: &'a mut GradientsParams,
    into: &'a mut GradientsParams,
    homes: &'a HashMap<ParamId, Device>,
    main: &'a Device,
}

impl ModuleVisitor for PlaceGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.from.remove::<D>(param.id) {
            let device = self.homes.get(&param.id).unwrap_or(self.main);
            self.into.register::<D>(param.id, grad.to_device(device));
        }
    }
}

struct ScaleGradients<'a, M> {
    grads: &'a mut GradientsParams,
    factor: f64,
    model: PhantomData<M>,
}

impl<M: Module> ModuleVisitor for ScaleGradients<'_, M> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.remove::<D>(param.id) {
            self.grads
                .register::<D>(param.id, grad.mul_scalar(self.factor));
        }
    }
}
