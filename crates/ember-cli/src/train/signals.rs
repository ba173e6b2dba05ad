//! `ember train`'s stop signals: Ctrl-C (SIGINT), and SIGTERM and SIGHUP, which schedulers
//! (Slurm, Kubernetes, systemd) and a closed terminal send, are one request: stop after the
//! current step, write a checkpoint, close the logs, and exit with 128 + the signal's number
//! (130, 143, 129), as shells report a process the signal ended. Across ranks, the ranks stop
//! after the same step, whichever got the signal, and each exits with the code of the signal
//! that stopped the job once every rank's log is closed (`Job::stopped`). A second signal of
//! any of them exits at once, with the same kind of code.
//!
//! The bound: the stop waits for the step under way, the checkpoint and the logs' close
//! (about 0.15 s for `ember train`'s model in a debug build on a loaded 2-core machine; a
//! step that hangs is bounded by `--step-timeout`, an object store that is down by the
//! record's wait, which the signal also ends). Under `mpirun`, itself signalled, that must
//! fit in Open MPI's grace: its SIGTERM reaches the ranks a second after it got its own, and
//! its SIGKILL a second after that.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signal that asked training to stop, once one has.
#[derive(Debug, Clone)]
pub(super) struct StopSignal(Arc<AtomicI32>);

impl StopSignal {
    /// The signal received, once one has.
    pub(super) fn received(&self) -> Option<i32> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            signal => Some(signal),
        }
    }
}

/// The exit code of a run `signal` stopped: 128 + its number; SIGINT's when the run was
/// stopped otherwise.
pub(super) fn exit_code(signal: Option<i32>) -> u8 {
    u8::try_from(128 + signal.unwrap_or(SIGINT)).unwrap_or(u8::MAX)
}

/// Has the first SIGINT, SIGTERM or SIGHUP set `flag`, for the trainer to stop after the
/// current step with the logs complete; a second one ends the process at once.
pub(super) fn stop_on_signals(flag: Arc<AtomicBool>) -> StopSignal {
    let received = StopSignal(Arc::new(AtomicI32::new(0)));
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(signals) => signals,
        Err(error) => {
            crate::output::err(format!(
                "warning: Ctrl-C and SIGTERM will end training at once, losing the latest \
                 logs: {error}"
            ));
            return received;
        }
    };
    let seen = received.clone();
    let spawned = std::thread::Builder::new()
        .name("ember-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if flag.swap(true, Ordering::AcqRel) {
                    std::process::exit(128 + signal);
                }
                seen.0.store(signal, Ordering::Release);
                let again = if signal == SIGINT {
                    "Ctrl-C"
                } else {
                    name(signal)
                };
                crate::output::err(format!(
                    "{}: stopping after the current step ({again} again to quit at once)",
                    name(signal),
                ));
            }
        });
    if let Err(error) = spawned {
        crate::output::err(format!(
            "warning: Ctrl-C and SIGTERM will end training at once: {error}"
        ));
    }
    received
}

fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
