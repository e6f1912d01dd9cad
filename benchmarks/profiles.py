"""Profiles of the benchmarks' own workloads, and where their time goes, by owner.

    python -m benchmarks.profiles beam-read [--out /tmp/perf-27] [--rate 200]
    python -m benchmarks.profiles --summary /tmp/perf-27/beam-read.txt

The first form sets up one subject of a benchmark (a moto server, a filled stream, the
records), then runs py-spy on this very process (``py-spy record --pid``, raw format, every
thread, full file names) while the subject runs, so that the set-up is not in the profile,
and prints the summary. py-spy must be installed (``pip install py-spy``: a measuring tool, not
a dependency). The servers run in other processes and are not sampled. py-spy samples the
thread that holds the GIL (``--gil``), so the shares are shares of the Python work of this
process (work done with the GIL released, hashing or socket I/O in C, is not in them).

The summary charges each sample to an owner: the innermost frame that belongs to a library or
to this project (a frame of the standard library, ``json`` say, is charged to its caller;
asyncio's frames are the event loop's, threading's and queue's the thread hand-off's). Then
the functions with the most samples of their own (self) and the most samples beneath them
(cumulative).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

THREADS = "threads: hand-off and waits"
OWNERS: tuple[tuple[str, str], ...] = (
    ("/kinesis_core/", "ours: kinesis_core"),
    ("/beam_kinesis/", "ours: beam_kinesis"),
    ("/faust_kinesis/", "ours: faust_kinesis"),
    ("/benchmarks/", "benchmark harness"),
    ("/apache_beam/", "Beam"),
    ("/faust/", "Faust (faust, mode)"),
    ("/mode/", "Faust (faust, mode)"),
    ("/aiobotocore/", "aiobotocore"),
    ("/botocore/", "botocore"),
    ("/boto3/", "boto3"),
    ("/aiohttp/", "aiohttp (yarl, multidict)"),
    ("/yarl/", "aiohttp (yarl, multidict)"),
    ("/multidict/", "aiohttp (yarl, multidict)"),
    ("/urllib3/", "urllib3"),
    ("/google/protobuf/", "protobuf"),
    ("/grpc/", "grpc"),
    ("/moto/", "moto"),
    ("/kinesis/", "async-kinesis"),
    ("/aiokpl/", "aiokpl"),
    ("/aws_kinesis_agg/", "aws-kinesis-agg"),
    ("/asyncio/", "event loop (asyncio)"),
    ("/selectors.py", "event loop (asyncio)"),
    ("/threading.py", THREADS),
    ("/queue.py", THREADS),
    ("/concurrent/futures/", THREADS),
)
"""Path fragment -> owner, first match wins. A frame matching none belongs to the standard
library (its caller is charged) or to another third-party library (named by its package)."""

_STDLIB = sysconfig.get_paths()["stdlib"]


@dataclass(frozen=True)
class Frame:
    function: str
    path: str

    @property
    def short(self) -> str:
        """``function (package/module.py)``: the last two parts of the path."""
        return f"{self.function} ({'/'.join(Path(self.path).parts[-2:])})"


def parse_frame(text: str) -> Frame:
    """``Class.method (/path/to/file.py:123)`` -> Frame (line number dropped)."""
    function, _, rest = text.rpartition(" (")
    if not function:
        return Frame(text, "")
    path = rest.rstrip(")").rpartition(":")[0] or rest.rstrip(")")
    return Frame(function, path)


def owner_of(frame: Frame) -> str | None:
    """The owner of a frame, or None for the standard library (charged to its caller)."""
    for fragment, owner in OWNERS:
        if fragment in frame.path:
            return owner
    if "site-packages" in frame.path:
        return frame.path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if frame.path.startswith(_STDLIB) or not frame.path.startswith("/"):
        return None
    return frame.path


@dataclass
class Summary:
    samples: int
    by_thread: Counter[str]
    by_owner: Counter[str]
    self_time: Counter[Frame]
    cumulative: Counter[Frame]
    owners: dict[Frame, str]

    def render(self, top: int = 15) -> str:
        def pct(n: int) -> str:
            return f"{100 * n / max(self.samples, 1):5.1f}%"

        lines = [f"{self.samples} samples", "", "thread"]
        lines += [f"  {pct(n)}  {name}" for name, n in self.by_thread.most_common()]
        lines += ["", "owner (innermost frame not of the stdlib)"]
        lines += [f"  {pct(n)}  {owner}" for owner, n in self.by_owner.most_common()]
        wrappers = {None, "benchmark harness", "event loop (asyncio)", THREADS}
        cumulative = Counter(
            {f: n for f, n in self.cumulative.items() if self.owners.get(f) not in wrappers}
        )
        for title, counts in (("self", self.self_time), ("cumulative", cumulative)):
            lines += ["", f"top functions by {title} samples"]
            lines += [
                f"  {pct(n)}  {frame.short}  [{self.owners.get(frame) or 'stdlib'}]"
                for frame, n in counts.most_common(top)
            ]
        return "\n".join(lines)


def summarize(lines: Iterator[str], thread: str | None = None) -> Summary:
    """Summary of py-spy's raw output (``--format raw``), optionally of the threads whose
    name contains ``thread``."""
    samples = 0
    by_thread: Counter[str] = Counter()
    by_owner: Counter[str] = Counter()
    self_time: Counter[Frame] = Counter()
    cumulative: Counter[Frame] = Counter()
    owners: dict[Frame, str] = {}
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        parts = stack.split(";")
        name = "(one thread)"
        if parts and parts[0].startswith("thread ("):
            name = parts[0].partition("): ")[2] or parts[0]
            parts = parts[1:]
            if thread is not None and thread not in name:
                continue
        if not parts:
            continue
        count = int(count_text)
        by_thread[_thread_kind(name)] += count
        frames = [parse_frame(part) for part in parts]
        samples += count
        for frame in set(frames):
            cumulative[frame] += count
        self_time[frames[-1]] += count
        charged = "stdlib only (thread start, interpreter)"
        for frame in reversed(frames):
            owner = owner_of(frame)
            if owner is not None:
                owners[frame] = owner
                charged = owner
                break
        by_owner[charged] += count
        for frame in frames:
            owner = owner_of(frame)
            if owner is not None:
                owners[frame] = owner
    return Summary(samples, by_thread, by_owner, self_time, cumulative, owners)


def _thread_kind(name: str) -> str:
    """A thread's name without its number: the workers of one pool count together."""
    return re.sub(r"[-_ ]?\d+", "", name).strip() or name


@contextlib.contextmanager
def py_spy(path: Path, rate: int, wall: bool = False) -> Iterator[None]:
    """py-spy records this process into ``path`` (raw format) inside the block: the thread
    holding the GIL, or with ``wall`` every thread, waiting or not."""
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if exe is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    command = [exe, "record", "--pid", str(os.getpid()), "--rate", str(rate)]
    command += ["--format", "raw", "--threads", "--full-filenames", "--output", str(path)]
    command.append("--idle" if wall else "--gil")
    spy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        out, _ = spy.communicate(timeout=120)
        if spy.returncode not in (0, -signal.SIGINT) or not path.exists():
            raise RuntimeError(f"py-spy failed ({spy.returncode}): {out}")


# -- the subjects: set up, then return one run of the workload to profile ---------------------

Run = Callable[[int], object]
"""One run of a subject's workload (the argument: the run's number, from 0)."""


def _beam_read(ceiling: bool, stack: contextlib.ExitStack) -> Run:
    from benchmarks import bench_beam_read as b
    from kinesis_core.local import MotoServer

    count = 500_000
    read = b.prepare(stack.enter_context(MotoServer()), count)
    build = b.ceiling if ceiling else read
    return lambda _: b._timed(build, count)


def _beam_write(subject: str, stack: contextlib.ExitStack) -> Run:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_kinesis import WriteToKinesis
    from benchmarks import bench_beam_write as b
    from kinesis_core.aws.config import ClientConfig
    from kinesis_core.local import LOCAL_REGION, MotoServer

    count = 200_000
    moto = stack.enter_context(MotoServer())
    options = PipelineOptions(
        [f"--kinesis_endpoint_url={moto.endpoint_url}", f"--kinesis_region_name={LOCAL_REGION}"]
    )
    stream = moto.create_stream("beam-write", b.SHARDS)
    if subject == "core":
        config = ClientConfig(endpoint_url=moto.endpoint_url, region_name=LOCAL_REGION)
        one = b._core_producer(stream.name, config, count)
    elif subject == "boto3":
        sink = partial(b._boto3_sink, stream.name, moto.endpoint_url)
        one = b._pipeline("Create", b.BOTO3_ELEMENTS, sink, options)
    else:
        source = "Impulse" if subject == "impulse" else "Create"
        one = b._pipeline(source, count, partial(WriteToKinesis, stream.name), options)
    return lambda _: one()


def _faust(kinesis: bool, stack: contextlib.ExitStack) -> Run:
    from benchmarks import bench_faust as b
    from kinesis_core.local import MotoServer

    count = 60_000
    moto = stack.enter_context(MotoServer())
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    stream = moto.create_stream("faust", b.SHARDS)
    config = moto.client_config()
    asyncio.run(b._fill(stream.name, config, count))
    if kinesis:
        return lambda i: asyncio.run(b._kinesis(stream.name, config, count, tmp / f"k{i}"))
    return lambda i: asyncio.run(b._in_memory(count, tmp / f"m{i}"))


def _consumer_replay(peer: bool, stack: contextlib.ExitStack) -> Run:
    from benchmarks import bench_consumer as b
    from kinesis_core.local import MotoServer

    count = 120_000
    moto = stack.enter_context(MotoServer())
    raw = moto.create_stream("raw", b.SHARDS)
    b._fill_raw(raw, count)
    shard_ids = [s["ShardId"] for s in raw.shards()]
    bodies = asyncio.run(b._record_bodies(moto.endpoint_url, "raw", shard_ids))
    url = stack.enter_context(b._replay(bodies, moto.endpoint_url))
    if peer:
        return lambda _: asyncio.run(b._peer(url, "raw", count))
    return lambda _: asyncio.run(b._ours(url, "raw", count, batches=True))


def _producer(peer: bool, stack: contextlib.ExitStack) -> Run:
    from benchmarks import bench_producer as b
    from kinesis_core.local import MotoServer

    moto = stack.enter_context(MotoServer())
    data = b._records(200_000 if peer else 1_000_000)
    subject = b._async_kinesis if peer else b._ours
    return lambda _: b._measure(moto, subject, data)


def _idle_consumer(shards: int, stack: contextlib.ExitStack) -> Run:
    from benchmarks import bench_scale as b
    from kinesis_core.local import MotoServer

    moto = stack.enter_context(MotoServer())
    stream = moto.create_stream(f"idle-{shards}", shards)
    return lambda _: print(b.measure_idle_here(moto.endpoint_url, stream.name, 5.0, 30.0))


SUBJECTS: dict[str, tuple[Callable[[contextlib.ExitStack], Run], int]] = {
    "beam-read": (partial(_beam_read, False), 2),
    "beam-read-ceiling": (partial(_beam_read, True), 4),
    "beam-write-impulse": (partial(_beam_write, "impulse"), 4),
    "beam-write-core": (partial(_beam_write, "core"), 5),
    "beam-write-create": (partial(_beam_write, "create"), 1),
    "beam-write-create-boto3": (partial(_beam_write, "boto3"), 3),
    "faust-kinesis": (partial(_faust, True), 5),
    "faust-memory": (partial(_faust, False), 5),
    "consumer-replay": (partial(_consumer_replay, False), 10),
    "consumer-replay-async-kinesis": (partial(_consumer_replay, True), 2),
    "producer": (partial(_producer, False), 2),
    "producer-async-kinesis": (partial(_producer, True), 5),
    "idle-consumer-256": (partial(_idle_consumer, 256), 1),
}
"""Name -> (set-up returning one run of the benchmark's own workload, runs by default: enough
for about 2,000 samples)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiles", description=__doc__)
    parser.add_argument("subject", nargs="?", choices=sorted(SUBJECTS))
    parser.add_argument("--out", default="/tmp/perf-27", help="directory of the raw profiles")
    parser.add_argument("--rate", type=int, default=200, help="samples per second")
    parser.add_argument("--summary", metavar="RAW", help="summarize a raw profile and exit")
    parser.add_argument("--thread", help="only the threads whose name contains this")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--runs", type=int, help="runs of the workload (default: per subject)")
    parser.add_argument(
        "--wall",
        action="store_true",
        help="sample every thread, waiting or not (the file gets a -wall suffix): where each "
        "thread spends its time, rather than who holds the GIL",
    )
    args = parser.parse_args(argv)
    if args.summary:
        with open(args.summary) as f:
            print(summarize(f, args.thread).render(args.top))
        return 0
    if not args.subject:
        parser.error("name a subject or give --summary")
    from kinesis_core.aws.noise import silence_third_party_noise

    silence_third_party_noise()
    # As the benchmarks do: the peers and Beam's workers take credentials from the environment.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    random.seed(7)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.subject}{'-wall' if args.wall else ''}.txt"
    with contextlib.ExitStack() as stack:
        setup, runs = SUBJECTS[args.subject]
        one = setup(stack)
        with py_spy(path, args.rate, args.wall):
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(args.runs or runs):
                one(i)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"{args.subject}: {wall:.1f} s wall, {cpu:.1f} s CPU; raw profile: {path}")
    with open(path) as f:
        print(summarize(f, args.thread).render(args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
