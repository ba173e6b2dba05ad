"""MLflow's own Python client logging into a tracking server, timed (`cargo xtask mlflow --bench`).

Usage: bench_mlflow.py URI MODE STEPS

Each step logs ten metrics, m0..m9, as ember's `scalars10` workload does. MODE:
- sync: `MlflowClient.log_batch` of 1,000 metrics at a time, one request after another;
- async: `mlflow.log_metrics` a step at a time with `mlflow.config.enable_async_logging()`,
  timed until `mlflow.flush_async_logging()` returns;
- ceiling: four threads, each `log_batch`es of 1,000 into a run of its own: what the server
  takes at most.

Prints one JSON line: {"peer", "metrics", "seconds", "loop_seconds"}; every run's metrics are
counted back before it is reported.
"""

import json
import sys
import threading
import time

import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

KEYS = [f"m{k}" for k in range(10)]


def value(step, k):
    return ((step * 7 + k * 13) % 1000) / 1000.0


def metrics(steps, timestamp):
    for step in range(steps):
        for k, key in enumerate(KEYS):
            yield Metric(key, value(step, k), timestamp, step)


def batches(steps, timestamp):
    batch = []
    for metric in metrics(steps, timestamp):
        batch.append(metric)
        if len(batch) == 1000:
            yield batch
            batch = []
    if batch:
        yield batch


def counted(client, run_id, steps):
    for key in KEYS:
        got = len(client.get_metric_history(run_id, key))
        if got != steps:
            raise SystemExit(f"{run_id}: {key} holds {got} points, not {steps}")


def sync(uri, steps):
    client = MlflowClient(uri)
    run_id = client.create_run("0").info.run_id
    started = time.perf_counter()
    for batch in batches(steps, int(time.time() * 1000)):
        client.log_batch(run_id, metrics=batch)
    seconds = time.perf_counter() - started
    counted(client, run_id, steps)
    return seconds, seconds


def asynchronous(uri, steps):
    mlflow.set_tracking_uri(uri)
    mlflow.config.enable_async_logging(True)
    with mlflow.start_run() as run:
        started = time.perf_counter()
        for step in range(steps):
            mlflow.log_metrics({key: value(step, k) for k, key in enumerate(KEYS)}, step=step)
        loop = time.perf_counter() - started
        mlflow.flush_async_logging()
        seconds = time.perf_counter() - started
    counted(MlflowClient(uri), run.info.run_id, steps)
    return seconds, loop


def ceiling(uri, steps, threads=4):
    client = MlflowClient(uri)
    runs = [client.create_run("0").info.run_id for _ in range(threads)]
    each = steps // threads

    def log(run_id):
        own = MlflowClient(uri)
        for batch in batches(each, int(time.time() * 1000)):
            own.log_batch(run_id, metrics=batch)

    workers = [threading.Thread(target=log, args=(run_id,)) for run_id in runs]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    for run_id in runs:
        counted(client, run_id, each)
    return seconds, seconds


def main():
    uri, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run = {"sync": sync, "async": asynchronous, "ceiling": ceiling}[mode]
    seconds, loop = run(uri, steps)
    print(json.dumps({"peer": f"mlflow-{mode}", "metrics": steps * len(KEYS), "seconds": seconds, "loop_seconds": loop}))


if __name__ == "__main__":
    main()
