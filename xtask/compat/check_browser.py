"""TensorBoard's and MindInsight's own web pages, rendered in headless Chromium, show what
ember wrote (`cargo xtask compat`, its browser step).

Usage: check_browser.py --chromium BIN --shots DIR --tensorboard PYTHON --logdir DIR
                        [--mindinsight PYTHON --summary-base-dir DIR]

Runs in a venv with Playwright only (pinned by xtask); each server runs from its own venv's
Python, on loopback, on a free port, and is stopped at the end. For every plugin ember writes
it opens the plugin's page, waits for the expected tag to be listed, asserts that its chart,
canvas, image, table or player holds data (a point count, a decoded image's size, an audio
duration, inked pixels) and that the page shows no error, and saves a PNG of the page to
`--shots`. The logs are the ones the rest of compat writes: `--logdir` holds the
compat_writer run (`.`, every kind with `manifest.json`) and the demo `ember train` run
(`train-tb`); `--summary-base-dir` holds MindInsight's jobs and its own `manifest.json`.

Prints one line per UI with what it checked; exits 1 naming each plugin that failed.
"""

import argparse
import base64
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

# Charts load asynchronously after the tag list; a page that has not drawn by then is broken.
# (EMBER_BROWSER_TIMEOUT_MS shortens it while a check is being developed.)
PAGE_TIMEOUT_MS = int(os.environ.get("EMBER_BROWSER_TIMEOUT_MS", "30000"))
SERVER_TIMEOUT_S = 60

# Text that the dashboards show instead of data, or next to data that failed.
EMPTY_OR_ERROR = re.compile(
    r"No (?:\w+ )*data was found|No data|do not match|Error|error occurred|Failed to load",
    re.IGNORECASE,
)

# Walks the composed tree (shadow roots included): TensorBoard's dashboards are Polymer
# elements, and the texts and charts sit in their shadow roots. Only visible text counts, so a
# hidden "No data" template does not.
VISIBLE_TEXT_JS = """(root) => {
  const out = [];
  const walk = (node) => {
    for (const c of node.childNodes) {
      if (c.nodeType === 3) {
        const p = c.parentElement;
        if (p && p.checkVisibility() && c.textContent.trim()) out.push(c.textContent.trim());
      } else if (c.nodeType === 1) {
        if (c.tagName === 'STYLE' || c.tagName === 'SCRIPT') continue;
        if (c.shadowRoot) walk(c.shadowRoot);
        walk(c);
      }
    }
  };
  root = root || document;
  if (root.shadowRoot) walk(root.shadowRoot);
  walk(root);
  return out.join('\\n');
}"""

# Counts the pixels of a PNG that carry ink (colour, or dark), decoded by the browser itself,
# so the check needs no image library. Chart frames, grids and axes are light gray, so an empty
# chart has few inked pixels (its axis labels).
PIXELS_JS = """async (b64) => {
  const blob = await (await fetch('data:image/png;base64,' + b64)).blob();
  const bmp = await createImageBitmap(blob);
  const canvas = new OffscreenCanvas(bmp.width, bmp.height);
  const ctx = canvas.getContext('2d');
  ctx.drawImage(bmp, 0, 0);
  const d = ctx.getImageData(0, 0, bmp.width, bmp.height).data;
  let ink = 0;
  for (let i = 0; i < d.length; i += 4) {
    const hi = Math.max(d[i], d[i + 1], d[i + 2]), lo = Math.min(d[i], d[i + 1], d[i + 2]);
    if (hi - lo > 40 || hi < 128) ink++;
  }
  return ink;
}"""


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, ready, what, proc=None, log=None):
    """Polls `url` until `ready(body)` holds; fails with the server's log when it never does."""
    deadline = time.time() + SERVER_TIMEOUT_S
    last = None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read().decode("utf-8", "replace")
                if ready(body):
                    return body
                last = body[:300]
        except OSError as e:
            last = str(e)
        time.sleep(0.3)
    tail = Path(log).read_text(errors="replace")[-2000:] if log and Path(log).exists() else ""
    raise CheckFailed(f"{what} did not come up at {url} (last answer: {last})\n{tail}")


class Browser:
    """One headless Chromium (the system's, never a downloaded build) and what it saw."""

    def __init__(self, playwright, chromium, shots):
        self.browser = playwright.chromium.launch(
            executable_path=chromium,
            headless=True,
            # WebGL (the projector) on the CPU, where the machine has no GPU.
            args=["--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
        )
        self.context = self.browser.new_context(viewport={"width": 1400, "height": 1000})
        self.context.set_default_timeout(PAGE_TIMEOUT_MS)
        # A blank page of its own decodes screenshots: the UIs' pages forbid data: fetches.
        self.decoder = self.context.new_page()
        self.shots = shots
        self.page = None
        self.problems = []

    def open(self, url):
        if self.page is not None:
            self.page.close()
        self.page = self.context.new_page()
        self.problems = []
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on(
            "response",
            lambda r: r.status >= 500 and self.problems.append(f"HTTP {r.status} for {r.url}"),
        )
        self.page.goto(url)
        return self.page

    def ink(self, locator, what, at_least):
        """The inked pixels of `locator`, once over `at_least` or the page's time is up:
        charts animate in, and WebGL draws a frame after its data loads."""
        deadline = time.time() + PAGE_TIMEOUT_MS / 1000
        while True:
            png = locator.screenshot()
            ink = self.decoder.evaluate(PIXELS_JS, base64.b64encode(png).decode())
            if ink > at_least or time.time() > deadline:
                break
            self.page.wait_for_timeout(300)
        expect(ink > at_least, f"{what}: {ink} inked pixels, want over {at_least}")
        return ink

    def visible_text(self, locator=None):
        if locator is None:
            return self.page.evaluate(VISIBLE_TEXT_JS, None)
        return locator.evaluate(VISIBLE_TEXT_JS)

    def diagnose(self, name):
        """After a failure: the page as it was, and any error it shows, for the message."""
        try:
            self.page.screenshot(path=str(self.shots / f"{name}-FAILED.png"))
            text = self.visible_text()
        except Exception:  # The page itself is gone; the failure says enough.
            return ""
        bad = EMPTY_OR_ERROR.search(text)
        if not bad:
            return ""
        return " ".join(text[max(0, bad.start() - 80) : bad.end() + 120].split())

    def finish(self, name, root=None, empty_ok=()):
        """The page's screenshot, then the checks every page shares: no error text, no
        failed request, no script error. `empty_ok` names panels for what ember does not
        write, whose "No data" is right."""
        # Animations (chart transitions, spinners) settle before the picture.
        self.page.wait_for_timeout(500)
        self.page.screenshot(path=str(self.shots / f"{name}.png"))
        text = self.visible_text(root)
        for title in empty_ok:
            text = text.replace(f"{title}\nNo data", title)
        bad = EMPTY_OR_ERROR.search(text)
        if bad:
            around = " ".join(text[max(0, bad.start() - 80) : bad.end() + 80].split())
            raise CheckFailed(f"the page says {bad.group(0)!r}: ...{around}...")
        expect(not self.problems, "; ".join(self.problems[:3]))

    def close(self):
        self.browser.close()


def exact(text):
    return re.compile(rf"^\s*{re.escape(text)}\s*$")


def line_points(page, card, what, at_least):
    """The points of the longest line drawn in `card` (Plottable's `path.line`: `M`, then one
    `L` per point after), once it has `at_least` or the page's time is up: a chart draws its
    frame before its data arrives."""
    card.scroll_into_view_if_needed()
    deadline = time.time() + PAGE_TIMEOUT_MS / 1000
    while True:
        paths = card.locator("path.line").evaluate_all("ps => ps.map(p => p.getAttribute('d') || '')")
        points = max((d.count("L") + 1 for d in paths if d.startswith("M")), default=0)
        if points >= at_least or time.time() > deadline:
            break
        page.wait_for_timeout(200)
    expect(points >= at_least, f"{what}: its longest line has {points} points, want {at_least}")
    return points


def filter_tags(page, regex):
    """Types into the dashboard's tag filter, so only these tags' cards are rendered (the
    legacy dashboards draw a card only once it is on screen)."""
    page.locator("tf-tag-filterer input").fill(regex)


def tb_card(page, element, tag):
    """The card `element` whose heading names `tag`, once listed."""
    card = page.locator(element).filter(
        has=page.locator(".heading-label.name, .heading-label span", has_text=exact(tag))
    )
    card.first.wait_for()
    return card.first


def tensorboard_checks(b, url, logdir):
    m = json.loads((logdir / "manifest.json").read_text())
    exact_steps = len(next(s for s in m["scalars"] if s["tag"] == "scalars/exact")["steps"])

    def scalars():
        page = b.open(f"{url}/#scalars")
        filter_tags(page, "^(scalars/exact|train/loss)$")
        said = []
        for tag, at_least in [("scalars/exact", exact_steps), ("train/loss", 2)]:
            card = tb_card(page, "tf-scalar-card", tag)
            said.append(f"{tag} {line_points(page, card, tag, at_least)} points")
        b.finish("tensorboard-scalars")
        return ", ".join(said)

    def custom_scalars():
        page = b.open(f"{url}/#custom_scalars")
        said = []
        for element, title, at_least in [
            ("tf-custom-scalar-multi-line-chart-card", "train and valid", exact_steps),
            ("tf-custom-scalar-margin-chart-card", "band", exact_steps),
            ("tf-custom-scalar-multi-line-chart-card", "loss", 2),
        ]:
            card = tb_card(page, element, title)
            said.append(f"{title!r} {line_points(page, card, f'chart {title!r}', at_least)} points")
        page.locator("tf-custom-scalar-dashboard").scroll_into_view_if_needed()
        b.finish("tensorboard-custom_scalars")
        return ", ".join(said)

    def histograms(kind, element, chart):
        def check():
            page = b.open(f"{url}/#{kind}")
            filter_tags(page, "^hist/spread$")
            card = tb_card(page, element, "hist/spread")
            card.locator(chart).wait_for()
            ink = b.ink(card.locator(chart), "hist/spread's chart", 2000)
            b.finish(f"tensorboard-{kind}")
            return f"hist/spread {ink} inked px"

        return check

    def images():
        page = b.open(f"{url}/#images")
        filter_tags(page, "^(image/rgb|samples/digits)$")
        said = []
        want = next(i for i in m["images"] if i["tag"] == "image/rgb")["shape"]
        for tag, size in [("image/rgb", (want[2], want[1])), ("samples/digits", None)]:
            card = tb_card(page, "tf-image-loader", tag)
            img = card.locator("img")
            img.wait_for()
            page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=img.element_handle())
            got = img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
            expect(size is None or tuple(got) == size, f"{tag}: {got[0]}x{got[1]} image, want {size}")
            said.append(f"{tag} {got[0]}x{got[1]}")
        b.finish("tensorboard-images")
        return ", ".join(said)

    def text():
        page = b.open(f"{url}/#text")
        said = []
        for tag, want in [("notes", "ember compat run: every value kind"), ("samples/predictions", None)]:
            card = tb_card(page, "tf-text-loader", tag)
            page.wait_for_timeout(300)
            shown = b.visible_text(card)
            if want:
                expect(want in " ".join(shown.split()), f"{tag}: {want!r} is not shown:\n{shown[:500]}")
            else:
                expect(len(shown) > len(tag) + 20, f"{tag}: only {shown!r} is shown")
            said.append(tag)
        b.finish("tensorboard-text")
        return ", ".join(said)

    def audio():
        page = b.open(f"{url}/#audio")
        card = tb_card(page, "tf-audio-loader", "audio/sweep")
        player = card.locator("audio")
        player.wait_for()
        page.wait_for_function("a => a.readyState >= 1 && a.duration > 0", arg=player.element_handle())
        duration = player.evaluate("a => a.duration")
        want = len(m["audio"]["samples"]) / m["audio"]["sample_rate"]
        expect(math.isclose(duration, want, rel_tol=0.01), f"audio/sweep plays {duration} s, want {want}")
        b.finish("tensorboard-audio")
        return f"audio/sweep {duration:.3f} s"

    def pr_curves():
        page = b.open(f"{url}/#pr_curves")
        filter_tags(page, "^(pr/digit|pr/raw|pr/digit_3)$")
        said = []
        # A curve has a point per threshold where precision is defined: pr/digit has 21
        # thresholds, pr/raw 5 and the demo job's 11.
        for tag, at_least in [("pr/digit", 10), ("pr/raw", 3), ("pr/digit_3", 5)]:
            card = tb_card(page, "tf-pr-curve-card", tag)
            said.append(f"{tag} {line_points(page, card, tag, at_least)} points")
        page.locator("tf-pr-curve-dashboard").scroll_into_view_if_needed()
        b.finish("tensorboard-pr_curves")
        return ", ".join(said)

    def hparams():
        page = b.open(f"{url}/#hparams")
        table = page.locator("tf-hparams-table-view")
        table.locator("vaadin-grid-cell-content").first.wait_for()
        page.wait_for_timeout(500)
        cells = [c.strip() for c in table.locator("vaadin-grid-cell-content").all_inner_texts()]
        expect("." in cells and "train-tb" in cells, f"the runs are not both rows of {cells[:60]}")
        # The columns are one run's experiment (TensorBoard takes the first it finds, in no
        # set order): the compat run's, whose values the manifest has, or the demo job's.
        compat = [n for n, _ in m["hparams"]["hparams"]] + [n for n, _ in m["hparams"]["metrics"]]
        demo = ["batch_size", "epochs", "hidden", "final/valid_accuracy", "final/valid_loss"]
        if all(n in cells for n in compat):
            for value in ["32.000", "0.12500", "adam", "true", "0.50000", "0.87500"]:
                expect(value in cells, f"{value!r} is not in the table {cells[:60]}")
            names = compat
        else:
            missing = [n for n in demo if n not in cells]
            expect(not missing, f"neither run's columns: {missing} are missing from {cells[:40]}")
            # The demo job's row: its hparams and final metrics, as numbers.
            row = cells[cells.index("train-tb"):]
            numbers = [c for c in row if re.fullmatch(r"-?\d+\.\d+(e[-+]\d+)?", c)]
            expect(len(numbers) >= len(demo), f"the train-tb row shows {row[:20]}")
            names = demo
        b.finish("tensorboard-hparams")
        return f"columns {', '.join(names)}; rows . and train-tb"

    def graphs():
        page = b.open(f"{url}/#graphs")
        nodes = page.locator("g.node text.nodelabel")
        nodes.first.wait_for()
        page.wait_for_timeout(500)
        # A label's text, then a <title> with the same text.
        labels = set(t.strip() for t in nodes.evaluate_all("ts => ts.map(t => t.firstChild.textContent)"))
        want = {"input", "model", "loss"}
        expect(want <= labels, f"graph nodes {sorted(labels)} lack {sorted(want - labels)}")
        edges = page.locator("path.edgeline").count()
        expect(edges >= 2, f"the graph has {edges} edges")
        b.finish("tensorboard-graphs")
        return f"nodes {', '.join(sorted(labels))}; {edges} edges"

    def projector():
        page = b.open(f"{url}/#projector")
        # The plugin's page holds the projector in a frame of its own.
        frame = page.frame_locator("iframe").frame_locator("iframe")
        # The projector opens one run's embedding (either run: the order is not set): its
        # point count and dimension must be those of a tensors.tsv in the log.
        shapes = {}
        for tsv in logdir.glob("**/embeddings/*/tensors.tsv"):
            rows = [r for r in tsv.read_text().splitlines() if r.strip()]
            shapes[(len(rows), len(rows[0].split("\t")))] = tsv.parent.name
        points = frame.locator(".numDataPoints")
        points.wait_for()
        frame.locator(".dim").wait_for()
        deadline = time.time() + PAGE_TIMEOUT_MS / 1000
        while time.time() < deadline:
            n, d = points.inner_text().strip(), frame.locator(".dim").inner_text().strip()
            if n.isdigit() and int(n) > 0 and d.isdigit():
                break
            page.wait_for_timeout(200)
        expect(n.isdigit() and d.isdigit(), f"the projector's status bar shows {n!r} points of {d!r}")
        shown = (int(n), int(d))
        expect(shown in shapes, f"the projector shows {shown[0]} points of {shown[1]}, not one of {sorted(shapes)}")
        canvas = frame.locator("canvas").first
        ink = b.ink(canvas, "the projector's canvas", 500)
        b.finish("tensorboard-projector", page.locator("body"))
        return f"{shapes[shown]}: {shown[0]} points of {shown[1]}, {ink} inked px"

    return [
        ("scalars", scalars),
        ("custom_scalars", custom_scalars),
        ("histograms", histograms("histograms", "tf-histogram-loader", "vz-histogram-timeseries")),
        ("distributions", histograms("distributions", "tf-distribution-loader", "vz-distribution-chart")),
        ("images", images),
        ("text", text),
        ("audio", audio),
        ("pr_curves", pr_curves),
        ("hparams", hparams),
        ("graphs", graphs),
        ("projector", projector),
    ]


def mindinsight_checks(b, url, base):
    m = json.loads((base / "manifest.json").read_text())
    job = "./ember-kinds"

    def chart_of(page, title):
        """The innermost block holding both `title` and a canvas: that title's chart (blocks
        come before what they hold, so the last match is the innermost)."""
        titled = page.get_by_text(title, exact=True)
        titled.first.wait_for()
        chart = page.locator("div").filter(has=titled).filter(has=page.locator("canvas")).last
        chart.locator("canvas").first.wait_for()
        return chart

    def canvas_drawn(page, title, at_least):
        return b.ink(chart_of(page, title).locator("canvas").first, f"{title}'s chart", at_least)

    def summary_list():
        page = b.open(f"{url}/#/summary-manage")
        for j in ["./ember-kinds", "./ember-train", "./mindspore-job"]:
            page.get_by_text(j, exact=True).filter(visible=True).first.wait_for()
        b.finish("mindinsight-summary-list")
        return "jobs ./ember-kinds ./ember-train ./mindspore-job"

    def scalars():
        page = b.open(f"{url}/#/train-manage/scalar?train_id={job}")
        ink = canvas_drawn(page, "scalars/loss/scalar", 1000)
        b.finish("mindinsight-scalars")
        return f"scalars/loss {ink} inked px"

    def images():
        want = next(i for i in m["images"] if i["tag"] == "image/rgb")["shape"]
        shown = (
            "() => [...document.querySelectorAll('img')].some(i => i.complete && "
            f"i.naturalWidth === {want[3]} && i.naturalHeight === {want[2]})"
        )
        # MindInsight lists a job's tags before it has loaded their images, and an image asked
        # for before then stays broken on the page: the page is loaded again, a few times.
        for attempt in range(4):
            page = b.open(f"{url}/#/train-manage/image?train_id={job}")
            page.get_by_text("image/rgb/image").first.wait_for()
            try:
                page.wait_for_function(shown, timeout=10_000)
                break
            except Exception:
                if attempt == 3:
                    break
        sizes = page.locator("img").evaluate_all(
            "is => is.filter(i => i.naturalWidth > 0).map(i => [i.naturalWidth, i.naturalHeight])"
        )
        expect([want[3], want[2]] in sizes, f"image/rgb: images {sizes} lack {want[3]}x{want[2]}")
        b.finish("mindinsight-images")
        return f"image/rgb {want[3]}x{want[2]} among {len(sizes)} images"

    def histograms():
        page = b.open(f"{url}/#/train-manage/histogram?train_id={job}")
        ink = canvas_drawn(page, "hist/spread/histogram", 5000)
        b.finish("mindinsight-histograms")
        return f"hist/spread {ink} inked px"

    def tensors():
        page = b.open(f"{url}/#/train-manage/tensor?train_id={job}")
        page.get_by_text("tensor/weights/tensor").first.wait_for()
        want = next(t for t in m["tensors"] if t["tag"] == "tensor/weights")
        first = f"{want['values'][0]:.5f}"
        page.get_by_text(first).first.wait_for()
        b.finish("mindinsight-tensors")
        return f"tensor/weights shows {first}"

    def graph():
        page = b.open(f"{url}/#/train-manage/graph?train_id={job}")
        nodes = page.locator("g.node")
        nodes.first.wait_for()
        page.wait_for_timeout(1000)
        # A first visit opens a user guide over the graph, with a sample graph of its own.
        guide = page.locator(".el-popover .el-icon-close").filter(visible=True)
        if guide.count():
            guide.first.click()
            page.wait_for_timeout(500)
        labels = set(
            t.strip() for t in page.locator("g.node text").evaluate_all("ts => ts.map(t => t.textContent)")
        )
        want = {"input", "net"}
        expect(want <= labels, f"graph nodes {sorted(labels)} lack {sorted(want - labels)}")
        edges = page.locator("g.edge").count()
        expect(edges >= 1, f"the graph has {edges} edges")
        b.finish("mindinsight-graph")
        return f"nodes {', '.join(sorted(labels))}; {edges} edges"

    def dashboard():
        page = b.open(f"{url}/#/train-manage/training-dashboard?id={job}")
        said = []
        for title, at_least in [("scalars/loss/scalar", 500), ("hist/constant/histogram", 5000)]:
            said.append(f"{title} {canvas_drawn(page, title, at_least)} inked px")
        # The tensor card's table and the sampled image.
        page.get_by_text("tensor/counts/tensor", exact=True).first.wait_for()
        page.wait_for_function(
            "() => [...document.querySelectorAll('img')].some(i => i.complete && i.naturalWidth > 0 && /image/.test(i.src))"
        )
        b.finish(
            "mindinsight-dashboard",
            page.locator("body"),
            empty_ok=["Loss Function Multidimensional Analysis", "Reduced Precision Operator Analysis"],
        )
        return ", ".join(said)

    def lineage():
        page = b.open(f"{url}/#/model-traceback")
        for j in ["./ember-kinds", "./ember-train", "./mindspore-job"]:
            page.get_by_text(j, exact=True).filter(visible=True).first.wait_for()
        accuracy = f"{m['lineage']['metric']['accuracy']}"
        page.get_by_text(accuracy, exact=True).filter(visible=True).first.wait_for()
        b.finish("mindinsight-lineage")
        return f"3 jobs, ./ember-kinds accuracy {accuracy}"

    return [
        ("summary list", summary_list),
        ("dashboard", dashboard),
        ("scalars", scalars),
        ("images", images),
        ("histograms", histograms),
        ("tensors", tensors),
        ("graph", graph),
        ("lineage", lineage),
    ]


def run_checks(b, ui, checks):
    failed = []
    said = []
    for name, check in checks:
        try:
            said.append(f"{name} ({check()})")
        except Exception as e:  # A timeout or an assertion: either way this plugin failed.
            lines = [l.strip() for l in str(e).strip().splitlines()]
            why = lines[0] if lines else type(e).__name__
            # A timeout's own message names only the call; what it waited for is in its log.
            waited = [l[len("- waiting for ") :] for l in lines if l.startswith("- waiting for ")]
            if waited:
                why += f" waiting for {waited[0]}"
            shown = b.diagnose(f"{ui.lower()}-{name.replace(' ', '_')}")
            if shown:
                why += f"; the page says: ...{shown}..."
            failed.append(f"{ui} {name}: {why}")
    return said, failed


def start_tensorboard(python, logdir, work, servers):
    port = free_port()
    log = work / "tensorboard.log"
    proc = subprocess.Popen(
        [python, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
         "--port", str(port), "--reload_interval", "0"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    servers.append(("tb", proc))
    url = f"http://127.0.0.1:{port}"
    # Every run and plugin of the log loaded: the compat run and the demo job.
    wait_for(f"{url}/data/plugin/scalars/tags",
             lambda body: all(r in json.loads(body) for r in [".", "train-tb"]),
             f"TensorBoard listing the runs . and train-tb of {logdir}", proc, log)
    return url


def start_mindinsight(python, base, work, servers):
    port = free_port()
    bindir = str(Path(python).parent)
    # `mindinsight start` runs gunicorn by name, from the venv's bin.
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    command = [str(Path(bindir) / "mindinsight")]
    out = subprocess.run(
        command + ["start", "--port", str(port), "--summary-base-dir", str(base),
                   "--workspace", str(work / "mindinsight-workspace"), "--reload-interval", "0"],
        env=env, capture_output=True, text=True, timeout=SERVER_TIMEOUT_S,
    )
    servers.append(("mi", (command + ["stop", "--port", str(port)], env)))
    url = f"http://127.0.0.1:{port}"
    if out.returncode != 0:
        raise CheckFailed(f"mindinsight start failed:\n{out.stdout}{out.stderr}")
    wait_for(f"{url}/v1/mindinsight/datavisual/train-jobs?offset=0&limit=10",
             lambda body: json.loads(body).get("total", 0) >= 3, f"MindInsight listing 3 jobs of {base}")
    return url


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--shots", required=True, type=Path)
    ap.add_argument("--tensorboard", required=True)
    ap.add_argument("--logdir", required=True, type=Path)
    ap.add_argument("--mindinsight")
    ap.add_argument("--summary-base-dir", type=Path)
    args = ap.parse_args()

    if args.shots.exists():
        shutil.rmtree(args.shots)
    args.shots.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="ember-browser-"))
    failed = []
    servers = []
    try:
        with sync_playwright() as p:
            b = Browser(p, args.chromium, args.shots)
            try:
                url = start_tensorboard(args.tensorboard, args.logdir, work, servers)
                said, bad = run_checks(b, "TensorBoard", tensorboard_checks(b, url, args.logdir))
                failed += bad
                print(f"browser: TensorBoard 2.21 in Chromium shows {len(said)} plugins: " + "; ".join(said))
                if args.mindinsight:
                    url = start_mindinsight(args.mindinsight, args.summary_base_dir, work, servers)
                    said, bad = run_checks(
                        b, "MindInsight", mindinsight_checks(b, url, args.summary_base_dir)
                    )
                    failed += bad
                    print(f"browser: MindInsight 2.3.1 in Chromium shows {len(said)} pages: " + "; ".join(said))
            finally:
                b.close()
    except CheckFailed as e:
        failed.append(str(e))
    finally:
        for kind, server in servers:
            if kind == "tb":
                server.terminate()
                server.wait(timeout=30)
            else:
                stop, env = server
                subprocess.run(stop, env=env, capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    print(f"browser: screenshots in {args.shots}")
    if failed:
        print("browser: FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
