//! Hyper-parameter sessions written in parts, and graphs in MindSpore's layout: what each part
//! writes in each format, and the graphs MindInsight could not build, refused with a reason.

use ember_pack::proto::mindspore as msp;
use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    Format, Graph, GraphNode, HParams, MetadataFor, PackErrorKind, PackOptions, Packer, Record,
    SessionPart, SessionStatus, Tag, Value,
};
use prost::Message;

fn pack(format: Format, value: impl Into<Value>) -> ember_pack::PackedRecord {
    let mut record = Record::new(1, 2.0);
    record.add(Tag::new("v").unwrap(), value);
    Packer::new(PackOptions::new(format)).pack(&record, MetadataFor::All)
}

fn rejection(format: Format, value: impl Into<Value>) -> PackErrorKind {
    let packed = pack(format, value);
    assert!(
        packed.items.is_empty(),
        "packed {} items",
        packed.items.len()
    );
    packed.rejected[0].kind.clone()
}

fn tb_tags(packed: &ember_pack::PackedRecord) -> Vec<String> {
    let event = tbp::Event::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(tbp::event::What::Summary(s)) = event.what else {
        panic!("not a summary event")
    };
    s.value.into_iter().map(|v| v.tag).collect()
}

fn ms_user_info(packed: &ember_pack::PackedRecord) -> Vec<msp::UserDefinedInfo> {
    assert_eq!(packed.items.len(), 1);
    let event = msp::LineageEvent::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(msp::lineage_event::What::UserDefinedInfo(info)) = event.what else {
        panic!("not a custom lineage event")
    };
    assert!(info.map_str.is_empty() && info.map_double.is_empty() && info.map_int32.is_empty());
    info.user_info
}

fn str_entry(key: &str, value: &str) -> msp::UserDefinedInfo {
    let mut info = msp::UserDefinedInfo::default();
    info.map_str.insert(key.into(), value.into());
    info
}

#[test]
fn a_session_written_in_two_parts_gives_each_tag_once() {
    let mut start = HParams::new().with("lr", 0.5).metric("final/loss");
    start.part = SessionPart::Start;
    // A status on a start is not written: the end carries it.
    start.status = Some(SessionStatus::Failure);
    let end = HParams::end(SessionStatus::Success);
    assert_eq!(
        tb_tags(&pack(Format::TensorBoard, start.clone())),
        ["_hparams_/experiment", "_hparams_/session_start_info"]
    );
    assert_eq!(
        tb_tags(&pack(Format::TensorBoard, end.clone())),
        ["_hparams_/session_end_info"]
    );

    let mut lr = msp::UserDefinedInfo::default();
    lr.map_double.insert("lr".into(), 0.5);
    assert_eq!(
        ms_user_info(&pack(Format::MindInsight, start)),
        [lr.clone()]
    );
    assert_eq!(
        ms_user_info(&pack(Format::MindInsight, end)),
        [str_entry("session_status", "success")]
    );
    let mut whole = HParams::new().with("lr", 0.5);
    whole.status = Some(SessionStatus::Running);
    assert_eq!(
        ms_user_info(&pack(Format::MindInsight, whole)),
        [lr, str_entry("session_status", "running")]
    );
}

#[test]
fn integers_beyond_int32_go_to_map_double() {
    let hp = HParams::new()
        .with("small", i64::from(i32::MIN))
        .with("big", i64::from(i32::MAX) + 1);
    let info = ms_user_info(&pack(Format::MindInsight, hp));
    assert_eq!(info[0].map_int32["small"], i32::MIN);
    assert_eq!(info[1].map_double["big"], 2_147_483_648.0);
}

#[test]
fn sessions_that_cannot_be_written_are_refused() {
    let mut end = HParams::new();
    end.part = SessionPart::End;
    for format in [Format::TensorBoard, Format::MindInsight] {
        assert_eq!(
            rejection(format, end.clone()),
            PackErrorKind::InvalidHParams("a session end needs a status")
        );
    }
    // An empty custom lineage record breaks MindInsight's lineage page for every job.
    assert!(matches!(
        rejection(Format::MindInsight, HParams::new()),
        PackErrorKind::InvalidHParams(_)
    ));
    // TensorBoard takes an empty experiment.
    assert!(
        pack(Format::TensorBoard, HParams::new())
            .rejected
            .is_empty()
    );
}

fn graph(nodes: Vec<GraphNode>) -> Graph {
    Graph {
        name: "g".into(),
        nodes,
    }
}

fn graph_error(nodes: Vec<GraphNode>) -> String {
    match rejection(Format::MindInsight, graph(nodes)) {
        PackErrorKind::InvalidGraph(why) => why,
        other => panic!("{other:?}"),
    }
}

#[test]
fn graphs_mindinsight_cannot_build_are_refused_with_the_node() {
    let why = graph_error(vec![GraphNode::new("a", "Relu").input("b")]);
    assert!(why.contains("\"b\""), "{why}");
    let why = graph_error(vec![
        GraphNode::new("a", "Relu"),
        GraphNode::new("a", "Add"),
    ]);
    assert!(why.contains("twice"), "{why}");
    let why = graph_error(vec![
        GraphNode::new("a", "Relu"),
        GraphNode::new("w", "Parameter").input("a"),
    ]);
    assert!(why.contains("parameter takes no input"), "{why}");
    let why = graph_error(vec![GraphNode::new("a<b", "Relu")]);
    assert!(why.contains("refuses"), "{why}");
    let why = graph_error(vec![GraphNode::new("a//b", "Relu")]);
    assert!(why.contains("empty"), "{why}");
    let why = graph_error(vec![GraphNode::new("a", "")]);
    assert!(why.contains("no op"), "{why}");
    let why = graph_error(vec![
        GraphNode::new("m/w", "Parameter"),
        GraphNode::new("m.w", "Parameter"),
    ]);
    assert!(why.contains("\"m.w\""), "{why}");
    // Node 1 is `a/Relu-op1`; a node named so would make it a scope.
    let why = graph_error(vec![
        GraphNode::new("a", "Relu"),
        GraphNode::new("a/Relu-op1", "Add"),
    ]);
    assert!(why.contains("also a scope"), "{why}");
    // TensorBoard takes them as they are.
    let packed = pack(
        Format::TensorBoard,
        graph(vec![GraphNode::new("a", "Relu").input("b")]),
    );
    assert!(packed.rejected.is_empty());
}

#[test]
fn nodes_that_are_scopes_of_others_and_names_with_op_keep_distinct_ids() {
    let g = graph(vec![
        GraphNode::new("loop", "Loop"),
        GraphNode::new("loop/op", "Add").input("loop"),
        GraphNode::new("loop/op/op12", "Mul").input("loop/op"),
        GraphNode::new("top/op12", "Mul").input("loop/op/op12"),
    ]);
    let packed = pack(Format::MindInsight, g);
    let event = msp::Event::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(msp::event::What::GraphDef(gp)) = event.what else {
        panic!()
    };
    let got: Vec<_> = gp
        .node
        .iter()
        .map(|n| (n.name.clone().unwrap(), n.full_name.clone().unwrap()))
        .collect();
    let want = [
        ("1", "loop/Loop-op1"),
        ("2", "loop/op/Add-op2"),
        ("3", "loop/op/op12/Mul-op3"),
        ("4", "top/op12/Mul-op4"),
    ];
    assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
}
