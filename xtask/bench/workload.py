"""The fixed data of `ember bench write`'s workloads (crates/ember-cli/src/bench.rs), regenerated
bit for bit for the Python peers: SplitMix64 with the same seed and the same Box-Muller
transform (the RNGs of Rust and numpy differ), and the byte count of an output directory.

| name             | calls per step                                              |
|------------------|-------------------------------------------------------------|
| scalars          | one scalar, tag loss, 1/(s+1)                               |
| scalars10        | ten scalars, tags m0..m9, 1/(s+1+k), one call each          |
| scalars10-record | the same ten values as one event (where the API has it)     |
| hist             | histogram of one fixed vector of 100,000 f32 normals        |
| image            | one fixed 3x64x64 f32 image (CHW) in [0, 1)                 |
| tensor           | one fixed vector of 100,000 f32 in [0, 1)                   |
"""

import math
import os

import numpy as np

SEED = 0x000E_4BE5_2026
VECTOR_LEN = 100_000
IMAGE_SHAPE = (3, 64, 64)
MASK = (1 << 64) - 1
WORKLOADS = ["scalars", "scalars10", "scalars10-record", "hist", "image", "tensor"]


class SplitMix64:
    """bench.rs's SplitMix64, with u64 wrapping done by masking."""

    def __init__(self, seed):
        self.state = seed & MASK

    def next_u64(self):
        self.state = (self.state + 0x9E37_79B9_7F4A_7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & MASK
        return z ^ (z >> 31)

    def next_f64(self):
        # 53 random bits times 2^-53: exact in f64, as in Rust.
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def next_normal(self):
        u1 = 1.0 - self.next_f64()
        u2 = self.next_f64()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(math.tau * u2)


def fixed_data(workload):
    """The workload's fixed vector as float32 (None for the scalar workloads)."""
    rng = SplitMix64(SEED)
    if workload == "hist":
        values = [rng.next_normal() for _ in range(VECTOR_LEN)]
        return np.array(values, dtype=np.float64).astype(np.float32)
    if workload == "image":
        n = IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2]
        values = np.array([rng.next_f64() for _ in range(n)], dtype=np.float64)
        return values.astype(np.float32).reshape(IMAGE_SHAPE)
    if workload == "tensor":
        values = [rng.next_f64() for _ in range(VECTOR_LEN)]
        return np.array(values, dtype=np.float64).astype(np.float32)
    return None


def size_under(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total
