use std::path::PathBuf;

use super::download::file_of_segment;
use super::shipper::whole_records;
use super::*;

#[test]
fn only_whole_records_are_shipped() {
    let mut bytes = Vec::new();
    crate::framing::frame_into(&mut bytes, b"first");
    crate::framing::frame_into(&mut bytes, b"second record");
    let whole = bytes.len();
    crate::framing::frame_into(&mut bytes, b"third, cut");
    for cut in whole..bytes.len() {
        assert_eq!(whole_records(&bytes[..cut]), whole, "cut at {cut}");
    }
    assert_eq!(whole_records(&bytes), bytes.len());
    assert_eq!(whole_records(&[]), 0);
    // Zeros (bytes freed after they were shipped) are no record of length 0: their header's
    // CRC is wrong.
    let mut freed = bytes[..whole].to_vec();
    freed.extend_from_slice(&[0; 64]);
    assert_eq!(whole_records(&freed), whole);
}

#[test]
fn file_urls_ship_segments_of_whole_records_in_order() {
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    let file = staging.path().join("events.out.tfevents.0000000001.h.1.0");
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for record in 0..7u8 {
        crate::framing::frame_into(&mut stream, &[record; 40]);
        ends.push(stream.len());
    }
    // Each round the file holds two more whole records and half of the next one.
    for round in 1..=3 {
        let whole = ends[2 * round - 1];
        let half = whole + (ends[2 * round] - whole) / 2;
        std::fs::write(&file, &stream[..half]).unwrap();
        mirror.ship().unwrap();
    }
    let stats = mirror.close().unwrap();
    assert_eq!((stats.segments, stats.bytes), (3, ends[5] as u64));
    // The segments, beside the marker that says the file is the run's.
    let marker = markers::marker_of("events.out.tfevents.0000000001.h.1.0.00000001");
    assert_eq!(
        std::fs::read(bucket.path().join("run").join(marker)).unwrap(),
        b""
    );
    let mut segments: Vec<PathBuf> = std::fs::read_dir(bucket.path().join("run"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| !path.ends_with(".ember-run"))
        .collect();
    segments.sort();
    let names: Vec<String> = segments
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [1, 2, 3].map(|n| format!("events.out.tfevents.0000000001.h.1.0.{n:08}"))
    );
    // In name order, the segments are the file's whole records, each once.
    let shipped: Vec<u8> = segments
        .iter()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect();
    assert_eq!(shipped, stream[..ends[5]]);
    for segment in &segments {
        let scan = crate::Scan::file(segment).unwrap();
        assert!(scan.problems.is_empty(), "{segment:?}: {:?}", scan.problems);
    }
    // Downloaded, the segments join back into the file as it was shipped.
    let local = tempfile::tempdir().unwrap();
    assert_eq!(download(&url, local.path()).unwrap(), 3);
    let joined = std::fs::read(local.path().join("events.out.tfevents.0000000001.h.1.0"));
    assert_eq!(joined.unwrap(), stream[..ends[5]]);
    assert_eq!(
        file_of_segment("a.summary.1.0.h_lineage.00000002"),
        "a.summary.1.0.h_lineage"
    );
    assert_eq!(
        file_of_segment("projector_config.pbtxt"),
        "projector_config.pbtxt"
    );
}

#[test]
fn other_files_go_whole_and_again_when_they_change() {
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    let export = staging.path().join("export_5/tensor");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::write(export.join("loss_3.npy"), b"\x93NUMPY tensor").unwrap();
    std::fs::write(staging.path().join("projector_config.pbtxt"), b"one").unwrap();
    std::fs::write(staging.path().join(".projector_config.pbtxt.9.tmp"), b"x").unwrap();
    mirror.ship().unwrap();
    let stored = |relative: &str| std::fs::read(bucket.path().join("run").join(relative));
    assert_eq!(
        stored("export_5/tensor/loss_3.npy").unwrap(),
        b"\x93NUMPY tensor"
    );
    assert_eq!(stored("projector_config.pbtxt").unwrap(), b"one");
    assert!(stored(".projector_config.pbtxt.9.tmp").is_err());
    // Unchanged files are not sent again; a changed one replaces its object.
    mirror.ship().unwrap();
    std::fs::write(
        staging.path().join("projector_config.pbtxt"),
        b"two, longer",
    )
    .unwrap();
    let stats = mirror.close().unwrap();
    assert_eq!(stored("projector_config.pbtxt").unwrap(), b"two, longer");
    assert_eq!(
        (stats.objects, stats.segments, stats.backlog_bytes),
        (3, 0, 0)
    );
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let got = std::fs::read(local.path().join("projector_config.pbtxt")).unwrap();
    assert_eq!(got, b"two, longer");
}

#[test]
fn over_the_budget_the_pool_policy_decides_and_nothing_accepted_is_lost() {
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let prefix = bucket.path().join("run");
    std::fs::create_dir_all(&prefix).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    // The store goes away: its directory becomes a file, so every upload fails.
    std::fs::remove_dir(&prefix).unwrap();
    std::fs::write(&prefix, b"").unwrap();
    let mut stream = Vec::new();
    for record in 0..20u8 {
        crate::framing::frame_into(&mut stream, &[record; 100]);
    }
    let file = staging.path().join("events.out.tfevents.0000000001.h.1.0");
    std::fs::write(&file, &stream).unwrap();
    assert!(mirror.ship().is_err());
    assert_eq!(mirror.backlog(), stream.len() as u64);
    let budget = 1000;
    assert!(mirror.admit(FullQueuePolicy::Block, 10_000).unwrap());
    assert!(!mirror.admit(FullQueuePolicy::DropNewest, budget).unwrap());
    assert!(matches!(
        mirror.admit(FullQueuePolicy::Error, budget),
        Err(RemoteError::OverBudget { backlog, .. }) if backlog == stream.len() as u64
    ));
    std::thread::scope(|scope| {
        let blocked = scope.spawn(|| mirror.admit(FullQueuePolicy::Block, budget));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!blocked.is_finished(), "admitted while over the budget");
        // The store comes back: the next pass ships the backlog and the caller goes on.
        std::fs::remove_file(&prefix).unwrap();
        std::fs::create_dir(&prefix).unwrap();
        mirror.ship().unwrap();
        assert!(blocked.join().unwrap().unwrap());
    });
    let stats = mirror.close().unwrap();
    assert_eq!(stats.records_over_budget, 2);
    assert_eq!((stats.bytes, stats.backlog_bytes), (stream.len() as u64, 0));
    assert!(stats.failed_uploads >= 1);
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let joined = std::fs::read(local.path().join("events.out.tfevents.0000000001.h.1.0"));
    assert_eq!(joined.unwrap(), stream);
}

#[cfg(target_os = "linux")]
#[test]
fn shipped_records_leave_the_local_disk_and_the_file_its_length() {
    use std::os::unix::fs::MetadataExt;
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    let mut stream = Vec::new();
    for record in 0..64u8 {
        crate::framing::frame_into(&mut stream, &[record; 16 << 10]);
    }
    let file = staging.path().join("events.out.tfevents.0000000001.h.1.0");
    std::fs::write(&file, &stream).unwrap();
    let before = std::fs::metadata(&file).unwrap().blocks() * 512;
    assert!(before >= stream.len() as u64);
    mirror.ship().unwrap();
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(after.len(), stream.len() as u64);
    assert!(
        after.blocks() * 512 < before / 4,
        "{} of {before} bytes still on disk",
        after.blocks() * 512
    );
    mirror.close().unwrap();
}

#[test]
fn a_url_of_no_object_store_is_refused_at_start() {
    let staging = tempfile::tempdir().unwrap();
    for url in ["ftp://x/y", "not a url"] {
        assert!(matches!(
            RemoteMirror::start(url, staging.path(), DEFAULT_SHIP_INTERVAL),
            Err(RemoteError::Url { .. })
        ));
    }
    assert!(crate::is_remote("s3://bucket/run") && crate::is_remote("gs://b/p"));
    assert!(!crate::is_remote("runs/s3:/x") && !crate::is_remote("/tmp/run"));
}

/// Before: two records of one host and rank to one URL in one second staged files of one
/// name, and the second writer's PUTs replaced the first's objects.
#[test]
fn two_writers_to_one_url_in_one_second_both_keep_their_records() {
    let bucket = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let name = "events.out.events.summary.1700000000.0.host_MS";
    let mut streams = Vec::new();
    let mut mirrors = Vec::new();
    let stagings: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for (writer, staging) in stagings.iter().enumerate() {
        let mut stream = Vec::new();
        crate::framing::frame_into(&mut stream, format!("writer {writer}").as_bytes());
        std::fs::write(staging.path().join(name), &stream).unwrap();
        let export = staging.path().join("export_1700000000");
        std::fs::create_dir(&export).unwrap();
        std::fs::write(export.join("w.npy"), format!("tensor of {writer}")).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        mirror.ship().unwrap();
        streams.push(stream);
        mirrors.push(mirror);
    }
    // The first writer's next segment still goes under the name it claimed.
    crate::framing::frame_into(&mut streams[0], b"writer 0, later");
    std::fs::write(stagings[0].path().join(name), &streams[0]).unwrap();
    for mirror in mirrors {
        mirror.close().unwrap();
    }
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let moved = "events.out.events.summary.1700000001.0.host_MS";
    assert_eq!(std::fs::read(local.path().join(name)).unwrap(), streams[0]);
    assert_eq!(std::fs::read(local.path().join(moved)).unwrap(), streams[1]);
    for (dir, writer) in [("export_1700000000", 0), ("export_1700000001", 1)] {
        let tensor = std::fs::read_to_string(local.path().join(dir).join("w.npy")).unwrap();
        assert_eq!(tensor, format!("tensor of {writer}"));
    }
}

#[test]
fn a_name_moves_on_by_its_time_alone() {
    use crate::naming::with_secs;
    assert_eq!(
        with_secs("events.out.tfevents.0000000009.a.b.7.0", 10).unwrap(),
        "events.out.tfevents.0000000010.a.b.7.0"
    );
    assert_eq!(
        with_secs("events.out.events.summary.9.0.rank3.host_lineage", 10).unwrap(),
        "events.out.events.summary.10.0.rank3.host_lineage"
    );
    assert_eq!(with_secs("export_9", 10).unwrap(), "export_10");
    assert_eq!(with_secs("projector_config.pbtxt", 10), None);
}

/// Before: a blocked record waited for the store with no deadline, and nothing could end
/// the wait (Ctrl-C was never read).
#[test]
fn a_blocked_record_waits_no_longer_than_its_deadline_or_its_stop() {
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let prefix = bucket.path().join("run");
    std::fs::create_dir_all(&prefix).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    std::fs::remove_dir(&prefix).unwrap();
    std::fs::write(&prefix, b"").unwrap();
    let mut stream = Vec::new();
    crate::framing::frame_into(&mut stream, &[7; 500]);
    std::fs::write(
        staging.path().join("events.out.tfevents.0000000001.h.1.0"),
        &stream,
    )
    .unwrap();
    assert!(mirror.ship().is_err());
    let deadline = Wait {
        deadline: Duration::from_millis(200),
        stop: None,
    };
    let started = std::time::Instant::now();
    let waited = mirror.admit_within(FullQueuePolicy::Block, 10, &deadline);
    assert!(
        matches!(
            waited,
            Err(RemoteError::Waited {
                why: "the deadline passed",
                ..
            })
        ),
        "{waited:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = Wait {
        deadline: Duration::from_secs(3600),
        stop: Some(Arc::clone(&stop)),
    };
    std::thread::scope(|scope| {
        let blocked = scope.spawn(|| mirror.admit_within(FullQueuePolicy::Block, 10, &stopping));
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Release);
        let waited = blocked.join().unwrap();
        assert!(
            matches!(
                waited,
                Err(RemoteError::Waited {
                    why: "asked to stop",
                    ..
                })
            ),
            "{waited:?}"
        );
    });
    std::fs::remove_file(&prefix).unwrap();
    std::fs::create_dir(&prefix).unwrap();
    assert_eq!(mirror.close().unwrap().records_over_budget, 2);
}

/// Before: `start` and `download` blocked on a runtime of their own, which panics inside
/// the caller's tokio runtime.
#[test]
fn a_mirror_starts_and_a_download_runs_inside_a_tokio_runtime() {
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
        let mut stream = Vec::new();
        crate::framing::frame_into(&mut stream, b"from inside a runtime");
        let name = "events.out.tfevents.0000000001.h.1.0";
        std::fs::write(staging.path().join(name), &stream).unwrap();
        mirror.ship().unwrap();
        let local = download_private(&url).unwrap();
        assert_eq!(std::fs::read(local.path().join(name)).unwrap(), stream);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(local.path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "a download directory is private");
        }
        mirror.close().unwrap();
    });
}

/// A backlog ships as segments of at most the cap, each of whole records, a record larger
/// than the cap alone: before, all of it went as one PUT (which S3 refuses past 5 GiB).
#[test]
fn a_backlog_is_read_a_segment_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.out.tfevents.0000000001.h.1.0");
    let mut stream = Vec::new();
    let mut ends = Vec::new();
    for len in [100usize, 100, 100, 1000, 100] {
        crate::framing::frame_into(&mut stream, &vec![1; len]);
        ends.push(stream.len());
    }
    std::fs::write(&path, &stream).unwrap();
    let cap = 2 * 116 + 50;
    let first = shipper::read_segment(&path, 0, cap).unwrap();
    assert_eq!(whole_records_of(&first), ends[1]);
    let from = ends[2] as u64;
    let big = shipper::read_segment(&path, from, cap).unwrap();
    assert_eq!(whole_records_of(&big), ends[3] - ends[2]);
    let last = shipper::read_segment(&path, ends[3] as u64, cap).unwrap();
    assert_eq!(whole_records_of(&last), ends[4] - ends[3]);
}

fn whole_records_of(bytes: &[u8]) -> usize {
    shipper::whole_records(bytes)
}

/// The projector's directories hold a `%` (`embedding%2Fhidden_26`): a rollback removes their
/// objects, as listed, where it used to escape the `%` again and remove nothing.
#[test]
fn a_rollback_removes_the_objects_of_names_holding_a_percent_sign() {
    let staging = tempfile::tempdir().unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let store = Bucket::open(&url).unwrap();
    let ownership = crate::Ownership {
        rank: 0,
        world_size: 1,
    };
    let checkpoint = BucketSnapshot::take(&store, &[], ownership).unwrap();
    let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600)).unwrap();
    let embedding = staging.path().join("embeddings/embedding%2Fhidden_26");
    std::fs::create_dir_all(&embedding).unwrap();
    std::fs::write(embedding.join("tensors.tsv"), b"0.5\t0.25\n").unwrap();
    mirror.close().unwrap();
    let object = "embeddings/embedding%2Fhidden_26/tensors.tsv";
    let listed = |store: &Bucket| -> Vec<String> {
        store.list().unwrap().into_iter().map(|l| l.name).collect()
    };
    assert!(
        listed(&store).iter().any(|name| name == object),
        "{:?}",
        listed(&store)
    );
    let removed = checkpoint.restore(&store, &[], ownership).unwrap();
    assert_eq!(removed, [object]);
    assert!(
        !listed(&store).iter().any(|name| name == object),
        "{:?}",
        listed(&store)
    );
    assert!(!bucket.path().join("run").join(object).exists());
}

/// Before: a run resumed within the second its last file was made in (in one process, or by
/// one of a lower process id) named its first file by its staging directory alone, which
/// holds none of the run's files, and that name could sort before the last one's: readers,
/// which take a directory's files in name order, read the resumed steps first. Now its first
/// object is named one second after the newest of its kind in the store, as the pool names a
/// first file after those already in a local directory; a lineage file there moves no summary
/// file.
#[test]
fn a_resumed_run_s_first_file_sorts_after_the_run_s_files_in_the_store() {
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let write = |name: &str, record: &[u8]| {
        let staging = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        crate::framing::frame_into(&mut bytes, record);
        std::fs::write(staging.path().join(name), bytes).unwrap();
        let mirror = RemoteMirror::start(&url, staging.path(), Duration::from_secs(3600));
        mirror.unwrap().close().unwrap();
    };
    write(
        "events.out.events.summary.0000000005.0.h_lineage",
        b"lineage",
    );
    write("events.out.tfevents.0000000005.h.9.0", b"killed");
    write("events.out.tfevents.0000000005.h.10.1", b"resumed");
    let local = tempfile::tempdir().unwrap();
    download(&url, local.path()).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(local.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("tfevents"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "events.out.tfevents.0000000005.h.9.0",
            "events.out.tfevents.0000000006.h.10.1"
        ]
    );
    let read: Vec<Vec<u8>> = names
        .iter()
        .flat_map(|name| crate::Scan::file(local.path().join(name)).unwrap().records)
        .map(|record| record.data)
        .collect();
    assert_eq!(read, [b"killed".to_vec(), b"resumed".to_vec()]);
}
