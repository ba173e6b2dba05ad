"""The S3 side of `cargo xtask objects`: a bucket on a loopback S3 server (moto), and what
TensorBoard's own S3 reader makes of what ember shipped there; `compare` also reads `gs://` and
`az://` runs, through the fsspec readers TensorBoard uses for them (gcsfs, adlfs).

Usage:
  check_s3.py bucket <endpoint> <bucket>             create the bucket
  check_s3.py compare <s3 url> <local run>            TensorBoard's loader on the bucket shows
                                                      every value of every kind of the local
                                                      run, equal, and the bucket holds the
                                                      local run's other files (projector), equal
  check_s3.py replay <endpoint>                       a restarted moto server replays its
                                                      recording (its state before the stop)
  check_s3.py killed <s3 url>                         every object holds whole records only, and
                                                      the loader shows train/loss at 1..N
Credentials and the endpoint come from the environment (AWS_ACCESS_KEY_ID, S3_ENDPOINT, ...),
as TensorBoard's S3 file system reads them; for gs:// and az://, as gcsfs and adlfs read them
(STORAGE_EMULATOR_HOST, AZURE_STORAGE_CONNECTION_STRING, ...).
"""

import os
import struct
import sys
import urllib.parse
import urllib.request

from tensorboard.backend.event_processing import event_accumulator as ea


def timing(tag):
    return (
        tag.endswith("_seconds")
        or tag.endswith("examples_per_second")
        or tag.startswith("system/")
    )


def accumulator(path):
    guidance = {kind: 0 for kind in (ea.SCALARS, ea.HISTOGRAMS, ea.IMAGES, ea.TENSORS, ea.AUDIO)}
    acc = ea.EventAccumulator(path, size_guidance=guidance, purge_orphaned_data=False)
    acc.Reload()
    return acc


def scalars(path):
    acc = accumulator(path)
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
        if not timing(tag)
    }


def everything(path):
    """Every value of every kind TensorBoard's loader gives, by kind and tag, wall times
    aside (and the hparams session's start, which holds one)."""
    acc = accumulator(path)
    tags = acc.Tags()
    kinds = {
        "scalars": {t: [(e.step, e.value) for e in acc.Scalars(t)]
                    for t in tags["scalars"] if not timing(t)},
        "histograms": {t: [(e.step, str(e.histogram_value)) for e in acc.Histograms(t)]
                       for t in tags["histograms"]},
        "images": {t: [(e.step, e.width, e.height, e.encoded_image_string) for e in acc.Images(t)]
                   for t in tags["images"]},
        "audio": {t: [(e.step, e.encoded_audio_string) for e in acc.Audio(t)]
                  for t in tags["audio"]},
        "tensors": {t: [(e.step, e.tensor_proto.SerializeToString()) for e in acc.Tensors(t)]
                    for t in tags["tensors"] if t != "_hparams_/session_start_info"},
        "hparams session": {t: len(acc.Tensors(t)) for t in tags["tensors"]
                            if t == "_hparams_/session_start_info"},
        "graph": {"graph": acc.Graph().SerializeToString() if tags["graph"] else None},
    }
    return kinds


# The run's model files: the model and its record, which names the run it is of (a bucket run
# and the local one are two runs), are not logs.
MODEL_FILES = ("model.bpk", "model.json", "model.interrupted.bpk")


def other_files(local):
    """The files of a local run that ember's writers made besides event files: the projector's
    config and tensors, exported tensors (checkpoints, the saved model, the writers' locks
    under .ember-locks/ and their journal under .ember-run/ are not logs)."""
    found = {}
    for dirpath, _, names in os.walk(local):
        for name in names:
            path = os.path.join(dirpath, name)
            relative = os.path.relpath(path, local)
            if ("tfevents" in name or ".summary." in name or relative.startswith("checkpoints")
                    or relative.startswith(".ember-locks" + os.sep)
                    or relative.startswith(".ember-run" + os.sep) or relative in MODEL_FILES):
                continue
            with open(path, "rb") as f:
                found[relative] = f.read()
    return found


def segment(key):
    stem, _, number = key.rpartition(".")
    return len(number) == 8 and number.isdigit() and ("tfevents" in stem or ".summary." in stem)


def client(endpoint=None):
    # Imported here: the venv that reads gs:// and az:// has no boto3.
    import boto3

    return boto3.client("s3", endpoint_url=endpoint or os.environ["S3_ENDPOINT"])


def objects(url):
    parsed = urllib.parse.urlparse(url)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    if parsed.scheme != "s3":
        import fsspec

        store = fsspec.filesystem(parsed.scheme)
        for path in store.find(f"{bucket}/{prefix}"):
            yield path[len(bucket) + 1:], store.cat_file(path)
        return
    s3 = client()
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
    for item in listed.get("Contents", []):
        yield item["Key"], s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()


def whole_records(data):
    """The number of records, if `data` is whole records and nothing else; else None."""
    at, count = 0, 0
    while at < len(data):
        if len(data) - at < 12:
            return None
        (length,) = struct.unpack("<Q", data[at:at + 8])
        end = at + 16 + length
        if end > len(data):
            return None
        at, count = end, count + 1
    return count


def main():
    mode = sys.argv[1]
    if mode == "bucket":
        client(sys.argv[2]).create_bucket(Bucket=sys.argv[3])
        return
    if mode == "compare":
        url, local = sys.argv[2], sys.argv[3]
        got, want = everything(url), everything(local)
        failures = [
            f"{kind} {tag}: {str(got[kind].get(tag))[:200]} != {str(want[kind].get(tag))[:200]}"
            for kind in want
            for tag in sorted(set(got[kind]) | set(want[kind]))
            if got[kind].get(tag) != want[kind].get(tag)
        ]
        stored = dict(objects(url))
        segments = {key: data for key, data in stored.items() if segment(key)}
        broken = [key for key, data in segments.items() if whole_records(data) is None]
        prefix = urllib.parse.urlparse(url).path.strip("/") + "/"
        # The run's checkpoints and model are beside its log in the bucket, as on a local disk,
        # and the markers of its files (`.ember-run/`), as its journal is: not logs.
        whole = {key[len(prefix):]: data for key, data in stored.items() if not segment(key)
                 and not key[len(prefix):].startswith("checkpoints/")
                 and not key[len(prefix):].startswith(".ember-run/")
                 and key[len(prefix):] not in MODEL_FILES}
        files = other_files(local)
        failures += [f"file {name}: not in the bucket as written"
                     for name, data in files.items() if whole.get(name) != data]
        failures += [f"object {name}: no such file in the local run"
                     for name in whole if name not in files]
        if failures or broken or not want["scalars"]:
            for failure in failures[:40]:
                print("MISMATCH", failure)
            for key in broken:
                print("TORN", key)
            sys.exit(1)
        counts = ", ".join(f"{sum(len(v) if isinstance(v, list) else 1 for v in want[k].values())}"
                           f" {k}" for k in ("scalars", "histograms", "images", "tensors"))
        reader = "S3 reader" if url.startswith("s3://") else "fsspec reader"
        print(f"{url}: TensorBoard's {reader} shows every value of the run ({counts}, the graph) "
              f"from {len(segments)} segment objects of whole records; its {len(files)} other "
              f"files are in the bucket as written")
        return
    if mode == "replay":
        request = urllib.request.Request(sys.argv[2] + "/moto-api/recorder/replay-recording",
                                         method="POST")
        urllib.request.urlopen(request, timeout=120).read()
        return
    if mode == "killed":
        url = sys.argv[2]
        segments = [(key, data) for key, data in objects(url) if segment(key)]
        broken = [key for key, data in segments if whole_records(data) is None]
        steps = [s for s, _ in scalars(url).get("train/loss", [])]
        if broken or not steps or steps != list(range(1, len(steps) + 1)):
            print("TORN", broken, "steps", steps[:20])
            sys.exit(1)
        print(f"s3: after SIGKILL, {len(segments)} segment objects, each whole records; "
              f"train/loss at steps 1..{len(steps)}, none missing")
        return
    sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
