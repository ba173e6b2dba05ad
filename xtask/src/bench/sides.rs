//! The sides of the comparison and the workloads they run: who is measured (ember and its
//! peers, each peer's venv pinned), and how many steps each side takes of each workload. A
//! module of its own, so that the runs (`bench.rs`) and the report (`report.rs`) share it.

/// tensorboardX's venv. `tensorboardX` 2.6.5 is the newest release on PyPI (the one the
/// reference notes describe); `crc32c` is the optional native CRC that tensorboardX picks up
/// when installed (`tbx_write.py --crc python` hides it, for tensorboardX as pip installs it);
/// `pillow` encodes its images; `numpy` and `protobuf` are pinned to what tensorboardX resolved
/// to on Python 3.11, so a new release cannot move the figures.
pub(crate) const BENCH_REQUIREMENTS: &[&str] = &[
    "tensorboardX==2.6.5",
    "protobuf==7.36.2",
    "numpy==2.4.6",
    "pillow==12.0.0",
    "crc32c==2.9.post0",
];

/// MindSpore's venv: the 2.10.0 wheel (cp311, manylinux x86_64/aarch64) and the versions of its
/// dependencies pip resolved with it.
pub(crate) const MINDSPORE_REQUIREMENTS: &[&str] = &[
    "mindspore==2.10.0",
    "numpy==2.4.6",
    "protobuf==7.36.2",
    "pillow==13.0.0",
    "scipy==1.17.1",
    "psutil==7.2.2",
];

/// The sides of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Ember,
    /// tensorboardX with its pure-Python CRC, as `pip install tensorboardX` leaves it.
    Tbx,
    /// tensorboardX with the native `crc32c` it picks up when installed.
    TbxCrc,
    MindSpore,
}

impl Side {
    /// The name its JSON line carries.
    pub(super) fn peer(self) -> &'static str {
        match self {
            Side::Ember => "ember",
            Side::Tbx => "tensorboardX",
            Side::TbxCrc => "tensorboardX+crc32c",
            Side::MindSpore => "MindSpore",
        }
    }

    /// Steps of `workload` on this side, or `None` where the side has no such call: enough for
    /// about a second or more of each side's time on 2 cores, so that start-up and the final
    /// fsync weigh little (ember's first histograms, for one, each touch fresh pages until the
    /// first batch is written: 2,000 of them measured ~9 k/s where 8,000 measured ~12.7 k/s).
    /// Both tensorboardX sides run the same count.
    pub(super) fn steps(self, workload: &str) -> Option<u64> {
        let n = match (self, workload) {
            (Side::Ember, "scalars") => 3_000_000,
            (Side::Ember, "scalars10") => 250_000,
            (Side::Ember, "scalars10-record") => 600_000,
            (Side::Ember, "hist") => 10_000,
            (Side::Ember, "image") => 30_000,
            (Side::Ember, "tensor") => 3_000,
            (Side::Tbx | Side::TbxCrc, "scalars") => 50_000,
            (Side::Tbx | Side::TbxCrc, "scalars10") => 5_000,
            (Side::Tbx | Side::TbxCrc, "scalars10-record") => return None,
            (Side::Tbx | Side::TbxCrc, "hist") => 600,
            (Side::Tbx | Side::TbxCrc, "image") => 1_000,
            (Side::Tbx | Side::TbxCrc, "tensor") => 500,
            (Side::MindSpore, "scalars" | "scalars10-record") => 3_000,
            (Side::MindSpore, "scalars10") => 300,
            (Side::MindSpore, "hist") => 400,
            (Side::MindSpore, "image") => 600,
            (Side::MindSpore, "tensor") => 50,
            _ => return None,
        };
        Some(n)
    }
}

/// The workloads of `ember bench write`, in report order.
pub(crate) const WORKLOADS: &[&str] = &[
    "scalars",
    "scalars10",
    "scalars10-record",
    "hist",
    "image",
    "tensor",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_side_has_steps_for_the_workloads_it_can_run() {
        for &w in WORKLOADS {
            assert!(Side::Ember.steps(w).is_some(), "{w}");
            assert!(Side::MindSpore.steps(w).is_some(), "{w}");
        }
        assert_eq!(Side::Tbx.steps("scalars10-record"), None);
    }
}
