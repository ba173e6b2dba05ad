//! How `ember train` ends: the test accuracy, where the logs are and how to view them, how
//! many warnings and errors the library logged, and, last, what stopped the run early or what
//! the log lost; and the exit code that says which.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Context;
use ember::devices::OpenedDevice;
use ember::pack::Format;
use ember::{EpochReport, TrainReport};

use super::plan::Plan;
use super::signals::{self, StopSignal};
use crate::devices::print_device_memory;
use crate::output::{err, out, shown};

/// The exit code of a run that trained to its end and saved its model, but whose log is
/// incomplete: a log writer failed (a full disk), and the last line says from which step.
const LOG_INCOMPLETE: u8 = 3;

/// What the run left to report.
pub(super) struct Ending<'a> {
    pub(super) report: &'a TrainReport,
    /// What the log lost, when a log writer failed.
    pub(super) log: Option<String>,
    pub(super) signal: StopSignal,
    pub(super) test_len: usize,
    pub(super) started: Instant,
    pub(super) opened: &'a [OpenedDevice],
    pub(super) step_times: &'a Mutex<ember::StepTimes>,
}

/// Prints how the run ended (rank 0 all of it, another rank only what went wrong) and returns
/// its exit code: 0; 128 + the signal that stopped it (the job, across ranks); [`LOG_INCOMPLETE`].
pub(super) fn report(plan: &mut Plan, ending: Ending<'_>) -> anyhow::Result<ExitCode> {
    let (report, epochs, lead) = (ending.report, plan.epochs(), plan.job.lead());
    if lead && report.interrupted {
        err(format!(
            "interrupted after {} step(s), {} of {epochs} epoch(s) finished; the logs are \
             complete up to there",
            report.steps,
            report.epochs.len()
        ));
        if plan.checkpointing() {
            err(format!(
                "go on with: ember train --resume {}",
                shown(&plan.logdir)
            ));
        }
        print_logdir(plan);
    } else if lead {
        let last = report.last().context("training ran no epoch")?;
        let accuracy = last
            .valid_accuracy
            .context("no test accuracy: the test set is empty; use a larger --subset")?;
        let seconds = ending.started.elapsed().as_secs_f64();
        print_device_memory(ending.opened);
        if let Ok(times) = ending.step_times.lock() {
            crate::output::err_bytes(times.to_string().as_bytes());
        }
        out(format!(
            "test accuracy: {:.2}% ({} held-out digits) after {epochs} epoch(s), {} steps, \
             {seconds:.1} s",
            accuracy * 100.0,
            ending.test_len,
            report.steps
        ));
        print_logdir(plan);
    }
    print_logged(&plan.job.prefix());
    if report.checkpoints_failed > 0 {
        err(format!(
            "warning: {}{} checkpoint(s) found no room on the disk and were not written; a \
             resume goes on from the last one written",
            plan.job.prefix(),
            report.checkpoints_failed
        ));
    }
    if let Some(lost) = &ending.log {
        let from = crate::logger::log_failed_at().unwrap_or(report.steps as u64);
        err(format!(
            "error: {}the log under {} is incomplete from step {from} on: {lost}{}",
            plan.job.prefix(),
            shown(&plan.logdir),
            if lead {
                "; the trained model is saved"
            } else {
                ""
            },
        ));
    }
    let code = if report.interrupted {
        // Last, once this rank has said how it ended; across ranks, once every rank has closed
        // its log, and then at once, with nothing left to drop or to run at exit (the
        // allocator hands its memory back for milliseconds): Open MPI SIGKILLs the other
        // ranks as soon as one has exited.
        let code = signals::exit_code(plan.job.stopped(ending.signal.received())?);
        if plan.job.size() > 1 {
            signal_hook::low_level::exit(code.into());
        }
        code
    } else if ending.log.is_some() {
        LOG_INCOMPLETE
    } else {
        0
    };
    Ok(ExitCode::from(code))
}

/// How many warnings and errors the library logged (shown as they came, unless `RUST_LOG`
/// hid them).
fn print_logged(prefix: &str) {
    let (warnings, errors) = crate::logger::counts();
    if warnings + errors > 0 {
        err(format!(
            "{prefix}{warnings} warning(s) and {errors} error(s) logged"
        ));
    }
}

/// Where the logs are, and how to view them.
fn print_logdir(plan: &Plan) {
    let logdir = &plan.logdir;
    out(format!("logs: {}", shown(logdir)));
    let remote = logdir.to_str().filter(|l| ember::is_remote(l));
    out(match (plan.args.format.format(), remote) {
        // MindInsight reads local directories only.
        (Format::MindInsight, Some(url)) => {
            let run = url
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("run");
            format!(
                "view: ember pull {url} pulled/{run} && mindinsight start --summary-base-dir pulled"
            )
        }
        // MindInsight lists every directory of summaries under its base directory as a run.
        (Format::MindInsight, None) => format!(
            "view: mindinsight start --summary-base-dir {}",
            shown(match logdir.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => std::path::Path::new("."),
            })
        ),
        _ => format!("view: tensorboard --logdir {}", shown(logdir)),
    });
}

pub(super) fn epoch_line(report: &EpochReport, epochs: usize) -> String {
    let percent = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    format!(
        "epoch {}/{epochs}: train loss {:.4}, train accuracy {}, test loss {}, test accuracy {}",
        report.epoch,
        report.train_loss,
        percent(report.train_accuracy),
        report
            .valid_loss
            .map_or("-".to_string(), |v| format!("{v:.4}")),
        percent(report.valid_accuracy),
    )
}
