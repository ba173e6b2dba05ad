"""MindSpore's side of `cargo xtask bench --peers`: one write workload through MindSpore 2.10's
`SummaryRecord`, one JSON line.

Usage: ms_write.py --workload W --n N --out DIR

MindSpore's per-value API is `add_value(plugin, tag, Tensor)`, written by `record(step)`:

- scalars: one `add_value('scalar', ...)` and one `record(s)` a step;
- scalars10: ten (`add_value`, `record(s)`) pairs a step, ten events, like ten `add_scalar`s;
- scalars10-record: ten `add_value`s and one `record(s)`, one event with ten values;
- hist: `add_value('histogram', 'w', Tensor(vector))`;
- image: `add_value('image', 'img', Tensor(image[None]))` (MindSpore takes NCHW only);
- tensor: `add_value('tensor', 't', Tensor(vector))`.

The values are wrapped in MindSpore `Tensor`s inside the timed loop, as a training loop hands
them over; the record is created (which starts MindSpore's writer process) before the clock
starts and timing runs until `close()` returns, as in `ember bench write`.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from workload import WORKLOADS, fixed_data, size_under


def run(workload, n, out):
    from mindspore import Tensor
    from mindspore.train.summary import SummaryRecord

    data = fixed_data(workload)
    record = SummaryRecord(out)
    started = time.perf_counter()
    if workload == "scalars":
        for s in range(n):
            record.add_value("scalar", "loss", Tensor(np.float32(1.0 / (s + 1.0))))
            record.record(s)
    elif workload in ("scalars10", "scalars10-record"):
        tags = [f"m{k}" for k in range(10)]
        each = workload == "scalars10"
        for s in range(n):
            for k, tag in enumerate(tags):
                record.add_value("scalar", tag, Tensor(np.float32(1.0 / (s + 1.0 + k))))
                if each:
                    record.record(s)
            if not each:
                record.record(s)
    elif workload == "hist":
        for s in range(n):
            record.add_value("histogram", "w", Tensor(data))
            record.record(s)
    elif workload == "image":
        batch = data[None]
        for s in range(n):
            record.add_value("image", "img", Tensor(batch))
            record.record(s)
    elif workload == "tensor":
        for s in range(n):
            record.add_value("tensor", "t", Tensor(data))
            record.record(s)
    else:
        raise ValueError(f"unknown workload {workload}")
    record.close()
    seconds = max(time.perf_counter() - started, sys.float_info.min)
    return {
        "peer": "MindSpore",
        "workload": workload,
        "n": n,
        "seconds": seconds,
        "per_second": n / seconds,
        "bytes": size_under(out),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=WORKLOADS)
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n >= 1 is required")
    if os.path.isdir(args.out) and os.listdir(args.out):
        parser.error(f"--out {args.out} is not empty")
    result = run(args.workload, args.n, args.out)
    # MindSpore logs to stdout and stderr; the figure is the last line.
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
