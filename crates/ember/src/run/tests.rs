use std::path::Path;

use ember_tests::files_under;

use super::*;
use crate::checkpoint::{Checkpoint, CheckpointError};

fn checkpoint_at(dir: &Path, meta: &str) {
    Checkpoints::new(dir, 3)
        .write(1, &Checkpoint::new().with("meta", meta.as_bytes().to_vec()))
        .unwrap();
}

#[test]
fn a_fresh_run_is_refused_where_another_run_left_checkpoints_or_events() {
    let root = tempfile::tempdir().unwrap();
    let checkpoints = root.path().join("checkpoints");
    let fresh = || {
        Run::builder(Begin::Fresh, &checkpoints)
            .dir(root.path())
            .admit()
    };
    std::fs::write(root.path().join("notes.txt"), "the user's").unwrap();
    fresh().unwrap();
    let events = root.path().join("events.out.tfevents.1700000000.host.1.0");
    std::fs::write(&events, b"").unwrap();
    let error = fresh().unwrap_err().to_string();
    assert!(
        error.contains("of another run") && error.contains("tfevents"),
        "{error}"
    );
    std::fs::remove_file(&events).unwrap();
    checkpoint_at(&checkpoints, "epoch=1");
    assert!(matches!(
        fresh().unwrap_err(),
        CheckpointError::AnotherRun { .. }
    ));
}

/// Issue 52: a fresh run used to replace another program's `model.bpk` in its directory; and a
/// directory that is another run's checkpoint directory (a `--logdir` linked into one) was
/// taken for a new run's.
#[test]
fn a_fresh_run_never_replaces_a_file_it_would_write_that_is_not_its_own() {
    let root = tempfile::tempdir().unwrap();
    let fresh = |dir: &Path| {
        Run::builder(Begin::Fresh, dir.join("checkpoints"))
            .dir(dir)
            .admit()
    };
    for name in [MODEL_FILE, MODEL_RECORD, INTERRUPTED_MODEL_FILE] {
        let dir = root.path().join(name.replace('.', "_"));
        std::fs::create_dir_all(dir.join("checkpoints")).unwrap();
        std::fs::write(dir.join(name), b"another program's").unwrap();
        std::fs::write(dir.join("checkpoints/epoch=3.ckpt"), b"burn's").unwrap();
        let before = files_under(&dir, false);
        let error = fresh(&dir).unwrap_err();
        assert!(
            matches!(&error, CheckpointError::Occupied { found } if found.ends_with(name)),
            "{error}"
        );
        assert!(error.to_string().contains("not this run's"), "{error}");
        // Opened for good, it is refused the same, having written nothing.
        let opened = Run::builder(Begin::Fresh, dir.join("checkpoints"))
            .dir(&dir)
            .open();
        assert!(opened.is_err());
        assert_eq!(files_under(&dir, false), before);
    }
    // Another run's checkpoint directory, taken for a run directory.
    let other = root.path().join("other");
    checkpoint_at(&other, "epoch=1");
    let error = fresh(&other).unwrap_err().to_string();
    assert!(error.contains("ckpt-000000000001.ember"), "{error}");
    // A run's record alone (a run killed before its first checkpoint) is another run's too.
    let recorded = root.path().join("recorded");
    let record = RunRecord {
        id: Some(RunId::new()),
        command: None,
    };
    record
        .write_at(&place::Place::at(recorded.join("checkpoints")))
        .unwrap();
    let error = fresh(&recorded).unwrap_err().to_string();
    assert!(error.contains(RECORD_FILE), "{error}");
}

/// A resume admitted says how the run cut its data, so that a run going on on other devices or
/// ranks counts its steps as the run did.
#[test]
fn a_resume_admitted_says_the_devices_and_ranks_the_run_began_with() {
    let root = tempfile::tempdir().unwrap();
    let layout = || {
        Run::builder(Begin::Resume, root.path())
            .open()
            .unwrap()
            .layout()
    };
    // A job of 2 ranks on 1 device each, gone on as 1 rank: it keeps the 2 ranks' shards.
    checkpoint_at(root.path(), "epoch=1\ndevices=1\nranks=1\ndata_ranks=2");
    let two_ranks = DataLayout {
        devices: 1,
        data_ranks: 2,
    };
    assert_eq!(layout(), Some(two_ranks));
    // Before data_ranks was recorded, the ranks were the shards.
    checkpoint_at(root.path(), "epoch=1\ndevices=2\nranks=1");
    let two_devices = DataLayout {
        devices: 2,
        data_ranks: 1,
    };
    assert_eq!(layout(), Some(two_devices));
    checkpoint_at(root.path(), "epoch=1");
    assert_eq!(layout(), None);
    let restart = Run::builder(Begin::Restart, root.path()).open().unwrap();
    assert_eq!((restart.begin(), restart.layout()), (Begin::Restart, None));
}

#[test]
fn a_resume_is_refused_when_finished_with_its_model_or_when_a_count_changed() {
    let root = tempfile::tempdir().unwrap();
    let checkpoints = root.path().join("checkpoints");
    checkpoint_at(
        &checkpoints,
        "epoch=2\nepoch_done=true\nsteps=12\nbatch_size=32",
    );
    let resume = |epochs, batch| {
        Run::builder(Begin::Resume, &checkpoints)
            .dir(root.path())
            .epochs(epochs)
            .count("batch_size", batch)
            .admit()
    };
    // Trained to its end, its model never saved (killed between the two): it finishes.
    assert_eq!(resume(2, 32).unwrap(), Begin::Resume);
    let place = place::Place::at(root.path());
    model::write_final(&place, None, 12, b"trained").unwrap();
    assert!(matches!(
        resume(2, 32).unwrap_err(),
        CheckpointError::Finished { epochs: 2, .. }
    ));
    resume(3, 32).unwrap();
    let error = resume(3, 75).unwrap_err().to_string();
    assert!(error.contains("batch_size: 32 there, 75 here"), "{error}");
}

#[test]
fn resume_if_any_begins_by_what_the_directory_holds() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("checkpoints");
    let begin = |world| {
        Run::builder(Begin::ResumeIfAny, &dir)
            .rank(0, world)
            .admit()
    };
    assert_eq!(begin(1).unwrap(), Begin::Fresh);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ckpt-000000000001.ember"), b"torn").unwrap();
    assert_eq!(begin(1).unwrap(), Begin::Restart);
    checkpoint_at(&dir, "epoch=1\nranks=1");
    assert_eq!(begin(1).unwrap(), Begin::Resume);
    // A job of more ranks than began it is refused: named, not restarted.
    let error = begin(2).unwrap_err().to_string();
    assert!(error.contains("1 rank(s), this one has 2"), "{error}");
    // A job of fewer ranks that divide them goes on, once the checkpoint is whole with the
    // part of every rank that took it.
    checkpoint_at(&dir, "epoch=1\nranks=2");
    assert_eq!(begin(1).unwrap(), Begin::Restart);
    let part = Checkpoint::new().with("meta", b"rank=1".to_vec());
    Checkpoints::new(&dir, 3).write_part(1, 1, &part).unwrap();
    assert_eq!(begin(1).unwrap(), Begin::Resume);
}

/// Issue 52: a path the system cannot open used to fail at the first checkpoint, after
/// training began.
#[test]
fn a_checkpoint_directory_of_too_long_a_path_is_refused_before_anything_is_written() {
    let root = tempfile::tempdir().unwrap();
    let mut deep = root.path().to_path_buf();
    while deep.as_os_str().len() + 201 < 4048 {
        deep.push("d".repeat(200));
    }
    let pad = 4048 - deep.as_os_str().len() - 1;
    deep.push("e".repeat(pad));
    let error = Run::builder(Begin::Fresh, &deep).open().unwrap_err();
    assert!(
        matches!(error, CheckpointError::PathTooLong { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("shorter path"), "{error}");
    let long_name = root.path().join("n".repeat(300));
    let error = Run::builder(Begin::Fresh, &long_name).open().unwrap_err();
    assert!(error.to_string().contains("300 bytes"), "{error}");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}
