"""How much of a stream's write capacity each producer uses, through shard limits as AWS's.

moto and kinesis-mock accept any rate, so records/s on them says nothing of what a producer gets
out of a real stream, where each shard takes 1,000 records and 1 MiB per second and throttles the
rest. Here every producer writes through the fault proxy in its shard-limit mode
(``kinesis_core.local.shard_limits``: per-shard token buckets of 1,000 records/s and 1 MiB/s
holding one second's worth, ProvisionedThroughputExceededException per record over them) in
front of moto. The proxy runs in its own process, as moto does, so neither takes this process's
CPU.

Each producer in turn, with its default settings (the ones meant for AWS), writes 100-byte
records with random partition keys into a fresh 4-shard stream as fast as it can, for a warm-up
of 3 s (1 s quick) and then a measured window of 20 s (3 s quick); the proxy counts what it let
through and what it throttled in the window:

* capacity used: the larger of the two shares of the stream's limits the written Kinesis
  records took, records/s / (1,000 x shards) and bytes/s / (1 MiB x shards) (data plus partition
  key: an aggregating producer fills bytes, a plain one records);
* throttled: the share of the Kinesis records sent in the window that the proxy throttled.

Subjects: the core ``Producer`` (``submit_many`` in batches of 1,000; aggregation, its limiter
at 150 % of the shard limits and adaptive on throttling); async-kinesis 3.0.1 (``put`` per
record, its KPL aggregating processor, its default limits of 1,000 records and 1,024 KB per
second per shard; the writer waits while more than 10 of its 1 MiB aggregates are queued, as
it has no backpressure of its own short of 10,000); aiokpl 0.2.0 (``put_record`` per record,
default limits); a boto3 ``put_records`` loop (500 records per call, the failed ones sent again
at once, no aggregation). Target: the core producer at 90 % or more of the capacity with at
most 1 % of its records throttled.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from benchmarks._table import Row
from benchmarks.peers import why_missing
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.local import LOCAL_REGION, LocalStream, MotoServer, local_client_config
from kinesis_core.local.shard_limits import ShardUse
from kinesis_core.producer import Producer, random_partition_key
from kinesis_core.shards.hashing import SHARD_BYTES_PER_SECOND, SHARD_RECORDS_PER_SECOND

SHARDS = 4
RECORD_BYTES = 100
BATCH = 1_000
ASYNC_KINESIS_QUEUE = 10
"""Aggregates (about 1 MiB each) async-kinesis may hold queued before the writer waits: about
the backlog the core producer allows itself (100,000 records of 100 bytes)."""
OURS = "kinesis_core Producer"
ASYNC_KINESIS = "async-kinesis"
AIOKPL = "aiokpl"
BOTO3 = "boto3 put_records loop"
USED = f"capacity: share of a {SHARDS}-shard stream's write limits used (shard-limit proxy)"
THROTTLED = f"capacity: share of the records throttled ({SHARDS} shards; lower is better)"


# -- the proxy, in a process of its own --------------------------------------------------------


def _proxy_main(upstream: str, conn: Connection) -> None:
    asyncio.run(_proxy_serve(upstream, conn))


async def _proxy_serve(upstream: str, conn: Connection) -> None:
    from kinesis_core.local.fault_proxy import FaultProxy
    from kinesis_core.local.faults import FaultConfig
    from kinesis_core.local.shard_limits import ShardLimits

    loop = asyncio.get_running_loop()
    async with FaultProxy(upstream, FaultConfig(shard_limits=ShardLimits())) as proxy:
        conn.send(proxy.endpoint_url)
        while (command := await loop.run_in_executor(None, conn.recv)) != "stop":
            assert command == "use"
            conn.send(proxy.stats().shard_use)


class _Proxy:
    """The limited proxy's endpoint, and what it let through and throttled so far."""

    def __init__(self, conn: Connection, endpoint_url: str) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.endpoint_url = endpoint_url

    def use(self) -> ShardUse:
        with self._lock:
            self._conn.send("use")
            use: ShardUse = self._conn.recv()
            return use


@contextlib.contextmanager
def _limited_proxy(upstream: str) -> Iterator[_Proxy]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_proxy_main, args=(upstream, child), daemon=True)
    process.start()
    try:
        yield _Proxy(parent, parent.recv())
    finally:
        parent.send("stop")
        process.join(10)
        if process.is_alive():
            process.kill()


# -- the window: the proxy's counters before and after -----------------------------------------


@dataclass(frozen=True)
class Window:
    seconds: float
    start: ShardUse
    end: ShardUse

    @property
    def records_share(self) -> float:
        written = self.end.records - self.start.records
        return written / self.seconds / (SHARD_RECORDS_PER_SECOND * SHARDS)

    @property
    def bytes_share(self) -> float:
        written = self.end.bytes - self.start.bytes
        return written / self.seconds / (SHARD_BYTES_PER_SECOND * SHARDS)

    @property
    def throttled_share(self) -> float:
        written = self.end.records - self.start.records
        throttled = self.end.throttled_records - self.start.throttled_records
        return throttled / (written + throttled) if written + throttled else 0.0


class _Timer:
    """Snapshots of the proxy's counters after the warm-up and after the window, from a thread;
    ``stop`` is set at the end of the window."""

    def __init__(self, proxy: _Proxy, warmup: float, seconds: float) -> None:
        self.stop = threading.Event()
        self.window: Window | None = None
        self._proxy, self._warmup, self._seconds = proxy, warmup, seconds
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Timer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._thread.join()

    def _run(self) -> None:
        time.sleep(self._warmup)
        start, began = self._proxy.use(), time.perf_counter()
        time.sleep(self._seconds)
        end, seconds = self._proxy.use(), time.perf_counter() - began
        self.window = Window(seconds, start, end)
        self.stop.set()


# -- the producers ----------------------------------------------------------------------------


def _batch(rng: random.Random) -> list[tuple[bytes, str]]:
    return [(rng.randbytes(RECORD_BYTES), f"{rng.getrandbits(64):016x}") for _ in range(BATCH)]


async def _ours(stream: str, config: ClientConfig, stop: threading.Event) -> None:
    rng = random.Random(1)
    async with Producer(stream, client_config=config) as producer:
        while not stop.is_set():
            await producer.submit_many(_batch(rng))


async def _async_kinesis(stream: str, config: ClientConfig, stop: threading.Event) -> None:
    from kinesis import Producer as AsyncKinesisProducer
    from kinesis.processors import KPLStringProcessor

    rng = random.Random(2)
    async with AsyncKinesisProducer(
        stream,
        endpoint_url=config.endpoint_url,
        region_name=config.region_name,
        processor=KPLStringProcessor(),
    ) as producer:
        while not stop.is_set():
            for data, _ in _batch(rng):
                await producer.put(data.hex()[:RECORD_BYTES])  # its processor takes text
            # put() waits only once 10,000 aggregates (of 1 MiB) are queued, and sends only
            # when it waits: without this, nothing is sent until then (hundreds of MB later).
            while producer.queue.qsize() > ASYNC_KINESIS_QUEUE:  # noqa: ASYNC110 (its queue)
                await asyncio.sleep(0.01)


async def _aiokpl(stream: str, config: ClientConfig, stop: threading.Event) -> None:
    import aiokpl

    rng = random.Random(3)
    settings = aiokpl.Config(
        region=config.region_name or LOCAL_REGION,
        endpoint_url=config.endpoint_url,
        aws_access_key_id=config.aws_access_key_id,
        aws_secret_access_key=config.aws_secret_access_key,
    )
    async with aiokpl.Producer(settings) as producer:
        while not stop.is_set():
            for data, key in _batch(rng):
                await producer.put_record(stream=stream, partition_key=key, data=data)


async def _boto3(stream: str, config: ClientConfig, stop: threading.Event) -> None:
    def loop() -> None:
        rng = random.Random(4)
        client = create_botocore_client(config, "kinesis")
        try:
            while not stop.is_set():
                entries = [
                    {"Data": rng.randbytes(RECORD_BYTES), "PartitionKey": random_partition_key()}
                    for _ in range(500)
                ]
                while entries and not stop.is_set():
                    answer = client.put_records(StreamName=stream, Records=entries)
                    entries = [
                        entry
                        for entry, result in zip(entries, answer["Records"], strict=True)
                        if "ErrorCode" in result
                    ]
        finally:
            client.close()

    await asyncio.get_running_loop().run_in_executor(None, loop)


Writer = Callable[[str, ClientConfig, threading.Event], Coroutine[Any, Any, None]]


def _measure(
    server: MotoServer, proxy: _Proxy, writer: Writer, warmup: float, seconds: float
) -> tuple[Window | None, str]:
    """The window of one producer, and a note: what it raised, if it raised (while it wrote,
    there is no window; once the window was measured, while it closed, there is one)."""
    stream: LocalStream = server.create_stream(f"capacity-{random.getrandbits(32):08x}", SHARDS)
    config = local_client_config(proxy.endpoint_url)
    note = ""
    try:
        with _Timer(proxy, warmup, seconds) as timer:
            try:
                asyncio.run(writer(stream.name, config, timer.stop))
            except Exception as exc:  # a peer's failure is a finding, not the end of the run
                while len(getattr(exc, "exceptions", ())) == 1:  # a group of one: its error
                    exc = exc.exceptions[0]  # type: ignore[attr-defined]
                when = "closing, after the window" if timer.stop.is_set() else "writing"
                note = f"raised while {when}: {type(exc).__name__}: {exc}"
                timer.stop.set()
    finally:
        stream.delete()
        stream.close()
    return timer.window, note


def run(quick: bool) -> list[Row]:
    warmup, seconds = (1.0, 3.0) if quick else (3.0, 20.0)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # async-kinesis reads them here
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    subjects: dict[str, Writer] = {
        OURS: _ours,
        ASYNC_KINESIS: _async_kinesis,
        AIOKPL: _aiokpl,
        BOTO3: _boto3,
    }
    absent = {name: why for name in (ASYNC_KINESIS, AIOKPL) if (why := why_missing(name))}
    windows: dict[str, Window | None] = {}
    notes = dict(absent)
    with MotoServer() as server, _limited_proxy(server.endpoint_url) as proxy:
        for name, writer in subjects.items():
            if name not in absent:
                windows[name], notes[name] = _measure(server, proxy, writer, warmup, seconds)
    rows: list[Row] = []
    for name in subjects:
        window = windows.get(name)
        used = None if window is None else 100 * max(window.records_share, window.bytes_share)
        shares = (
            f"records {window.records_share:.0%}, bytes {window.bytes_share:.0%}" if window else ""
        )
        note = "; ".join(text for text in (shares, notes.get(name, "")) if text)
        minimum = 90 if name == OURS else None
        rows.append(Row(USED, name, used, "% of capacity", note=note, minimum=minimum))
    for name in subjects:
        window = windows.get(name)
        throttled = None if window is None else 100 * window.throttled_share
        maximum = 1 if name == OURS else None
        rows.append(Row(THROTTLED, name, throttled, "% of records", maximum=maximum))
    return rows


if __name__ == "__main__":
    from benchmarks._table import render

    print(render(run(quick="--quick" in sys.argv)))
