"""tensorboardX's side of `cargo xtask bench --peers`: one write workload, one JSON line.

Usage: tbx_write.py --workload {scalars,scalars10,hist,image,tensor} --n N --out DIR

The workloads are those of crates/ember-write/src/workload.rs, value for value:

| name      | tags      | value at step s                                        |
|-----------|-----------|--------------------------------------------------------|
| scalars   | loss      | 1/(s+1)                                                |
| scalars10 | m0..m9    | 1/(s+1+k) for tag mk                                   |
| hist      | w         | histogram of one fixed vector of 100,000 f32 normals   |
| image     | img       | one fixed 3x64x64 f32 image (CHW) in [0, 1)            |
| tensor    | t         | one fixed vector of 100,000 f32 in [0, 1)              |

Wall times are 1.7e9 + s/1000. The fixed vectors are regenerated here bit for bit: SplitMix64
with the same seed and the same Box-Muller transform as workload.rs, reimplemented below (the
RNGs of Rust and numpy differ). `--dump-data FILE` writes the vector of a workload as raw
little-endian f32 so that the equality can be checked against ember's output.

Choices, so that both sides do the same work and write the same kind of data:
- hist: `add_histogram(..., bins=30)`, numpy's 30 equal-width buckets, which is ember's default
  rule (tensorboardX's own default, bins='tensorflow', makes ~1,500 exponential buckets).
- tensor: tensorboardX has no `add_tensor`, so each step builds a `TensorProto` (DT_FLOAT, raw
  little-endian `tensor_content`, plugin `tensor` metadata on the first value as ember does) and
  hands the summary to the writer's file writer, the path its own `add_*` methods take.
- SummaryWriter defaults otherwise (max_queue=10, flush_secs=120).

Timing runs from the first value added until `close()` returns, as in `ember bench write`; the
byte count is every file under --out.
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
from tensorboardX import SummaryWriter
from tensorboardX.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

SEED = 0x000E_4BE5_2026
VECTOR_LEN = 100_000
IMAGE_SHAPE = (3, 64, 64)
MASK = (1 << 64) - 1


class SplitMix64:
    """workload.rs's SplitMix64, with u64 wrapping done by masking."""

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
        return np.array([rng.next_normal() for _ in range(VECTOR_LEN)], dtype=np.float64).astype(
            np.float32
        )
    if workload == "image":
        n = IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2]
        values = np.array([rng.next_f64() for _ in range(n)], dtype=np.float64)
        return values.astype(np.float32).reshape(IMAGE_SHAPE)
    if workload == "tensor":
        return np.array([rng.next_f64() for _ in range(VECTOR_LEN)], dtype=np.float64).astype(
            np.float32
        )
    return None


def size_under(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total


def tensor_summary(tag, data, first):
    proto = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in data.shape]
        ),
        tensor_content=data.astype("<f4").tobytes(),
    )
    value = summary_pb2.Summary.Value(tag=tag, tensor=proto)
    if first:
        value.metadata.plugin_data.plugin_name = "tensor"
    return summary_pb2.Summary(value=[value])


def run(workload, n, out):
    data = fixed_data(workload)
    writer = SummaryWriter(logdir=out)
    started = time.perf_counter()
    if workload == "scalars":
        for s in range(n):
            writer.add_scalar("loss", 1.0 / (s + 1.0), s, walltime=1.7e9 + s / 1000.0)
    elif workload == "scalars10":
        tags = [f"m{k}" for k in range(10)]
        for s in range(n):
            wall = 1.7e9 + s / 1000.0
            for k, tag in enumerate(tags):
                writer.add_scalar(tag, 1.0 / (s + 1.0 + k), s, walltime=wall)
    elif workload == "hist":
        for s in range(n):
            writer.add_histogram("w", data, s, bins=30, walltime=1.7e9 + s / 1000.0)
    elif workload == "image":
        for s in range(n):
            writer.add_image("img", data, s, walltime=1.7e9 + s / 1000.0, dataformats="CHW")
    elif workload == "tensor":
        file_writer = writer._get_file_writer()
        for s in range(n):
            file_writer.add_summary(tensor_summary("t", data, s == 0), s, 1.7e9 + s / 1000.0)
    else:
        raise ValueError(f"unknown workload {workload}")
    writer.close()
    seconds = max(time.perf_counter() - started, sys.float_info.min)
    return {
        "peer": "tensorboardX",
        "workload": workload,
        "n": n,
        "seconds": seconds,
        "per_second": n / seconds,
        "bytes": size_under(out),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload", required=True, choices=["scalars", "scalars10", "hist", "image", "tensor"]
    )
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--dump-data", help="write the fixed vector as raw f32 LE and exit")
    args = parser.parse_args()
    if args.dump_data:
        data = fixed_data(args.workload)
        if data is None:
            parser.error(f"{args.workload} has no fixed data")
        with open(args.dump_data, "wb") as f:
            f.write(data.astype("<f4").tobytes())
        return 0
    if not args.out or args.n < 1:
        parser.error("--out and --n >= 1 are required")
    if os.path.isdir(args.out) and os.listdir(args.out):
        parser.error(f"--out {args.out} is not empty")
    print(json.dumps(run(args.workload, args.n, args.out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
