//! The process's CPU use and resident memory, and each device's memory in use, sampled on a
//! thread of its own every few seconds (as W&B's and MLflow's system metrics are, and
//! burn-train's dashboard shows), for the training thread to record with its next step:
//! `system/cpu_percent` (100 is one core busy), `system/resident_bytes` and
//! `system/device/<i>/memory_in_use_bytes` (backends that count their memory: wgpu, CUDA).
//! The machine's own, under the names MLflow's system metrics give them (so that its UI
//! shows them as its own client's): `system/cpu_utilization_percentage` (all cores, 100 is
//! every core busy), `system/system_memory_usage_megabytes` and
//! `system/system_memory_usage_percentage`.
//!
//! The training thread only takes the newest sample, if one came since its last look; reading
//! `/proc` and the devices' allocators happens off it.
//!
//! The CPU use is the process's CPU time between two readings over the wall time between them,
//! the first reading taken when sampling starts, so that the first sample is a real one.
//! sysinfo's own `cpu_usage` is not used: it stays 0 while the reading before found the process
//! at 0 clock ticks (a fresh release build's), and comes out near 0 when two readings are less
//! than its `MINIMUM_CPU_UPDATE_INTERVAL` apart (200 ms on Linux), as a run's first sample was
//! at a short interval.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// One sample: each scalar's tag and value.
pub(super) type Sample = Vec<(String, f64)>;

/// The sampling thread; stopped and joined when dropped.
pub(super) struct SystemSampler {
    latest: Arc<Mutex<Option<Sample>>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SystemSampler {
    /// Samples every `every` for the process and for each distinct device of `devices` (in
    /// device order; a device listed twice is sampled once, under its first index).
    pub(super) fn start(every: Duration, devices: &[Device]) -> std::io::Result<Self> {
        let mut distinct: Vec<(usize, Device)> = Vec::new();
        for (index, device) in devices.iter().enumerate() {
            if !distinct.iter().any(|(_, seen)| seen == device) {
                distinct.push((index, device.clone()));
            }
        }
        let latest = Arc::new(Mutex::new(None));
        let (stop, stopped) = mpsc::channel::<()>();
        let into = latest.clone();
        let thread = std::thread::Builder::new()
            .name("ember-system".into())
            .spawn(move || {
                let pid = sysinfo::get_current_pid().ok();
                let mut system = System::new();
                // The machine's CPU use is measured from this reading to the first sample's.
                system.refresh_cpu_usage();
                let mut last = cpu_clock(&mut system, pid);
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    let sample = sample(&mut system, pid, &mut last, &distinct);
                    if let Ok(mut slot) = into.lock() {
                        *slot = Some(sample);
                    }
                }
            })?;
        Ok(Self {
            latest,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The newest sample taken since the last call, if any.
    pub(super) fn take(&self) -> Option<Sample> {
        self.latest.lock().ok().and_then(|mut slot| slot.take())
    }
}

impl Drop for SystemSampler {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn refresh(system: &mut System, pid: Option<Pid>) {
    if let Some(pid) = pid {
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            true,
            ProcessRefreshKind::nothing().with_cpu().with_memory(),
        );
    }
}

/// The process's CPU time so far (milliseconds, all threads), read now, and when.
type CpuClock = (Option<u64>, Instant);

fn cpu_clock(system: &mut System, pid: Option<Pid>) -> CpuClock {
    refresh(system, pid);
    let cpu_ms = pid
        .and_then(|pid| system.process(pid))
        .map(|process| process.accumulated_cpu_time());
    (cpu_ms, Instant::now())
}

fn sample(
    system: &mut System,
    pid: Option<Pid>,
    last: &mut CpuClock,
    devices: &[(usize, Device)],
) -> Sample {
    let (before, since) = std::mem::replace(last, cpu_clock(system, pid));
    let mut sample = Sample::new();
    if let (Some(before), (Some(now), at)) = (before, *last) {
        let wall_ms = at.duration_since(since).as_secs_f64() * 1e3;
        let busy_ms = now.saturating_sub(before) as f64;
        let percent = 100.0 * busy_ms / wall_ms.max(f64::MIN_POSITIVE);
        sample.push(("system/cpu_percent".into(), percent));
    }
    if let Some(process) = pid.and_then(|pid| system.process(pid)) {
        sample.push(("system/resident_bytes".into(), process.memory() as f64));
    }
    machine(system, &mut sample);
    for (index, device) in devices {
        if let Some(usage) = device.memory_pool_usage() {
            sample.push((
                format!("system/device/{index}/memory_in_use_bytes"),
                usage.bytes_in_use as f64,
            ));
        }
    }
    sample
}

/// The machine's CPU and memory use, as MLflow's own system metrics name them (its
/// `CPUMonitor`: psutil's `cpu_percent` and `virtual_memory().used`, in megabytes of 10^6).
fn machine(system: &mut System, sample: &mut Sample) {
    system.refresh_cpu_usage();
    if !system.cpus().is_empty() {
        let percent = f64::from(system.global_cpu_usage());
        sample.push(("system/cpu_utilization_percentage".into(), percent));
    }
    system.refresh_memory();
    let (used, total) = (system.used_memory() as f64, system.total_memory() as f64);
    if total > 0.0 {
        sample.push(("system/system_memory_usage_megabytes".into(), used / 1e6));
        sample.push((
            "system/system_memory_usage_percentage".into(),
            100.0 * used / total,
        ));
    }
}
