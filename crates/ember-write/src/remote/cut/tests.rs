use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::super::{Bucket, BucketSnapshot, RemoteMirror, download};
use crate::Ownership;

const EVENTS: &str = "events.out.tfevents.0000000001.h.1.0";

fn file_bucket() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    let url = format!("file://{}/run", dir.path().display());
    (dir, url)
}

/// Appends `records` framed records of 40 bytes each (`first` on) to the staged event file;
/// its length after.
fn append(staging: &Path, first: u8, records: u8) -> u64 {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(staging.join(EVENTS))
        .unwrap();
    let mut bytes = Vec::new();
    for record in first..first + records {
        crate::framing::frame_into(&mut bytes, &[record; 40]);
    }
    file.write_all(&bytes).unwrap();
    file.metadata().unwrap().len()
}

#[test]
fn a_cut_names_the_objects_up_to_it_as_a_listing_would_and_a_rollback_keeps_just_them() {
    let (_dir, url) = file_bucket();
    let staging = tempfile::tempdir().unwrap();
    let bucket = Bucket::open(&url).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    let at_first = append(staging.path(), 0, 2);
    std::fs::write(staging.path().join("projector_config.pbtxt"), b"config a").unwrap();
    let first = mirror.cut().unwrap();

    // After the cut: more records, the config rewritten, an embedding's tensors. One ship takes it
    // all, and still the segment ends at the cut.
    let at_second = append(staging.path(), 2, 2);
    std::fs::write(staging.path().join("projector_config.pbtxt"), b"config b").unwrap();
    std::fs::create_dir_all(staging.path().join("embeddings")).unwrap();
    std::fs::write(staging.path().join("embeddings/tensors.tsv"), b"1\t2\n").unwrap();
    mirror.ship().unwrap();
    let listed = BucketSnapshot::take(&bucket, &[], Ownership::ALONE).unwrap();
    let second = mirror.cut().unwrap();
    append(staging.path(), 4, 3);

    let base = BucketSnapshot::default();
    let second = base.with_shipped(second.shipped().unwrap(), &[], Ownership::ALONE);
    assert_eq!(
        second, listed,
        "the cut after the ship is what a listing then counts"
    );
    let first = first.shipped().unwrap();
    assert_eq!(
        first.objects,
        [(format!("{EVENTS}.00000001"), at_first)].into()
    );
    assert_eq!(first.projector_config.as_deref(), Some(&b"config a"[..]));
    mirror.close().unwrap();

    // Rolled back to the first cut, the bucket holds the log as it was then.
    let first = base.with_shipped(first, &[], Ownership::ALONE);
    first.restore(&bucket, &[], Ownership::ALONE).unwrap();
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let events = std::fs::read(local.path().join(EVENTS)).unwrap();
    assert_eq!(events.len() as u64, at_first);
    let scan = crate::Scan::file(local.path().join(EVENTS)).unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.records.len(), 2);
    assert!(!local.path().join("embeddings/tensors.tsv").exists());
    let config = std::fs::read(local.path().join("projector_config.pbtxt")).unwrap();
    assert_eq!(config, b"config a");
    assert!(at_second > at_first);
}

#[test]
fn no_segment_crosses_a_cut_taken_while_the_mirror_ships() {
    let (_dir, url) = file_bucket();
    let staging = tempfile::tempdir().unwrap();
    // A pass every millisecond, racing the cuts.
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_millis(1)).unwrap();
    let mut cuts = Vec::new();
    for record in 0..120u8 {
        let len = append(staging.path(), record, 1);
        if record % 7 == 3 {
            cuts.push((len, mirror.cut().unwrap()));
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    for (len, cut) in cuts {
        let shipped = cut.shipped().unwrap();
        let total: u64 = shipped.objects.values().sum();
        assert_eq!(total, len, "the objects up to a cut hold exactly its bytes");
    }
    mirror.close().unwrap();
}

#[test]
fn a_cut_of_a_closed_mirror_is_an_error_not_a_checkpoint() {
    let (_dir, url) = file_bucket();
    let staging = tempfile::tempdir().unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    append(staging.path(), 0, 1);
    let cut = mirror.cut().unwrap();
    mirror.close().unwrap();
    assert!(cut.shipped().is_err());
}

/// Before: the mirror closed a cut before the pass that shipped it, so that pass's segment ran
/// on past the cut whenever records had followed it, and the checkpoint was passed over ("not
/// shipped up to the checkpoint's … bytes"): in about a third of bucket runs, where the
/// checkpoint thread asked before a timed pass had shipped the cut.
#[test]
fn a_cut_asked_for_before_any_pass_ships_it_ends_a_segment() {
    let (_dir, url) = file_bucket();
    let staging = tempfile::tempdir().unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    let at_cut = append(staging.path(), 0, 2);
    let cut = mirror.cut().unwrap();
    let at_end = append(staging.path(), 2, 3);
    let shipped = cut.shipped().unwrap();
    assert_eq!(
        shipped.objects,
        [(format!("{EVENTS}.00000001"), at_cut)].into()
    );
    mirror.close().unwrap();
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let events = local.path().join(EVENTS);
    assert_eq!(std::fs::metadata(&events).unwrap().len(), at_end);
    let scan = crate::Scan::file(events).unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.records.len(), 5);
}

/// A cut whose segment the store refuses is an error, so its checkpoint is not written; once
/// the store takes segments again, the next cut ships with the records of both.
#[test]
fn a_cut_the_store_refuses_is_an_error_and_the_next_one_ships_its_records_too() {
    let (dir, url) = file_bucket();
    let staging = tempfile::tempdir().unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    append(staging.path(), 0, 1);
    mirror.cut().unwrap().shipped().unwrap();
    // A directory where the second segment goes: the file store cannot put an object there.
    let second_segment = dir.path().join(format!("run/{EVENTS}.00000002"));
    std::fs::create_dir(&second_segment).unwrap();
    append(staging.path(), 1, 2);
    let refused = mirror.cut().unwrap();
    assert!(refused.shipped().is_err(), "a cut not in the store shipped");

    std::fs::remove_dir(&second_segment).unwrap();
    let at_next = append(staging.path(), 3, 1);
    let next = mirror.cut().unwrap().shipped().unwrap();
    assert_eq!(next.objects.values().sum::<u64>(), at_next);
    mirror.close().unwrap();
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let scan = crate::Scan::file(local.path().join(EVENTS)).unwrap();
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.records.len(), 4);
}
