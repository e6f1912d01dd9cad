"""How the cost grows with the stream: the same work at 4, 64, 256 and 1,024 shards on moto.

moto runs in its own process (``kinesis_core.local.MotoServer``); the figures are this process's
(the client's) CPU time, ``time.process_time``, every thread included, so the server's work is
not in them. ``--quick`` measures 4 and 64 shards with smaller volumes.

* producer: 100-byte records with random 16-hex-digit keys (500,000; 50,000 quick) through
  the core ``Producer`` (``submit_many`` in batches of 5,000, aggregation on, limits far above
  what moto takes, as in bench_producer), into a fresh stream of each size, after a first
  run that is not counted: records per second from the first record handed over until every
  one is confirmed, and CPU seconds per million.
* consumer: 100,000 100-byte records (20,000 quick) in KPL aggregates, each inside one shard's
  range, read from TRIM_HORIZON by the core ``Consumer`` with its defaults (``batches()``, each
  acked, memory checkpoints): records per second from the first delivery to the last, CPU
  seconds per million in that window, and CPU seconds per million of the whole read (from
  making the consumer to its last record: each shard's start, its GetShardIterator and its
  first GetRecords, included). The best of 3 runs of each size (1 quick), the sizes taking
  turns: at 256 shards one run's rate varied by a factor of two between runs of the same code.
  Target: 256 shards at least half the rate of 4 shards. What the ratio
  measures: one GetRecords returns a shard's whole backlog here (up to 10 MiB), so 4 shards are
  4 GetShardIterator and 4 GetRecords calls and then the deaggregation of 100,000 records,
  while 256 shards hold about 390 records each (one aggregate) and are 256 of each call: the
  run is the start of 256 readers, paced by the calls moto serves one at a time, not a steady
  reading rate.
* consumer against a replay server: the same read, with every GetRecords answer that moto gave
  for the stream replayed from memory and GetShardIterator answered at once
  (bench_consumer's replay server, in a process of its own; ListShards still moto's). Calls
  then cost the server next to nothing, as the calls of different shards cost a client on
  AWS, which serves them in parallel: the row is the client's own scaling, with the same
  target (256 shards at least half the rate of 4).
* idle consumer: the same ``Consumer`` on an empty stream (no traffic), after a warm-up of 5 s
  (2 s quick), for 20 s (3 s quick): the client's CPU seconds per second, GetRecords calls per
  second (counted on the client's ``before-call`` event), the time the garbage collector took
  per second (``gc.callbacks``) and the largest lag of the event loop (a task that asks to wake
  every 50 ms: how late it woke). Targets: 256 shards at most 0.1 CPU s per s; 1,024 shards
  polled at the configured idle interval (1 s), at least 0.9 calls per shard per second.
  Each idle consumer runs in a fresh process of its own, as an application reading one stream
  does: in this one it would walk, at each full collection, what the subjects before it left
  (the start-up freeze of ``kinesis_core.runtime.heap`` happens once per process, at the first
  start).

``MotoServer`` keeps connections open, as real Kinesis does, and serves one request at a time:
at 256 and 1,024 shards the calls moto can serve per second (a few hundred on a 2-core machine)
may bound the idle consumer's calls, whatever the client could do. And moto's ListShards wants the
stream's name again next to a NextToken, where AWS and kinesis-mock refuse it: past 1,000 shards
(two pages) the core, which follows AWS, cannot list a moto stream. The producer and the
consumer here get their client from the benchmark (made as they make it: botocore retries
off, 24 connections), with a hook that adds the name back on later pages, for moto.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from benchmarks._table import Row
from benchmarks.bench_consumer import _fill_aggregated, _record_bodies, _replay
from benchmarks.bench_producer import BATCH, _our_config, _records
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.aws.noise import silence_third_party_noise
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import LocalStream, MotoServer, local_client_config
from kinesis_core.producer import Producer

PRODUCER = "scale: producer, 100 B records (moto)"
PRODUCER_CPU = "scale: producer CPU (lower is better)"
CONSUMER = "scale: consumer, 100 B records in KPL aggregates (moto)"
CONSUMER_CPU = "scale: consumer CPU (lower is better)"
CONSUMER_WHOLE_CPU = "scale: consumer CPU, each shard's start included (lower is better)"
CONSUMER_REPLAYED = "scale: consumer, against a server that answers from memory (replay)"
CONSUMER_RUNS = 3
"""Runs of each consumer size in a full run (the best counts)."""
IDLE = "scale: idle consumer, no traffic: client cost (moto; lower is better)"
IDLE_CALLS = "scale: idle consumer, no traffic: GetRecords (moto)"
IDLE_INTERVAL = 1.0
"""The consumer's default ``idle_interval``: a caught-up shard is polled once a second."""


def _shards(n: int) -> str:
    return f"{n:,} shards"


def _stream(server: MotoServer, prefix: str, shards: int) -> LocalStream:
    return server.create_stream(f"scale-{prefix}-{random.getrandbits(32):08x}", shards)


@asynccontextmanager
async def _moto_client(endpoint: str, stream: str) -> AsyncIterator[Any]:
    """A Kinesis client as the producer and the consumer make theirs, that pages ListShards
    the way moto wants: a NextToken with the parameters of the first page."""

    def name_on_every_page(params: dict[str, Any], **_: Any) -> None:
        if "NextToken" in params:
            params.setdefault("StreamName", stream)

    async with create_kinesis_client(local_client_config(endpoint), max_attempts=1) as client:
        client.meta.events.register("before-parameter-build.kinesis.ListShards", name_on_every_page)
        yield client


async def produce(endpoint: str, stream: str, records: list[tuple[bytes, str]]) -> None:
    """bench_producer's subject: ``submit_many`` in batches, every result checked."""
    async with (
        _moto_client(endpoint, stream) as client,
        Producer(stream, client=client, producer_config=_our_config()) as producer,
    ):
        futures = [
            await producer.submit_many(records[i : i + BATCH])
            for i in range(0, len(records), BATCH)
        ]
        for batch in await asyncio.gather(*futures):
            batch.raise_for_failures()


def measure_producer(
    server: MotoServer, shards: int, records: list[tuple[bytes, str]]
) -> tuple[float, float]:
    """(records/s, CPU s per million) of the core producer into a fresh stream."""
    stream = _stream(server, "produce", shards)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        asyncio.run(produce(server.endpoint_url, stream.name, records))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        stream.delete()
        stream.close()
    return len(records) / wall, cpu / len(records) * 1e6


@dataclass(frozen=True)
class Consumed:
    rate: float
    """Records per second from the first delivery to the last."""
    cpu_per_million: float
    """CPU seconds per million records in that window."""
    whole_cpu_per_million: float
    """CPU seconds per million records from making the consumer (its client made before) to
    the last record."""


async def _consume(endpoint: str, stream: str, count: int) -> Consumed:
    seen = counted = 0
    wall = cpu = 0.0
    async with _moto_client(endpoint, stream) as client:
        whole = time.process_time()
        async with Consumer(
            stream,
            client=client,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            close_timeout=0,
        ) as consumer:
            async for batch in consumer.batches():
                batch.ack()
                seen += len(batch)
                if not wall:  # the first batch opens the clock and is not counted
                    wall, cpu = time.perf_counter(), time.process_time()
                else:
                    counted += len(batch)
                if seen >= count:
                    break
            end = time.process_time()
            wall = time.perf_counter() - wall
    return Consumed(counted / wall, (end - cpu) / counted * 1e6, (end - whole) / seen * 1e6)


def measure_consumer(server: MotoServer, shards: int, count: int) -> Consumed:
    """The core consumer reading ``count`` aggregated records from a fresh stream."""
    stream = _stream(server, "consume", shards)
    try:
        _fill_aggregated(stream, count)
        gc.collect()
        return asyncio.run(_consume(server.endpoint_url, stream.name, count))
    finally:
        stream.delete()
        stream.close()


def measure_consumer_replayed(server: MotoServer, shards: int, count: int) -> Consumed:
    """The core consumer reading ``count`` aggregated records that moto wrote and answered,
    each GetRecords answer replayed from memory (bench_consumer's replay server)."""
    stream = _stream(server, "replay", shards)
    try:
        _fill_aggregated(stream, count)
        shard_ids = [shard["ShardId"] for shard in stream.shards()]
        bodies = asyncio.run(_record_bodies(server.endpoint_url, stream.name, shard_ids))
        with _replay(bodies, server.endpoint_url) as url:
            gc.collect()
            return asyncio.run(_consume(url, stream.name, count))
    finally:
        stream.delete()
        stream.close()


def _consumer_rows(
    server: MotoServer, shard_counts: tuple[int, ...], count: int, runs: int
) -> list[Row]:
    """The consumer's rows: each figure the best of ``runs``, the sizes taking turns."""
    runs_of: dict[int, list[Consumed]] = {shards: [] for shards in shard_counts}
    replayed: dict[int, list[Consumed]] = {shards: [] for shards in shard_counts}
    for _ in range(runs):
        for shards in shard_counts:
            runs_of[shards].append(measure_consumer(server, shards, count))
            replayed[shards].append(measure_consumer_replayed(server, shards, count))
    base = _shards(shard_counts[0])
    rows = []
    for shards, measured in runs_of.items():
        baseline = None if shards == shard_counts[0] else base
        target = 0.5 if shards == 256 else None
        note = f"{count:,} records, best of {runs}" if baseline is None else ""
        rate = max(m.rate for m in measured)
        rows += [
            Row(CONSUMER, _shards(shards), rate, "rec/s", baseline, target, note),
            Row(
                CONSUMER_REPLAYED,
                _shards(shards),
                max(m.rate for m in replayed[shards]),
                "rec/s",
                baseline,
                target,
                note="the client's own scaling: the calls answered at memory speed, in turn"
                if baseline is None
                else "",
            ),
            Row(
                CONSUMER_CPU,
                _shards(shards),
                min(m.cpu_per_million for m in measured),
                "CPU s / 1M records",
            ),
            Row(
                CONSUMER_WHOLE_CPU,
                _shards(shards),
                min(m.whole_cpu_per_million for m in measured),
                "CPU s / 1M records",
            ),
        ]
    return rows


@dataclass(frozen=True)
class Idle:
    cpu_per_second: float
    get_records_per_second: float
    gc_ms_per_second: float
    gc_max_ms: float
    max_lag_ms: float


class _GcClock:
    """Time spent in garbage collections, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.total = self.longest = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            took = time.perf_counter() - self._started
            self.total += took
            self.longest = max(self.longest, took)

    @contextmanager
    def installed(self) -> Iterator[_GcClock]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


async def _lag(tick: float, worst: list[float]) -> None:
    """Wake every ``tick`` seconds; keep the largest delay past the wake-up time in worst[0]."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + tick
        await asyncio.sleep(tick)
        worst[0] = max(worst[0], loop.time() - due)


def _count_get_records(client: Any) -> Callable[[], int]:
    """A count of the GetRecords requests ``client`` sends: botocore's (on its ``before-call``
    event) and those of the lean path (kinesis_core.aws.lean_get_records), which skip botocore."""
    calls = [0]

    def count(**_: Any) -> None:
        calls[0] += 1

    client.meta.events.register("before-call.kinesis.GetRecords", count)
    lean = LeanGetRecords.of(client)
    return lambda: calls[0] + (0 if lean is None else lean.sent)


async def _idle(endpoint: str, stream: str, warmup: float, seconds: float, lean: bool) -> Idle:
    async with _moto_client(endpoint, stream) as client:
        calls = _count_get_records(client)
        async with Consumer(
            stream,
            client=client,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            close_timeout=0,
            lean_get_records=lean,
        ) as consumer:

            async def read() -> None:
                async for batch in consumer.batches():
                    batch.ack()

            reader = asyncio.create_task(read())
            await asyncio.sleep(warmup)
            worst = [0.0]
            lag = asyncio.create_task(_lag(0.05, worst))
            with _GcClock().installed() as gc_clock:
                start_calls, wall, cpu = calls(), time.perf_counter(), time.process_time()
                await asyncio.sleep(seconds)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                made = calls() - start_calls
            for task in (lag, reader):
                task.cancel()
            await asyncio.gather(lag, reader, return_exceptions=True)
    return Idle(
        cpu / wall,
        made / wall,
        gc_clock.total * 1000 / wall,
        gc_clock.longest * 1000,
        worst[0] * 1000,
    )


def measure_idle(
    endpoint: str, stream: str, warmup: float, seconds: float, *, lean: bool = True
) -> Idle:
    """What a consumer of an empty stream costs the client, after ``warmup`` seconds
    (``lean``: its ``lean_get_records`` setting), measured in a process of its own."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as process:
        idle = process.submit(measure_idle_here, endpoint, stream, warmup, seconds, lean)
        return idle.result()


def measure_idle_here(
    endpoint: str, stream: str, warmup: float, seconds: float, lean: bool = True
) -> Idle:
    """:func:`measure_idle` in this process (the profiles run py-spy on it)."""
    silence_third_party_noise()
    return asyncio.run(_idle(endpoint, stream, warmup, seconds, lean))


def _producer_rows(server: MotoServer, shard_counts: tuple[int, ...], count: int) -> list[Row]:
    """The producer's rows. Its records are dropped on return: the consumers measured next
    would otherwise pay for collections that scan them."""
    records = _records(count)
    # A first run pays what only the first run pays (imports, caches): not counted.
    measure_producer(server, shard_counts[0], records[:10_000])
    rows = []
    for shards in shard_counts:
        gc.collect()
        rate, cpu = measure_producer(server, shards, records)
        baseline = None if shards == shard_counts[0] else _shards(shard_counts[0])
        note = f"{count:,} records" if baseline is None else ""
        rows.append(Row(PRODUCER, _shards(shards), rate, "rec/s", baseline, note=note))
        rows.append(Row(PRODUCER_CPU, _shards(shards), cpu, "CPU s / 1M records"))
    return rows


BOTOCORE_PATH_AT = 64
"""The shard count at which the idle consumer is measured a second time with every GetRecords
sent through botocore (``lean_get_records=False``), for the ratio of the two paths (not in a
quick run)."""


def _botocore_path_row(
    server: MotoServer, stream: LocalStream, warmup: float, seconds: float, lean: Idle
) -> Row:
    slow = measure_idle(server.endpoint_url, stream.name, warmup, seconds, lean=False)
    return Row(
        IDLE,
        f"{_shards(BOTOCORE_PATH_AT)}: client CPU, every GetRecords through botocore",
        slow.cpu_per_second,
        "CPU s / s",
        note=(
            f"the lean path: {lean.cpu_per_second / slow.cpu_per_second:.2f}x of it "
            f"({lean.get_records_per_second:.0f} vs {slow.get_records_per_second:.0f} calls/s)"
        ),
    )


def run(quick: bool) -> list[Row]:
    shard_counts = (4, 64) if quick else (4, 64, 256, 1024)
    consumer_counts = (4, 64) if quick else (4, 64, 256)
    produced = 50_000 if quick else 500_000
    consumed = 20_000 if quick else 100_000
    warmup, seconds = (2.0, 3.0) if quick else (5.0, 20.0)
    rows: list[Row] = []
    with MotoServer() as server:
        rows += _producer_rows(server, shard_counts, produced)
        rows += _consumer_rows(server, consumer_counts, consumed, 1 if quick else CONSUMER_RUNS)
        for shards in shard_counts:
            stream = _stream(server, "idle", shards)
            gc.collect()
            try:
                idle = measure_idle(server.endpoint_url, stream.name, warmup, seconds)
                if shards == BOTOCORE_PATH_AT and not quick:
                    gc.collect()
                    rows.append(_botocore_path_row(server, stream, warmup, seconds, idle))
            finally:
                stream.delete()
                stream.close()
            name = _shards(shards)
            rows += [
                Row(
                    IDLE,
                    f"{name}: client CPU",
                    idle.cpu_per_second,
                    "CPU s / s",
                    maximum=0.1 if shards == 256 else None,
                ),
                Row(
                    IDLE_CALLS,
                    name,
                    idle.get_records_per_second,
                    "calls/s",
                    note=f"{idle.get_records_per_second / shards:.2f} per shard per s",
                    minimum=0.9 * shards / IDLE_INTERVAL if shards == 1024 else None,
                ),
                Row(
                    IDLE,
                    f"{name}: GC time",
                    idle.gc_ms_per_second,
                    "ms / s",
                    note=f"longest collection {idle.gc_max_ms:.1f} ms",
                ),
                Row(IDLE, f"{name}: max event-loop lag", idle.max_lag_ms, "ms"),
            ]
    return rows


if __name__ == "__main__":
    import sys

    from benchmarks._table import render

    print(render(run(quick="--quick" in sys.argv)))
