"""Checks a MindInsight base directory with MindInsight's own loaders (`cargo xtask compat`).

Usage: check_mindinsight.py <base dir>

The base directory holds three jobs and `manifest.json`, the *raw inputs* ember was given for
the job `ember-kinds`:

- `ember-kinds`: every value kind MindInsight holds, written by ember (compat_writer example);
- `ember-train`: an `ember train --format mindinsight` run of the digits MLP;
- `mindspore-job`: lineage laid out as MindSpore's `SummaryCollector` writes it.

MindInsight's `DataManager` (what its REST API serves from) loads them with its lineage cache
updater, as `mindinsight start` does. Every expectation is computed here from the raw inputs
and the rules MindSpore 2.10 follows (`_summary_adapter.py`, `_summary_collector.py`; see
docs/formats.md), never from ember's packed output:

- scalars: the input rounded to f32;
- histograms: `valid // 10 + 1` (2, 3, 90 ...) bins, `numpy.linspace` edges in float32,
  `numpy.histogram` counts, as `(left, width, count)`;
- images: NCHW tiled into min(N, 8) columns on a zero canvas, scaled over the whole canvas
  (x255 within [0, 1], else `(x - min) * 255 / (max - min + 1)`), truncated to uint8;
- tensors: every element as f32, with MindSpore's data type; exports: `numpy.load` equal to
  the input;
- graphs: every edge ember wrote, resolved by MindInsight's graph builder to the same two
  nodes (ids and names per the documented layout: operators `<name>/<Op>-op<N>`, parameters
  `<name with / as .>`), no self-loop, no edge lost;
- lineage: `filter_summary_lineage`, from the data manager's cache and from the directory,
  lists all three jobs with their hyper-parameters and metrics.

Prints one line with counts per kind; exit status 1 with every mismatch listed otherwise.
"""

import io
import json
import math
import os
import struct
import sys
import urllib.parse

import numpy as np
from PIL import Image

FAILURES = []

JOBS = ("./ember-kinds", "./ember-train", "./mindspore-job")

# The digits MLP of `ember train` (crates/ember-cli/src/digits.rs: DigitMlp { l1: Linear,
# act: Relu, l2: Linear }) as ember's module graph lays it out: modules in visiting order,
# then parameters; edges from part to whole.
DIGITS_MLP = [
    ("model", "DigitMlp", ["model/l1", "model/act", "model/l2"]),
    ("model/l1", "Linear", ["model/l1/weight", "model/l1/bias"]),
    ("model/act", "Relu", []),
    ("model/l2", "Linear", ["model/l2/weight", "model/l2/bias"]),
    ("model/l1/weight", "Parameter", []),
    ("model/l1/bias", "Parameter", []),
    ("model/l2/weight", "Parameter", []),
    ("model/l2/bias", "Parameter", []),
]


def fail(message):
    FAILURES.append(message)


def expect(condition, message):
    if not condition:
        fail(message)
    return condition


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same_float(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b


# ---------------------------------------------------------------------------------------------
# Expectations from raw inputs, by MindSpore's rules


def ms_histogram(values):
    """MindSpore 2.10's `_fill_histogram_summary` buckets of float32 `values`."""
    x = np.array(values, dtype=np.float32)
    finite = x[np.isfinite(x)]
    n = finite.size
    if n == 0:
        bins = 1
    elif n <= 5:
        bins = 2
    elif n <= 10:
        bins = 3
    elif n <= 880:
        bins = n // 10 + 1
    else:
        bins = 90
    first, last = float(finite.min()), float(finite.max())
    if not first < last:
        first, last = first - 0.5, last + 0.5
    edges = np.linspace(first, last, bins + 1, dtype=np.float32)
    counts, _ = np.histogram(finite, edges)
    widths = edges[1:] - edges[:-1]
    return [(float(edges[i]), float(widths[i]), int(counts[i])) for i in range(bins)]


def ms_image(shape, values):
    """MindSpore 2.10's `_make_image`: the canvas as (H, W, 3) uint8."""
    n, c, h, w = shape
    data = np.array(values, dtype=np.float32).astype(np.float64).reshape(shape)
    if c == 1:
        data = np.repeat(data, 3, axis=1)
    cols = min(n, 8)
    rows = (n + cols - 1) // cols
    canvas = np.zeros((3, h * rows, w * cols), dtype=np.float64)
    for i in range(n):
        r, q = divmod(i, cols)
        canvas[:, r * h : (r + 1) * h, q * w : (q + 1) * w] = data[i]
    canvas = canvas.transpose(1, 2, 0)
    lo, hi = canvas.min(), canvas.max()
    if lo >= 0 and hi <= 1:
        canvas = canvas * 255
    elif hi != lo:
        canvas = (canvas - lo) * 255 / (hi - lo + 1)
    else:
        canvas = canvas - lo
    return canvas.astype(np.float32).astype(np.uint8)


def expected_layout(nodes):
    """Ember's documented MindSpore layout of a node list: the name MindInsight gives each node
    (operators: full name `<name>/<Op>-op<N>`, N counting operators from 1; parameters: their
    name with `/` as `.`), and the edges (input, node)."""
    op_names, param_names, next_id = {}, {}, 0
    for name, op, _ in nodes:
        if op == "Parameter":
            param_names[name.replace("/", ".")] = name
        else:
            next_id += 1
            op_names[f"{name}/{op.replace('/', '_')}-op{next_id}"] = name
    edges = sorted((src, name) for name, _, inputs in nodes for src in inputs)
    return op_names, param_names, edges


# ---------------------------------------------------------------------------------------------
# Checks


def tags_of(dm, job, plugin):
    entry = dm.get_train_job_by_plugin(job, plugin)
    return entry["tags"] if entry else []


def check_scalars(dm, manifest):
    from mindinsight.datavisual.processors.scalars_processor import ScalarsProcessor

    points = 0
    for item in manifest["scalars"]:
        tag = item["tag"] + "/scalar"
        got = ScalarsProcessor(dm).get_metadata_list("./ember-kinds", tag)["metadatas"]
        want = list(zip(item["steps"], item["values"]))
        if not expect(len(got) == len(want), f"{tag}: {len(got)} points, expected {len(want)}"):
            continue
        for g, (step, value) in zip(got, want):
            expect(g["step"] == step, f"{tag}: step {g['step']}, expected {step}")
            expect(
                same_float(float(g["value"]), f32(value)),
                f"{tag} step {step}: {g['value']!r}, expected f32({value!r})",
            )
        points += len(got)
    return points


def check_histograms(dm, manifest):
    from mindinsight.datavisual.processors.histogram_processor import HistogramProcessor

    by_tag = {}
    for h in manifest["histograms"]:
        by_tag.setdefault(h["tag"], []).append(h)
    count = 0
    for tag, items in by_tag.items():
        mi_tag = tag + "/histogram"
        tensors = dm.list_tensors("./ember-kinds", mi_tag)
        shown = HistogramProcessor(dm).get_histograms("./ember-kinds", mi_tag)["histograms"]
        if not expect(len(tensors) == len(items), f"{tag}: {len(tensors)} histograms"):
            continue
        expect(all(h["buckets"] for h in shown), f"{tag}: the dashboard's buckets are empty")
        for tensor, item in zip(tensors, items):
            expect(tensor.step == item["step"], f"{tag}: step {tensor.step}, expected {item['step']}")
            got = [(b.left, b.width, b.count) for b in tensor.value.histogram._original_buckets]
            want = ms_histogram(item["values"])
            expect(got == want, f"{tag} step {item['step']}: buckets {got[:3]}..., expected {want[:3]}...")
            count += 1
    return count


def check_images(dm, manifest):
    count = 0
    for item in manifest["images"]:
        tag = item["tag"] + "/image"
        tensors = dm.list_tensors("./ember-kinds", tag)
        if not expect(len(tensors) == 1, f"{tag}: {len(tensors)} images"):
            continue
        image = tensors[0].value
        want = ms_image(item["shape"], item["values"])
        png = Image.open(io.BytesIO(image.encoded_image))
        expect(png.mode == "RGB", f"{tag}: mode {png.mode}")
        pixels = np.asarray(png.convert("RGB"))
        expect(
            (image.height, image.width, image.colorspace) == (want.shape[0], want.shape[1], 3),
            f"{tag}: {image.height}x{image.width} colorspace {image.colorspace}",
        )
        if expect(pixels.shape == want.shape, f"{tag}: pixels {pixels.shape}, expected {want.shape}"):
            bad = np.argwhere(pixels != want)
            expect(len(bad) == 0, f"{tag}: {len(bad)} pixel values differ, first at {bad[:1].tolist()}")
        count += 1
    return count


def check_tensors(dm, manifest, base):
    from mindinsight.datavisual.processors.tensor_processor import TensorProcessor

    data_types = {"float32": 11, "int32": 4}
    exports = [
        os.path.join(base, "ember-kinds", d, "tensor")
        for d in os.listdir(os.path.join(base, "ember-kinds"))
        if d.startswith("export_")
    ]
    count = 0
    for item in manifest["tensors"]:
        tag = item["tag"] + "/tensor"
        tensors = dm.list_tensors("./ember-kinds", tag)
        if not expect(len(tensors) == 1, f"{tag}: {len(tensors)} tensors"):
            continue
        value = tensors[0].value
        want = np.array(item["values"], dtype=item["dtype"]).reshape(item["shape"])
        expect(value.data_type == data_types[item["dtype"]], f"{tag}: data type {value.data_type}")
        expect(list(value.dims) == item["shape"], f"{tag}: dims {value.dims}")
        got = np.asarray(value.tensor_value)
        expect(
            got.shape == want.shape and np.array_equal(got, want.astype(np.float32)),
            f"{tag}: values {got.ravel().tolist()}, expected {want.ravel().tolist()}",
        )
        # The dashboard slices at most two dimensions; the others are fixed at 0.
        rank = len(item["shape"])
        dims = "[" + ",".join(["0"] * max(rank - 2, 0) + [":"] * min(rank, 2)) + "]"
        shown = TensorProcessor(dm).get_tensors(["./ember-kinds"], [tag], item["step"], dims, "data")
        expect(shown["tensors"], f"{tag}: the tensor dashboard returned nothing")
        name = urllib.parse.quote(item["tag"], safe="") + f"_{item['step']}.npy"
        found = [os.path.join(d, name) for d in exports if os.path.exists(os.path.join(d, name))]
        if expect(len(found) == 1, f"{tag}: export {name} found {len(found)} times"):
            exported = np.load(found[0])
            expect(
                exported.dtype == want.dtype and np.array_equal(exported, want),
                f"{name}: {exported.dtype} {exported.ravel().tolist()}",
            )
        count += 1
    return count


def resolved_edges(dm, job):
    """The graph MindInsight built for `job`, as MindInsight's dashboard API serves it: every
    leaf node's inputs, by node name, and the leaf nodes with their types and full names."""
    from mindinsight.datavisual.processors.graph_processor import GraphProcessor

    processor = GraphProcessor(job, dm)
    # The dashboard's first request; it fails when the builder left a broken tree.
    processor.list_nodes("")
    graph = processor._graph
    leaves = graph._leaf_nodes
    edges = []
    for name, node in leaves.items():
        for src in node.inputs:
            edges.append((src, name))
    return leaves, edges


def check_graph(dm, job, nodes):
    """Every edge of `nodes`, resolved by MindInsight to the nodes ember named, and nothing else."""
    op_names, param_names, want = expected_layout(nodes)
    leaves, edges = resolved_edges(dm, job)

    def ember_name(mi_name):
        node = leaves.get(mi_name)
        if node is None:
            return None
        if node.type == "Parameter":
            return param_names.get(mi_name.split("/")[-1])
        return op_names.get(node.full_name)

    got = []
    for src, dst in edges:
        pair = (ember_name(src), ember_name(dst))
        if not expect(None not in pair, f"{job}: edge {src} -> {dst} does not resolve to ember's nodes"):
            continue
        expect(pair[0] != pair[1], f"{job}: self-loop on {pair[0]}")
        got.append(pair)
    got.sort()
    expect(got == want, f"{job}: MindInsight's edges {got}, expected {want}")
    ops = {node.full_name: node.type for node in leaves.values() if node.type != "Parameter"}
    for full_name, name in op_names.items():
        op = next(o for n, o, _ in nodes if n == name)
        expect(ops.get(full_name) == op, f"{job}: node {name} has op {ops.get(full_name)}, expected {op}")
    return len(got)


def check_lineage(dm, base, manifest):
    from mindinsight.lineagemgr.model import filter_summary_lineage

    # The query the REST API serves, from the data manager's lineage cache, and the one that
    # parses the base directory afresh: one job whose custom lineage MindInsight cannot read
    # makes the second raise for every job.
    result = filter_summary_lineage(data_manager=dm)
    rows = {o["summary_dir"]: o for o in result["object"]}
    expect(sorted(rows) == sorted(JOBS), f"lineage rows {sorted(rows)}, expected {sorted(JOBS)}")
    from_disk = filter_summary_lineage(summary_base_dir=base)
    disk_rows = sorted(o["summary_dir"] for o in from_disk["object"])
    expect(disk_rows == sorted(JOBS), f"lineage rows from disk {disk_rows}, expected {sorted(JOBS)}")

    want = manifest["lineage"]
    row = rows.get(want["job"], {}).get("model_lineage", {})
    expect(row.get("user_defined") == want["user_defined"], f"ember-kinds user_defined {row.get('user_defined')}")
    expect(row.get("metric") == want["metric"], f"ember-kinds metric {row.get('metric')}")
    for key, value in want["model"].items():
        got = row.get(key)
        ok = math.isclose(got, value, rel_tol=1e-6) if isinstance(value, float) and got is not None else got == value
        expect(ok, f"ember-kinds {key}: {got!r}, expected {value!r}")
    dataset = rows.get(want["job"], {}).get("dataset_graph", {})
    expect(want["dataset_op"] in json.dumps(dataset), f"ember-kinds dataset graph {dataset}")

    train = rows.get("./ember-train", {}).get("model_lineage", {})
    user = train.get("user_defined", {})
    expect(user.get("session_status") == "success", f"ember-train status {user.get('session_status')}")
    expect(
        isinstance(user.get("devices"), int) and isinstance(user.get("learning_rate"), float),
        f"ember-train hyper-parameter types {user}",
    )
    metric = train.get("metric", {})
    expect(sorted(metric) == ["valid_accuracy", "valid_loss"], f"ember-train metrics {metric}")
    expect(0.0 <= metric.get("valid_accuracy", -1) <= 1.0, f"ember-train accuracy {metric}")
    expect(train.get("network") == "DigitMlp", f"ember-train network {train.get('network')}")

    ms = rows.get("./mindspore-job", {}).get("model_lineage", {})
    expect(
        ms.get("user_defined") == {"version": "v1", "epochs": 10, "dropout": 0.5},
        f"mindspore-job user_defined {ms.get('user_defined')}",
    )
    expect(ms.get("metric") == {"Accuracy": 0.9875}, f"mindspore-job metric {ms.get('metric')}")
    return len(rows), sum(len(r.get("model_lineage", {}).get("user_defined", {})) for r in rows.values())


def load(base):
    from mindinsight.datavisual.data_transform.data_manager import DataManager
    from mindinsight.lineagemgr.cache_item_updater import LineageCacheItemUpdater

    dm = DataManager(base)
    dm.register_brief_cache_item_updater(LineageCacheItemUpdater())
    for thread in dm.start_load_data():
        thread.join()
    # The detail cache loads a job once it is asked for, as the dashboard asks.
    for job in JOBS:
        dm.cache_train_job(job)
    for thread in dm.start_load_data():
        thread.join()
    return dm


def main():
    if len(sys.argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    base = os.path.realpath(sys.argv[1])
    manifest = json.load(open(os.path.join(base, "manifest.json"), encoding="utf-8"))
    import mindinsight

    dm = load(base)
    counts = {}
    checks = [
        ("scalar points", lambda: check_scalars(dm, manifest)),
        ("histograms", lambda: check_histograms(dm, manifest)),
        ("images", lambda: check_images(dm, manifest)),
        ("tensors (and .npy exports)", lambda: check_tensors(dm, manifest, base)),
        (
            "graph edges resolved",
            lambda: check_graph(dm, "./ember-kinds", [(n["name"], n["op"], n["inputs"]) for n in manifest["graph"]])
            + check_graph(dm, "./ember-train", DIGITS_MLP),
        ),
    ]
    for label, check in checks:
        try:
            counts[label] = check()
        except Exception as error:  # a loader error is a finding, reported with the others
            fail(f"{label}: {type(error).__name__}: {error}")
            counts[label] = 0
        expect(counts[label] > 0, f"no {label}")
    try:
        rows, user_defined = check_lineage(dm, base, manifest)
    except Exception as error:
        fail(f"lineage: {type(error).__name__}: {error}")
        rows, user_defined = 0, 0
    counts["lineage rows"] = rows
    counts["custom lineage values"] = user_defined
    expect(manifest["text_refused"], "text was not refused")
    if FAILURES:
        for message in FAILURES:
            print(f"FAIL: {message}")
        print(f"compat: {len(FAILURES)} mismatches with mindinsight {mindinsight.__version__}")
        return 1
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    print(f"compat: mindinsight {mindinsight.__version__} reads everything back: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
