"""Reads resumed `ember train --format mindinsight` runs with MindInsight 2.3.1 (`cargo xtask
resume`).

Usage: check_mindinsight.py <summary base dir> <reference job> <job>...

The reference trained without a break; the other jobs were killed with SIGKILL at a random
moment and resumed. MindInsight's `DataManager` (what its REST API serves from) must show each
resumed job's scalars exactly as the reference's (the same (step, value) pairs in the same
order: no step twice, none missing), wall-time-derived series aside, the same histogram and
image steps, and its lineage query must list every job once, each with the reference's
metrics, hyper-parameters and status.

Prints one line with counts; exit status 1 with every mismatch listed otherwise.
"""

import sys

FAILURES = []


def fail(message):
    FAILURES.append(message)


def timing(tag):
    return "_seconds" in tag or "examples_per_second" in tag or "system/" in tag


def load(base, jobs):
    from mindinsight.datavisual.data_transform.data_manager import DataManager
    from mindinsight.lineagemgr.cache_item_updater import LineageCacheItemUpdater

    dm = DataManager(base)
    dm.register_brief_cache_item_updater(LineageCacheItemUpdater())
    for thread in dm.start_load_data():
        thread.join()
    for job in jobs:
        dm.cache_train_job(job)
    for thread in dm.start_load_data():
        thread.join()
    return dm


def series(dm, job):
    from mindinsight.datavisual.processors.histogram_processor import HistogramProcessor
    from mindinsight.datavisual.processors.images_processor import ImageProcessor
    from mindinsight.datavisual.processors.scalars_processor import ScalarsProcessor

    def tags(plugin):
        entry = dm.get_train_job_by_plugin(job, plugin)
        return entry["tags"] if entry else []

    out = {}
    for tag in tags("scalar"):
        if not timing(tag):
            points = ScalarsProcessor(dm).get_metadata_list(job, tag)["metadatas"]
            out["scalar " + tag] = [(p["step"], p["value"]) for p in points]
    for tag in tags("histogram"):
        points = HistogramProcessor(dm).get_histograms(job, tag)["histograms"]
        out["histogram " + tag] = [(p["step"], str(p["buckets"])) for p in points]
    for tag in tags("image"):
        points = ImageProcessor(dm).get_metadata_list(job, tag)["metadatas"]
        out["image " + tag] = [p["step"] for p in points]
    return out


def lineage_rows(dm):
    from mindinsight.lineagemgr.model import filter_summary_lineage

    rows = {}
    for row in filter_summary_lineage(data_manager=dm)["object"]:
        rows.setdefault(row["summary_dir"], []).append(row)
    return rows


def comparable(row):
    lineage = dict(row.get("model_lineage", {}))
    for key in ("summary_dir", "train_dataset_path", "test_dataset_path", "model_size"):
        lineage.pop(key, None)
    return lineage


def main():
    base, reference, jobs = sys.argv[1], sys.argv[2], sys.argv[3:]
    names = ["./" + j for j in [reference] + jobs]
    dm = load(base, names)
    want = series(dm, names[0])
    steps = [s for s, _ in want.get("scalar train/loss/scalar", [])]
    if not steps or steps != list(range(1, len(steps) + 1)):
        fail(f"the reference's train/loss steps: {steps[:10]}..., series {sorted(want)[:8]}")
    for job in names[1:]:
        got = series(dm, job)
        for key in sorted(set(got) | set(want)):
            if got.get(key) != want.get(key):
                fail(f"{job}: {key}: got {str(got.get(key))[:300]}, expected {str(want.get(key))[:300]}")

    rows = lineage_rows(dm)
    if len(rows.get(names[0], [])) != 1:
        fail(f"the reference has {len(rows.get(names[0], []))} lineage rows")
    reference_row = comparable(rows.get(names[0], [{}])[0])
    if reference_row.get("user_defined", {}).get("session_status") != "success":
        fail(f"the reference's lineage: {reference_row}")
    for job in names[1:]:
        got = rows.get(job, [])
        if len(got) != 1:
            fail(f"{job}: {len(got)} lineage rows, expected 1")
        elif comparable(got[0]) != reference_row:
            fail(f"{job}: lineage {comparable(got[0])}, expected {reference_row}")

    if FAILURES:
        for message in FAILURES[:60]:
            print("MISMATCH", message)
        print(f"{len(FAILURES)} mismatches")
        sys.exit(1)
    points = sum(len(v) for k, v in want.items() if k.startswith("scalar "))
    print(f"mindinsight: {len(jobs)} resumed jobs show every step once, as the reference does: "
          f"{len(want)} series, {points} scalar points each, one lineage row each")


if __name__ == "__main__":
    main()
