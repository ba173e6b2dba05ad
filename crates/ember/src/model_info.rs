//! What the Trainer reads off a Burn module: named parameters (for histograms) and the module
//! tree (for the graph).

use std::collections::HashMap;

use burn::module::{
    Content, DisplaySettings, Module, ModuleDisplay, ModuleVisitor, Param, ParamId,
};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use ember_write::pack::{AttrValue, Graph, GraphNode};

/// Every float parameter of `module` as `(path, id, values)`, the path joined with `.`.
pub(crate) fn named_parameters<M: Module>(module: &M) -> Vec<(String, ParamId, Vec<f32>)> {
    let mut visitor = Walk::default();
    module.visit(&mut visitor);
    visitor.params
}

/// Every float parameter of `module` as `(path, shape)`, without reading its values.
pub(crate) fn named_shapes<M: Module>(module: &M) -> Vec<(String, Vec<usize>)> {
    let mut visitor = Walk {
        shapes_only: true,
        ..Walk::default()
    };
    module.visit(&mut visitor);
    visitor.shapes
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
/// `root`, so both dashboards show nested scopes. Edges run from part to whole: each parameter
/// feeds the module that owns it and each module its parent, as data flows (a parameter has no
/// input, which MindSpore's graphs require).
///
/// A module's op is its own type: the container type Burn reports when entering its fields,
/// or, for a field of the root that has none (an activation such as `Relu`), the field's type
/// from the root's display content; a deeper module without fields is a plain `Module`.
pub(crate) fn module_graph<M: Module + ModuleDisplay>(module: &M, root: &str) -> Graph {
    let mut visitor = Walk {
        shapes_only: true,
        ..Walk::default()
    };
    module.visit(&mut visitor);
    let field_types: HashMap<String, String> = module
        .content(Content::new(DisplaySettings::new()))
        .map(|content| {
            content
                .attributes
                .into_iter()
                .map(|a| (a.name, short_type_name(&a.ty)))
                .collect()
        })
        .unwrap_or_default();
    let node_name = |path: &str| format!("{root}/{}", path.replace('.', "/"));
    let parent_name = |path: &str| match path.rsplit_once('.') {
        Some((parent, _)) => node_name(parent),
        None => root.to_string(),
    };
    let mut inputs: HashMap<String, Vec<String>> = HashMap::new();
    for path in visitor
        .modules
        .iter()
        .chain(visitor.shapes.iter().map(|(path, _)| path))
    {
        inputs
            .entry(parent_name(path))
            .or_default()
            .push(node_name(path));
    }
    let with_inputs = |mut node: GraphNode| {
        for input in inputs.get(&node.name).into_iter().flatten() {
            node = node.input(input.clone());
        }
        node
    };
    let mut nodes = vec![with_inputs(GraphNode::new(root, type_name::<M>()))];
    for path in &visitor.modules {
        let op = visitor
            .types
            .get(path)
            .or_else(|| field_types.get(path))
            .map_or("Module", String::as_str);
        nodes.push(with_inputs(GraphNode::new(node_name(path), op)));
    }
    for (path, shape) in &visitor.shapes {
        nodes.push(GraphNode::new(node_name(path), "Parameter").attr(
            "shape",
            AttrValue::Ints(shape.iter().map(|&d| d as i64).collect()),
        ));
    }
    Graph {
        name: root.to_string(),
        nodes,
    }
}

fn type_name<M>() -> String {
    short_type_name(std::any::type_name::<M>())
}

/// `Linear` of `burn_nn::modules::linear::Linear<B>`.
fn short_type_name(full: &str) -> String {
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

#[derive(Default)]
struct Walk<'a> {
    path: Vec<String>,
    /// Module paths in visiting order.
    modules: Vec<String>,
    /// The type of each module path that has fields: the container type its fields report.
    types: HashMap<String, String>,
    params: Vec<(String, ParamId, Vec<f32>)>,
    shapes: Vec<(String, Vec<usize>)>,
    grads: Option<&'a GradientsParams>,
    grad_values: Vec<(String, Vec<f32>)>,
    /// Names and shapes only: no parameter's values are read (copying a large model's
    /// parameters out of the device costs a pass over all of them).
    shapes_only: bool,
}

impl ModuleVisitor for Walk<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        // `container_type` is the type holding the field being entered ("Struct:Linear" when
        // entering a Linear's weight): the type of the module at the current path, not of the
        // field. The root's own type comes from `M`.
        if !self.path.is_empty() {
            let ty = container_type
                .split_once(':')
                .map(|(_, name)| name)
                .unwrap_or(container_type);
            self.types.insert(self.path.join("."), ty.to_string());
        }
        self.path.push(name.to_string());
        self.modules.push(self.path.join("."));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        // Derived modules enter each field, parameters included, so the path ends in the
        // parameter's own name; it is a parameter, not a module.
        let name = self.path.join(".");
        self.modules.retain(|module| module != &name);
        let tensor = param.val();
        self.shapes.push((name.clone(), tensor.dims().to_vec()));
        if self.shapes_only {
            return;
        }
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
