use std::fs;

use ember_write::FullQueuePolicy;

use crate::SummaryRecord;

#[test]
fn over_its_budget_a_record_follows_the_queue_policy_and_ships_all_it_accepted() {
    let bucket = tempfile::tempdir().unwrap();
    let prefix = bucket.path().join("run");
    fs::create_dir_all(&prefix).unwrap();
    let url = format!("file://{}", prefix.display());
    let mut record = SummaryRecord::builder(&url)
        .queue(1024, FullQueuePolicy::DropNewest)
        .remote_backlog_budget(1)
        .build()
        .unwrap();
    record.add_scalar("loss", 1.0, 1).unwrap();
    record.flush().unwrap();
    // The store goes away: its directory is moved aside for a file, and every upload fails.
    let aside = bucket.path().join("aside");
    fs::rename(&prefix, &aside).unwrap();
    fs::write(&prefix, b"").unwrap();
    record.add_scalar("loss", 2.0, 2).unwrap();
    assert!(record.flush().is_err(), "shipped to a store that is gone");
    for step in 3..=5 {
        record.add_scalar("loss", step as f64, step).unwrap();
    }
    let stats = record.remote_stats().unwrap();
    assert_eq!(stats.records_over_budget, 3);
    assert!(stats.backlog_bytes > 1);
    // Back again: the close ships what was accepted.
    fs::remove_file(&prefix).unwrap();
    fs::rename(&aside, &prefix).unwrap();
    record.close().unwrap();
    let shipped = record.remote_stats().unwrap();
    assert!(shipped.segments >= 2 && shipped.bytes > 0, "{shipped:?}");
    let read = crate::read::Summaries::read_dir(&url).unwrap();
    let steps: Vec<i64> = read.scalars["loss"].iter().map(|p| p.step).collect();
    assert_eq!(steps, [1, 2]);
    assert_eq!(record.stats().unwrap().records_written, 2);
}

#[test]
fn ranks_share_a_url_each_with_its_own_files() {
    use crate::RankLayout;
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    fs::create_dir_all(bucket.path().join("run")).unwrap();
    for layout in [RankLayout::FileName, RankLayout::Directory] {
        let mut records: Vec<SummaryRecord> = (0..2)
            .map(|rank| {
                SummaryRecord::builder(&url)
                    .rank(rank, 2)
                    .rank_layout(layout)
                    .build()
                    .unwrap()
            })
            .collect();
        for step in 1..=3 {
            for (rank, record) in records.iter_mut().enumerate() {
                let tag = format!("{layout:?}/rank{rank}");
                record.add_scalar(&tag, step as f64, step).unwrap();
            }
        }
        for record in &mut records {
            record.close().unwrap();
        }
    }
    let by_name = crate::read::Summaries::read_dir(&url).unwrap();
    for rank in 0..2 {
        let steps: Vec<i64> = by_name.scalars[&format!("FileName/rank{rank}")]
            .iter()
            .map(|p| p.step)
            .collect();
        assert_eq!(steps, [1, 2, 3], "rank {rank}");
        let own = crate::read::Summaries::read_dir(format!("{url}/rank_{rank}")).unwrap();
        let steps: Vec<i64> = own.scalars[&format!("Directory/rank{rank}")]
            .iter()
            .map(|p| p.step)
            .collect();
        assert_eq!(steps, [1, 2, 3], "rank {rank}'s directory");
        assert_eq!(own.scalars.len(), 1);
    }
}

#[test]
fn exports_and_the_projector_reach_the_store_as_written_locally() {
    let bucket = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    fs::create_dir_all(bucket.path().join("run")).unwrap();
    for dir in [url.clone(), local.path().display().to_string()] {
        let mut record = SummaryRecord::builder(&dir)
            .export_tensors(true)
            .build()
            .unwrap();
        record
            .add_tensor("weights/l1", &[1.0f32, 2.0, 3.0][..], 7)
            .unwrap();
        let labels = Some(vec!["a".to_owned(), "b".to_owned()]);
        record
            .add_embedding(
                "hidden",
                ember_write::pack::TensorValue::from_slice(&[0.5f32, 1.5, 2.5, 3.5], [2, 2]),
                labels,
                None,
                7,
            )
            .unwrap();
        record.close().unwrap();
    }
    // Every file the local run has besides its event files is in the bucket, byte for byte
    // (an export directory is named after the second it was made in: that part aside).
    let files = |root: &std::path::Path| {
        let mut found = std::collections::BTreeMap::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.ends_with(".ember-locks") || path.ends_with(ember_write::journal::RUN_DIR) {
                    // The record's lock and journal of its local directory: not the log's.
                    continue;
                }
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if name.contains("tfevents") {
                    continue;
                }
                let name = match name.split_once('/') {
                    Some((first, rest)) if first.starts_with("export_") => {
                        format!("export_*/{rest}")
                    }
                    _ => name,
                };
                found.insert(name, fs::read(&path).unwrap());
            }
        }
        found
    };
    let written = files(local.path());
    assert_eq!(files(&bucket.path().join("run")), written);
    let compared = written.len();
    assert!(compared >= 4, "only {compared} files compared");
}

/// Before: a bucket run was never locked, and a second `--resume` of a live one was let in.
#[test]
fn a_bucket_run_another_process_writes_is_refused_naming_it_until_it_closes() {
    use crate::checkpoint::CheckpointError;
    use crate::run::{Begin, Run};
    use ember_write::remote::RemoteError;
    let bucket = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let mut record = SummaryRecord::builder(&url).build().unwrap();
    record.add_scalar("loss", 1.0, 1).unwrap();
    let restart = || {
        Run::builder(Begin::Restart, format!("{url}/checkpoints"))
            .dir(&url)
            .admit()
    };
    let admitted = restart();
    assert!(
        matches!(
            &admitted,
            Err(CheckpointError::Leased(RemoteError::Leased { pid, .. }))
                if *pid == std::process::id()
        ),
        "{admitted:?}"
    );
    let message = admitted.unwrap_err().to_string();
    assert!(message.contains(&format!("is in use by process {}", std::process::id())));
    let second = SummaryRecord::builder(&url).build();
    assert!(second.is_err(), "a second record of a leased run");
    record.close().unwrap();
    restart().unwrap();
    let read = crate::read::scalars(&url).unwrap();
    assert_eq!(read["loss"].len(), 1);
}

#[test]
fn a_bucket_log_with_an_mlflow_sink_is_refused_before_the_server_is_asked() {
    let bucket = tempfile::tempdir().unwrap();
    let prefix = bucket.path().join("run");
    fs::create_dir_all(&prefix).unwrap();
    let url = format!("file://{}", prefix.display());
    // Nothing listens on port 9: a sink that asked the server would fail as unreachable.
    let config = ember_track::MlflowConfig::new("http://127.0.0.1:9");
    let built = SummaryRecord::builder(&url)
        .mlflow(config, ember_track::Continue::No, &[])
        .build();
    assert!(
        matches!(built, Err(crate::SummaryError::TrackerInBucket)),
        "{:?}",
        built.err()
    );
}
