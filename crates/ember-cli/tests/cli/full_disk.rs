//! A log directory on a full disk (a 3 MB tmpfs): the log is lost from some step on, the
//! trained model is not, and the run says so. Mounting needs root, as CI runs; elsewhere the
//! test says it cannot run, and fails only under CI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::Device;
use ember::read::Summaries;

use super::text;

/// `ember train`'s model, as its burnpack file holds it: 64 pixels, 64 hidden units, 10
/// classes.
#[derive(Module, Debug)]
struct DigitMlp {
    l1: Linear,
    act: Relu,
    l2: Linear,
}

/// A tmpfs of `size` mounted at a directory of its own, unmounted when dropped (a failed
/// assertion included).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Self {
        std::fs::create_dir_all(&at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(mounted.success(), "mount -t tmpfs failed");
        Self(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Whether this process may mount a file system; when not, says so, and fails under CI.
fn can_mount() -> bool {
    let root = running_as_root();
    if !root {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run the full-disk test as root (it mounts a tmpfs)"
        );
        eprintln!("skipped: mounting a tmpfs needs root");
    }
    root
}

/// Whether this process runs as root, read from /proc (no libc call, no unsafe code).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

fn loads_as_the_model(path: &Path) -> bool {
    let device = Device::default();
    let model = DigitMlp {
        l1: LinearConfig::new(64, 64).init(&device),
        act: Relu::new(),
        l2: LinearConfig::new(64, 10).init(&device),
    };
    model.try_load_file(path).is_ok()
}

#[test]
fn on_a_full_log_disk_the_model_is_saved_and_the_run_names_the_step_the_log_stopped() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(dir.path().join("m"), "3m");
    let run = disk.0.join("full");
    let output = Command::new(env!("CARGO_BIN_EXE_ember"))
        // Enough epochs that the event file reaches the disk's end (about epoch 125) and the
        // run goes on past it; one checkpoint kept, so that checkpoints still fit.
        .args([
            "train",
            "--epochs",
            "140",
            "--keep-checkpoints",
            "1",
            "--logdir",
        ])
        .arg(&run)
        .output()
        .expect("the ember binary runs");
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{printed}");
    let model = run.join("model.bpk");
    let size = std::fs::metadata(&model).map_or(0, |m| m.len());
    assert!(size > 0, "no model.bpk: {printed}");
    assert!(loads_as_the_model(&model), "model.bpk does not load");

    // The writer's failure is printed once, when it happens.
    let failures: Vec<&str> = printed
        .lines()
        .filter(|line| line.contains("writer failed and was removed"))
        .collect();
    assert!(!failures.is_empty(), "{printed}");
    assert!(failures[0].starts_with("error"), "{printed}");
    // The last line says the log is incomplete, from which step, and why, the cause once.
    let last = printed.lines().last().unwrap();
    let step = last
        .split("is incomplete from step ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|step| step.parse::<i64>().ok());
    let step = step.unwrap_or_else(|| panic!("no step named: {last}"));
    assert!(step < 140 * 23, "the log stopped before the end: {last}");
    // Nothing after the named step is in the log.
    let summaries = Summaries::read_dir(&run).unwrap();
    let logged = summaries.scalars["train/loss"].last().unwrap().step;
    assert!(logged <= step, "train/loss at step {logged}, after {step}");
    assert!(last.contains("the trained model is saved"), "{last}");
    assert_eq!(
        last.matches("writer failed and was removed").count(),
        1,
        "{last}"
    );
    assert_eq!(last.matches("may soon be exhausted").count(), 1, "{last}");
}

#[test]
fn a_checkpoint_directory_without_room_costs_the_checkpoints_not_the_run() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // Room for one of the digit model's checkpoints (about 60 KB: the parameters and Adam's two
    // moments), not for a second beside it, which a checkpoint needs before the older goes.
    let disk = Tmpfs::mount(run.join("checkpoints"), "100k");
    let output = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--subset", "300", "--epochs", "4"])
        .args(["--checkpoint-every", "5", "--logdir"])
        .arg(&run)
        .output()
        .expect("the ember binary runs");
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(loads_as_the_model(&run.join("model.bpk")), "{printed}");
    // Said once, as an error, when it happened; and counted at the end.
    let said: Vec<&str> = printed
        .lines()
        .filter(|line| line.contains("a checkpoint was not written"))
        .collect();
    assert_eq!(said.len(), 1, "{printed}");
    assert!(said[0].starts_with("error"), "{printed}");
    assert!(printed.contains("found no room on the disk"), "{printed}");
    // The checkpoint that fitted is whole, for a resume to go on from.
    let kept = ember::checkpoint::Checkpoints::new(&disk.0, 1)
        .latest()
        .unwrap();
    assert!(kept.is_some(), "no whole checkpoint left: {printed}");
    // The log, on a disk with room, has every step once, to the end.
    let summaries = Summaries::read_dir(&run).unwrap();
    let steps: Vec<i64> = summaries.scalars["train/loss"]
        .iter()
        .map(|p| p.step)
        .collect();
    assert_eq!(steps, (1..=steps.len() as i64).collect::<Vec<_>>());
    assert_eq!(summaries.scalars["valid/loss"].len(), 4, "{printed}");
}

/// Issue 52: once the checkpoint disk was full no checkpoint was written again (202 of 214
/// skipped), though removing the oldest kept one would have made room. With room for two of
/// them, every checkpoint is written, the oldest going first when the disk is full.
#[test]
fn a_full_checkpoint_disk_makes_room_by_removing_the_oldest_kept_checkpoint() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // Two of the digit model's checkpoints (about 60 KB each) and change; three are kept.
    let disk = Tmpfs::mount(run.join("checkpoints"), "150k");
    let output = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--subset", "300", "--epochs", "4"])
        .args(["--checkpoint-every", "2", "--logdir"])
        .arg(&run)
        .output()
        .expect("the ember binary runs");
    let printed = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(
        !printed.contains("a checkpoint was not written"),
        "{printed}"
    );
    let store = ember::checkpoint::Checkpoints::new(&disk.0, 1);
    let kept = store.list().unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    // The newest, at the end of the last epoch, is the run's whole last checkpoint.
    let newest = store.latest().unwrap().expect("a whole checkpoint");
    let meta = String::from_utf8(newest.checkpoint.section("meta").unwrap().to_vec()).unwrap();
    assert!(
        meta.contains("\nepoch=4\n") && meta.contains("epoch_done=true"),
        "{meta}"
    );
}

/// Before: the run went on past its log writer's failure and checkpointed (its checkpoints on a
/// disk of their own); the resume after space was freed exited 0 with the log missing the
/// steps between the failure and the checkpoint, and nothing said so. Now the resume warns with
/// the steps, notes them in the log, and `ember inspect` shows them.
#[test]
fn a_resume_after_the_log_disk_filled_names_the_steps_the_log_lacks() {
    if !can_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log_disk = Tmpfs::mount(dir.path().join("m"), "2m");
    let run = log_disk.0.join("full");
    let _checkpoint_disk = Tmpfs::mount(run.join("checkpoints"), "64m");
    let run_arg = run.to_str().unwrap();
    let mut training = super::Training::past_first_epoch(
        dir.path(),
        &[
            "--epochs",
            "150",
            "--keep-checkpoints",
            "1",
            "--logdir",
            run_arg,
        ],
    );
    training.wait_for("writer failed and was removed");
    // Two epochs on, each ending in a checkpoint the log has no records for.
    training.wait_for("epoch ");
    training.wait_for("epoch ");
    training.signal("-TERM");
    let stopped = super::exit_within(&mut training.child, Duration::from_secs(60));
    assert_eq!(stopped.code(), Some(143), "{}", training.printed());
    let remounted = Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(&log_disk.0)
        .status()
        .unwrap();
    assert!(remounted.success());

    let resumed = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["train", "--resume", run_arg])
        .output()
        .unwrap();
    let printed = text(&resumed.stderr);
    assert!(resumed.status.success(), "{printed}");
    let (from, to) = printed
        .split("lacks records of steps ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|range| range.split_once("..="))
        .map(|(from, to)| (from.parse::<i64>().unwrap(), to.parse::<i64>().unwrap()))
        .unwrap_or_else(|| panic!("the resume names no steps the log lacks:\n{printed}"));
    assert!(from <= to, "{printed}");

    // The log lacks train/loss inside the gap, and from the checkpoint on has each step once.
    let summaries = Summaries::read_dir(&run).unwrap();
    let steps: Vec<i64> = summaries.scalars["train/loss"]
        .iter()
        .map(|p| p.step)
        .collect();
    let in_gap = steps.iter().filter(|s| (from..=to).contains(*s)).count();
    assert!(
        in_gap < (to - from + 1) as usize,
        "nothing missing in {from}..={to}"
    );
    let after: Vec<i64> = steps.iter().copied().filter(|s| *s > to).collect();
    let last = *steps.last().unwrap();
    assert_eq!(after, (to + 1..=last).collect::<Vec<_>>());
    let notes = &summaries.texts[ember::LOG_GAP_TAG];
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].step, from);
    assert!(
        notes[0].text.contains(&format!("steps {from}..={to}")),
        "{notes:?}"
    );

    let inspected = Command::new(env!("CARGO_BIN_EXE_ember"))
        .args(["inspect", run_arg])
        .output()
        .unwrap();
    let shown = text(&inspected.stdout);
    assert!(
        shown.contains(&format!(
            "log gap (noted at step {from}): steps {from}..={to} lack records"
        )),
        "{shown}"
    );
}
