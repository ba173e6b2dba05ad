"""MLflow's own web page of an ember run, in headless Chromium (`cargo xtask mlflow`): what a
team member who opens the run in MLflow's UI sees.

Usage: check_mlflow_page.py --chromium BIN --shots DIR --url URL --experiment ID --run ID
                            --expect JSON

Runs in the Playwright venv (`cargo xtask compat`'s browser step, whose helpers it uses)
against a running tracking server. `--expect` holds the log's `train/loss` as `[[step, value],
...]`. On the run's "Model metrics" tab, searched for the tag, the chart of `train/loss` must
plot exactly those points (each step once, every value equal as the f32 the event file holds),
be inked, and the page must show no error; its screenshot goes to `--shots`.
"""

import argparse
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from check_browser import Browser, CheckFailed, expect  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

TAG = "train/loss"
# The traces of every chart on the page: [run name, xs, ys] (MLflow draws with Plotly).
TRACES_JS = "el => (el.data || []).map(t => [t.name, t.x || [], t.y || []])"
ONE_CHART_JS = """() => {
  const charts = document.querySelectorAll(".js-plotly-plot");
  return charts.length == 1 && (charts[0].data || []).length > 0;
}"""


def as_float32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def check(b, args, want):
    page = b.open(f"{args.url}/#/experiments/{args.experiment}/runs/{args.run}/model-metrics")
    page.get_by_placeholder("Search metric charts").fill(TAG)
    # The search filters the charts as it renders: one chart, with data, is the settled page.
    page.wait_for_function(ONE_CHART_JS)
    chart = page.locator(".js-plotly-plot")
    b.ink(chart, f"the chart of {TAG}", at_least=500)
    lines = chart.locator(".scatterlayer path.js-line")
    expect(lines.count() > 0 and all(len(d or "") > 100 for d in
                                     (lines.nth(i).get_attribute("d") for i in range(lines.count()))),
           f"the chart of {TAG} draws no line")
    traces = chart.evaluate(TRACES_JS)
    expect(traces, f"the chart of {TAG} has no trace")
    for name, xs, ys in traces:
        got = list(zip(xs, (as_float32(y) for y in ys)))
        expect(got == want, f"the chart's trace {name!r} plots {len(got)} points, the log "
               f"{len(want)}: first differences {[p for p in zip(got, want) if p[0] != p[1]][:3]}")
    b.finish("mlflow-run-model-metrics")
    return f"{len(want)} points in {len(traces)} traces"


def main():
    parser = argparse.ArgumentParser()
    for name in ("--chromium", "--shots", "--url", "--experiment", "--run", "--expect"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    want = [(step, as_float32(value)) for step, value in json.load(open(args.expect))]
    shots = Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        b = Browser(playwright, args.chromium, shots)
        try:
            drew = check(b, args, want)
        except CheckFailed as failure:
            print(f"MLflow's run page: {failure} {b.diagnose('mlflow-run')}", file=sys.stderr)
            return 1
        finally:
            b.close()
    print(f"MLflow's run page in Chromium draws {TAG}: {drew}, each step once with the log's "
          f"value; screenshot {shots / 'mlflow-run-model-metrics.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
