//! The binary's logger: the library's `log` warnings and errors (a checkpoint passed over, a
//! log writer that failed, a file system without locks) reach the user as one stderr line
//! each, `warning: …` or `error: …`, drawn above the progress bar, with the training step when
//! one is under way. `RUST_LOG` filters them as it does everywhere in Rust (ember's warnings
//! when unset, no dependency's); whatever it shows, every warning and error of ember's crates
//! is counted for `ember train`'s final report.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Warnings logged so far.
static WARNINGS: AtomicU64 = AtomicU64::new(0);
/// Errors logged so far.
static ERRORS: AtomicU64 = AtomicU64::new(0);
/// Whether training is under way, and so lines name [`STEP`].
static TRAINING: AtomicBool = AtomicBool::new(false);
/// The training step reached.
static STEP: AtomicU64 = AtomicU64::new(0);
/// The step at which a log writer first failed, or [`NONE`].
static LOG_FAILED_AT: AtomicU64 = AtomicU64::new(NONE);
const NONE: u64 = u64::MAX;

struct Logger {
    shown: env_logger::Logger,
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Warn || self.shown.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        let ours = is_ember(record.target());
        match record.level() {
            Level::Error if ours => ERRORS.fetch_add(1, Ordering::Relaxed),
            Level::Warn if ours => WARNINGS.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        if record.level() == Level::Error && is_log_writer(record.target()) {
            let step = STEP.load(Ordering::Relaxed);
            let _ =
                LOG_FAILED_AT.compare_exchange(NONE, step, Ordering::Relaxed, Ordering::Relaxed);
        }
        if self.shown.matches(record) {
            self.shown.log(record);
        }
    }

    fn flush(&self) {}
}

/// Whether `target` (a module path) is one of ember's crates: what the run's count and its
/// default filter cover. A dependency's own log (wgpu's Vulkan loader, say) is shown only when
/// `RUST_LOG` asks for it.
fn is_ember(target: &str) -> bool {
    target.starts_with("ember")
}

/// The filter where `RUST_LOG` is unset: ember's warnings and errors, nothing of dependencies.
/// (env_logger matches a directive's name as a prefix of the target: `ember` is every
/// `ember_*` crate too.)
const DEFAULT_FILTER: &str = "off,ember=warn";

/// Whether `target` (a module path) is where ember's summary writers report their failures:
/// ember-write's pool, and the Trainer's handling of a summary error.
fn is_log_writer(target: &str) -> bool {
    target.starts_with("ember_write") || target.starts_with("ember::faults")
}

/// Where env_logger's lines go: [`crate::output::err_bytes`], above the bar, failures ignored.
struct AboveTheBar;

impl Write for AboveTheBar {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        crate::output::err_bytes(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the logger, once, first thing in `main`.
pub(crate) fn install() {
    let shown =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(DEFAULT_FILTER))
            .format(|line, record| {
                let level = match record.level() {
                    Level::Error => "error",
                    Level::Warn => "warning",
                    Level::Info => "info",
                    Level::Debug => "debug",
                    Level::Trace => "trace",
                };
                // One write per line: env_logger hands the buffer to the target whole.
                if TRAINING.load(Ordering::Relaxed) {
                    let step = STEP.load(Ordering::Relaxed);
                    writeln!(line, "{level} (step {step}): {}", record.args())
                } else {
                    writeln!(line, "{level}: {}", record.args())
                }
            })
            .target(env_logger::Target::Pipe(Box::new(AboveTheBar)))
            .build();
    let max = shown.filter().max(LevelFilter::Warn);
    if log::set_boxed_logger(Box::new(Logger { shown })).is_ok() {
        log::set_max_level(max);
    }
}

/// Lines logged from now on name `step` as the step training has reached.
pub(crate) fn at_step(step: u64) {
    STEP.store(step, Ordering::Relaxed);
    TRAINING.store(true, Ordering::Relaxed);
}

/// Lines logged from now on name no step.
pub(crate) fn training_done() {
    TRAINING.store(false, Ordering::Relaxed);
}

/// How many warnings and errors were logged so far.
pub(crate) fn counts() -> (u64, u64) {
    (
        WARNINGS.load(Ordering::Relaxed),
        ERRORS.load(Ordering::Relaxed),
    )
}

/// The step training had reached when a log writer first reported a failure, if one did.
pub(crate) fn log_failed_at() -> Option<u64> {
    Some(LOG_FAILED_AT.load(Ordering::Relaxed)).filter(|&step| step != NONE)
}
