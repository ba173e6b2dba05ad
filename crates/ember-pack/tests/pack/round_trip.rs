//! Every packed event decodes with the generated types and its fields equal the input; the
//! hand-encoded events equal prost's encoding of the same message byte for byte.

use std::collections::HashSet;

use ember_pack::proto::mindspore as msp;
use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    AttrValue, DType, FileKind, Format, Graph, GraphNode, HParamValue, HParams, Image, ImageLayout,
    Lineage, MetadataFor, PackOptions, Packer, Record, SessionStatus, Tag, TensorValue, Value,
};
use half::{bf16, f16};
use prost::Message;

fn tag(s: &str) -> Tag {
    Tag::new(s).unwrap()
}

fn tb_event(bytes: &[u8]) -> tbp::Event {
    let event = tbp::Event::decode(bytes).unwrap();
    assert_eq!(
        event.encode_to_vec(),
        bytes,
        "hand encoding differs from prost's"
    );
    event
}

fn ms_event(bytes: &[u8]) -> msp::Event {
    let event = msp::Event::decode(bytes).unwrap();
    assert_eq!(
        event.encode_to_vec(),
        bytes,
        "hand encoding differs from prost's"
    );
    event
}

fn tb_values(event: &tbp::Event) -> &[tbp::summary::Value] {
    match &event.what {
        Some(tbp::event::What::Summary(s)) => &s.value,
        other => panic!("not a summary event: {other:?}"),
    }
}

fn ms_values(event: &msp::Event) -> &[msp::summary::Value] {
    match &event.what {
        Some(msp::event::What::Summary(s)) => &s.value,
        other => panic!("not a summary event: {other:?}"),
    }
}

fn f32_values(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one event file written and read back, each value checked in turn"
)]
fn tensorboard_scalars_and_tensors() {
    let floats = f32_values(1000);
    let mut record = Record::new(42, 1_700_000_000.5);
    record
        .add(tag("loss"), 0.125)
        .add(tag("nan"), f64::NAN)
        .add(tag("inf"), f64::NEG_INFINITY)
        .add(tag("w"), TensorValue::from_slice(&floats, [10usize, 100]))
        .add(tag("i64"), TensorValue::from(vec![-5i64, 7, i64::MAX]))
        .add(
            tag("bool"),
            TensorValue::from_slice(&[true, false, true, true], [2usize, 2]),
        )
        .add(
            tag("empty"),
            TensorValue::from_slice::<f32>(&[], [0usize, 3]),
        )
        .add(tag("scalar"), TensorValue::scalar(bf16::from_f32(1.5)));
    for metadata in [true, false] {
        let none = HashSet::new();
        let for_ = if metadata {
            MetadataFor::All
        } else {
            MetadataFor::Only(&none)
        };
        let packed = Packer::new(PackOptions::new(Format::TensorBoard)).pack(&record, for_);
        assert!(packed.rejected.is_empty(), "{:?}", packed.rejected);
        assert_eq!(packed.items.len(), 1);
        let event = tb_event(&packed.items[0].bytes);
        assert_eq!(event.wall_time, 1_700_000_000.5);
        assert_eq!(event.step, 42);
        let values = tb_values(&event);
        assert_eq!(values.len(), 8);
        for v in values {
            assert_eq!(v.metadata.is_some(), metadata, "{}", v.tag);
        }
        use tbp::summary::value::Value as V;
        assert_eq!(values[0].tag, "loss");
        assert_eq!(values[0].value, Some(V::SimpleValue(0.125)));
        assert!(matches!(values[1].value, Some(V::SimpleValue(x)) if x.is_nan()));
        assert_eq!(values[2].value, Some(V::SimpleValue(f32::NEG_INFINITY)));
        if metadata {
            let m = values[0].metadata.as_ref().unwrap();
            assert_eq!(m.plugin_data.as_ref().unwrap().plugin_name, "scalars");
            assert_eq!(m.data_class, tbp::DataClass::Scalar as i32);
        }
        let tensor = |i: usize| match &values[i].value {
            Some(V::Tensor(t)) => t.clone(),
            other => panic!("{other:?}"),
        };
        let dims = |t: &tbp::TensorProto| {
            t.tensor_shape
                .as_ref()
                .unwrap()
                .dim
                .iter()
                .map(|d| d.size)
                .collect::<Vec<_>>()
        };
        let w = tensor(3);
        assert_eq!(w.dtype, tbp::DataType::DtFloat as i32);
        assert_eq!(dims(&w), [10, 100]);
        let decoded: Vec<f32> = w
            .tensor_content
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(decoded, floats);
        let t = tensor(4);
        assert_eq!(t.dtype, tbp::DataType::DtInt64 as i32);
        let decoded: Vec<i64> = t
            .tensor_content
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(decoded, [-5, 7, i64::MAX]);
        let t = tensor(5);
        assert_eq!(t.dtype, tbp::DataType::DtBool as i32);
        assert_eq!(t.tensor_content, [1, 0, 1, 1]);
        let t = tensor(6);
        assert_eq!(dims(&t), [0, 3]);
        assert!(t.tensor_content.is_empty());
        let t = tensor(7);
        assert_eq!(t.dtype, tbp::DataType::DtBfloat16 as i32);
        assert!(dims(&t).is_empty());
        assert_eq!(t.tensor_content, bf16::from_f32(1.5).to_le_bytes());
    }
}

#[test]
fn tensorboard_zero_step_and_time_match_prost() {
    let mut record = Record::new(0, f64::NAN);
    assert_eq!(record.wall_time(), 0.0, "non-finite wall time becomes 0");
    record.add(tag("x"), 1.0);
    let packed = Packer::default().pack(&record, MetadataFor::All);
    let event = tb_event(&packed.items[0].bytes);
    assert_eq!((event.wall_time, event.step), (0.0, 0));
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one event file written and read back, each kind checked in turn"
)]
fn tensorboard_text_histogram_image_hparams_graph() {
    let mut record = Record::new(7, 100.0);
    let graph = Graph {
        name: "net".into(),
        nodes: vec![
            GraphNode::new("net/input", "Input").attr("shape", AttrValue::Ints(vec![1, 3])),
            GraphNode::new("net/fc/linear", "Linear")
                .input("net/input")
                .attr("bias", AttrValue::Bool(true)),
        ],
    };
    let hparams = HParams::new()
        .with("lr", 0.01)
        .with("opt", "adam")
        .with("bn", true)
        .metric("loss");
    let hparams = HParams {
        status: Some(SessionStatus::Success),
        ..hparams
    };
    record
        .add(tag("note"), "**hello**")
        .add(tag("h"), Value::histogram(vec![1.0f32, 2.0, 3.0, 4.0]))
        .add(
            tag("img"),
            Image::new(
                TensorValue::from_slice(&[0u8, 128, 255, 7], [1usize, 2, 2]),
                ImageLayout::Chw,
            ),
        )
        .add(tag("hp"), hparams)
        .add(tag("graph"), graph.clone());
    let packed = Packer::default().pack(&record, MetadataFor::All);
    assert!(packed.rejected.is_empty(), "{:?}", packed.rejected);
    assert_eq!(packed.items.len(), 2);
    // The graph event comes first, as in MindSpore's order.
    let g = tb_event(&packed.items[0].bytes);
    let Some(tbp::event::What::GraphDef(bytes)) = g.what else {
        panic!("no graph")
    };
    let def = tbp::GraphDef::decode(bytes.as_slice()).unwrap();
    assert_eq!(def.node.len(), 2);
    assert_eq!(def.node[1].name, "net/fc/linear");
    assert_eq!(def.node[1].op, "Linear");
    assert_eq!(def.node[1].input, ["net/input"]);
    assert_eq!(
        def.node[1].attr["bias"].value,
        Some(tbp::attr_value::Value::B(true))
    );
    let Some(tbp::attr_value::Value::List(l)) = &def.node[0].attr["shape"].value else {
        panic!()
    };
    assert_eq!(l.i, [1, 3]);

    let event = tbp::Event::decode(packed.items[1].bytes.as_slice()).unwrap();
    assert_eq!(event.step, 7);
    let values = tb_values(&event);
    use tbp::summary::value::Value as V;
    let tags: Vec<&str> = values.iter().map(|v| v.tag.as_str()).collect();
    assert_eq!(
        tags,
        [
            "note",
            "h",
            "img",
            "_hparams_/experiment",
            "_hparams_/session_start_info",
            "_hparams_/session_end_info"
        ]
    );
    let plugin = |i: usize| {
        values[i]
            .metadata
            .as_ref()
            .unwrap()
            .plugin_data
            .as_ref()
            .unwrap()
            .plugin_name
            .clone()
    };
    assert_eq!(
        [plugin(0), plugin(1), plugin(2), plugin(3)],
        ["text", "histograms", "images", "hparams"]
    );

    let Some(V::Tensor(text)) = &values[0].value else {
        panic!()
    };
    assert_eq!(text.dtype, tbp::DataType::DtString as i32);
    assert_eq!(text.string_val, [b"**hello**".to_vec()]);

    let Some(V::Histo(h)) = &values[1].value else {
        panic!()
    };
    assert_eq!(
        (h.min, h.max, h.num, h.sum, h.sum_squares),
        (1.0, 4.0, 4.0, 10.0, 30.0)
    );
    assert_eq!(h.bucket.iter().sum::<f64>(), 4.0);
    assert_eq!(h.bucket_limit.len(), 30);

    let Some(V::Image(img)) = &values[2].value else {
        panic!()
    };
    assert_eq!((img.width, img.height, img.colorspace), (2, 2, 1));
    let decoder = png::Decoder::new(std::io::Cursor::new(img.encoded_image_string.clone()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut buf).unwrap();
    assert_eq!(&buf[..4], &[0, 128, 255, 7]);

    use tbp::hparams::h_params_plugin_data::Data;
    let data = |i: usize| {
        let content = &values[i]
            .metadata
            .as_ref()
            .unwrap()
            .plugin_data
            .as_ref()
            .unwrap()
            .content;
        tbp::hparams::HParamsPluginData::decode(content.as_slice())
            .unwrap()
            .data
            .unwrap()
    };
    let Data::Experiment(exp) = data(3) else {
        panic!()
    };
    let names: Vec<_> = exp
        .hparam_infos
        .iter()
        .map(|i| (i.name.as_str(), i.r#type))
        .collect();
    use tbp::hparams::DataType as H;
    assert_eq!(
        names,
        [
            ("lr", H::Float64 as i32),
            ("opt", H::String as i32),
            ("bn", H::Bool as i32)
        ]
    );
    assert_eq!(exp.metric_infos[0].name.as_ref().unwrap().tag, "loss");
    let Data::SessionStartInfo(start) = data(4) else {
        panic!()
    };
    use ember_pack::proto::google::protobuf::value::Kind;
    assert_eq!(start.hparams["lr"].kind, Some(Kind::NumberValue(0.01)));
    assert_eq!(
        start.hparams["opt"].kind,
        Some(Kind::StringValue("adam".into()))
    );
    assert_eq!(start.hparams["bn"].kind, Some(Kind::BoolValue(true)));
    let Data::SessionEndInfo(end) = data(5) else {
        panic!()
    };
    assert_eq!(end.status, tbp::hparams::Status::Success as i32);
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one summary file written and read back, each kind checked in turn"
)]
fn mindinsight_every_kind() {
    let floats = f32_values(300);
    let halfs: Vec<f16> = floats.iter().map(|&x| f16::from_f32(x)).collect();
    let mut record = Record::new(3, 12.5);
    let train = msp::TrainLineage {
        hyper_parameters: Some(msp::train_lineage::HyperParameters {
            learning_rate: Some(0.1),
            epoch: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    };
    let explain = msp::Explain {
        image_path: Some("a.png".into()),
        sample_id: Some(9),
        ..Default::default()
    };
    let graph = Graph {
        name: "g".into(),
        nodes: vec![
            GraphNode::new("x", "Placeholder"),
            GraphNode::new("Default/net/conv1/weight", "Parameter")
                .attr("shape", AttrValue::Ints(vec![8, 3])),
            GraphNode::new("Default/net/conv1", "Conv2D")
                .input("x")
                .input("Default/net/conv1/weight")
                .attr("k", AttrValue::Int(3)),
        ],
    };
    record
        .add(tag("loss"), 2.5)
        .add(tag("w"), TensorValue::from_slice(&floats, [3usize, 100]))
        .add(tag("h16"), TensorValue::from(halfs.clone()))
        .add(tag("i8"), TensorValue::from(vec![-3i8, 4]))
        .add(tag("train"), Lineage::from(train.clone()))
        .add(tag("hist"), Value::histogram(floats.clone()))
        .add(tag("graph"), graph)
        .add(tag("explain"), explain.clone())
        .add(
            tag("hp"),
            HParams::new()
                .with("lr", 0.5)
                .with("epochs", 7i64)
                .with("opt", "sgd")
                .with("bn", HParamValue::Bool(false)),
        )
        .add(
            tag("export"),
            Value::export(TensorValue::from(vec![1u16, 2])),
        );
    let packed = Packer::new(PackOptions::new(Format::MindInsight)).pack(&record, MetadataFor::All);
    assert!(packed.rejected.is_empty(), "{:?}", packed.rejected);
    let kinds: Vec<FileKind> = packed.items.iter().map(|i| i.kind).collect();
    assert_eq!(
        kinds,
        [
            FileKind::Lineage,
            FileKind::Summary,
            FileKind::Explain,
            FileKind::Lineage,
            FileKind::Summary,
            FileKind::Export
        ]
    );

    let lineage = msp::LineageEvent::decode(packed.items[0].bytes.as_slice()).unwrap();
    assert_eq!((lineage.wall_time, lineage.step), (12.5, None));
    assert_eq!(
        lineage.what,
        Some(msp::lineage_event::What::TrainLineage(train))
    );

    let g = ms_event(&packed.items[1].bytes);
    assert_eq!(g.step, None);
    let Some(msp::event::What::GraphDef(gp)) = g.what else {
        panic!()
    };
    assert_eq!(gp.name.as_deref(), Some("g"));
    // MindSpore's layout: operators named by numeric id, `full_name` `<scope>/<Op>-op<id>`,
    // inputs by id; parameters apart, named in MindSpore's dotted style.
    let summary: Vec<_> = gp
        .node
        .iter()
        .map(|n| {
            (
                n.name.as_deref().unwrap(),
                n.op_type.as_deref().unwrap(),
                n.scope.as_deref().unwrap(),
                n.full_name.as_deref().unwrap(),
                n.input
                    .iter()
                    .map(|i| i.name.as_deref().unwrap())
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("1", "Placeholder", "x", "x/Placeholder-op1", vec![]),
            (
                "2",
                "Conv2D",
                "Default/net/conv1",
                "Default/net/conv1/Conv2D-op2",
                vec!["1", "Default.net.conv1.weight"]
            ),
        ]
    );
    assert_eq!(
        gp.node[1].attribute[0].value.as_ref().unwrap().int_val,
        Some(3)
    );
    assert_eq!(gp.parameters.len(), 1);
    assert_eq!(
        gp.parameters[0].name.as_deref(),
        Some("Default.net.conv1.weight")
    );
    let Some(msp::type_proto::Value::TensorType(t)) =
        gp.parameters[0].r#type.as_ref().unwrap().value.as_ref()
    else {
        panic!()
    };
    let dims: Vec<i64> = t
        .shape
        .as_ref()
        .unwrap()
        .dim
        .iter()
        .map(|d| d.size.unwrap())
        .collect();
    assert_eq!(dims, [8, 3]);

    let e = ms_event(&packed.items[2].bytes);
    assert_eq!(e.what, Some(msp::event::What::Explain(explain)));

    let hp = msp::LineageEvent::decode(packed.items[3].bytes.as_slice()).unwrap();
    let Some(msp::lineage_event::What::UserDefinedInfo(info)) = hp.what else {
        panic!()
    };
    // MindSpore's `SummaryCollector` layout: nothing at the top level, one `user_info` entry
    // per key holding one single-key map.
    assert!(info.map_double.is_empty() && info.map_str.is_empty() && info.map_int32.is_empty());
    let mut lr = msp::UserDefinedInfo::default();
    lr.map_double.insert("lr".into(), 0.5);
    let mut epochs = msp::UserDefinedInfo::default();
    epochs.map_int32.insert("epochs".into(), 7);
    let mut opt = msp::UserDefinedInfo::default();
    opt.map_str.insert("opt".into(), "sgd".into());
    let mut bn = msp::UserDefinedInfo::default();
    bn.map_str.insert("bn".into(), "false".into());
    assert_eq!(info.user_info, [lr, epochs, opt, bn]);

    let event = ms_event(&packed.items[4].bytes);
    assert_eq!((event.wall_time, event.step), (12.5, Some(3)));
    let values = ms_values(&event);
    let tags: Vec<&str> = values.iter().map(|v| v.tag.as_str()).collect();
    assert_eq!(tags, ["loss", "w", "h16", "i8", "hist"]);
    use msp::summary::value::Value as V;
    assert_eq!(values[0].value, Some(V::ScalarValue(2.5)));
    let Some(V::Tensor(t)) = &values[1].value else {
        panic!()
    };
    assert_eq!(
        (t.dims.as_slice(), t.data_type),
        (&[3i64, 100][..], Some(msp::DataType::DtFloat32 as i32))
    );
    assert_eq!(t.float_data, floats);
    let Some(V::Tensor(t)) = &values[2].value else {
        panic!()
    };
    assert_eq!(t.data_type, Some(msp::DataType::DtFloat16 as i32));
    assert_eq!(
        t.float_data,
        halfs.iter().map(|h| h.to_f32()).collect::<Vec<_>>()
    );
    let Some(V::Tensor(t)) = &values[3].value else {
        panic!()
    };
    assert_eq!(t.data_type, Some(msp::DataType::DtInt8 as i32));
    assert_eq!(t.float_data, [-3.0, 4.0]);
    let Some(V::Histogram(h)) = &values[4].value else {
        panic!()
    };
    assert_eq!(h.count, Some(300));
    assert_eq!(
        h.buckets.len(),
        31,
        "300 valid values: 300 / 10 + 1 buckets"
    );
    assert_eq!(h.buckets.iter().map(|b| b.count).sum::<i64>(), 300);

    let export = &packed.items[5];
    assert_eq!(
        export.export.as_ref().map(|k| (k.tag.as_str(), k.step)),
        Some(("export", 3))
    );
    assert!(export.bytes.starts_with(b"\x93NUMPY\x01\x00"));
    assert!(export.bytes.ends_with(&[1, 0, 2, 0]));
}

#[test]
fn every_dtype_packs_as_a_tensor() {
    for dtype in DType::ALL {
        let t = TensorValue::new(dtype, [2usize], vec![1u8; 2 * dtype.size()]);
        let mut record = Record::new(1, 1.0);
        record.add(tag("t"), t);
        let tb = Packer::default().pack(&record, MetadataFor::All);
        assert!(tb.rejected.is_empty(), "{dtype}");
        tb_event(&tb.items[0].bytes);
        let ms = Packer::new(PackOptions::new(Format::MindInsight)).pack(&record, MetadataFor::All);
        if dtype == DType::BF16 {
            assert_eq!(ms.rejected.len(), 1, "MindSpore has no bf16");
        } else {
            assert!(ms.rejected.is_empty(), "{dtype}");
            ms_event(&ms.items[0].bytes);
        }
    }
}

#[test]
fn pack_many_keeps_order() {
    let records: Vec<Record> = (0..200)
        .map(|i| {
            let mut r = Record::new(i, i as f64);
            r.add(tag("x"), i as f64);
            r
        })
        .collect();
    let packer = Packer::default();
    let packed = packer.pack_many(&records);
    assert_eq!(packed.len(), 200);
    for (i, p) in packed.iter().enumerate() {
        assert_eq!(
            p.items[0].bytes,
            packer.pack(&records[i], MetadataFor::All).items[0].bytes
        );
        assert_eq!(tb_event(&p.items[0].bytes).step, i as i64);
    }
}

/// `pack_into` gives the bytes `pack` gives, whatever the buffer held before and however large
/// it is.
#[test]
fn pack_into_a_used_buffer_equals_pack() {
    let values: Vec<f32> = (0..50_000).map(|i| i as f32 * 0.5).collect();
    let mut record = Record::new(300, 1.7e9);
    record.add(tag("t"), TensorValue::from(values));
    record.add(tag("loss"), 0.25);
    for format in [Format::TensorBoard, Format::MindInsight] {
        let packer = Packer::new(PackOptions::new(format));
        let want = packer.pack(&record, MetadataFor::All);
        let mut big = Vec::with_capacity(1 << 20);
        big.extend_from_slice(&[0xab; 1000]);
        for buffer in [Vec::new(), vec![0xcd; 10], big] {
            assert_eq!(
                packer.pack_into(&record, MetadataFor::All, buffer),
                want,
                "{format:?}"
            );
        }
    }
}
