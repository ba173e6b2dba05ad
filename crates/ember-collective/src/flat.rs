//! A module's float parameters and gradients as one flat `f32` buffer, in the module's visit
//! order: the order is the model's structure, the same on every rank, whereas parameter ids
//! are drawn at random by each process.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};

/// The element count of each float parameter, in visit order.
pub(crate) fn parameter_sizes<M: Module>(model: &M) -> Vec<usize> {
    struct Sizes(Vec<usize>);
    impl ModuleVisitor for Sizes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.shape().num_elements());
        }
    }
    let mut sizes = Sizes(Vec::new());
    model.visit(&mut sizes);
    sizes.0
}

/// Every float parameter's values, concatenated in visit order.
pub(crate) fn parameters<M: Module>(model: &M) -> Vec<f32> {
    struct Values(Vec<f32>);
    impl ModuleVisitor for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let data = param.val().inner().into_data();
            self.0.extend(data.iter::<f32>());
        }
    }
    let mut values = Values(Vec::new());
    model.visit(&mut values);
    values.0
}

/// `model` with every float parameter's values taken from `values` (as [`parameters`] lays
/// them out), on the parameter's own device, keeping its id and whether it requires a
/// gradient.
pub(crate) fn with_parameters<M: Module>(model: M, values: &[f32]) -> M {
    struct Replace<'a> {
        values: &'a [f32],
        at: usize,
    }
    impl ModuleMapper for Replace<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let values = self.values;
            let start = self.at;
            self.at += param.shape().num_elements();
            param.map(|tensor| {
                let shape = tensor.shape();
                let device = tensor.device();
                let require_grad = tensor.is_require_grad();
                let data =
                    TensorData::new(values[start..start + shape.num_elements()].to_vec(), shape);
                let fresh = Tensor::<D>::from_data(data, &device);
                if require_grad {
                    fresh.require_grad()
                } else {
                    fresh
                }
            })
        }
    }
    model.map(&mut Replace { values, at: 0 })
}

/// Writes every parameter's gradient from `grads` into `out` (one slot per element, in visit
/// order; zeros where a parameter has no gradient) and marks in `present` (one slot per
/// parameter) which had one.
pub(crate) fn write_gradients<M: Module>(
    model: &M,
    grads: Option<&GradientsParams>,
    out: &mut [f32],
    present: &mut [f32],
) {
    struct Write<'a> {
        grads: Option<&'a GradientsParams>,
        out: &'a mut [f32],
        present: &'a mut [f32],
        at: usize,
        param: usize,
    }
    impl ModuleVisitor for Write<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let len = param.shape().num_elements();
            let slot = &mut self.out[self.at..self.at + len];
            match self.grads.and_then(|grads| grads.get::<D>(param.id)) {
                Some(grad) => {
                    let data = grad.into_data();
                    // A straight copy where the gradient is f32 already (the usual case: a
                    // large model's gradients are tens of megabytes a round); converted
                    // element by element otherwise.
                    match data.as_slice::<f32>() {
                        Ok(values) if values.len() == len => slot.copy_from_slice(values),
                        _ => {
                            for (to, from) in slot.iter_mut().zip(data.iter::<f32>()) {
                                *to = from;
                            }
                        }
                    }
                    self.present[self.param] = 1.0;
                }
                None => {
                    slot.fill(0.0);
                    self.present[self.param] = 0.0;
                }
            }
            self.at += len;
            self.param += 1;
        }
    }
    model.visit(&mut Write {
        grads,
        out,
        present,
        at: 0,
        param: 0,
    });
}

/// Gradients for `model` read from `values` (laid out as [`write_gradients`] writes them), each
/// multiplied by `scale`, for every parameter some rank had a gradient for (`present` > 0), on
/// the parameter's device without autodiff, as Burn's optimizers take them.
pub(crate) fn read_gradients<M: Module>(
    model: &M,
    values: &[f32],
    present: &[f32],
    scale: f32,
) -> GradientsParams {
    struct Read<'a> {
        values: &'a [f32],
        present: &'a [f32],
        scale: f32,
        at: usize,
        param: usize,
        grads: GradientsParams,
    }
    impl ModuleVisitor for Read<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let shape = param.shape();
            let len = shape.num_elements();
            if self.present[self.param] > 0.0 {
                let device = param.val().inner().device();
                let scaled: Vec<f32> = self.values[self.at..self.at + len]
                    .iter()
                    .map(|v| v * self.scale)
                    .collect();
                let tensor = Tensor::<D>::from_data(TensorData::new(scaled, shape), &device);
                self.grads.register::<D>(param.id, tensor);
            }
            self.at += len;
            self.param += 1;
        }
    }
    let mut read = Read {
        values,
        present,
        scale,
        at: 0,
        param: 0,
        grads: GradientsParams::new(),
    };
    model.visit(&mut read);
    read.grads
}
