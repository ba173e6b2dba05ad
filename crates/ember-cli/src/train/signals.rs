//! `ember train`'s stop signals: Ctrl-C (SIGINT), and SIGTERM and SIGHUP, which schedulers
//! (Slurm, Kubernetes, systemd) and a closed terminal send, are one request: stop after the
//! current step, write a checkpoint, close the logs, and exit with 128 + the signal's number
//! (130, 143, 129), as shells report a process the signal ended. A second signal of any of
//! them exits at once, with the same kind of code.
//!
//! The bound: the stop waits for the step under way, the checkpoint and the logs' close
//! (about 0.15 s for `ember train`'s model in a debug build on a loaded 2-core machine; a
//! step that hangs is bounded by `--step-timeout`, an object store that is down by the
//! record's wait, which the signal also ends).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signal that asked training to stop, once one has.
#[derive(Debug, Clone)]
pub(super) struct StopSignal(Arc<AtomicI32>);

impl StopSignal {
    /// The exit code of a run the signal stopped: 128 + its number; SIGINT's when the run was
    /// stopped otherwise.
    pub(super) fn exit_code(&self) -> u8 {
        let signal = match self.0.load(Ordering::Acquire) {
            0 => SIGINT,
            signal => signal,
        };
        u8::try_from(128 + signal).unwrap_or(u8::MAX)
    }
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
