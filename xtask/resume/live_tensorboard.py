"""A TensorBoard left running while `ember train` is killed and resumed (`cargo xtask live`).

Usage: live_tensorboard.py <ember> <base dir> <seed> <rounds> <train argument>...

Trains a reference run without a break into <base dir>/reference, then starts two TensorBoards
on <base dir>, reloading every second: the Python loader (`--load_fast=false`, which forgets
what a restarted session writes again by its SessionLog START) and rustboard
(`--load_fast=true`). Then, <rounds> times, starts the run <base dir>/live (fresh, then
`--resume`), kills it with SIGKILL at a moment drawn from <seed> (5 to 12 % of the reference's
duration after its start: 1 to 2.4 s where the reference takes 20 s, and as far into the run
on a faster or slower machine), and waits until both have loaded what it wrote, so that each holds the
records the next resume rolls back. Resumed once more, the run finishes; every scalar series each TensorBoard serves of
it must then be the reference's: each step once, the same values (wall-time-derived series
aside).

Prints one line per round and a summary; exit status 1 with every mismatch listed otherwise.
"""

import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

FAILURES = []


def timing(tag):
    return (
        tag.endswith("_seconds")
        or tag.endswith("examples_per_second")
        or tag.startswith("system/")
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One TensorBoard on the base directory, asked over HTTP as its dashboard asks."""

    def __init__(self, name, base, load_fast):
        self.name = name
        # rustboard reads no SessionLog and keeps what it read of a file cut back: a tag the
        # resumed run has not yet written again holds the killed run's values past the files'.
        self.keeps_past_the_files = load_fast
        self.port = free_port()
        tensorboard = os.path.join(os.path.dirname(sys.executable), "tensorboard")
        self.process = subprocess.Popen(
            [tensorboard, "--logdir", base, "--load_fast=" + ("true" if load_fast else "false"),
             "--host", "127.0.0.1", "--port", str(self.port), "--reload_interval", "1",
             "--samples_per_plugin", "scalars=1000000"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def get(self, route, **args):
        url = f"http://127.0.0.1:{self.port}{route}?" + urllib.parse.urlencode(args)
        with urllib.request.urlopen(url, timeout=20) as response:
            return json.loads(response.read())

    def series(self, run):
        """Every scalar series of `run` but the wall-time-derived ones: tag -> [(step, value)]."""
        tags = self.get("/data/plugin/scalars/tags").get(run, {})
        return {
            tag: [(step, value) for _, step, value in self.get("/data/plugin/scalars/scalars", run=run, tag=tag)]
            for tag in sorted(tags)
            if not timing(tag)
        }

    def settled(self, run, last_steps, timeout=60):
        """`run`'s series once each reaches its step in `last_steps`: what the files hold."""
        deadline = time.time() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: " + self.process.stderr.read().decode()[-2000:])
            try:
                now = self.series(run)
                served = {tag: points[-1][0] for tag, points in now.items() if points}
                if served == last_steps or self.keeps_past_the_files and all(
                    served.get(tag, -1) >= step for tag, step in last_steps.items()
                ):
                    return now
            except (OSError, ValueError):
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{self.name} did not load {run} up to {last_steps} in {timeout} s")
            time.sleep(0.5)

    def stop(self):
        self.process.terminate()
        self.process.wait()


def last_steps(run_dir):
    """The last step of each scalar series in the whole records of `run_dir`'s event files,
    wall-time-derived ones aside."""
    from tensorboard.compat.proto import event_pb2

    last = {}
    for name in sorted(os.listdir(run_dir)):
        if "tfevents" not in name:
            continue
        with open(os.path.join(run_dir, name), "rb") as f:
            data = f.read()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            end = at + 12 + length + 4
            if end > len(data):
                break
            event = event_pb2.Event.FromString(data[at + 12:end - 4])
            for value in event.summary.value:
                if value.HasField("simple_value") and not timing(value.tag):
                    last[value.tag] = max(last.get(value.tag, event.step), event.step)
            at = end
    return last


def twice(series):
    """The tags whose series hold a step more than once, with the first such step."""
    out = {}
    for tag, points in series.items():
        seen = set()
        for step, _ in points:
            if step in seen:
                out[tag] = step
                break
            seen.add(step)
    return out


def compare(server, got, want):
    for tag, step in twice(got).items():
        FAILURES.append(f"{server}: {tag} shows step {step} twice")
    for tag in sorted(set(got) | set(want)):
        g, w = got.get(tag), want.get(tag)
        if g != w:
            FAILURES.append(f"{server}: {tag}: got {str(g)[:300]}, expected {str(w)[:300]}")


def train(ember, argv):
    """Runs `ember train argv` to its end; returns how long it took."""
    began = time.time()
    done = subprocess.run([ember, "train", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise RuntimeError(f"ember train {' '.join(argv)}: {done.stderr.decode()[-2000:]}")
    return time.time() - began


def killed(ember, argv, at):
    """Starts `ember train argv`, SIGKILLs it `at` seconds later; False when it ended first."""
    process = subprocess.Popen([ember, "train", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        process.wait(timeout=at)
        return False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        return True


def main():
    ember, base, seed, rounds, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
    rng = random.Random(seed)
    started = time.time()
    duration = train(ember, [*args, "--logdir", os.path.join(base, "reference")])
    moments = [duration * rng.uniform(0.05, 0.12) for _ in range(rounds)]
    print(f"live: seed {seed}: the reference took {duration:.1f} s; kills after "
          + ", ".join(f"{at:.2f}" for at in moments) + " s", flush=True)
    servers = [Server("TensorBoard's Python loader", base, False), Server("rustboard", base, True)]
    pool = ThreadPoolExecutor(len(servers))

    def settled(run):
        last = last_steps(os.path.join(base, run))
        return list(pool.map(lambda server: server.settled(run, last), servers))

    try:
        want = settled("reference")
        live = os.path.join(base, "live")
        for round, at in enumerate(moments):
            argv = [*args, "--logdir", live] if round == 0 else ["--resume", live]
            if not killed(ember, argv, at):
                FAILURES.append(f"round {round + 1}: the run finished before its kill at {at:.2f} s")
                break
            loaded = [len(series.get("train/loss", [])) for series in settled("live")]
            print(f"live: round {round + 1}: killed after {at:.2f} s; train/loss points loaded: "
                  + ", ".join(f"{s.name} {n}" for s, n in zip(servers, loaded)), flush=True)
        train(ember, ["--resume", live])
        for server, got, reference in zip(servers, settled("live"), want):
            compare(server.name, got, reference)
        points = sum(len(p) for p in want[0].values())
    finally:
        for server in servers:
            server.stop()
        pool.shutdown()
    if FAILURES:
        for message in FAILURES[:60]:
            print("MISMATCH", message)
        print(f"{len(FAILURES)} mismatches")
        sys.exit(1)
    print(f"live: {rounds} kills and resumes under a live TensorBoard: its Python loader and rustboard "
          f"each show every step once, as the uninterrupted run ({points} scalar points, "
          f"{len(want[0])} series) in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
