//! The process's CPU use and resident memory, and each device's memory in use, sampled on a
//! thread of its own every few seconds (as W&B's and MLflow's system metrics are, and
//! burn-train's dashboard shows), for the training thread to record with its next step:
//! `system/cpu_percent` (100 is one core busy), `system/resident_bytes` and
//! `system/device/<i>/memory_in_use_bytes` (backends that count their memory: wgpu, CUDA).
//!
//! The training thread only takes the newest sample, if one came since its last look; reading
//! `/proc` and the devices' allocators happens off it.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use burn::tensor::Device;
use sysinfo::{MINIMUM_CPU_UPDATE_INTERVAL, Pid, ProcessRefreshKind, ProcessesToUpdate, System};

/// One sample: each scalar's tag and value.
pub(super) type Sample = Vec<(String, f64)>;

/// The sampling thread; stopped and joined when dropped.
pub(super) struct SystemSampler {
    latest: Arc<Mutex<Option<Sample>>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SystemSampler {
    /// Samples every `every` (at least sysinfo's `MINIMUM_CPU_UPDATE_INTERVAL`, within which
    /// it does not read the CPU's times again and a process's use comes out near 0) for the
    /// process and for each distinct device of `devices` (in device order; a device listed
    /// twice is sampled once, under its first index).
    pub(super) fn start(every: Duration, devices: &[Device]) -> std::io::Result<Self> {
        let every = every.max(MINIMUM_CPU_UPDATE_INTERVAL);
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
                // A process's CPU use is the time it ran between two readings, and sysinfo
                // gives 0 until it has had two (or while the first found the process at 0
                // clock ticks): the second is taken here, a measurable interval after the
                // first, so that the first sample is a real one.
                refresh(&mut system, pid);
                if stopped.recv_timeout(MINIMUM_CPU_UPDATE_INTERVAL)
                    != Err(RecvTimeoutError::Timeout)
                {
                    return;
                }
                refresh(&mut system, pid);
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    let sample = sample(&mut system, pid, &distinct);
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

fn sample(system: &mut System, pid: Option<Pid>, devices: &[(usize, Device)]) -> Sample {
    refresh(system, pid);
    let mut sample = Sample::new();
    if let Some(process) = pid.and_then(|pid| system.process(pid)) {
        sample.push(("system/cpu_percent".into(), f64::from(process.cpu_usage())));
        sample.push(("system/resident_bytes".into(), process.memory() as f64));
    }
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
