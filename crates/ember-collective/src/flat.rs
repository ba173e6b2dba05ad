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
    let mut at = 0;
    replace_parameters(model, |_, len| {
        let start = at;
        at += len;
        Some(&values[start..start + len])
    })
}

/// `model` with each float parameter (by visit index, with its element count) that `source`
/// gives values for replaced by a tensor of them, on the parameter's own device, keeping its
/// id and whether it requires a gradient; the others are left as they are.
pub(crate) fn replace_parameters<'v, M: Module>(
    model: M,
    source: impl FnMut(usize, usize) -> Option<&'v [f32]>,
) -> M {
    struct Replace<F> {
        source: F,
        index: usize,
    }
    impl<'v, F: FnMut(usize, usize) -> Option<&'v [f32]>> ModuleMapper for Replace<F> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let index = self.index;
            self.index += 1;
            let Some(values) = (self.source)(index, param.shape().num_elements()) else {
                return param;
            };
            param.map(|tensor| {
                let shape = tensor.shape();
                let device = tensor.device();
                let require_grad = tensor.is_require_grad();
                let fresh =
                    Tensor::<D>::from_data(TensorData::new(values.to_vec(), shape), &device);
                if require_grad {
                    fresh.require_grad()
                } else {
                    fresh
                }
            })
        }
    }
    model.map(&mut Replace { source, index: 0 })
}

/// Copies the values of the float parameters `keep` picks (by visit index) into `out`, one
/// after another in visit order.
pub(crate) fn write_parameters<M: Module>(
    model: &M,
    keep: impl Fn(usize) -> bool,
    out: &mut [f32],
) {
    struct Write<'a, F> {
        keep: F,
        out: &'a mut [f32],
        at: usize,
        index: usize,
    }
    impl<F: Fn(usize) -> bool> ModuleVisitor for Write<'_, F> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let index = self.index;
            self.index += 1;
            if !(self.keep)(index) {
                return;
            }
            let data = param.val().inner().into_data();
            let slot = &mut self.out[self.at..self.at + data.num_elements()];
            match data.as_slice::<f32>() {
                Ok(values) => slot.copy_from_slice(values),
                Err(_) => {
                    for (to, from) in slot.iter_mut().zip(data.iter::<f32>()) {
                        *to = from;
                    }
                }
            }
            self.at += slot.len();
        }
    }
    model.visit(&mut Write {
        keep,
        out,
        at: 0,
        index: 0,
    });
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
/// multiplied by `scale`, for every parameter `keep` picks (by visit index) that some rank had
/// a gradient for (`present` > 0), on the parameter's device without autodiff, as Burn's
/// optimizers take them.
pub(crate) fn read_gradients<M: Module>(
    model: &M,
    values: &[f32],
    present: &[f32],
    scale: f32,
    keep: impl Fn(usize) -> bool,
) -> GradientsParams {
    struct Read<'a, F> {
        keep: F,
        values: &'a [f32],
        present: &'a [f32],
        scale: f32,
        at: usize,
        param: usize,
        grads: GradientsParams,
    }
    impl<F: Fn(usize) -> bool> ModuleVisitor for Read<'_, F> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let shape = param.shape();
            let len = shape.num_elements();
            if self.present[self.param] > 0.0 && (self.keep)(self.param) {
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
        keep,
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
