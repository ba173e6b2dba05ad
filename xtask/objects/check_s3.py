"""The S3 side of `cargo xtask objects`: a bucket on a loopback S3 server (moto), and what
TensorBoard's own S3 reader makes of what ember shipped there.

Usage:
  check_s3.py bucket <endpoint> <bucket>             create the bucket
  check_s3.py compare <s3 url> <local run>            TensorBoard's loader on the bucket shows
                                                      every scalar of the local run, equal
  check_s3.py killed <s3 url>                         every object holds whole records only, and
                                                      the loader shows train/loss at 1..N
Credentials and the endpoint come from the environment (AWS_ACCESS_KEY_ID, S3_ENDPOINT, ...),
as TensorBoard's S3 file system reads them.
"""

import os
import struct
import sys
import urllib.parse

import boto3

from tensorboard.backend.event_processing import event_accumulator as ea


def timing(tag):
    return tag.endswith("step_seconds") or tag.endswith("examples_per_second")


def scalars(path):
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0}, purge_orphaned_data=False)
    acc.Reload()
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
        if not timing(tag)
    }


def client():
    return boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"])


def objects(url):
    parsed = urllib.parse.urlparse(url)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
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
        boto3.client("s3", endpoint_url=sys.argv[2]).create_bucket(Bucket=sys.argv[3])
        return
    if mode == "compare":
        url, local = sys.argv[2], sys.argv[3]
        got, want = scalars(url), scalars(local)
        failures = [
            f"{tag}: {str(got.get(tag))[:200]} != {str(want.get(tag))[:200]}"
            for tag in sorted(set(got) | set(want))
            if got.get(tag) != want.get(tag)
        ]
        segments = list(objects(url))
        broken = [key for key, data in segments if whole_records(data) is None]
        if failures or broken or not want:
            for failure in failures[:40]:
                print("MISMATCH", failure)
            for key in broken:
                print("TORN", key)
            sys.exit(1)
        points = sum(len(v) for v in want.values())
        print(f"s3: TensorBoard's S3 reader shows every scalar of the run ({len(want)} series, "
              f"{points} points) from {len(segments)} segment objects of whole records")
        return
    if mode == "killed":
        url = sys.argv[2]
        segments = list(objects(url))
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
