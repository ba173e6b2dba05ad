//! Training devices named the way a user types them: `cpu`, `wgpu:0`, `cuda:1`.
//!
//! [`parse_devices`] reads a comma-separated list and [`open_devices`] turns it into Burn
//! [`Device`]s, one per entry, with autodiff on. A device named twice is one device shared by
//! two workers: that is how a caller asks for sharing, and nothing shares silently.
//!
//! - `cpu` is Burn's flex backend, which has exactly one device.
//! - `cuda:N` (feature `cuda`) is the N-th CUDA device the driver lists; one that is absent is
//!   an error naming how many there are.
//! - `wgpu:N` (feature `wgpu`) is the N-th *logical* wgpu device ember opens: each is a device
//!   of its own, requested from an adapter, with its own queue, memory and Burn client, and
//!   registered with Burn as an `Existing` device. Logical devices are laid over the adapters in
//!   order (hardware adapters if there are any, else software ones such as Mesa's lavapipe), so
//!   on a machine with two GPUs `wgpu:0` and `wgpu:1` are the two cards, and on a machine with
//!   one adapter they are two distinct devices on it: tensors of one are not tensors of the
//!   other, and moving between them is a real transfer. [`OpenedDevice::description`] says which
//!   adapter each landed on.
//!
//! Opening is idempotent within a process: `wgpu:1` opened twice is the same device, so a
//! program (or a test suite) that opens its devices again gets the memory it already holds.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;

/// A device as a user names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    /// Burn's flex CPU backend: one device per process.
    Cpu,
    /// The N-th logical wgpu device (feature `wgpu`).
    Wgpu(usize),
    /// The N-th CUDA device (feature `cuda`).
    Cuda(usize),
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Wgpu(i) => write!(f, "wgpu:{i}"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// The highest device index a spec may name: far above any machine's device count, low enough
/// that a typo cannot ask ember to open millions of logical devices.
pub const MAX_DEVICE_INDEX: usize = 255;

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, DeviceError> {
        let unknown = || DeviceError::Unknown(text.to_string());
        let trimmed = text.trim();
        if trimmed == "cpu" {
            return Ok(DeviceSpec::Cpu);
        }
        let (backend, index) = trimmed.split_once(':').ok_or_else(unknown)?;
        let index: usize = index.parse().map_err(|_| unknown())?;
        if index > MAX_DEVICE_INDEX {
            return Err(unknown());
        }
        match backend {
            "wgpu" => Ok(DeviceSpec::Wgpu(index)),
            "cuda" => Ok(DeviceSpec::Cuda(index)),
            _ => Err(unknown()),
        }
    }
}

/// Reads a comma-separated device list such as `wgpu:0,wgpu:1`.
pub fn parse_devices(list: &str) -> Result<Vec<DeviceSpec>, DeviceError> {
    if list.trim().is_empty() {
        return Err(DeviceError::Empty);
    }
    list.split(',').map(str::parse).collect()
}

/// Why a device list cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The list names no device.
    #[error("the device list is empty: name at least one device, e.g. `cpu` or `wgpu:0`")]
    Empty,
    /// An entry is not `cpu`, `wgpu:N` or `cuda:N`.
    #[error("unknown device `{0}`: expected `cpu`, `wgpu:N` or `cuda:N` (N from 0 to 255)")]
    Unknown(String),
    /// The build lacks the backend the device needs.
    #[error("{device} needs ember built with the `{feature}` feature")]
    NotBuilt {
        /// The device asked for.
        device: DeviceSpec,
        /// The cargo feature that adds its backend.
        feature: &'static str,
    },
    /// The device is not on this machine.
    #[error("{device} is absent: {found}")]
    Absent {
        /// The device asked for.
        device: DeviceSpec,
        /// What the machine has instead.
        found: String,
    },
    /// The driver refused to open the device.
    #[error("cannot open {device}: {message}")]
    Open {
        /// The device asked for.
        device: DeviceSpec,
        /// The driver's or runtime's reason.
        message: String,
    },
}

/// A device opened for training, with where it landed.
#[derive(Debug, Clone)]
pub struct OpenedDevice {
    /// The name it was opened by.
    pub spec: DeviceSpec,
    /// The Burn device, with autodiff on.
    pub device: Device,
    /// The hardware under it, e.g. `llvmpipe (LLVM 15.0.6, 256 bits) [Cpu, Vulkan]`.
    pub description: String,
}

/// Opens every listed device, in order (the first is the main device). A device listed twice
/// is opened once, and both entries hold it.
pub fn open_devices(specs: &[DeviceSpec]) -> Result<Vec<OpenedDevice>, DeviceError> {
    if specs.is_empty() {
        return Err(DeviceError::Empty);
    }
    specs.iter().map(|spec| open_device(*spec)).collect()
}

/// Opens one device (idempotent within a process).
pub fn open_device(spec: DeviceSpec) -> Result<OpenedDevice, DeviceError> {
    match spec {
        DeviceSpec::Cpu => Ok(OpenedDevice {
            spec,
            device: Device::flex().autodiff(),
            description: "flex CPU backend".to_string(),
        }),
        DeviceSpec::Wgpu(index) => wgpu_device(spec, index),
        DeviceSpec::Cuda(index) => cuda_device(spec, index),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(spec: DeviceSpec, _index: usize) -> Result<OpenedDevice, DeviceError> {
    Err(DeviceError::NotBuilt {
        device: spec,
        feature: "cuda",
    })
}

#[cfg(feature = "cuda")]
fn cuda_device(spec: DeviceSpec, index: usize) -> Result<OpenedDevice, DeviceError> {
    let gpus = Device::enumerate(burn::tensor::DeviceType::Cuda).into_vec();
    let device = gpus
        .get(index)
        .cloned()
        .ok_or_else(|| DeviceError::Absent {
            device: spec,
            found: format!("the CUDA driver lists {} device(s)", gpus.len()),
        })?;
    Ok(OpenedDevice {
        spec,
        description: format!("CUDA device {index}"),
        device: device.autodiff(),
    })
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device(spec: DeviceSpec, _index: usize) -> Result<OpenedDevice, DeviceError> {
    Err(DeviceError::NotBuilt {
        device: spec,
        feature: "wgpu",
    })
}

#[cfg(feature = "wgpu")]
fn wgpu_device(spec: DeviceSpec, index: usize) -> Result<OpenedDevice, DeviceError> {
    let (device, description) = logical_wgpu::open(index).map_err(|message| DeviceError::Open {
        device: spec,
        message,
    })?;
    Ok(OpenedDevice {
        spec,
        device,
        description,
    })
}

#[cfg(feature = "wgpu")]
mod logical_wgpu {
    //! Logical wgpu devices: each one `request_device` on an adapter, registered with Burn.

    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};

    use burn::backend::wgpu::{RuntimeOptions, WgpuSetup, try_init_device, wgpu};
    use burn::tensor::Device;

    /// The logical devices opened so far, by index, with their adapter's description.
    type Opened = BTreeMap<usize, (Device, String)>;

    fn opened() -> &'static Mutex<Opened> {
        static OPENED: OnceLock<Mutex<Opened>> = OnceLock::new();
        OPENED.get_or_init(|| Mutex::new(BTreeMap::new()))
    }

    /// The instance every logical device comes from, and its usable adapters (hardware ones if
    /// any, else software ones), in the order Vulkan (or the platform's API) lists them.
    fn adapters() -> &'static Result<(wgpu::Instance, Vec<wgpu::Adapter>), String> {
        static ADAPTERS: OnceLock<Result<(wgpu::Instance, Vec<wgpu::Adapter>), String>> =
            OnceLock::new();
        ADAPTERS.get_or_init(|| {
            let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
                backends: wgpu::Backends::PRIMARY,
                ..wgpu::InstanceDescriptor::new_without_display_handle()
            });
            let all = futures_lite::future::block_on(
                instance.enumerate_adapters(wgpu::Backends::PRIMARY),
            );
            let hardware: Vec<wgpu::Adapter> = all
                .iter()
                .filter(|a| a.get_info().device_type != wgpu::DeviceType::Cpu)
                .cloned()
                .collect();
            let usable = if hardware.is_empty() { all } else { hardware };
            if usable.is_empty() {
                return Err(
                    "no wgpu adapter found: install a Vulkan driver (on Debian, \
                     mesa-vulkan-drivers gives the lavapipe CPU adapter)"
                        .to_string(),
                );
            }
            Ok((instance, usable))
        })
    }

    fn describe(adapter: &wgpu::Adapter) -> String {
        let info = adapter.get_info();
        format!("{} [{:?}, {:?}]", info.name, info.device_type, info.backend)
    }

    /// Logical device `index` (opened once, then the same one) and its hardware's description.
    pub(super) fn open(index: usize) -> Result<(Device, String), String> {
        // Held while opening, so two threads asking for one index open it once.
        let mut opened = opened()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(known) = opened.get(&index) {
            return Ok(known.clone());
        }
        let (instance, adapters) = adapters().as_ref().map_err(Clone::clone)?;
        let adapter = &adapters[index % adapters.len()];
        let limits = adapter.limits();
        let (device, queue) = futures_lite::future::block_on(
            adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("ember logical device"),
                // What the runtime's own WGSL path asks for: everything the adapter has but
                // mappable primary buffers, at the adapter's own limits; experimental features
                // would need an unsafe opt-in, and the WGSL path runs without them.
                required_features: adapter
                    .features()
                    .iter_names()
                    .filter(|(name, _)| !name.starts_with("EXPERIMENTAL_"))
                    .fold(wgpu::Features::empty(), |all, (_, feature)| all | feature)
                    .difference(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS),
                required_limits: limits,
                memory_hints: wgpu::MemoryHints::MemoryUsage,
                ..Default::default()
            }),
        )
        .map_err(|e| e.to_string())?;
        let setup = WgpuSetup {
            instance: instance.clone(),
            adapter: adapter.clone(),
            device,
            queue,
            backend: adapter.get_info().backend,
        };
        let registered =
            try_init_device(setup, RuntimeOptions::default()).map_err(|e| format!("{e:?}"))?;
        let device = Device::new(registered).autodiff();
        let sharing = if adapters.len() > 1 {
            String::new()
        } else {
            format!(", logical device {index} of the machine's one adapter")
        };
        let description = format!("{}{sharing}", describe(adapter));
        opened.insert(index, (device.clone(), description.clone()));
        Ok((device, description))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_users_type_them() {
        assert_eq!(
            parse_devices("wgpu:0,wgpu:1").unwrap(),
            vec![DeviceSpec::Wgpu(0), DeviceSpec::Wgpu(1)]
        );
        assert_eq!(
            parse_devices("cuda:0, cuda:1").unwrap(),
            vec![DeviceSpec::Cuda(0), DeviceSpec::Cuda(1)]
        );
        assert_eq!(parse_devices("cpu").unwrap(), vec![DeviceSpec::Cpu]);
        for spec in ["cpu", "wgpu:3", "cuda:12"] {
            assert_eq!(spec.parse::<DeviceSpec>().unwrap().to_string(), spec);
        }
    }

    #[test]
    fn bad_lists_are_typed_errors() {
        assert_eq!(parse_devices(" "), Err(DeviceError::Empty));
        for bad in [
            "gpu:0", "wgpu", "wgpu:", "wgpu:-1", "cuda:x", "wgpu:256", "cpu:0",
        ] {
            assert_eq!(
                parse_devices(bad),
                Err(DeviceError::Unknown(bad.to_string())),
                "{bad}"
            );
        }
        let message = parse_devices("tpu:0").unwrap_err().to_string();
        assert!(message.starts_with("unknown device `tpu:0`"), "{message}");
    }

    #[test]
    fn the_cpu_is_one_device_and_listing_it_twice_shares_it() {
        let opened = open_devices(&[DeviceSpec::Cpu, DeviceSpec::Cpu]).unwrap();
        assert_eq!(opened[0].device, opened[1].device);
        assert!(opened[0].device.is_autodiff());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_backend_not_built_is_named() {
        let error = open_device(DeviceSpec::Cuda(0)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cuda:0 needs ember built with the `cuda` feature"
        );
    }
}
