"""Checks an ember log directory with TensorBoard's own loading code (`cargo xtask compat`).

Usage: check_tensorboard.py <log dir written by the compat_writer example> [<ember train log dir>]
       [--ember-inspect <ember inspect --json --values of both>]

The directory holds one TensorBoard event file and `manifest.json`, the *raw inputs* the writer
gave ember. Every expectation below is computed here from those inputs and the documented rules
(docs/formats.md), never from ember's packed output:

- scalars: the input rounded to f32 (NaN, +-Inf and the sign of zero kept);
- histograms: min/max/num/sum/sum_squares of the values, 30 equal-width buckets
  (edge[i] = min*(1-i/k) + max*(i/k), last edge max, value x in the last bucket with
  edge[i] <= x), or one bucket when all values are equal;
- images: round(x*255) clamped to 0..255, a batch tiled into min(N, 8) columns on black;
- text, tensors, hparams, graph: as given; 1.2 MB tensors at twelve steps (past the
  writer's writeback starts): as `arange`;
- pr curves: from the labels and predictions by the curve's definition (at threshold
  i/(n-1), the positives are the predictions at or above it; precision tp/(tp+fp) and
  recall tp/(tp+fn), 0 for an empty count), read through the pr_curves plugin's
  `pr_curves_impl`; raw counts as given, rounded to f32;
- audio: the clip decoded with Python's `wave` module from the blob TensorBoard's data
  provider serves, equal to round-half-away(x * 32768) clamped to int16 (TensorFlow's
  `encode_wav`), listed by the audio plugin;
- custom scalars: the layout the custom_scalars plugin's `layout_impl` returns, equal to the
  manifest's;
- embedding: through the projector plugin's own handlers (`/runs`, `/info`, `/tensor`,
  `/metadata`, `/sprite_image`), listed with its shape, its values equal to the input as f32,
  its labels as given, and a sprite of ceil(sqrt(N)) thumbnails to a side of the given size.

Then the event file is cut mid-record at several places, and TensorBoard must read every whole
record before the cut and nothing else.

With an `ember train --format tensorboard` log dir, the hparams plugin's own handlers (what its
dashboard requests) must give one session, ended with success, whose metric columns include the
final metrics, each equal to the last value of the scalar it summarises.

With `--ember-inspect`, ember's own reader must list what TensorBoard's plugins list for both
runs: every PR curve equal to the pr_curves plugin's entry (thresholds, counts, precision and
recall, step and wall time; the tail the plugin trims where nothing is predicted positive), every
audio clip equal to the samples of the WAV blob the data provider serves, the custom scalars
layout equal to `layout_impl`'s, and the embeddings equal to the projector's `/info` entries.

Exit status 0 when everything matches; 1 with every mismatch listed otherwise.
"""

import bisect
import io
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
from PIL import Image
import tensorboard
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import metadata as hp_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

FAILURES = []


def fail(message):
    FAILURES.append(message)


def expect(condition, message):
    if not condition:
        fail(message)
    return condition


def f32(x):
    """x rounded to the nearest f32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same_float(a, b):
    """Bit-level equality for floats that are f32 values (NaN equals NaN; -0.0 differs from 0.0)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def load(path):
    """Both of TensorBoard's Python loaders over `path`, keeping everything (size guidance 0)."""
    acc = ea.EventAccumulator(
        path,
        size_guidance={
            ea.COMPRESSED_HISTOGRAMS: 0,
            ea.IMAGES: 0,
            ea.AUDIO: 0,
            ea.SCALARS: 0,
            ea.HISTOGRAMS: 0,
            ea.TENSORS: 0,
            ea.GRAPH: 0,
            ea.META_GRAPH: 0,
            ea.RUN_METADATA: 0,
        },
    )
    acc.Reload()
    plugin_acc = pea.EventAccumulator(
        path,
        size_guidance={pea.TENSORS: 0, pea.GRAPH: 0, pea.META_GRAPH: 0, pea.RUN_METADATA: 0},
        tensor_size_guidance={},
    )
    plugin_acc.Reload()
    return acc, plugin_acc


def plugin_of(plugin_acc, tag):
    return plugin_acc.SummaryMetadata(tag).plugin_data.plugin_name


# ---------------------------------------------------------------------------------------------
# Expectations from raw inputs


def expected_histogram(values, k=30):
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = min(finite), max(finite)
    if lo == hi:
        limits, counts = [hi], [float(len(finite))]
    else:
        edges = []
        for i in range(k + 1):
            t = i / k
            e = hi if i == k else lo * (1.0 - t) + hi * t
            edges.append(max(e, edges[-1]) if edges else e)
        counts = [0.0] * k
        for x in finite:
            counts[min(max(bisect.bisect_right(edges, x) - 1, 0), k - 1)] += 1.0
        limits = edges[1:]
    return {
        "min": lo,
        "max": hi,
        "num": float(len(finite)),
        "sum": math.fsum(finite),
        "sum_squares": math.fsum(x * x for x in finite),
        "bucket_limit": limits,
        "bucket": counts,
    }


def expected_pixels(layout, shape, values):
    """The canvas as an (H, W, C) uint8 array."""
    data = np.array(values, dtype=np.float64)
    scaled = data * 255.0
    frac = np.abs(scaled - np.floor(scaled) - 0.5)
    in_range = (scaled >= 0.0) & (scaled <= 255.0)
    if np.any(frac[in_range] < 1e-3):
        raise ValueError("an image input sits on a rounding midpoint: the expectation is ambiguous")
    levels = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    if layout == "CHW":
        c, h, w = shape
        return levels.reshape(c, h, w).transpose(1, 2, 0)
    if layout == "NCHW":
        n, c, h, w = shape
        images = levels.reshape(n, c, h, w).transpose(0, 2, 3, 1)
        cols = min(n, 8)
        rows = (n + cols - 1) // cols
        canvas = np.zeros((rows * h, cols * w, c), dtype=np.uint8)
        for i in range(n):
            r, q = divmod(i, cols)
            canvas[r * h : (r + 1) * h, q * w : (q + 1) * w, :] = images[i]
        return canvas
    raise ValueError(f"unknown layout {layout}")


# ---------------------------------------------------------------------------------------------
# Checks of the full file


def check_kinds(manifest, acc, plugin_acc):
    tags = acc.Tags()
    want_scalars = {s["tag"] for s in manifest["scalars"]} | {
        t for t, _ in manifest["hparams"]["metrics"]
    }
    want_hists = {h["tag"] for h in manifest["histograms"]}
    want_images = {i["tag"] for i in manifest["images"]}
    want_tensors = {t["tag"] for t in manifest["tensors"] + manifest["large_tensors"]} | {
        t["tag"] for t in manifest["texts"]
    }
    new_kinds = {
        manifest["pr_raw"]["tag"]: "pr_curves",
        manifest["audio"]["tag"]: "audio",
        "custom_scalars__config__": "custom_scalars",
    } | {p["tag"]: "pr_curves" for p in manifest["pr_curves"]}
    want_tensors |= set(new_kinds)
    want_hparams = {
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    expect(set(tags["scalars"]) == want_scalars, f"scalar tags {tags['scalars']} != {want_scalars}")
    expect(set(tags["histograms"]) == want_hists, f"histogram tags {tags['histograms']}")
    expect(set(tags["images"]) == want_images, f"image tags {tags['images']}")
    expect(
        set(tags["tensors"]) == want_tensors | want_hparams,
        f"tensor tags {tags['tensors']} != {want_tensors | want_hparams}",
    )
    expect(tags["graph"] is True, "no graph")
    plugins = {}
    for tag in want_scalars:
        plugins[tag] = "scalars"
    for tag in want_hists:
        plugins[tag] = "histograms"
    for tag in want_images:
        plugins[tag] = "images"
    for t in manifest["texts"]:
        plugins[t["tag"]] = "text"
    for t in manifest["tensors"] + manifest["large_tensors"]:
        plugins[t["tag"]] = "tensor"
    for tag in want_hparams:
        plugins[tag] = "hparams"
    plugins |= new_kinds
    for tag, plugin in plugins.items():
        got = plugin_of(plugin_acc, tag)
        expect(got == plugin, f"{tag}: plugin {got!r}, expected {plugin!r}")
    return len(plugins)


def check_scalars(manifest, acc, plugin_acc):
    series = [(s["tag"], list(zip(s["steps"], s["values"]))) for s in manifest["scalars"]]
    step = manifest["hparams"]["step"]
    series += [(t, [(step, v)]) for t, v in manifest["hparams"]["metrics"]]
    points = 0
    for tag, want in series:
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        as_tensors = [
            (e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in plugin_acc.Tensors(tag)
        ]
        for label, seq in (("event accumulator", got), ("plugin event accumulator", as_tensors)):
            if not expect(len(seq) == len(want), f"{tag} ({label}): {len(seq)} points, expected {len(want)}"):
                continue
            for (gs, gv), (ws, wv) in zip(seq, want):
                expect(gs == ws, f"{tag} ({label}): step {gs}, expected {ws}")
                expect(
                    same_float(gv, f32(wv)),
                    f"{tag} ({label}) step {ws}: {gv!r}, expected f32({wv!r}) = {f32(wv)!r}",
                )
        points += len(want)
    return points


def check_histograms(manifest, acc, plugin_acc):
    by_tag = {}
    for h in manifest["histograms"]:
        by_tag.setdefault(h["tag"], []).append(h)
    for tag, items in by_tag.items():
        got = acc.Histograms(tag)
        tensors = plugin_acc.Tensors(tag)
        if not expect(len(got) == len(items), f"{tag}: {len(got)} histograms, expected {len(items)}"):
            continue
        for event, tensor_event, item in zip(got, tensors, items):
            want = expected_histogram(item["values"])
            hv = event.histogram_value
            expect(event.step == item["step"], f"{tag}: step {event.step}, expected {item['step']}")
            for field in ("min", "max", "num"):
                expect(
                    getattr(hv, field) == want[field],
                    f"{tag} step {item['step']}: {field} {getattr(hv, field)}, expected {want[field]}",
                )
            for field in ("sum", "sum_squares"):
                g, w = getattr(hv, field), want[field]
                expect(
                    math.isclose(g, w, rel_tol=1e-12, abs_tol=1e-9),
                    f"{tag} step {item['step']}: {field} {g}, expected {w}",
                )
            expect(
                list(hv.bucket_limit) == want["bucket_limit"],
                f"{tag} step {item['step']}: bucket limits {list(hv.bucket_limit)}, expected {want['bucket_limit']}",
            )
            expect(
                list(hv.bucket) == want["bucket"],
                f"{tag} step {item['step']}: bucket counts {list(hv.bucket)}, expected {want['bucket']}",
            )
            # The data-provider view: data_compat turns the proto into [k, 3] rows
            # (left, right, count).
            rows = tensor_util.make_ndarray(tensor_event.tensor_proto)
            expect(
                rows.shape == (len(want["bucket"]), 3),
                f"{tag} step {item['step']}: tensor shape {rows.shape}",
            )
            if rows.shape == (len(want["bucket"]), 3):
                expect(
                    list(rows[:, 2]) == want["bucket"],
                    f"{tag} step {item['step']}: tensor counts {list(rows[:, 2])}",
                )
                expect(rows[-1, 1] == want["max"], f"{tag}: last right edge {rows[-1, 1]}")
    return len(manifest["histograms"])


def check_images(manifest, acc, plugin_acc):
    for item in manifest["images"]:
        tag = item["tag"]
        want = expected_pixels(item["layout"], item["shape"], item["values"])
        height, width, channels = want.shape
        got = acc.Images(tag)
        if not expect(len(got) == 1, f"{tag}: {len(got)} images, expected 1"):
            continue
        event = got[0]
        expect(event.step == item["step"], f"{tag}: step {event.step}, expected {item['step']}")
        expect(
            (event.width, event.height) == (width, height),
            f"{tag}: {event.width}x{event.height}, expected {width}x{height}",
        )
        png = Image.open(io.BytesIO(event.encoded_image_string))
        expect(png.format == "PNG", f"{tag}: encoded as {png.format}")
        expect(png.size == (width, height), f"{tag}: PNG is {png.size}")
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
        expect(png.mode == mode, f"{tag}: PNG mode {png.mode}, expected {mode}")
        pixels = np.asarray(png)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if expect(pixels.shape == want.shape, f"{tag}: pixels {pixels.shape}, expected {want.shape}"):
            bad = np.argwhere(pixels != want)
            expect(
                len(bad) == 0,
                f"{tag}: {len(bad)} pixel values differ, first at {bad[:1].tolist()}",
            )
        # The data-provider view: [width, height, png] strings.
        tensors = plugin_acc.Tensors(tag)
        blobs = tensor_util.make_ndarray(tensors[0].tensor_proto) if tensors else []
        expect(
            len(blobs) == 3 and blobs[0] == str(width).encode() and blobs[1] == str(height).encode(),
            f"{tag}: image tensor header {list(blobs[:2])}",
        )
    return len(manifest["images"])


def check_texts(manifest, plugin_acc):
    by_tag = {}
    for t in manifest["texts"]:
        by_tag.setdefault(t["tag"], []).append(t)
    for tag, items in by_tag.items():
        got = plugin_acc.Tensors(tag)
        if not expect(len(got) == len(items), f"{tag}: {len(got)} texts, expected {len(items)}"):
            continue
        for event, item in zip(got, items):
            text = tensor_util.make_ndarray(event.tensor_proto)
            expect(event.step == item["step"], f"{tag}: step {event.step}, expected {item['step']}")
            expect(text.shape == (), f"{tag}: text tensor shape {text.shape}")
            expect(
                text.item().decode("utf-8") == item["text"],
                f"{tag} step {item['step']}: text {text.item()!r}, expected {item['text']!r}",
            )
    return len(manifest["texts"])


def check_tensors(manifest, acc):
    for item in manifest["tensors"]:
        tag = item["tag"]
        got = acc.Tensors(tag)
        if not expect(len(got) == 1, f"{tag}: {len(got)} tensors, expected 1"):
            continue
        expect(got[0].step == item["step"], f"{tag}: step {got[0].step}")
        array = tensor_util.make_ndarray(got[0].tensor_proto)
        want = np.array(item["values"], dtype=item["dtype"]).reshape(item["shape"])
        expect(array.dtype == want.dtype, f"{tag}: dtype {array.dtype}, expected {want.dtype}")
        expect(array.shape == want.shape, f"{tag}: shape {array.shape}, expected {want.shape}")
        expect(
            array.shape == want.shape and np.array_equal(array, want),
            f"{tag}: values {array.ravel().tolist()}, expected {want.ravel().tolist()}",
        )
    return len(manifest["tensors"])


def check_large_tensors(manifest, acc):
    """Tensors of 1.2 MB at twelve steps: the file passes the 4 MiB after which ember's writer
    starts the disk's writeback three times, and every one reads back whole."""
    count = 0
    for item in manifest["large_tensors"]:
        tag, n = item["tag"], item["n"]
        got = acc.Tensors(tag)
        steps = [e.step for e in got]
        if not expect(steps == item["steps"], f"{tag}: steps {steps}, expected {item['steps']}"):
            continue
        for event in got:
            array = tensor_util.make_ndarray(event.tensor_proto)
            want = np.arange(event.step * n, event.step * n + n, dtype=np.float32)
            expect(
                array.dtype == want.dtype and np.array_equal(array, want),
                f"{tag} step {event.step}: {array.dtype} {array.shape} differs from arange",
            )
            count += 1
    return count


def check_hparams(manifest, plugin_acc):
    want = manifest["hparams"]
    content = plugin_acc.PluginTagToContent("hparams")
    for tag in content:
        steps = [e.step for e in plugin_acc.Tensors(tag)]
        expect(steps == [want["step"]], f"{tag}: steps {steps}, expected [{want['step']}]")

    raw = plugin_data_pb2.HParamsPluginData.FromString(content.get("_hparams_/experiment", b""))
    expect(raw.WhichOneof("data") == "experiment", f"experiment plugin data holds {raw.WhichOneof('data')}")
    experiment = hp_metadata.parse_experiment_plugin_data(content["_hparams_/experiment"])
    types = {
        bool: api_pb2.DATA_TYPE_BOOL,
        str: api_pb2.DATA_TYPE_STRING,
        int: api_pb2.DATA_TYPE_FLOAT64,
        float: api_pb2.DATA_TYPE_FLOAT64,
    }
    got_infos = [(h.name, h.type) for h in experiment.hparam_infos]
    want_infos = [(name, types[type(value)]) for name, value in want["hparams"]]
    expect(got_infos == want_infos, f"experiment hparams {got_infos}, expected {want_infos}")
    got_metrics = [m.name.tag for m in experiment.metric_infos]
    want_metrics = [t for t, _ in want["metrics"]]
    expect(got_metrics == want_metrics, f"experiment metrics {got_metrics}, expected {want_metrics}")

    start = hp_metadata.parse_session_start_info_plugin_data(content["_hparams_/session_start_info"])
    expect(
        sorted(start.hparams) == sorted(n for n, _ in want["hparams"]),
        f"session hparams {sorted(start.hparams)}",
    )
    for name, value in want["hparams"]:
        if name not in start.hparams:
            continue
        v = start.hparams[name]
        if isinstance(value, bool):
            ok = v.WhichOneof("kind") == "bool_value" and v.bool_value == value
        elif isinstance(value, str):
            ok = v.WhichOneof("kind") == "string_value" and v.string_value == value
        else:
            ok = v.WhichOneof("kind") == "number_value" and v.number_value == value
        expect(ok, f"session hparam {name}: {v}, expected {value!r}")

    end = hp_metadata.parse_session_end_info_plugin_data(content["_hparams_/session_end_info"])
    want_status = {"success": api_pb2.STATUS_SUCCESS}[want["status"]]
    expect(end.status == want_status, f"session end status {end.status}, expected {want_status}")
    return len(want["hparams"])


def check_graph(manifest, acc, plugin_acc):
    graph = acc.Graph()
    got = [(n.name, n.op, list(n.input)) for n in graph.node]
    want = [(n["name"], n["op"], n["inputs"]) for n in manifest["graph"]["nodes"]]
    expect(got == want, f"graph nodes {got}, expected {want}")
    expect("__run_graph__" in plugin_acc.Tags()["tensors"], "plugin accumulator has no run graph")
    return len(want)


# ---------------------------------------------------------------------------------------------
# Truncation


def record_spans(data):
    """(start, end) of every whole record, by the length fields (CRCs are TensorBoard's job)."""
    spans, offset = [], 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        end = offset + 12 + length + 4
        if end > len(data):
            break
        spans.append((offset, end))
        offset = end
    if offset != len(data):
        raise ValueError(f"the full event file has {len(data) - offset} trailing bytes")
    return spans


def values_of(record_bytes):
    """(tag, step) of every summary value in one record, plus '__graph__' for a graph event."""
    event = event_pb2.Event.FromString(record_bytes[12:-4])
    if event.HasField("graph_def"):
        return [("__run_graph__", event.step)]
    if event.HasField("summary"):
        return [(v.tag, event.step) for v in event.summary.value]
    return []


def snapshot(plugin_acc):
    """Every datum TensorBoard's plugin loader holds: (tag, step, wall time, serialized tensor)."""
    items = []
    for tag in plugin_acc.Tags()["tensors"]:
        for e in plugin_acc.Tensors(tag):
            items.append((tag, e.step, e.wall_time, e.tensor_proto.SerializeToString()))
    return sorted(items)


def check_truncation(path, event_file, full_snapshot):
    data = open(os.path.join(path, event_file), "rb").read()
    spans = record_spans(data)
    n = len(spans)
    cuts = {
        "last 7 bytes dropped": len(data) - 7,
        "inside a length field (middle record)": spans[n // 2][0] + 5,
        "after a record header (a third in)": spans[n // 3][0] + 12,
        "mid-data (two thirds in)": (spans[2 * n // 3][0] + spans[2 * n // 3][1]) // 2,
    }
    for label, cut in cuts.items():
        whole = [span for span in spans if span[1] <= cut]
        expect(len(whole) < n and cut not in {s[1] for s in spans}, f"{label}: the cut is not mid-record")
        kept = {tv for start, end in whole for tv in values_of(data[start:end])}
        cut_record = spans[len(whole)]
        lost = values_of(data[cut_record[0] : cut_record[1]])
        expect(lost, f"{label}: the cut record holds no value, so the check could not fail")
        want = [item for item in full_snapshot if (item[0], item[1]) in kept]
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, event_file), "wb") as f:
                f.write(data[:cut])
            acc, plugin_acc = load(tmp)
            got = snapshot(plugin_acc)
            expect(
                got == want,
                f"truncated ({label}, {cut} of {len(data)} bytes): TensorBoard read {len(got)} "
                f"values, expected the {len(want)} of the {len(whole)} whole records",
            )
            got_scalars = sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
            want_scalars = sum(
                1 for start, end in whole for tag, _ in values_of(data[start:end])
                if tag.startswith("scalars/") or tag.startswith("final/")
            )
            expect(
                got_scalars == want_scalars,
                f"truncated ({label}): {got_scalars} scalar points, expected {want_scalars}",
            )
    return len(cuts), n


def plugin_context(path):
    """TensorBoard's data provider over the run directory `path` alone (the run "."), as the
    plugins get it from TensorBoard's application."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin

    mux = pem.EventMultiplexer(tensor_size_guidance={"pr_curves": 0, "audio": 0, "custom_scalars": 0})
    # The root run alone: the `ember train` run below it has a layout of its own, which the
    # custom scalars plugin would merge in.
    mux.AddRun(path, name=".")
    mux.Reload()
    tb_context = base_plugin.TBContext(
        data_provider=data_provider.MultiplexerDataProvider(mux, path),
        logdir=path,
        multiplexer=mux,
    )
    return tb_context, context.RequestContext()


def pr_curve_by_definition(labels, predictions, n):
    positives = sum(labels)
    negatives = len(labels) - positives
    rows = [[] for _ in range(6)]
    for i in range(n):
        t = i / (n - 1)
        tp = sum(1 for l, p in zip(labels, predictions) if l and p >= t)
        fp = sum(1 for l, p in zip(labels, predictions) if not l and p >= t)
        for row, v in zip(
            rows,
            (tp, fp, negatives - fp, positives - tp,
             tp / (tp + fp) if tp + fp else 0.0, tp / positives if positives else 0.0),
        ):
            row.append(v)
    return rows


def check_pr_curves(manifest, path):
    from tensorboard.plugins.pr_curve import pr_curves_plugin

    tb_context, ctx = plugin_context(path)
    plugin = pr_curves_plugin.PrCurvesPlugin(tb_context)
    names = ["true_positives", "false_positives", "true_negatives", "false_negatives", "precision", "recall"]
    count = 0
    wants = []
    for p in manifest["pr_curves"]:
        rows = pr_curve_by_definition(p["labels"], p["predictions"], p["num_thresholds"])
        wants.append((p["tag"], p["step"], rows))
    raw = manifest["pr_raw"]
    wants.append((raw["tag"], raw["step"], raw["rows"]))
    for tag in sorted({t for t, _, _ in wants}):
        got = {e["step"]: e for e in plugin.pr_curves_impl(ctx, "", ["."], tag)["."]}
        for want_tag, step, rows in wants:
            if want_tag != tag:
                continue
            entry = got.get(step)
            if not expect(entry is not None, f"{tag}: no pr curve at step {step}, got {sorted(got)}"):
                continue
            # The plugin trims the tail where tp + fp = 0.
            end = len(entry["thresholds"])
            expect(
                entry["thresholds"] == np.linspace(0.0, 1.0, len(rows[0]))[:end].tolist(),
                f"{tag} step {step}: thresholds {entry['thresholds']}",
            )
            for name, row in zip(names, rows):
                want = [f32(v) for v in row[:end]]
                if name in names[:4]:
                    want = [int(v) for v in want]
                expect(
                    all(abs(a - b) <= 1e-6 for a, b in zip(entry[name], want)) and len(entry[name]) == end,
                    f"{tag} step {step}: {name} {entry[name]} != {want}",
                )
            count += 1
    return count


def check_audio(manifest, path):
    import urllib.parse
    import wave

    from tensorboard.plugins.audio import audio_plugin

    want = manifest["audio"]
    tb_context, ctx = plugin_context(path)
    plugin = audio_plugin.AudioPlugin(tb_context)
    listed = plugin._audio_response_for_run(ctx, "", ".", want["tag"], 0)
    if not expect(len(listed) == 1 and listed[0]["step"] == want["step"], f"audio plugin lists {listed}"):
        return 0
    expect(listed[0]["contentType"] == "audio/wav", f"audio content type {listed[0]['contentType']}")
    blob_key = urllib.parse.parse_qs(listed[0]["query"])["blob_key"][0]
    wav = tb_context.data_provider.read_blob(ctx, blob_key=blob_key)
    with wave.open(io.BytesIO(wav)) as w:
        expect(
            (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, want["sample_rate"]),
            f"wav header {(w.getnchannels(), w.getsampwidth(), w.getframerate())}",
        )
        got = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    # TensorFlow's encode_wav: roundf(x * 32768) (half away from zero) clamped to int16.
    x = np.array(want["samples"], dtype=np.float32) * np.float32(32768.0)
    rounded = np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))
    expected = np.clip(rounded, -32768, 32767).astype(np.int16)
    expect(got.shape == expected.shape, f"audio: {got.shape} samples, expected {expected.shape}")
    if got.shape == expected.shape:
        bad = int(np.sum(got != expected))
        expect(bad == 0, f"audio: {bad} samples differ")
        expect(int(np.sum(expected == 32767)) > 0, "audio: the clip never clips, so clamping went unchecked")
    return int(got.size)


def check_custom_scalars(manifest, path):
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin

    tb_context, ctx = plugin_context(path)
    plugin = custom_scalars_plugin.CustomScalarsPlugin(tb_context)
    got = plugin.layout_impl(ctx, "")
    if isinstance(got, str):
        got = json.loads(got)
    want = manifest["custom_scalars"]
    expect(got == want, f"custom scalars layout {got} != {want}")
    return sum(len(c.get("chart", [])) for c in got.get("category", []))


def check_projector(manifest, path):
    """The projector plugin's view of the run directory, as its own tests build it: a
    `TBContext` whose logdir is the run (no data provider, so the run is "."), its handlers
    called through werkzeug test requests."""
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.projector import projector_plugin
    from werkzeug import test as werkzeug_test
    from werkzeug import wrappers

    want = manifest["embedding"]
    plugin = projector_plugin.ProjectorPlugin(base_plugin.TBContext(logdir=path))
    apps = plugin.get_plugin_apps()
    client = werkzeug_test.Client(
        lambda environ, start: apps[environ["PATH_INFO"]](environ, start), wrappers.Response
    )

    def get(route, **args):
        response = client.get(route, query_string=args)
        expect(response.status_code == 200, f"projector {route} {args}: {response.status_code} {response.data[:200]!r}")
        return response

    runs = json.loads(get("/runs").data)
    if not expect(runs == ["."], f"projector runs {runs}"):
        return 0
    config = json.loads(get("/info", run=".").data)
    by_name = {e["tensorName"]: e for e in config.get("embeddings", [])}
    name = want["tensor_name"]
    embedding = by_name.get(name)
    if not expect(embedding is not None, f"projector config lists {list(by_name)}, not {name}"):
        return 0
    expect(embedding.get("tensorShape") == want["shape"], f"projector shape {embedding.get('tensorShape')} != {want['shape']}")
    expect(
        embedding.get("sprite", {}).get("singleImageDim") == want["single_image_dim"],
        f"projector sprite {embedding.get('sprite')}",
    )
    tensor = np.frombuffer(get("/tensor", run=".", name=name).data, dtype="<f4")
    expected = np.array(want["values"], dtype=np.float32)
    expect(
        tensor.shape == expected.shape and bool(np.all(tensor == expected)),
        f"projector tensor {tensor[:10]} != {expected[:10]}",
    )
    labels = get("/metadata", run=".", name=name).data.decode("utf-8").splitlines()
    expect(labels == want["labels"], f"projector labels {labels[:5]} != {want['labels'][:5]}")
    sprite = Image.open(io.BytesIO(get("/sprite_image", run=".", name=name).data))
    side = math.ceil(math.sqrt(want["shape"][0]))
    w, h = want["single_image_dim"]
    expect(sprite.size == (side * w, side * h), f"projector sprite of {sprite.size}, expected {(side * w, side * h)}")
    return len(by_name)


def check_train_hparams(train_dir):
    """The hparams dashboard's view of an `ember train` run: its experiment (metric columns) and
    session groups (values, status), through the plugin's handlers over the data provider."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context, get_experiment, list_session_groups

    mux = pem.EventMultiplexer(tensor_size_guidance={"scalars": 0, "hparams": 0})
    mux.AddRunsFromDirectory(train_dir)
    mux.Reload()
    tb_context = base_plugin.TBContext(
        data_provider=data_provider.MultiplexerDataProvider(mux, train_dir),
        logdir=train_dir,
        multiplexer=mux,
    )
    backend = backend_context.Context(tb_context)
    ctx = context.RequestContext()
    experiment = get_experiment.Handler(ctx, backend, "", api_pb2.GetExperimentRequest()).run()
    columns = [m.name.tag for m in experiment.metric_infos]
    finals = ["final/train_loss", "final/valid_loss", "final/valid_accuracy"]
    for tag in finals:
        expect(tag in columns, f"train run: {tag} is not a metric column of {columns}")
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0,
        slice_size=10,
        allowed_statuses=[api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING, api_pb2.STATUS_UNKNOWN],
    )
    groups = list_session_groups.Handler(ctx, backend, "", request).run().session_groups
    if not expect(len(groups) == 1 and len(groups[0].sessions) == 1, f"train run: session groups {groups}"):
        return 0
    session = groups[0].sessions[0]
    expect(session.status == api_pb2.STATUS_SUCCESS, f"train run: session status {session.status}")
    values = {m.name.tag: m.value for m in session.metric_values}
    acc, _ = load(train_dir)
    last = {tag: acc.Scalars(tag)[-1].value for tag in ("train/loss", "valid/loss", "valid/accuracy")}
    for final, source in (("final/valid_loss", "valid/loss"), ("final/valid_accuracy", "valid/accuracy")):
        expect(
            values.get(final) == last[source],
            f"train run: {final} column {values.get(final)}, expected the last {source} {last[source]}",
        )
    expect(values.get("final/train_loss", math.nan) > 0, f"train run: final/train_loss {values}")
    return sum(1 for tag in finals if tag in values)


# ---------------------------------------------------------------------------------------------
# ember inspect's view of the same files (its `--json --values` document), against the plugins'


def layout_as_proto_json(layout):
    """ember inspect's layout in the shape `proto_to_json` gives the plugin's `Layout`, default
    values included."""
    def chart(c):
        if "multiline" in c:
            return {"title": c["title"], "multiline": {"tag": c["multiline"]}}
        return {"title": c["title"], "margin": {"series": c["margin"]}}

    categories = [
        {"title": c["title"], "chart": [chart(x) for x in c["charts"]], "closed": c["closed"]}
        for c in layout["categories"]
    ]
    return {"category": categories, "version": 0}


def check_ember_inspect(report_path, run_dir):
    """What `ember inspect --json --values` lists for the run `run_dir` against what TensorBoard's
    own plugins return for it: every PR curve (thresholds, the four counts, precision and recall,
    step and wall time), every audio clip (rate, channels, samples of the WAV blob the data
    provider serves), the custom scalars layout and the projector's embeddings."""
    import urllib.parse
    import wave

    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.audio import audio_plugin
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin
    from tensorboard.plugins.pr_curve import pr_curves_plugin
    from tensorboard.plugins.projector import projector_plugin
    from werkzeug import test as werkzeug_test
    from werkzeug import wrappers

    report = json.load(open(report_path, encoding="utf-8"))
    label = os.path.basename(run_dir)
    runs = [r for r in report["runs"] if os.path.samefile(r["dir"], run_dir)]
    if not expect(len(runs) == 1, f"ember inspect lists no run {run_dir}"):
        return 0
    by_kind = {}
    for entry in runs[0]["tags"]:
        by_kind.setdefault(entry["kind"], {})[entry["tag"]] = entry
    tb_context, ctx = plugin_context(run_dir)
    count = 0

    plugin = pr_curves_plugin.PrCurvesPlugin(tb_context)
    tb_tags = sorted(plugin.tags_impl(ctx, "").get(".", {}))
    ours = by_kind.get("pr curve", {})
    expect(sorted(ours) == tb_tags, f"{label}: ember inspect's pr curves {sorted(ours)} != {tb_tags}")
    names = ["true_positives", "false_positives", "true_negatives", "false_negatives"]
    for tag in tb_tags:
        want = plugin.pr_curves_impl(ctx, "", ["."], tag)["."]
        got = ours.get(tag, {}).get("values", [])
        expect(
            [(s, w) for s, w, _ in got] == [(e["step"], e["wall_time"]) for e in want],
            f"{label} {tag}: ember inspect's steps and wall times differ from the plugin's",
        )
        for (step, _, curve), entry in zip(got, want):
            end = len(entry["thresholds"])
            where = f"{label} {tag} step {step}"
            expect(curve["thresholds"][:end] == entry["thresholds"], f"{where}: thresholds differ")
            for name in ("precision", "recall"):
                expect(curve[name][:end] == entry[name], f"{where}: {name} {curve[name][:end]} != {entry[name]}")
            for name in names:
                expect([int(v) for v in curve[name][:end]] == entry[name], f"{where}: {name} differ")
            # The plugin drops the tail where nothing is predicted positive; ember keeps it.
            tail = zip(curve["true_positives"][end:], curve["false_positives"][end:])
            expect(all(tp + fp == 0 for tp, fp in tail), f"{where}: the plugin cut a tail with positives")
            count += 1

    plugin = audio_plugin.AudioPlugin(tb_context)
    tb_tags = sorted(plugin._index_impl(ctx, "").get(".", {}))
    ours = by_kind.get("audio", {})
    expect(sorted(ours) == tb_tags, f"{label}: ember inspect's audio {sorted(ours)} != {tb_tags}")
    for tag in tb_tags:
        listed = plugin._audio_response_for_run(ctx, "", ".", tag, 0)
        got = ours.get(tag, {}).get("values", [])
        if not expect(
            [s for s, _, _ in got] == [e["step"] for e in listed],
            f"{label} {tag}: ember inspect's audio steps {[s for s, _, _ in got]}",
        ):
            continue
        for (step, _, clip), entry in zip(got, listed):
            blob_key = urllib.parse.parse_qs(entry["query"])["blob_key"][0]
            with wave.open(io.BytesIO(tb_context.data_provider.read_blob(ctx, blob_key=blob_key))) as w:
                header = (w.getframerate(), w.getnchannels())
                pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
            where = f"{label} {tag} step {step}"
            expect((clip["sample_rate"], clip["channels"]) == header, f"{where}: rate, channels {header}")
            samples = (pcm.astype(np.float64) / 32768.0).tolist()
            expect(clip["samples"] == samples, f"{where}: ember inspect's samples differ from the wav's")
            count += 1

    plugin = custom_scalars_plugin.CustomScalarsPlugin(tb_context)
    want = plugin.layout_impl(ctx, "")
    if isinstance(want, str):
        want = json.loads(want)
    ours = by_kind.get("custom scalars layout", {})
    got = {}
    if ours:
        got = layout_as_proto_json(next(iter(ours.values()))["layout"])
    expect(got == want, f"{label}: ember inspect's layout {got} != the plugin's {want}")
    count += len(ours)

    projector = projector_plugin.ProjectorPlugin(base_plugin.TBContext(logdir=run_dir))
    apps = projector.get_plugin_apps()
    client = werkzeug_test.Client(
        lambda environ, start: apps[environ["PATH_INFO"]](environ, start), wrappers.Response
    )
    want = {}
    if json.loads(client.get("/runs").data) == ["."]:
        config = json.loads(client.get("/info", query_string={"run": "."}).data)
        for e in config.get("embeddings", []):
            sprite = e.get("sprite")
            want[e["tensorName"]] = {
                "tensor_path": e.get("tensorPath"),
                "tensor_shape": e.get("tensorShape", []),
                "metadata_path": e.get("metadataPath"),
                "sprite": sprite and {"image_path": sprite["imagePath"], "single_image_dim": sprite["singleImageDim"]},
                "problems": [],
            }
    got = {tag: entry["embedding"] for tag, entry in by_kind.get("embedding", {}).items()}
    expect(got == want, f"{label}: ember inspect's embeddings {got} != the projector's {want}")
    count += len(got)
    return count


def main():
    args = sys.argv[1:]
    inspect_report = None
    if "--ember-inspect" in args:
        at = args.index("--ember-inspect")
        inspect_report = args[at + 1] if at + 1 < len(args) else None
        del args[at : at + 2]
    if len(args) not in (1, 2) or ("--ember-inspect" in sys.argv and inspect_report is None):
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    path = args[0]
    manifest = json.load(open(os.path.join(path, "manifest.json"), encoding="utf-8"))
    event_files = sorted(f for f in os.listdir(path) if "tfevents" in f)
    if len(event_files) != 1:
        print(f"expected one event file in {path}, found {event_files}", file=sys.stderr)
        return 1
    acc, plugin_acc = load(path)
    counts = {
        "tags by plugin": check_kinds(manifest, acc, plugin_acc),
        "scalar points": check_scalars(manifest, acc, plugin_acc),
        "histograms": check_histograms(manifest, acc, plugin_acc),
        "images": check_images(manifest, acc, plugin_acc),
        "texts": check_texts(manifest, plugin_acc),
        "tensors": check_tensors(manifest, acc),
        "large tensors past writeback starts": check_large_tensors(manifest, acc),
        "hparams": check_hparams(manifest, plugin_acc),
        "graph nodes": check_graph(manifest, acc, plugin_acc),
        "pr curves (plugin)": check_pr_curves(manifest, path),
        "audio samples (plugin)": check_audio(manifest, path),
        "custom scalar charts (plugin)": check_custom_scalars(manifest, path),
        "embedding (projector)": check_projector(manifest, path),
    }
    counts["graph edges"] = sum(len(n["inputs"]) for n in manifest["graph"]["nodes"])
    cuts, records = check_truncation(path, event_files[0], snapshot(plugin_acc))
    counts[f"truncations (of {records} records)"] = cuts
    if len(args) == 2:
        counts["final metric columns of an ember train run"] = check_train_hparams(args[1])
    if inspect_report:
        runs = [path] + args[1:]
        counts["pr curves, clips, layouts and embeddings in ember inspect"] = sum(
            check_ember_inspect(inspect_report, run) for run in runs
        )
    if FAILURES:
        for message in FAILURES:
            print(f"FAIL: {message}")
        print(f"compat: {len(FAILURES)} mismatches with tensorboard {tensorboard.__version__}")
        return 1
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    print(f"compat: tensorboard {tensorboard.__version__} reads everything back: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
