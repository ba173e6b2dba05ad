use std::io::Write;

use super::*;

fn write(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, bytes).unwrap();
}

/// Writes `path` as the run's writers do: listed in the journal first.
fn write_listed(journal: &Journal, path: &Path, bytes: &[u8]) {
    journal.make_dirs(path.parent().unwrap()).unwrap();
    journal.claim_file(path).unwrap();
    write(path, bytes);
}

fn append(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

const EVENTS: &str = "events.out.tfevents.0000000001.h.1.0";

#[test]
fn restore_cuts_back_removes_and_puts_the_config_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let journal = Journal::new(root, 0);
    write_listed(&journal, &root.join(EVENTS), b"0123456789");
    write_listed(&journal, &root.join("export_1/a.npy"), b"abc");
    write_listed(
        &journal,
        &root.join(PROJECTOR_CONFIG),
        b"embeddings { tensor_name: \"a\" }\n",
    );
    write(&root.join("checkpoints/ckpt-1.ember"), b"ckpt");
    write(&root.join("notes.txt"), b"mine");
    let exclude = vec![PathBuf::from("checkpoints")];
    let snapshot = LogSnapshot::take(root, &exclude, Ownership::ALONE).unwrap();
    let decoded = LogSnapshot::decode(&snapshot.encode()).unwrap();
    assert_eq!(decoded, snapshot);
    assert!(!decoded.is_legacy());

    // What a run writes after the snapshot, then dies.
    append(&root.join(EVENTS), b"later");
    write_listed(
        &journal,
        &root.join("events.out.tfevents.0000000002.h.1.0"),
        b"new file",
    );
    write_listed(&journal, &root.join("export_1/b.npy"), b"def");
    write_listed(
        &journal,
        &root.join("embeddings/x_3/tensors.tsv"),
        b"1\t2\n",
    );
    write(
        &root.join(PROJECTOR_CONFIG),
        b"embeddings { tensor_name: \"b\" }\n",
    );
    // A writer started before the rollback keeps its file.
    let resumed = "events.out.tfevents.0000000003.h.2.0";
    write_listed(&journal, &root.join(resumed), b"resumed");
    let keep = vec![PathBuf::from(resumed)];

    let restored = decoded
        .restore(root, &exclude, &keep, Ownership::ALONE)
        .unwrap();
    assert_eq!(fs::read(root.join(EVENTS)).unwrap(), b"0123456789");
    assert!(!root.join("events.out.tfevents.0000000002.h.1.0").exists());
    assert!(!root.join("export_1/b.npy").exists());
    assert_eq!(fs::read(root.join("export_1/a.npy")).unwrap(), b"abc");
    assert!(!root.join("embeddings").exists());
    assert_eq!(
        fs::read(root.join(PROJECTOR_CONFIG)).unwrap(),
        b"embeddings { tensor_name: \"a\" }\n"
    );
    assert_eq!(restored.truncated.len(), 2, "{restored:?}");
    assert!(restored.shorter.is_empty());
    // Starting over removes every file the journal lists, and only those.
    write(&root.join("notes.txt"), b"mine, longer");
    LogSnapshot::default()
        .restore(root, &exclude, &keep, Ownership::ALONE)
        .unwrap();
    assert_eq!(fs::read(root.join("notes.txt")).unwrap(), b"mine, longer");
    assert!(!root.join(EVENTS).exists() && !root.join("export_1").exists());
    assert!(!root.join(PROJECTOR_CONFIG).exists());
    assert!(root.join(resumed).exists());
    assert_eq!(
        fs::read(root.join("checkpoints/ckpt-1.ember")).unwrap(),
        b"ckpt"
    );
}

/// The files of issue 41: another tool's event file in a subdirectory, a copy of the run's
/// own file elsewhere, an empty directory; a file the run made after the snapshot; a file cut
/// back and grown again. Only the run's change, and each back to its bytes at the snapshot.
#[test]
fn what_the_run_did_not_write_stays_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let journal = Journal::new(root, 0);
    let run_file = root.join(EVENTS);
    write_listed(&journal, &run_file, b"header|step1|step2|");
    write_listed(
        &journal,
        &root.join("sub/events.out.tfevents.1.h.1.1"),
        b"sub|",
    );
    let snapshot = LogSnapshot::take(root, &[], Ownership::ALONE).unwrap();
    let snapshot = LogSnapshot::decode(&snapshot.encode()).unwrap();

    append(&run_file, b"step3|");
    let foreign = root.join("eval/events.out.tfevents.1700000000.h.1.0");
    write(&foreign, &[7u8; 6000]);
    let copy = root.join("backup").join(EVENTS);
    write(&copy, &fs::read(&run_file).unwrap());
    fs::create_dir(root.join("emptydir")).unwrap();
    let made_later = root.join("events.out.tfevents.0000000009.h.1.0");
    write_listed(&journal, &made_later, b"later");
    write_listed(
        &journal,
        &root.join("later_run/events.out.tfevents.2.h.1.0"),
        b"x",
    );
    // A file of the same name as one the run made, put there by someone else after the run
    // withdrew its claim: not the run's.
    let taken = root.join("events.out.tfevents.0000000010.h.1.0");
    journal.claim_file(&taken).unwrap();
    journal.retract(&taken).unwrap();
    write(&taken, b"theirs");

    for round in 0..2 {
        let restored = snapshot.restore(root, &[], &[], Ownership::ALONE).unwrap();
        // Named, so that a warning can say why a reader may show their steps.
        assert_eq!(
            restored.left,
            vec![
                PathBuf::from("backup").join(EVENTS),
                PathBuf::from("eval/events.out.tfevents.1700000000.h.1.0"),
                PathBuf::from("events.out.tfevents.0000000010.h.1.0"),
            ]
        );
        assert_eq!(
            fs::read(&run_file).unwrap(),
            b"header|step1|step2|",
            "{round}"
        );
        assert_eq!(fs::read(&foreign).unwrap(), vec![7u8; 6000]);
        assert_eq!(fs::read(&copy).unwrap(), b"header|step1|step2|step3|");
        assert!(root.join("emptydir").is_dir());
        assert_eq!(fs::read(&taken).unwrap(), b"theirs");
        assert!(!made_later.exists() && !root.join("later_run").exists());
        assert_eq!(
            fs::read(root.join("sub/events.out.tfevents.1.h.1.1")).unwrap(),
            b"sub|"
        );
        // Cut back, then grown again by a resumed run killed once more.
        append(&run_file, b"step3 again|step4|");
    }
}

#[test]
fn a_snapshot_from_before_journals_cuts_back_and_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join(EVENTS), b"0123456789");
    let later = root.join("events.out.tfevents.0000000002.h.1.0");
    write(&later, b"made since");
    let legacy = format!(
        "d {}\nf 4 {}\n",
        hex::encode(b"eval"),
        hex::encode(EVENTS.as_bytes())
    );
    let snapshot = LogSnapshot::decode(&legacy).unwrap();
    assert!(snapshot.is_legacy());
    let restored = snapshot.restore(root, &[], &[], Ownership::ALONE).unwrap();
    assert_eq!(fs::read(root.join(EVENTS)).unwrap(), b"0123");
    assert_eq!(fs::read(&later).unwrap(), b"made since");
    assert!(restored.removed.is_empty());
}

#[cfg(unix)]
#[test]
fn a_link_planted_under_a_run_name_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("log");
    let outside = dir.path().join("outside");
    write(&outside.join("victim"), b"keep me");
    let journal = Journal::new(&root, 0);
    write_listed(&journal, &root.join("sub/victim"), b"run");
    let snapshot = LogSnapshot::default();
    fs::remove_dir_all(root.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
    snapshot.restore(&root, &[], &[], Ownership::ALONE).unwrap();
    assert_eq!(fs::read(outside.join("victim")).unwrap(), b"keep me");
}

#[test]
fn each_rank_owns_its_own_summary_files() {
    let rank = |r| Ownership {
        rank: r,
        world_size: 2,
    };
    let tb1 = Path::new("events.out.tfevents.0000000001.h.7.0.rank1");
    let ms0 = Path::new("events.out.events.summary.1.0.h_MS");
    let ms1 = Path::new("events.out.events.summary.1.1.h_MS");
    assert!(rank(1).owns(tb1) && !rank(0).owns(tb1));
    assert!(rank(0).owns(ms0) && !rank(1).owns(ms0));
    assert!(rank(1).owns(ms1) && !rank(0).owns(ms1));
    assert!(rank(0).owns(Path::new("export_1/a.npy")));
    assert!(!rank(1).owns(Path::new("export_1/a.npy")));
    assert!(Ownership::ALONE.owns(tb1));
    // A rank-tagged suffix and hosts that look like rank tags.
    let tb1 = Path::new("events.out.tfevents.0000000001.h.7.0.rank1.v2");
    assert!(rank(1).owns(tb1) && !rank(0).owns(tb1));
    for name in [
        "events.out.tfevents.0000000001.rank3.cluster.7.0.rank0",
        "events.out.tfevents.0000000001.rank1.7.0.rank0",
        "events.out.tfevents.0000000001.a.12.34.rank1.7.0.rank0",
    ] {
        let ranks: Vec<u32> = (0..4).filter(|&r| rank(r).owns(Path::new(name))).collect();
        assert!(ranks.is_empty() || ranks == [0], "{name}: {ranks:?}");
        let owner = |r: u32| Ownership {
            rank: r,
            world_size: 4,
        };
        assert!(owner(0).owns(Path::new(name)), "{name}");
        assert!(!owner(1).owns(Path::new(name)) && !owner(3).owns(Path::new(name)));
    }
    let ms = Path::new("events.out.events.summary.1.1.rank0.cluster_MS");
    assert!(rank(1).owns(ms) && !rank(0).owns(ms));
}

#[test]
fn each_rank_rolls_back_only_what_its_journal_lists() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let rank = |r| Ownership {
        rank: r,
        world_size: 2,
    };
    let config = root.join(PROJECTOR_CONFIG);
    // Rank 1 took its snapshot before rank 0 wrote anything: it must not remove rank 0's.
    let snapshot = LogSnapshot::take(root, &[], rank(1)).unwrap();
    let rank0 = Journal::new(root, 0);
    write_listed(&rank0, &config, b"embeddings { tensor_name: \"a\" }");
    write_listed(&rank0, &root.join(EVENTS), b"rank 0");
    snapshot.restore(root, &[], &[], rank(1)).unwrap();
    assert_eq!(
        fs::read(&config).unwrap(),
        b"embeddings { tensor_name: \"a\" }"
    );
    assert_eq!(fs::read(root.join(EVENTS)).unwrap(), b"rank 0");
    // Rank 0's own rollback does remove them.
    LogSnapshot::default()
        .restore(root, &[], &[], rank(0))
        .unwrap();
    assert!(!config.exists() && !root.join(EVENTS).exists());
}

#[test]
fn a_malformed_snapshot_is_an_error() {
    assert!(LogSnapshot::decode("f x 00\n").is_err());
    assert!(LogSnapshot::decode("q\n").is_err());
    assert!(LogSnapshot::decode("f 1 0\n").is_err());
    assert!(LogSnapshot::decode("v 2\nv 2\n").is_err());
    for name in ["../x", "/etc/passwd", "a/../../b", ""] {
        let text = format!("v 2\nf 1 {}\n", hex::encode(name.as_bytes()));
        assert!(LogSnapshot::decode(&text).is_err(), "{name}");
    }
}

#[test]
fn a_projector_config_the_run_found_is_put_back_never_removed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let config = root.join(PROJECTOR_CONFIG);
    write(&config, b"embeddings { tensor_name: \"theirs\" }\n");
    let snapshot = LogSnapshot::take(root, &[], Ownership::ALONE).unwrap();
    // The run's projector writer found the config, and rewrote it with its own entry.
    let journal = Journal::new(root, 0);
    journal.claim_rewrite(&config).unwrap();
    write(
        &config,
        b"embeddings { tensor_name: \"theirs\" }\nembeddings { tensor_name: \"ours\" }\n",
    );
    snapshot.restore(root, &[], &[], Ownership::ALONE).unwrap();
    assert_eq!(
        fs::read(&config).unwrap(),
        b"embeddings { tensor_name: \"theirs\" }\n"
    );
    // Starting over knows no text to put back, and the file is not the run's to remove.
    LogSnapshot::default()
        .restore(root, &[], &[], Ownership::ALONE)
        .unwrap();
    assert!(config.is_file());
}
