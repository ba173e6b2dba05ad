//! Bad input gives a typed error naming the tag, and the rest of the record still packs;
//! item order; `.npy` exports; metadata only for the tags asked for.

use std::collections::HashSet;

use ember_pack::proto::tensorboard as tbp;
use ember_pack::{
    DType, FileKind, Format, Graph, Lineage, MetadataFor, PackErrorKind, PackOptions, Packer,
    Record, Tag, TensorValue, Value,
};
use prost::Message;

fn tag(s: &str) -> Tag {
    Tag::new(s).unwrap()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a table of bad values, each with its error"
)]
fn bad_values_are_rejected_one_by_one() {
    let mut record = Record::new(5, 1.0);
    record
        .add(
            tag("bad_bytes"),
            TensorValue::new(DType::F32, [3usize], vec![0; 11]),
        )
        .add(tag("ok"), 1.0)
        .add(tag("text"), "hello")
        .add(
            tag("lineage"),
            Lineage::from(ember_pack::proto::mindspore::UserDefinedInfo::default()),
        )
        .add(
            tag("explain"),
            ember_pack::proto::mindspore::Explain::default(),
        );
    let tb = Packer::default().pack(&record, MetadataFor::All);
    let tb_errors: Vec<(&str, &PackErrorKind)> = tb
        .rejected
        .iter()
        .map(|e| (e.tag.as_str(), &e.kind))
        .collect();
    assert_eq!(tb_errors.len(), 3);
    assert!(matches!(
        tb_errors[0],
        (
            "bad_bytes",
            PackErrorKind::ByteLength {
                expected: Some(12),
                actual: 11,
                ..
            }
        )
    ));
    assert_eq!(
        tb_errors[1],
        (
            "lineage",
            &PackErrorKind::Unsupported {
                format: Format::TensorBoard,
                kind: "lineage"
            }
        )
    );
    assert_eq!(
        tb_errors[2],
        (
            "explain",
            &PackErrorKind::Unsupported {
                format: Format::TensorBoard,
                kind: "explain"
            }
        )
    );
    assert!(
        tb.rejected[0].to_string().contains("bad_bytes"),
        "{}",
        tb.rejected[0]
    );
    let event = tbp::Event::decode(tb.items[0].bytes.as_slice()).unwrap();
    let Some(tbp::event::What::Summary(s)) = event.what else {
        panic!()
    };
    assert_eq!(
        s.value.iter().map(|v| v.tag.as_str()).collect::<Vec<_>>(),
        ["ok", "text"]
    );

    let ms = Packer::new(PackOptions::new(Format::MindInsight)).pack(&record, MetadataFor::All);
    let ms_errors: Vec<(&str, &PackErrorKind)> = ms
        .rejected
        .iter()
        .map(|e| (e.tag.as_str(), &e.kind))
        .collect();
    assert_eq!(ms_errors.len(), 3);
    assert_eq!(
        ms_errors[1],
        (
            "text",
            &PackErrorKind::Unsupported {
                format: Format::MindInsight,
                kind: "text"
            }
        )
    );
    assert_eq!(ms_errors[2], ("explain", &PackErrorKind::EmptyExplain));
    let kinds: Vec<FileKind> = ms.items.iter().map(|i| i.kind).collect();
    assert_eq!(kinds, [FileKind::Lineage, FileKind::Summary]);
}

#[test]
fn order_is_graph_and_lineage_then_summary_then_exports() {
    let mut record = Record::new(9, 1.0);
    record
        .add(tag("e1"), Value::export(TensorValue::from(vec![1.0f32])))
        .add(tag("x"), 1.0)
        .add(tag("g"), Graph::default())
        .add(tag("e2"), Value::export(TensorValue::from(vec![2.0f64])));
    for format in [Format::TensorBoard, Format::MindInsight] {
        let packed = Packer::new(PackOptions::new(format)).pack(&record, MetadataFor::All);
        assert!(packed.rejected.is_empty());
        let kinds: Vec<FileKind> = packed.items.iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            [
                FileKind::Summary,
                FileKind::Summary,
                FileKind::Export,
                FileKind::Export
            ]
        );
        let keys: Vec<_> = packed
            .items
            .iter()
            .filter_map(|i| i.export.as_ref())
            .map(|k| (k.tag.as_str(), k.step))
            .collect();
        assert_eq!(keys, [("e1", 9), ("e2", 9)]);
    }
    let mut empty = Record::new(1, 1.0);
    empty.add(
        tag("only_export"),
        Value::export(TensorValue::from(vec![1u8])),
    );
    let packed = Packer::default().pack(&empty, MetadataFor::All);
    assert_eq!(packed.items.len(), 1, "no summary values, no summary event");
}

#[test]
fn npy_matches_numpy_save() {
    let t = TensorValue::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2usize, 3]);
    let mut record = Record::new(1, 1.0);
    record.add(tag("t"), Value::export(t));
    let bytes = Packer::default()
        .pack(&record, MetadataFor::All)
        .items
        .remove(0)
        .bytes;
    // What numpy.save writes for np.arange(1, 7, dtype='<f4').reshape(2, 3).
    let mut header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".to_vec();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut want = b"\x93NUMPY\x01\x00".to_vec();
    want.extend_from_slice(&(header.len() as u16).to_le_bytes());
    want.extend_from_slice(&header);
    for v in 1..=6 {
        want.extend_from_slice(&(v as f32).to_le_bytes());
    }
    assert_eq!(bytes, want);
    assert_eq!((10 + header.len()) % 64, 0);

    for (t, descr, shape) in [
        (TensorValue::scalar(true), "|b1", "()"),
        (TensorValue::from(vec![1i64, 2, 3]), "<i8", "(3,)"),
        (TensorValue::scalar(half::bf16::from_f32(2.0)), "<f4", "()"),
    ] {
        let mut record = Record::new(1, 1.0);
        record.add(tag("t"), Value::export(t));
        let bytes = Packer::default()
            .pack(&record, MetadataFor::All)
            .items
            .remove(0)
            .bytes;
        let text = String::from_utf8_lossy(&bytes[10..]);
        assert!(text.contains(&format!("'descr': '{descr}'")), "{text}");
        assert!(text.contains(&format!("'shape': {shape}, ")), "{text}");
    }
}

#[test]
fn metadata_only_for_the_tags_asked() {
    let mut record = Record::new(1, 1.0);
    record
        .add(tag("a"), 1.0)
        .add(tag("b"), 2.0)
        .add(tag("c"), Value::histogram(vec![1.0f32, 2.0]));
    let first: HashSet<Tag> = [tag("b"), tag("c")].into();
    let packed = Packer::default().pack(&record, MetadataFor::Only(&first));
    let event = tbp::Event::decode(packed.items[0].bytes.as_slice()).unwrap();
    let Some(tbp::event::What::Summary(s)) = event.what else {
        panic!()
    };
    let with: Vec<bool> = s.value.iter().map(|v| v.metadata.is_some()).collect();
    assert_eq!(with, [false, true, true]);
}

#[test]
fn wall_time_is_always_finite() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(Record::new(1, bad).wall_time(), 0.0);
        let header = Packer::default().file_header(FileKind::Summary, bad);
        let event = tbp::Event::decode(header.as_slice()).unwrap();
        assert_eq!(event.wall_time, 0.0);
    }
}
