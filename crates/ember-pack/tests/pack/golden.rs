//! Golden bytes from the references: MindSpore's init and scalar events, TensorBoard's
//! `file_version` event and minimal scalar event.

use std::collections::HashSet;

use ember_pack::{FileKind, Format, MetadataFor, PackOptions, Packer, Record, Tag};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn packer(format: Format) -> Packer {
    Packer::new(PackOptions::new(format))
}

#[test]
fn mindspore_init_event() {
    // mindspore-summary.md §6: Event{wall_time=1.0, version="MindSpore.Event:1"}, 28 bytes.
    let expected = hex("09000000000000f03f 1a11 4d696e6453706f72652e4576656e743a31");
    assert_eq!(expected.len(), 28);
    let p = packer(Format::MindInsight);
    assert_eq!(p.file_header(FileKind::Summary, 1.0), expected);
    assert_eq!(p.file_header(FileKind::Explain, 1.0), expected);
    assert!(
        p.file_header(FileKind::Lineage, 1.0).is_empty(),
        "lineage files have no first event"
    );
    assert!(p.file_header(FileKind::Export, 1.0).is_empty());
}

#[test]
fn mindspore_scalar_event() {
    // {wall_time=1.0, step=1, summary{value{tag="loss", scalar_value=0.5}}}
    let expected = hex("09000000000000f03f 1001 2a0d 0a0b 0a046c6f7373 1d0000003f");
    let mut record = Record::new(1, 1.0);
    record.add(Tag::new("loss").unwrap(), 0.5);
    let packed = packer(Format::MindInsight).pack(&record, MetadataFor::All);
    assert!(packed.rejected.is_empty());
    assert_eq!(packed.items.len(), 1);
    assert_eq!(packed.items[0].kind, FileKind::Summary);
    assert_eq!(packed.items[0].bytes, expected);
}

#[test]
fn tensorboard_file_version_event() {
    // tensorboard-format.md §1: `09 00 00 80 38 99 d6 d7 41 1a 0d "brain.Event:2"`, 24 bytes,
    // wall_time 1599759586.0. ember adds source_metadata.writer (field 10) after it.
    let mut expected = hex("09 00 00 80 38 99 d6 d7 41 1a 0d");
    expected.extend_from_slice(b"brain.Event:2");
    assert_eq!(expected.len(), 24);
    let header = packer(Format::TensorBoard).file_header(FileKind::Summary, 1_599_759_586.0);
    assert_eq!(&header[..24], &expected[..]);
    let mut writer = vec![0x52, 0x07, 0x0a, 0x05];
    writer.extend_from_slice(b"ember");
    assert_eq!(&header[24..], &writer[..]);
}

#[test]
fn tensorboard_minimal_scalar_event_is_27_bytes() {
    // tensorboard-format.md §1: wall_time, step=1000, tag "loss", simple_value: 27 bytes.
    let mut record = Record::new(1000, 1_599_759_586.0);
    record.add(Tag::new("loss").unwrap(), 0.25);
    let none = HashSet::new();
    let packed = packer(Format::TensorBoard).pack(&record, MetadataFor::Only(&none));
    let mut expected = hex("09 00 00 80 38 99 d6 d7 41 10 e8 07 2a 0d 0a 0b 0a 04");
    expected.extend_from_slice(b"loss");
    expected.extend_from_slice(&hex("15"));
    expected.extend_from_slice(&0.25f32.to_le_bytes());
    assert_eq!(expected.len(), 27);
    assert_eq!(packed.items[0].bytes, expected);
}
