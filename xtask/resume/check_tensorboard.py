"""Reads resumed `ember train` runs with TensorBoard's readers (`cargo xtask resume`).

Usage: check_tensorboard.py <base dir> <reference run> <run>...

Every run is a subdirectory of the base directory: the reference trained without a break,
the others were killed with SIGKILL at a random moment and resumed (`ember train --resume`).
Each of three readers must show every resumed run exactly as it shows the reference: each
scalar series the same (step, value) pairs in the same order (no step twice, none missing,
none left from the killed run past its checkpoint), wall-time-derived series aside:

- TensorBoard's Python loaders (`EventAccumulator` and the plugin one, with
  `purge_orphaned_data=False`, so that a step written twice would show twice), which also give
  the histograms, images, texts, PR curves and the hyper-parameter session events;
- tbparse's `SummaryReader` (scalars, histograms, tensors);
- rustboard, TensorBoard's Rust data server (`tensorboard --load_fast=true`, every scalar
  kept: `--samples_per_plugin scalars=1000000`, since rustboard reads 0 as none), over HTTP
  as the dashboard asks it.

Prints one line with counts; exit status 1 with every mismatch listed otherwise.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea

FAILURES = []


def fail(message):
    FAILURES.append(message)


def timing(tag):
    return (
        tag.endswith("_seconds")
        or tag.endswith("examples_per_second")
        or tag.startswith("system/")
    )


def python_series(path):
    acc = ea.EventAccumulator(
        path,
        size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.IMAGES: 0, ea.TENSORS: 0},
        purge_orphaned_data=False,
    )
    acc.Reload()
    out = {}
    tags = acc.Tags()
    for tag in tags["scalars"]:
        if not timing(tag):
            out["scalar " + tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        out["histogram " + tag] = [
            (e.step, e.histogram_value.sum, e.histogram_value.num, tuple(e.histogram_value.bucket))
            for e in acc.Histograms(tag)
        ]
    for tag in tags["images"]:
        out["image " + tag] = [(e.step, e.encoded_image_string) for e in acc.Images(tag)]
    plugin = pea.EventAccumulator(
        path, size_guidance={pea.TENSORS: 0}, tensor_size_guidance={}, purge_orphaned_data=False
    )
    plugin.Reload()
    for tag in plugin.Tags()["tensors"]:
        if timing(tag):
            continue
        out["tensor " + tag] = [(e.step, e.tensor_proto.SerializeToString()) for e in plugin.Tensors(tag)]
    try:
        hparams = plugin.PluginTagToContent("hparams")
    except KeyError:  # a run without hyper-parameters (burn-train's)
        hparams = {}
    for tag, content in hparams.items():
        # Each session part is one event; a resumed run must not start a second session.
        out["hparams " + tag] = [len(plugin.Tensors(tag)), hparams_content(content)]
    return out


def hparams_content(content):
    """The hyper-parameter plugin data without its times (when the session started or ended),
    maps sorted (protobuf writes them in any order)."""
    from google.protobuf.json_format import MessageToDict
    from tensorboard.plugins.hparams import plugin_data_pb2

    data = MessageToDict(plugin_data_pb2.HParamsPluginData.FromString(content))

    def without_times(value):
        if isinstance(value, dict):
            return {k: without_times(v) for k, v in sorted(value.items()) if not k.endswith("Secs")}
        if isinstance(value, list):
            return sorted((without_times(v) for v in value), key=json.dumps)
        return value

    return json.dumps(without_times(data), sort_keys=True)


def tbparse_series(path):
    from tbparse import SummaryReader

    reader = SummaryReader(path, pivot=False)
    out = {}
    for row in reader.scalars.itertuples():
        if not timing(row.tag):
            out.setdefault("scalar " + row.tag, []).append((int(row.step), float(row.value)))
    for row in reader.histograms.itertuples():
        out.setdefault("histogram " + row.tag, []).append((int(row.step), repr(row.counts), repr(row.limits)))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rustboard_series(base, runs, expected_points):
    """Scalars of every run as rustboard serves them; waits until it has loaded them all."""
    port = free_port()
    tensorboard = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    server = subprocess.Popen(
        [tensorboard, "--logdir", base, "--load_fast=true", "--host", "127.0.0.1", "--port", str(port),
         "--reload_interval", "1", "--samples_per_plugin", "scalars=1000000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def get(route, **args):
        url = f"http://127.0.0.1:{port}{route}?" + urllib.parse.urlencode(args)
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def scalars():
        tags = get("/data/plugin/scalars/tags")
        out = {}
        for run in runs:
            for tag in tags.get(run, {}):
                if not timing(tag):
                    points = get("/data/plugin/scalars/scalars", run=run, tag=tag)
                    out.setdefault(run, {})["scalar " + tag] = [(step, value) for _, step, value in points]
        return out

    try:
        deadline = time.time() + 120
        last = None
        while True:
            if server.poll() is not None:
                raise RuntimeError("tensorboard --load_fast=true exited: " + server.stderr.read().decode()[-2000:])
            try:
                now = scalars()
                loaded = sum(len(p) for series in now.values() for p in series.values())
                # Loaded, and the same on the next look: rustboard reloads every second.
                if loaded >= expected_points and now == last:
                    return now
                last = now
            except (OSError, ValueError):
                pass
            if time.time() > deadline:
                raise RuntimeError("rustboard did not load every run in 120 s")
            time.sleep(1.5)
    finally:
        server.terminate()
        server.wait()


def compare(reader, run, got, want):
    if got == want:
        return
    for key in sorted(set(got) | set(want)):
        g, w = got.get(key), want.get(key)
        if g != w:
            fail(f"{reader}, {run}: {key}: got {str(g)[:300]}, expected {str(w)[:300]}")


def main():
    base, reference, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    counts = {"runs": len(runs)}

    want = python_series(os.path.join(base, reference))
    steps = [s for s, _ in want.get("scalar train/loss", [])]
    if not steps or steps != list(range(1, len(steps) + 1)):
        fail(f"the reference's train/loss steps are {steps[:10]}...")
    for run in runs:
        compare("TensorBoard's loader", run, python_series(os.path.join(base, run)), want)
    counts["python loader series"] = len(want)

    want_tbparse = tbparse_series(os.path.join(base, reference))
    for run in runs:
        compare("tbparse", run, tbparse_series(os.path.join(base, run)), want_tbparse)
    counts["tbparse series"] = len(want_tbparse)

    scalar_points = sum(len(v) for k, v in want.items() if k.startswith("scalar "))
    served = rustboard_series(base, [reference] + runs, scalar_points * (len(runs) + 1))
    for run in runs:
        compare("rustboard", run, served.get(run, {}), served.get(reference, {}))
    counts["rustboard points per run"] = sum(len(v) for v in served.get(reference, {}).values())

    if FAILURES:
        for message in FAILURES[:60]:
            print("MISMATCH", message)
        print(f"{len(FAILURES)} mismatches")
        sys.exit(1)
    print("tensorboard readers: each resumed run shows every step once, as the reference does: "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
