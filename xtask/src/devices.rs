//! `cargo xtask devices`: multi-device training on two *distinct* devices, on any machine.
//!
//! Mesa's lavapipe gives Burn's wgpu backend a real Vulkan device on the CPU; ember opens two
//! logical devices on it (`wgpu:0`, `wgpu:1`), each with its own queue, memory and Burn client.
//!
//! 1. Finds lavapipe's Vulkan driver and the Vulkan loader; as root with `apt-get`, installs
//!    Debian's `mesa-vulkan-drivers libvulkan1` when missing. Without them the task is skipped
//!    in one line, except under `CI=true`, where that is a failure.
//! 2. Runs `tests/tests/integration/distinct_devices.rs` (the `wgpu` feature of the tests
//!    crate): the two devices are distinct; the Trainer on both trains like one device on the concatenated
//!    batch, with gradient accumulation; burn-train's `Learner` on ember's `PoolStrategy` logs
//!    what burn's `LearnerSummary` summarises; every failure of the pool is named by device and
//!    leaves nothing on a wrong device.
//! 3. Runs `ember train --device wgpu:0,wgpu:1` (built with `--features wgpu`) and the flex
//!    build's `ember train` on the same data and epochs: both reach the accuracy band, within
//!    a few points of each other, and the wgpu run prints nothing of the Vulkan stack's own;
//!    `ember inspect` reads its logs back whole, with both devices' step times; without a
//!    Vulkan driver the wgpu build fails before training, in one line.
//!
//! `cargo xtask gpu` is the same on a machine's CUDA devices (see `gpu.rs`).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, ensure};

use crate::process::{
    build, cargo, collect_tags, ensure_installed, expect_success, run_limited, skip_or_fail,
    target_dir,
};
use crate::scenario::inspect_json;

const TASK: &str = "devices";

/// Debian's lavapipe driver and the Vulkan loader.
const PACKAGES: &[&str] = &["mesa-vulkan-drivers", "libvulkan1"];

/// Epochs of the `ember train` comparison: two reach ~90% on the held-out digits.
const EPOCHS: &str = "2";

/// The lowest test accuracy either build may reach in [`EPOCHS`] epochs, and the largest gap
/// between them. Both builds start from the same seeded weights on the same batches, but the
/// flex CPU backend and a Vulkan device round differently, and over 46 Adam steps that moves
/// the accuracy by a digit or two of the 359 held out (0.3–0.6 points); a device whose
/// gradients were lost or doubled lands far outside.
const MIN_ACCURACY: f64 = 85.0;
const MAX_GAP: f64 = 3.0;

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    if let Err(why) = ensure_installed(TASK, PACKAGES, lavapipe_missing) {
        return skip_or_fail(TASK, &why);
    }
    let target = target_dir(root);
    let work = target.join(format!("devices-check-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;

    distinct_device_suite(root)?;
    build(root, &["build", "-p", "ember-cli", "--features", "wgpu"])?;
    let wgpu = train(&target, &work, "wgpu", &["--device", "wgpu:0,wgpu:1"])?;
    ensure!(
        wgpu.output.contains("worker 1: wgpu:1"),
        "ember train did not put worker 1 on wgpu:1:\n{}",
        wgpu.output
    );
    for noise in ["XDG_RUNTIME_DIR", "MESA", "WARNING"] {
        ensure!(
            !wgpu.output.contains(noise),
            "ember train on wgpu printed the graphics stack's `{noise}`:\n{}",
            wgpu.output
        );
    }
    logs_read_back(
        &target.join("debug/ember"),
        &work.join("wgpu"),
        wgpu.accuracy,
    )?;
    no_driver_is_one_error_line(&target.join("debug/ember"), &work)?;
    build(root, &["build", "-p", "ember-cli"])?;
    let flex = train(&target, &work, "flex", &[])?;
    let gap = (wgpu.accuracy - flex.accuracy).abs();
    eprintln!(
        "{TASK}: ember train, {EPOCHS} epochs: wgpu:0,wgpu:1 {:.2}% in {:.1} s, flex (2 workers \
         on cpu) {:.2}% in {:.1} s; gap {gap:.2} points",
        wgpu.accuracy, wgpu.seconds, flex.accuracy, flex.seconds
    );
    for (name, run) in [("wgpu", &wgpu), ("flex", &flex)] {
        ensure!(
            run.accuracy >= MIN_ACCURACY,
            "the {name} build reached {:.2}%, below {MIN_ACCURACY}%",
            run.accuracy
        );
    }
    ensure!(
        gap <= MAX_GAP,
        "the wgpu and flex builds differ by {gap:.2} points (more than {MAX_GAP})"
    );
    std::fs::remove_dir_all(&work).ok();
    eprintln!("{TASK}: all scenarios passed");
    Ok(())
}

/// The distinct-device suite on the wgpu build, one test at a time.
fn distinct_device_suite(root: &Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let status = cargo()
        .args([
            "test",
            "-p",
            "ember-tests",
            "--features",
            "wgpu",
            "--test",
            "integration",
            "distinct_devices::",
            "--",
            // The suite measures each device's memory; tests side by side would blur it.
            "--test-threads=1",
            "--nocapture",
        ])
        // Mesa's device-select layer prints about a missing Wayland session; `ember` turns
        // it off itself, a test binary is told here.
        .env("NODEVICE_SELECT", "1")
        .current_dir(root)
        .status()
        .context("starting cargo test")?;
    ensure!(
        status.success(),
        "the distinct-device suite failed ({status})"
    );
    eprintln!(
        "{TASK}: the distinct-device suite passed ({:.0} s with its build)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The wgpu run's logs, read back whole by `ember inspect`: both devices' step times, and the
/// last test accuracy recorded equal to the one printed.
fn logs_read_back(ember: &Path, logdir: &Path, printed: f64) -> anyhow::Result<()> {
    let report = inspect_json(ember, logdir)?;
    let mut tags = Vec::new();
    collect_tags(&report, &mut tags);
    for tag in [
        "train/loss",
        "device/0/step_seconds",
        "device/1/step_seconds",
    ] {
        ensure!(
            tags.iter().any(|t| t == tag),
            "the wgpu run has no `{tag}`; ember inspect found {tags:?}"
        );
    }
    let recorded = find_tag(&report, "valid/accuracy")
        .and_then(|series| series["scalar"]["last"].as_f64())
        .context("the wgpu run recorded no valid/accuracy")?;
    ensure!(
        (recorded * 100.0 - printed).abs() < 0.01,
        "ember train printed {printed:.2}% but recorded {:.4}%",
        recorded * 100.0
    );
    eprintln!(
        "{TASK}: the wgpu run's logs read back whole by ember inspect: both devices' step \
         times, and the test accuracy printed ({printed:.2}%)"
    );
    Ok(())
}

/// Without a Vulkan driver (the loader pointed at none) `ember train --device wgpu:0` fails
/// before training with one line saying what to install, not a panic.
fn no_driver_is_one_error_line(ember: &Path, work: &Path) -> anyhow::Result<()> {
    let nowhere = work.join("no-such-icd.json");
    let mut command = Command::new(ember);
    command
        .args(["train", "--epochs", "1", "--device", "wgpu:0", "--logdir"])
        .arg(work.join("no-driver"))
        // The loader's variables for which drivers to load, old name and new.
        .env("VK_ICD_FILENAMES", &nowhere)
        .env("VK_DRIVER_FILES", &nowhere);
    let what = "ember train --device wgpu:0 without a Vulkan driver";
    let ran = run_limited(command, what, &work.join("no-driver.log"))?;
    let expected = "error: cannot open wgpu:0: no wgpu adapter found: install a Vulkan driver";
    ensure!(
        !ran.success
            && ran
                .output
                .lines()
                .filter(|l| l.starts_with("error: "))
                .count()
                == 1
            && ran.output.contains(expected)
            && !ran.output.contains("panicked"),
        "{what}: expected one `{expected}` line and exit 1, got ({}):\n{}",
        ran.status,
        ran.output
    );
    eprintln!("{TASK}: without a Vulkan driver, ember train says so in one line before training");
    Ok(())
}

/// The first object anywhere in `value` whose `"tag"` is `tag`.
fn find_tag<'v>(value: &'v serde_json::Value, tag: &str) -> Option<&'v serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => {
            if map.get("tag").and_then(|t| t.as_str()) == Some(tag) {
                return Some(value);
            }
            map.values().find_map(|v| find_tag(v, tag))
        }
        serde_json::Value::Array(items) => items.iter().find_map(|v| find_tag(v, tag)),
        _ => None,
    }
}

/// What of lavapipe and the Vulkan loader is not here.
fn lavapipe_missing() -> Vec<&'static str> {
    let icd = std::fs::read_dir("/usr/share/vulkan/icd.d").is_ok_and(|files| {
        files
            .flatten()
            .any(|f| f.file_name().to_string_lossy().starts_with("lvp_icd"))
    });
    let loader = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .any(|dir| Path::new(dir).join("libvulkan.so.1").exists());
    let mut missing = Vec::new();
    if !icd {
        missing.push("lavapipe Vulkan driver");
    }
    if !loader {
        missing.push("Vulkan loader (libvulkan.so.1)");
    }
    missing
}

/// A finished `ember train`: its test accuracy in percent, its seconds, what it printed.
struct Trained {
    accuracy: f64,
    seconds: f64,
    output: String,
}

fn train(target: &Path, work: &Path, name: &str, args: &[&str]) -> anyhow::Result<Trained> {
    let mut command = Command::new(target.join("debug/ember"));
    command
        .args(["train", "--epochs", EPOCHS, "--logdir"])
        .arg(work.join(name))
        .args(args);
    let what = format!("ember train ({name})");
    let ran = run_limited(command, &what, &work.join(format!("{name}.log")))?;
    expect_success(&ran, &what)?;
    let accuracy = ran
        .output
        .lines()
        .find_map(|line| line.strip_prefix("test accuracy: "))
        .and_then(|rest| rest.split('%').next())
        .and_then(|number| number.parse().ok())
        .with_context(|| format!("{what} printed no test accuracy:\n{}", ran.output))?;
    Ok(Trained {
        accuracy,
        seconds: ran.elapsed.as_secs_f64(),
        output: ran.output,
    })
}
