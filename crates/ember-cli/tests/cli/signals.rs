//! SIGTERM and SIGHUP, as Slurm, Kubernetes, systemd and a closed terminal send them, stop
//! `ember train` as Ctrl-C does: after the current step, with a checkpoint and closed logs,
//! and exit code 128 + the signal; and the run's `--resume` ends as a run never stopped.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::ember_in;
use super::resume::{ARGS, model, series, uninterrupted};
use super::{Training, text};

/// What a scheduler gives a job between its SIGTERM and its SIGKILL, in this test.
const GRACE: Duration = Duration::from_secs(5);

/// How a signalled `ember train` ended.
struct Ended {
    code: Option<i32>,
    stderr: String,
    /// When the signal was sent.
    signalled: SystemTime,
    /// From the signal to the exit (or to the SIGKILL the grace ended with).
    took: Duration,
}

/// Starts `ember train ARGS --logdir run` in `dir`, sends it `signal` once it has finished its
/// first epoch, and SIGKILL if it is still running `GRACE` later, as a scheduler does.
fn signalled_train(dir: &Path, signal: &str) -> Ended {
    let mut training = Training::past_first_epoch(dir, &[ARGS, &["--logdir", "run"]].concat());
    let signalled = SystemTime::now();
    let sent = Instant::now();
    training.signal(signal);
    let child = &mut training.child;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > GRACE {
            let _ = child.0.kill();
            break child.0.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    Ended {
        code: status.code(),
        stderr: training.printed(),
        signalled,
        took,
    }
}

/// When the newest checkpoint of `run` was written.
fn newest_checkpoint(run: &Path) -> SystemTime {
    std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("ckpt-"))
        .map(|entry| entry.metadata().unwrap().modified().unwrap())
        .max()
        .expect("a checkpoint")
}

#[test]
fn sigterm_with_a_5_s_grace_ends_in_a_checkpoint_and_the_resume_is_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let whole = uninterrupted(dir.path());
    let ended = signalled_train(dir.path(), "-TERM");
    let stderr = &ended.stderr;
    assert_eq!(ended.code, Some(143), "{stderr}");
    assert!(ended.took < GRACE, "{:?}", ended.took);
    assert!(
        stderr.contains("SIGTERM: stopping after the current step"),
        "{stderr}"
    );
    assert!(
        stderr.contains("go on with: ember train --resume run"),
        "{stderr}"
    );
    let run = dir.path().join("run");
    assert!(
        newest_checkpoint(&run) >= ended.signalled,
        "no checkpoint written after the signal"
    );

    let output = ember_in(&["train", "--resume", "run"], dir.path());
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(model(&run), model(&whole));
    // Each step once, as in the run never stopped.
    assert_eq!(series(&run), series(&whole));
}

#[test]
fn sighup_stops_train_after_a_step_with_exit_code_129() {
    let dir = tempfile::tempdir().unwrap();
    let ended = signalled_train(dir.path(), "-HUP");
    assert_eq!(ended.code, Some(129), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("interrupted after") && ended.stderr.contains("go on with"),
        "{}",
        ended.stderr
    );
}

#[test]
fn a_second_sigterm_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut training = Training::past_first_epoch(
        dir.path(),
        &["--epochs", "300", "--hidden", "2048", "--logdir", "run"],
    );
    // The second signal once the first is heard: two sent at once may reach the process as
    // one. A wide model makes the step, the checkpoint and the close the first waits for long.
    training.signal("-TERM");
    loop {
        let line = (training.lines)
            .recv_timeout(GRACE)
            .expect("ember train says it heard the signal");
        if line.starts_with("SIGTERM: stopping") {
            break;
        }
    }
    training.signal("-TERM");
    let status = super::exit_within(&mut training.child, GRACE);
    let rest = training.printed();
    assert_eq!(status.code(), Some(143), "{rest}");
    assert!(!rest.contains("interrupted after"), "{rest}");
}
