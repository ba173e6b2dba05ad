//! The optimizer step split across threads by parameter, ZeRO-1 style: each shard owns the
//! optimizer state of a fixed set of whole parameters and steps only those, all shards at once.
//!
//! Burn's `ModuleOptimizer` steps each parameter on its own (its state, learning rate and
//! gradient clipping are per parameter), so stepping disjoint sets of parameters in parallel
//! and gathering the results gives the bits a single optimizer gives. With one worker per
//! device, the optimizer step was the largest serial part of a data-parallel step (an Adam step
//! reads and writes every parameter a dozen times): split over as many threads as there are
//! devices, it shrinks with them instead of capping the speed-up.
//!
//! The split is by whole parameters (a parameter is never cut, so optimizers that look at a
//! parameter as a whole, such as LAMB's trust ratio or Muon, stay exact), balanced by element
//! count: each parameter, largest first, goes to the shard holding the fewest elements so far.
//! A model whose elements sit in one parameter gains little, and one of fewer than 2^18
//! elements is not split at all: a thread's start costs what its Adam step does.
//!
//! On distinct devices (GPUs, lavapipe) the split is by device instead of by thread
//! ([`OptimizerShards::on_devices`]), as burn-train's `OptimSharded` splits it: one optimizer,
//! stepped on the calling thread, each parameter's step queued on the device that owns it
//! (its gradient is moved there, and Burn's optimizer moves the parameter and its state to
//! its gradient's device), so the devices run their shares at once. The stepped parameters
//! then come back to the main device, where the model lives between steps. Threads are not
//! used there: on wgpu, shards stepped on threads other than the one that made the gradients
//! left NaN parameters (`tests/tests/integration/distinct_devices.rs`).

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};

use crate::collective::owners_by_elements;
use crate::step::burn::place_gradients;

/// Below this many parameter elements the whole model stays in the first shard: starting a
/// thread costs tens of microseconds, as much as an Adam step over about this many elements.
const MIN_ELEMENTS_TO_SPLIT: usize = 1 << 18;

/// One optimizer per shard, and which shard owns each parameter.
#[derive(Clone)]
pub(crate) struct OptimizerShards {
    shards: Vec<ModuleOptimizer>,
    /// Filled from the model at the first step; the same model gives the same split.
    owners: Option<HashMap<ParamId, usize>>,
    /// A model with fewer parameter elements is not split.
    min_elements: usize,
    /// The devices one optimizer steps each its share of the parameters on (the first is the
    /// main device); empty when the split is by thread.
    devices: Vec<Device>,
    /// The device each parameter not stepped on the main device is stepped on; filled from
    /// the model at the first step, as `owners`.
    homes: Option<HashMap<ParamId, Device>>,
}

impl std::fmt::Debug for OptimizerShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OptimizerShards")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl OptimizerShards {
    /// `count` shards (at least one), each starting as `optimizer`.
    pub(crate) fn new(optimizer: ModuleOptimizer, count: usize) -> Self {
        Self {
            shards: vec![optimizer; count.max(1)],
            owners: None,
            min_elements: MIN_ELEMENTS_TO_SPLIT,
            devices: Vec::new(),
            homes: None,
        }
    }

    /// One `optimizer` stepping each parameter on the device of `devices` that owns it (the
    /// first is the main device, where the model comes back to); one device steps everything
    /// on it.
    pub(crate) fn on_devices(optimizer: ModuleOptimizer, devices: Vec<Device>) -> Self {
        let devices = if devices.len() > 1 {
            devices
        } else {
            Vec::new()
        };
        Self {
            devices,
            ..Self::new(optimizer, 1)
        }
    }

    /// Which device of [`on_devices`](Self::on_devices)' devices steps each parameter of
    /// `module`, for those not stepped on the main device (where their reduced gradients are
    /// best made); empty when the split is not by device or `module` is too small to split.
    pub(crate) fn gradient_homes<M: Module>(&mut self, module: &M) -> &HashMap<ParamId, Device> {
        let (devices, min_elements) = (&self.devices, self.min_elements);
        self.homes.get_or_insert_with(|| {
            if devices.len() < 2 {
                return HashMap::new();
            }
            split_by_elements(module, devices.len(), min_elements)
                .into_iter()
                .filter(|(_, device)| *device != 0)
                .map(|(id, device)| (id, devices[device].clone()))
                .collect()
        })
    }

    /// Splits models of any size (the tests' small models).
    #[cfg(test)]
    fn splitting_any_size(mut self) -> Self {
        self.min_elements = 0;
        self
    }

    /// The shard that steps each float parameter of `module`, in visit order: the split its
    /// steps use (fixed here if no step fixed it yet). An optimizer split by device is one
    /// optimizer, which steps them all.
    pub(crate) fn shard_of_each<M: Module>(&mut self, module: &M) -> Vec<usize> {
        let mut sizes = ParamSizes(Vec::new());
        module.visit(&mut sizes);
        if !self.devices.is_empty() || self.shards.len() == 1 {
            return vec![0; sizes.0.len()];
        }
        let (count, min_elements) = (self.shards.len(), self.min_elements);
        let owners = self
            .owners
            .get_or_insert_with(|| split_by_elements(module, count, min_elements));
        sizes
            .0
            .iter()
            .map(|(id, _)| owners.get(id).copied().unwrap_or(0))
            .collect()
    }

    /// How many shards step the model.
    pub(crate) fn len(&self) -> usize {
        self.shards.len()
    }

    /// Each shard's optimizer, for its checkpoint record.
    pub(crate) fn shards(&self) -> &[ModuleOptimizer] {
        &self.shards
    }

    /// Replaces shard `index`'s optimizer (its state read from a checkpoint).
    pub(crate) fn set_shard(&mut self, index: usize, optimizer: ModuleOptimizer) {
        if let Some(shard) = self.shards.get_mut(index) {
            *shard = optimizer;
        }
    }

    /// Steps `module` with `grads` at learning rate `lr`: every shard steps its own parameters
    /// on a thread of its own (the first on the caller's), then the stepped parameters are
    /// gathered into one module.
    pub(crate) fn step<M: Module>(
        &mut self,
        lr: impl Into<ModuleLearningRate>,
        module: M,
        mut grads: GradientsParams,
    ) -> M {
        let lr = lr.into();
        if !self.devices.is_empty() {
            return self.step_on_devices(lr, module, grads);
        }
        if self.shards.len() == 1 {
            return self.shards[0].step(lr, module, grads);
        }
        let count = self.shards.len();
        let owners = self
            .owners
            .get_or_insert_with(|| split_by_elements(&module, count, self.min_elements));
        if owners.values().all(|shard| *shard == 0) {
            return self.shards[0].step(lr, module, grads);
        }
        let mut parts: Vec<GradientsParams> = (0..count).map(|_| GradientsParams::new()).collect();
        module.visit(&mut SplitGradients {
            owners,
            from: &mut grads,
            into: &mut parts,
        });
        let (first, rest) = self.shards.split_first_mut().expect("at least one shard");
        let mut parts = parts.into_iter();
        let first_part = parts.next().unwrap_or_default();
        let mut stepped: Vec<M> = std::thread::scope(|scope| {
            let handles: Vec<_> = rest
                .iter_mut()
                .zip(parts)
                .map(|(shard, part)| {
                    let (lr, module) = (lr.clone(), module.clone());
                    scope.spawn(move || shard.step(lr, module, part))
                })
                .collect();
            let mut stepped = vec![first.step(lr, module.clone(), first_part)];
            for handle in handles {
                match handle.join() {
                    Ok(module) => stepped.push(module),
                    // A panicking optimizer step panics the caller, as one optimizer's would.
                    Err(payload) => std::panic::resume_unwind(payload),
                }
            }
            stepped
        });
        let mut gathered = GradientsParams::new();
        for (index, shard_module) in stepped.iter().enumerate().skip(1) {
            shard_module.visit(&mut CollectOwned {
                owners,
                shard: index,
                into: &mut gathered,
            });
        }
        let first_module = stepped.swap_remove(0);
        first_module.map(&mut PlaceOwned {
            from: &mut gathered,
        })
    }
}

impl OptimizerShards {
    /// The split by device: each gradient moved to the device that steps its parameter
    /// (where the Trainer's gradient window made it already), one optimizer step queueing each
    /// parameter's update there, then the model back on the main device.
    fn step_on_devices<M: Module>(
        &mut self,
        lr: ModuleLearningRate,
        module: M,
        grads: GradientsParams,
    ) -> M {
        let main = self.devices[0].clone();
        let homes = self.gradient_homes(&module);
        if homes.is_empty() {
            return self.shards[0].step(lr, module, grads);
        }
        let grads = place_gradients(grads, &module, homes, &main);
        let stepped = self.shards[0].step(lr, module, grads);
        // Leaving each parameter where it was stepped, for the next step's fork to take it
        // from there (as burn-train's `OptimSharded` does), was slower on lavapipe than this.
        stepped.fork(&main)
    }
}

/// Each parameter, largest first (ties in visit order), to the shard with the fewest elements;
/// every parameter to the first shard for a model of fewer than `min_elements`.
fn split_by_elements<M: Module>(
    module: &M,
    count: usize,
    min_elements: usize,
) -> HashMap<ParamId, usize> {
    let mut sizes = ParamSizes(Vec::new());
    module.visit(&mut sizes);
    let total: usize = sizes.0.iter().map(|(_, elements)| elements).sum();
    if total < min_elements {
        return sizes.0.iter().map(|(id, _)| (*id, 0)).collect();
    }
    let elements: Vec<usize> = sizes.0.iter().map(|(_, elements)| *elements).collect();
    sizes
        .0
        .iter()
        .zip(owners_by_elements(&elements, count))
        .map(|((id, _), shard)| (*id, shard))
        .collect()
}

struct ParamSizes(Vec<(ParamId, usize)>);

impl ModuleVisitor for ParamSizes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push((param.id, param.val().shape().num_elements()));
    }
}

/// Moves every parameter's gradient into the part of the shard that owns it.
struct SplitGradients<'a> {
    owners: &'a HashMap<ParamId, usize>,
    from: &'a mut GradientsParams,
    into: &'a mut [GradientsParams],
}

impl ModuleVisitor for SplitGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.from.remove::<D>(param.id) {
            let shard = self.owners.get(&param.id).copied().unwrap_or(0);
            self.into[shard].register::<D>(param.id, grad);
        }
    }
}

/// Takes the parameters shard `shard` owns (and so stepped) out of that shard's module.
struct CollectOwned<'a> {
    owners: &'a HashMap<ParamId, usize>,
    shard: usize,
    into: &'a mut GradientsParams,
}

impl ModuleVisitor for CollectOwned<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.owners.get(&param.id) == Some(&self.shard) {
            self.into.register::<D>(param.id, param.val());
        }
    }
}

/// Puts the gathered parameters in place of the ones the first shard left as they were.
struct PlaceOwned<'a> {
    from: &'a mut GradientsParams,
}

impl ModuleMapper for PlaceOwned<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        match self.from.remove::<D>(param.id) {
            Some(stepped) => {
                let (id, _, mapper) = param.consume();
                Param::from_mapped_value(id, stepped, mapper)
            }
            None => param,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::module::ParamGroup;
    use burn::optim::grad_clipping::GradientClipping;
    use burn::optim::{AdamConfig, GradientsParams, SgdConfig};
    use burn::tensor::Device;
    use ember_tests::{Mlp, XyBatch, parameters};

    use super::*;

    fn gradients(model: &Mlp, seed: u64, device: &Device) -> GradientsParams {
        let batch = XyBatch::synthetic(seed, 16, device);
        let output = model.forward(batch.x);
        let loss = (output - batch.y).powf_scalar(2.0).mean();
        GradientsParams::from_grads(loss.backward(), model)
    }

    /// A model whose parameters are drawn once: every run starts from a clone of it, whatever
    /// other tests draw from the device's generator meanwhile.
    fn model() -> Mlp {
        let model = Mlp::new(24, &Device::flex().autodiff());
        parameters(&model);
        model
    }

    /// Ten steps of `optimizer` split over `shards` from `model`, on the same gradients.
    fn train(optimizer: ModuleOptimizer, shards: usize, mut model: Mlp) -> Vec<f32> {
        let device = Device::flex().autodiff();
        let mut optimizer = OptimizerShards::new(optimizer, shards).splitting_any_size();
        for step in 0..10 {
            let grads = gradients(&model, step, &device);
            model = optimizer.step(0.01, model, grads);
        }
        parameters(&model)
    }

    fn bits(values: &[f32]) -> Vec<u32> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn sharded_steps_give_the_bits_of_one_optimizer() {
        let adam = || -> ModuleOptimizer { AdamConfig::new().init() };
        let start = model();
        let one = train(adam(), 1, start.clone());
        assert_ne!(one, parameters(&start));
        assert_ne!(
            bits(&one),
            bits(&train(SgdConfig::new().init(), 1, start.clone()))
        );
        for shards in [2, 3, 4, 7] {
            assert_eq!(
                bits(&train(adam(), shards, start.clone())),
                bits(&one),
                "{shards} shards"
            );
        }
    }

    #[test]
    fn a_split_by_device_steps_each_parameter_once_with_the_bits_of_one_optimizer() {
        // The CPU has one device, given twice: the moves between devices are no-ops here (the
        // distinct-device suite drives them on wgpu), the split and the steps are not.
        let adam = || -> ModuleOptimizer { AdamConfig::new().init() };
        let start = model();
        let device = Device::flex().autodiff();
        let mut by_device =
            OptimizerShards::on_devices(adam(), vec![Device::flex(), Device::flex()])
                .splitting_any_size();
        let homes = by_device.gradient_homes(&start).clone();
        // l1's bias and l2's weight go to the second device (see the split test below).
        assert_eq!(homes.len(), 2);
        let mut model = start.clone();
        for step in 0..10 {
            let grads = gradients(&model, step, &device);
            model = by_device.step(0.01, model, grads);
        }
        assert_eq!(by_device.len(), 1);
        assert_eq!(
            bits(&parameters(&model)),
            bits(&train(adam(), 1, start.clone()))
        );
        // One device is no split.
        let mut one =
            OptimizerShards::on_devices(adam(), vec![Device::flex()]).splitting_any_size();
        assert!(one.gradient_homes(&start).is_empty());
    }

    #[test]
    fn groups_and_clipping_follow_each_parameter_into_its_shard() {
        // The second layer on SGD with clipping, the rest on Adam: a shard must step each
        // parameter with its own group's optimizer, as one optimizer does.
        let grouped = || -> ModuleOptimizer {
            let optimizer: ModuleOptimizer = AdamConfig::new().init();
            optimizer.with_group(
                ParamGroup::from_predicate("l2"),
                SgdConfig::new().build(),
                Some(GradientClipping::Value(0.001)),
            )
        };
        let start = model();
        let one = train(grouped(), 1, start.clone());
        assert_ne!(
            bits(&one),
            bits(&train(AdamConfig::new().init(), 1, start.clone()))
        );
        assert_eq!(bits(&train(grouped(), 2, start)), bits(&one));
    }

    #[test]
    fn parameters_are_split_by_elements_largest_first() {
        // l1: weight 2x24 (48) and bias 24; l2: weight 24x1 (24) and bias 1.
        let model = model();
        let owners = split_by_elements(&model, 2, 0);
        let mut load = [0usize; 2];
        let mut sizes = ParamSizes(Vec::new());
        model.visit(&mut sizes);
        for (id, elements) in sizes.0 {
            load[owners[&id]] += elements;
        }
        assert_eq!(load, [48 + 1, 24 + 24]);
        // Under the size worth a thread, the whole model stays in the first shard.
        let owners = split_by_elements(&model, 2, 1000);
        assert!(owners.values().all(|shard| *shard == 0));
        assert_eq!(owners.len(), 4);
    }
}
