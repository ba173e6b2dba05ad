"""tensorboardX's side of `cargo xtask bench --peers`: one write workload, one JSON line.

Usage: tbx_write.py --workload W --n N --out DIR [--crc native|python] [--flush-every K]

The workloads and their fixed data are those of `ember bench write` (see workload.py), each
through tensorboardX's public per-value API, as a user calls it:

- scalars: `add_scalar` once a step; scalars10: `add_scalar` ten times a step (ten events, as
  ember's ten `add_scalar` calls); scalars10-record: tensorboardX has no call that writes ten
  scalars as one event (`add_scalars` writes one file per tag), so it has no figure there.
- hist: `add_histogram(..., bins=30)`, numpy's 30 equal-width buckets, which is ember's default
  rule (tensorboardX's own default, bins='tensorflow', makes ~1,500 exponential buckets).
- image: `add_image(..., dataformats="CHW")`.
- tensor: tensorboardX has no `add_tensor`, so each step builds a `TensorProto` (DT_FLOAT, raw
  little-endian `tensor_content`, plugin `tensor` metadata on the first value as ember does) and
  hands the summary to the writer's file writer, the path its own `add_*` methods take.
- SummaryWriter defaults otherwise (max_queue=10, flush_secs=120); wall times from the clock.

`--crc python` hides the optional native `crc32c` module, so tensorboardX runs as a plain
`pip install tensorboardX` leaves it (its pure-Python CRC); `--crc native` (default) lets it
find the installed `crc32c`, as its README advises. The JSON line's `peer` says which.

Timing runs from the first value added until `close()` returns, as in `ember bench write`; the
byte count is every file under --out. --out may be an `s3://bucket/prefix` (tensorboardX's S3
writer, through boto3, with `S3_ENDPOINT`); the byte count is then left to whoever watches the
wire (`cargo xtask objects --bench` counts it in a proxy). `--flush-every K` calls `flush()`
every K steps, as `ember bench write --flush-every` does. `--dump-data FILE` writes a
workload's vector as raw little-endian f32, to check it against ember's.
"""

import argparse
import json
import os
import sys
import time

from workload import WORKLOADS, fixed_data, size_under


def run(workload, n, out, crc, flush_every=None):
    if crc == "python":
        # tensorboardX imports `crc32c` and falls back to its pure-Python CRC when that fails.
        sys.modules["crc32c"] = None
    from tensorboardX import SummaryWriter
    from tensorboardX.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    import tensorboardX.crc32c as tbx_crc

    native = tbx_crc._crc32c_native is not None
    peer = "tensorboardX" if crc == "python" else "tensorboardX+crc32c"

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

    data = fixed_data(workload)
    writer = SummaryWriter(logdir=out)
    started = time.perf_counter()
    if workload == "scalars":
        for s in range(n):
            writer.add_scalar("loss", 1.0 / (s + 1.0), s)
            if flush_every and (s + 1) % flush_every == 0:
                writer.flush()
    elif workload == "scalars10":
        tags = [f"m{k}" for k in range(10)]
        for s in range(n):
            for k, tag in enumerate(tags):
                writer.add_scalar(tag, 1.0 / (s + 1.0 + k), s)
    elif workload == "hist":
        for s in range(n):
            writer.add_histogram("w", data, s, bins=30)
    elif workload == "image":
        for s in range(n):
            writer.add_image("img", data, s, dataformats="CHW")
    elif workload == "tensor":
        file_writer = writer._get_file_writer()
        for s in range(n):
            file_writer.add_summary(tensor_summary("t", data, s == 0), s)
    else:
        raise ValueError(f"tensorboardX has no {workload} workload")
    writer.close()
    seconds = max(time.perf_counter() - started, sys.float_info.min)
    return {
        "peer": peer,
        "workload": workload,
        "n": n,
        "seconds": seconds,
        "per_second": n / seconds,
        "bytes": None if out.startswith("s3://") else size_under(out),
        "native_crc": native,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=WORKLOADS)
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--crc", choices=["native", "python"], default="native")
    parser.add_argument("--flush-every", type=int, help="flush every K steps (scalars)")
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
    print(json.dumps(run(args.workload, args.n, args.out, args.crc, args.flush_every)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
