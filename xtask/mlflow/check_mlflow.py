"""Reads ember's runs back from an MLflow tracking server with MLflow's own Python client
(`cargo xtask mlflow`).

Usage: check_mlflow.py URI experiment NAME        creates experiment NAME, prints its id
       check_mlflow.py URI check SPEC.json          checks every run SPEC lists
       check_mlflow.py URI count RUN_ID             prints how many points the run's metrics hold
       check_mlflow.py URI runs NAME                prints the ids of experiment NAME's runs

SPEC is a list of {"run_id", "inspect", "params", "artifacts", "not_sent"}: `inspect` the path of `ember
inspect --json --values` of the run's log directory, `params` what MLflow must hold as the run's
params, `artifacts` {artifact path: local file} what it must hold as its artifacts, byte for
byte (downloaded through the server's artifact proxy), `not_sent` prefixes of the log's tags
the run does not send (another rank's own). For each
run, every scalar tag of the log is a metric whose history (`MlflowClient.get_metric_history`)
holds each of the log's steps once, with the log's value (the f32 the event file holds; of a
series of durations, which a resumed run measures anew for the steps it trains again, any value),
and no other step; the params are as given; the run's `ember.version` tag is set. Exit status 0 when all
match, 1 with every mismatch listed.
"""

import json
import math
import struct
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient


def same(a, b):
    """Equal as the f32 the event file holds (MLflow may give a double back to 16 digits)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<f", a) == struct.pack("<f", b)


def timed(tag):
    """A series of how long things took: no two starts of a run measure the same."""
    return tag.endswith("_seconds") or tag.endswith("per_second") or tag.startswith("system/")


def scalars(report):
    """Every scalar tag of an inspect report: {tag: [(step, value)]}."""
    series = {}
    for run in report["runs"]:
        for tag in run["tags"]:
            if tag.get("kind") != "scalar":
                continue
            points = series.setdefault(tag["tag"], [])
            for point in tag.get("values", []):
                value = point[2]
                points.append((point[0], float("nan") if value is None else float(value)))
    return series


def check(client, run_id, report, params, artifacts, not_sent):
    failures = []
    run = client.get_run(run_id)
    if "ember.version" not in run.data.tags:
        failures.append(f"{run_id}: no ember.version tag: {run.data.tags}")
    for key, value in params.items():
        if run.data.params.get(key) != value:
            failures.append(f"{run_id}: param {key} is {run.data.params.get(key)!r}, not {value!r}")
    for name, local in artifacts.items():
        with tempfile.TemporaryDirectory() as into:
            try:
                got = Path(client.download_artifacts(run_id, name, into)).read_bytes()
            except Exception as error:  # MLflow raises its own kinds; the message says it.
                failures.append(f"{run_id}: artifact {name} cannot be read back: {error}")
                continue
        if got != Path(local).read_bytes():
            failures.append(f"{run_id}: artifact {name} differs from {local}")
    expected = {tag: points for tag, points in scalars(report).items()
                if not tag.startswith(tuple(not_sent))}
    if not expected:
        failures.append(f"{run_id}: the log has no scalars")
    points = 0
    for tag, want in expected.items():
        got = [(m.step, m.value) for m in client.get_metric_history(run_id, tag)]
        steps = [step for step, _ in got]
        if len(steps) != len(set(steps)):
            twice = sorted({s for s in steps if steps.count(s) > 1})
            failures.append(f"{run_id}: {tag} holds steps {twice[:10]} more than once")
        have = dict(got)
        wanted = dict(want)
        if sorted(have) != sorted(wanted):
            missing = sorted(set(wanted) - set(have))
            extra = sorted(set(have) - set(wanted))
            failures.append(f"{run_id}: {tag} steps differ: missing {missing[:10]}, extra {extra[:10]}")
        for step, value in wanted.items():
            if step in have and not timed(tag) and not same(have[step], value):
                failures.append(f"{run_id}: {tag} at step {step} is {have[step]!r}, the log's {value!r}")
                break
        points += len(got)
    return failures, points, len(expected)


def main():
    uri, verb, arg = sys.argv[1:4]
    client = MlflowClient(uri)
    if verb == "experiment":
        print(client.create_experiment(arg))
        return 0
    if verb == "runs":
        experiment = client.get_experiment_by_name(arg)
        print(" ".join(run.info.run_id for run in client.search_runs([experiment.experiment_id])))
        return 0
    if verb == "count":
        run = client.get_run(arg)
        print(sum(len(client.get_metric_history(arg, key)) for key in run.data.metrics))
        return 0
    spec = json.load(open(arg))
    failures = []
    points = tags = 0
    for entry in spec:
        report = json.load(open(entry["inspect"]))
        found, p, t = check(client, entry["run_id"], report, entry.get("params", {}),
                            entry.get("artifacts", {}), entry.get("not_sent", []))
        failures += found
        points += p
        tags += t
    for failure in failures:
        print(f"mlflow: {failure}", file=sys.stderr)
    files = sum(len(entry.get("artifacts", {})) for entry in spec)
    print(f"{len(spec)} runs, {tags} metrics, {points} points, {files} artifacts")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
