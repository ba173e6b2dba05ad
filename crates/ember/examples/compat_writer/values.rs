//! Inputs shared by both formats' runs: image batches, histogram inputs and the nested graph.

use ember::pack::{Graph, GraphNode};

use super::*;

/// Image values in `[0, 1]` whose `x * 255` is at least 0.1 away from a rounding midpoint,
/// plus values outside `[0, 1]` that must be clamped.
pub(super) fn image_values(n: usize, salt: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let k = (i * 37 + salt * 11) % 263;
            if k >= 256 {
                // 256..262: out of range on both sides.
                if k.is_multiple_of(2) { 1.5 } else { -0.25 }
            } else {
                // Level k with a +0.2 offset: rounds to k (or 255 when k = 255).
                ((k as f32) + 0.2) / 255.0
            }
        })
        .collect()
}

/// Histogram inputs, as `(tag, step, values)`: a spread at three steps, a skewed small set and
/// a constant.
pub(super) fn histogram_inputs() -> Vec<(&'static str, i64, Vec<f32>)> {
    let mut hists = Vec::new();
    for step in [0i64, 5, 10] {
        let values: Vec<f32> = (0..1000)
            .map(|i| {
                let x = ((i * 7919 + step as usize * 104_729) % 1000) as f32 / 100.0 - 3.0;
                x * (1.0 + step as f32 / 10.0)
            })
            .collect();
        hists.push(("hist/spread", step, values));
    }
    hists.push((
        "hist/small",
        3,
        vec![1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0, -1.5],
    ));
    hists.push(("hist/constant", 7, vec![2.5; 17]));
    hists
}

/// The nested-scope graph both dashboards must resolve: nodes that are also scopes of others
/// (`net/block`, `net/block/op`), names holding `op` and sharing a last segment (`op12`), a
/// parameter fed to two nodes, and a node with two inputs.
pub(super) fn nested_graph() -> Graph {
    Graph {
        name: "nested".into(),
        nodes: vec![
            GraphNode::new("input", "Placeholder"),
            GraphNode::new("net/block/weight", "Parameter")
                .attr("shape", ember::pack::AttrValue::Ints(vec![4, 4])),
            GraphNode::new("net/block", "Block").input("input"),
            GraphNode::new("net/block/op", "MatMul")
                .input("net/block")
                .input("net/block/weight"),
            GraphNode::new("net/block/op/op12", "Add").input("net/block/op"),
            GraphNode::new("net/head/op12", "Mul")
                .input("net/block/op/op12")
                .input("net/block/weight"),
            GraphNode::new("loss", "CrossEntropy")
                .input("net/head/op12")
                .input("input"),
        ],
    }
}

pub(super) fn graph_json(graph: &Graph) -> String {
    let nodes: Vec<String> = graph
        .nodes
        .iter()
        .map(|n| {
            format!(
                "{{\"name\":{},\"op\":{},\"inputs\":{}}}",
                json_str(&n.name),
                json_str(&n.op),
                json_strs(&n.inputs)
            )
        })
        .collect();
    json_list(nodes)
}
