"""TensorBoard's web page over a run in an object store, in headless Chromium (`cargo xtask
objects`): what a user of `tensorboard --logdir s3://…`, `gs://…` or `az://…` sees.

Usage: check_cloud_page.py --chromium BIN --shots DIR --cloud NAME --tensorboard PYTHON
                           --logdir URL --expect JSON

Runs in the Playwright venv (`cargo xtask compat`'s browser step, whose helpers it uses); the
TensorBoard server runs from `--tensorboard`, a venv with the cloud's reader, on loopback, its
store given by the environment. `--expect` holds the local run's `train/loss` as `[[step,
value], ...]`. The server must serve exactly those points (each step once, every value equal,
no sampling), the scalars dashboard must fetch exactly those and draw the tag's line with a
point a step, with no error on the page; a screenshot goes to `--shots`.
"""

import argparse
import json
import re
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from check_browser import (  # noqa: E402
    SERVER_TIMEOUT_S, Browser, CheckFailed, expect, filter_tags, free_port, line_points, tb_card,
    wait_for,
)
from playwright.sync_api import sync_playwright  # noqa: E402

TAG = "train/loss"


def as_float32(value):
    """A summary's scalar is a float32: the local run's value as TensorBoard holds it."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def start_tensorboard(python, logdir, log):
    """TensorBoard's server over `logdir`, with its Python loader (`--load_fast=false`): by
    default TensorBoard 2.21 hands a gs:// directory to its Rust data server, whose own GCS
    client asks Google's servers for credentials and cannot be pointed at an emulator (it
    panics: "unable to initialize authentication manager: NoAuthMethod(GCloudError, ...)");
    the Python loader reads gs:// and az:// through fsspec, s3:// through its S3 reader. Every
    scalar is kept and served (the plugin serves at most `--samples_per_plugin` of a tag)."""
    port = free_port()
    server = subprocess.Popen(
        [python, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
         "--port", str(port), "--reload_interval", "0", "--load_fast", "false",
         "--samples_per_plugin", "scalars=1000000"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{url}/data/plugin/scalars/tags",
                 lambda body: TAG in json.loads(body).get(".", {}),
                 f"TensorBoard listing {TAG} of {logdir}", server, log)
    except BaseException:
        server.terminate()
        server.wait(timeout=30)
        raise
    return server, url


def served_points(url):
    query = urllib.parse.urlencode({"run": ".", "tag": TAG})
    with urllib.request.urlopen(f"{url}/data/plugin/scalars/scalars?{query}", timeout=60) as r:
        return [(step, value) for _, step, value in json.loads(r.read())]


def loaded_points(url, want):
    """The served points once the server has loaded as many as the local run has (its one load
    runs in the background: a tag is listed from its first records), or when the time is up."""
    deadline = time.time() + SERVER_TIMEOUT_S
    while True:
        got = served_points(url)
        if len(got) >= len(want) or time.time() > deadline:
            return got
        time.sleep(0.5)


def fetched_points(responses):
    """The TAG points the page itself fetched (the legacy dashboard's GET of one run, or the
    multi-run POST), as (step, value)."""
    for response in responses:
        request = response.request
        # The tag is in the query (GET) or a form field of the body (POST).
        asked = urllib.parse.unquote(f"{request.url} {request.post_data or ''}")
        if not re.search(re.escape(TAG) + r"(?![\w/])", asked) or not response.ok:
            continue
        body = response.json()
        series = body.get(".", []) if isinstance(body, dict) else body
        return [(step, value) for _, step, value in series]
    return None


def check(b, url, cloud, want):
    got = loaded_points(url, want)
    steps = [step for step, _ in got]
    expect(len(set(steps)) == len(steps), f"{TAG}: steps served more than once")
    local = [(step, as_float32(value)) for step, value in want]
    differs = next((i for i, pair in enumerate(zip(got, local)) if pair[0] != pair[1]),
                   min(len(got), len(local)))
    expect(got == local,
           f"{TAG}: TensorBoard serves {len(got)} points, the local run has {len(local)}; "
           f"from the {differs + 1}th, served {got[differs:differs + 2]}, local "
           f"{local[differs:differs + 2]}")
    responses = []
    b.context.on("response", lambda response: "/data/plugin/scalars/" in response.url
                 and responses.append(response))
    page = b.open(f"{url}/#scalars")
    # Every point drawn: the chart leaves out those outside its scale, which by default leaves
    # out outliers (the first steps' loss), and merges those that fall on one pixel column of
    # a narrow chart.
    outliers = page.locator("paper-checkbox", has_text="Ignore outliers in chart scaling")
    if outliers.get_attribute("aria-checked") == "true":
        outliers.click()
    filter_tags(page, f"^{TAG}$")
    card = tb_card(page, "tf-scalar-card", TAG)
    card.locator('paper-icon-button[icon="fullscreen"]').click()
    drawn = line_points(page, card, TAG, len(want))
    fetched = fetched_points(responses)
    expect(fetched == local,
           f"{TAG}: the page fetched {fetched and len(fetched)} points "
           f"{(fetched or [])[:3]}... of {[r.url for r in responses]}, not the local run's")
    b.finish(f"tensorboard-{cloud}-scalars")
    return drawn


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--chromium", "--cloud", "--tensorboard", "--logdir"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--shots", required=True, type=Path)
    ap.add_argument("--expect", required=True, type=Path)
    args = ap.parse_args()
    want = [tuple(point) for point in json.loads(args.expect.read_text())]
    args.shots.mkdir(parents=True, exist_ok=True)
    log = Path(tempfile.mkdtemp(prefix="ember-cloud-page-")) / "tensorboard.log"
    server = None
    try:
        server, url = start_tensorboard(args.tensorboard, args.logdir, log)
        with sync_playwright() as p:
            b = Browser(p, args.chromium, args.shots)
            try:
                drawn = check(b, url, args.cloud, want)
            except Exception:
                b.diagnose(f"tensorboard-{args.cloud}-scalars")
                raise
            finally:
                b.close()
    except CheckFailed as e:
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        sys.exit(f"{args.cloud}: TensorBoard's page over {args.logdir}: {e}\n{tail}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    print(f"TensorBoard 2.21's page over {args.logdir} in Chromium draws {TAG} with {drawn} "
          f"points, the local run's {len(want)} steps each once with their values "
          f"(screenshot {args.shots / f'tensorboard-{args.cloud}-scalars.png'})")


if __name__ == "__main__":
    main()
