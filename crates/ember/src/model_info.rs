//! What the Trainer reads off a Burn module: named parameters (for histograms) and the module
//! tree (for the graph).

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use ember_write::pack::{AttrValue, Graph, GraphNode};

/// Every float parameter of `module` as `(path, id, values)`, the path joined with `.`.
pub(crate) fn named_parameters<M: Module>(module: &M) -> Vec<(String, ParamId, Vec<f32>)> {
    let mut visitor = Walk::default();
    module.visit(&mut visitor);
    visitor.params
}

/// The gradient of each named parameter that has one.
pub(crate) fn named_gradients<M: Module>(
    module: &M,
    grads: &GradientsParams,
) -> Vec<(String, Vec<f32>)> {
    let mut visitor = Walk {
        grads: Some(grads),
        ..Walk::default()
    };
    module.visit(&mut visitor);
    visitor.grad_values
}

/// The module tree as a graph: one node per module and per parameter, named by path under
/// `root`, so TensorBoard's Graphs tab shows nested scopes.
pub(crate) fn module_graph<M: Module>(module: &M, root: &str) -> Graph {
    let mut visitor = Walk::default();
    module.visit(&mut visitor);
    let mut nodes = vec![GraphNode::new(root, type_name::<M>())];
    for (path, op) in &visitor.modules {
        let parent = parent_of(root, path);
        nodes.push(
            GraphNode::new(format!("{root}/{}", path.replace('.', "/")), op.clone()).input(parent),
        );
    }
    for (path, shape) in &visitor.shapes {
        let parent = parent_of(root, path);
        nodes.push(
            GraphNode::new(format!("{root}/{}", path.replace('.', "/")), "Parameter")
                .input(parent)
                .attr(
                    "shape",
                    AttrValue::Ints(shape.iter().map(|&d| d as i64).collect()),
                ),
        );
    }
    Graph {
        name: root.to_string(),
        nodes,
    }
}

fn parent_of(root: &str, path: &str) -> String {
    match path.rsplit_once('.') {
        Some((parent, _)) => format!("{root}/{}", parent.replace('.', "/")),
        None => root.to_string(),
    }
}

fn type_name<M>() -> String {
    let full = std::any::type_name::<M>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

#[derive(Default)]
struct Walk<'a> {
    path: Vec<String>,
    modules: Vec<(String, String)>,
    params: Vec<(String, ParamId, Vec<f32>)>,
    shapes: Vec<(String, Vec<usize>)>,
    grads: Option<&'a GradientsParams>,
    grad_values: Vec<(String, Vec<f32>)>,
}

impl ModuleVisitor for Walk<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push(name.to_string());
        let op = container_type
            .split_once(':')
            .map(|(_, name)| name)
            .unwrap_or(container_type);
        self.modules.push((self.path.join("."), op.to_string()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        // Derived modules enter each field, parameters included, so the path ends in the
        // parameter's own name; it is a parameter, not a module.
        let name = self.path.join(".");
        self.modules.retain(|(module, _)| module != &name);
        let tensor = param.val();
        self.shapes.push((name.clone(), tensor.dims().to_vec()));
        match self.grads {
            Some(grads) => {
                if let Some(grad) = grads.get::<D>(param.id) {
                    let values = grad.into_data().iter::<f32>().collect();
                    self.grad_values.push((name, values));
                }
            }
            None => {
                let values = tensor.into_data().iter::<f32>().collect();
                self.params.push((name, param.id, values));
            }
        }
    }
}
