//! Which device each of `ember train`'s workers trains on: the `--device` list, the build's
//! default, the rule that workers never share a device unasked, and what each device's
//! allocator holds at the end.

use anyhow::ensure;
use burn::tensor::Device;
use ember::devices::{DeviceSpec, OpenedDevice, parse_devices};

/// `--device`'s list, as one value (clap would take a bare `Vec` for a repeated flag).
#[derive(Debug, Clone)]
pub(crate) struct DeviceList(pub(crate) Vec<DeviceSpec>);

pub(crate) fn parse_device_list(text: &str) -> Result<DeviceList, String> {
    parse_devices(text)
        .map(DeviceList)
        .map_err(|e| e.to_string())
}

/// The devices the build trains on when none are named.
pub(crate) fn default_devices() -> anyhow::Result<Vec<DeviceSpec>> {
    #[cfg(feature = "cuda")]
    {
        let found = burn::tensor::Device::enumerate(burn::tensor::DeviceType::Cuda).len();
        ensure!(
            found > 0,
            "built with cuda, but the CUDA driver lists no device; name devices with --device"
        );
        return Ok((0..found).map(DeviceSpec::Cuda).collect());
    }
    #[cfg(all(feature = "wgpu", not(feature = "cuda")))]
    return Ok(vec![DeviceSpec::Wgpu(0), DeviceSpec::Wgpu(1)]);
    #[allow(unreachable_code)]
    Ok(vec![DeviceSpec::Cpu])
}

/// Each worker's device: worker `i` on listed device `i`. More workers than devices share
/// them only where asked to (or on `cpu`, which is one device by nature); fewer workers than
/// devices would leave a listed device idle, which is refused too.
pub(crate) fn worker_devices(
    listed: &[DeviceSpec],
    workers: Option<usize>,
    share: bool,
) -> anyhow::Result<Vec<DeviceSpec>> {
    let only_cpu = listed.iter().all(|d| *d == DeviceSpec::Cpu);
    let workers = workers.unwrap_or(if only_cpu && listed.len() == 1 {
        2
    } else {
        listed.len()
    });
    let named = listed
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    ensure!(
        workers <= listed.len() || share || only_cpu,
        "{workers} workers but {} device(s) listed ({named}): list one device per worker, or \
         pass --share-devices to share them round robin",
        listed.len()
    );
    ensure!(
        workers >= listed.len(),
        "--devices {workers} leaves devices of the list ({named}) without a worker: list only \
         the devices to train on"
    );
    Ok((0..workers).map(|i| listed[i % listed.len()]).collect())
}

/// What each device's allocator holds at the end of training, once per device: its reserved
/// bytes are the high-water mark of its pools, which keep their pages for reuse. Backends that
/// report no figure (flex) print nothing.
pub(crate) fn print_device_memory(opened: &[OpenedDevice]) {
    let mut seen: Vec<&Device> = Vec::new();
    for device in opened {
        if seen.contains(&&device.device) {
            continue;
        }
        seen.push(&device.device);
        if let Some(usage) = device.device.memory_pool_usage() {
            let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
            crate::output::err(format!(
                "device memory: {}: {:.1} MiB reserved, {:.1} MiB in use",
                device.spec,
                mib(usage.bytes_reserved),
                mib(usage.bytes_in_use)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_get_the_listed_devices_and_never_share_unasked() {
        let gpus = [DeviceSpec::Wgpu(0), DeviceSpec::Wgpu(1)];
        assert_eq!(worker_devices(&gpus, None, false).unwrap(), gpus);
        let error = worker_devices(&gpus, Some(4), false)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("4 workers but 2 device(s) listed (wgpu:0,wgpu:1)"),
            "{error}"
        );
        assert_eq!(
            worker_devices(&gpus, Some(3), true).unwrap(),
            [gpus[0], gpus[1], gpus[0]]
        );
        let error = worker_devices(&gpus, Some(1), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("without a worker"), "{error}");
        // The CPU backend is one device: its workers share it, two by default.
        assert_eq!(
            worker_devices(&[DeviceSpec::Cpu], None, false)
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            worker_devices(&[DeviceSpec::Cpu], Some(4), false)
                .unwrap()
                .len(),
            4
        );
    }
}
