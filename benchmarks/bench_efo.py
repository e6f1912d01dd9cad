"""Enhanced fan-out against polling, side by side on the local emulator (kinesis-mock).

* Latency: both consumers read the same 2-shard stream from LATEST at once, with the defaults a
  user gets (polling: ``idle_interval`` 1 s, as the KCL's ``idleTimeBetweenReadsInMillis``;
  fan-out: HTTP/1.1 on the emulator's plain port). A producer writes one record every 50 ms,
  stamped with the time its PutRecord call returned; each consumer notes when it got it. p50
  and p99 of put-to-delivery, in milliseconds (lower is better).
* Throughput: a stream pre-filled with KPL aggregates, read from TRIM_HORIZON to the last
  record by each consumer in turn: user records per second from ``start()`` to the last one
  (both read each shard's backlog in one response or event on the emulator, so the time
  from the first delivery to the last says nothing; fan-out's first event comes a second
  after the subscription, which this measure includes).

kinesis-mock pushes a fan-out event once a second whatever the traffic (AWS pushes as records
arrive, within tens of milliseconds), so on the emulator fan-out's latency is bounded by that
cadence rather than by this library: read these rows as a measure of both paths' overheads,
and docs/efo.md for what to expect on AWS.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks._table import Row
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import LATEST, TRIM_HORIZON, Consumer, ConsumerConfig, EnhancedFanOut
from kinesis_core.local import KinesisMock, LocalStream, StreamFactory
from kinesis_core.producer import Producer, ProducerConfig

LATENCY = "efo latency (kinesis-mock)"
THROUGHPUT = "efo throughput (kinesis-mock)"
POLLING = "polling"
FAN_OUT = "enhanced fan-out"


def _consumer(stream: LocalStream, efo: bool, position: Any) -> Consumer:
    config = ConsumerConfig(
        application_name=f"bench-{'efo' if efo else 'polling'}-{time.monotonic_ns()}",
        initial_position=position,
        enhanced_fan_out=EnhancedFanOut(consumer_name="bench-efo") if efo else False,
    )
    return Consumer(
        stream.name,
        consumer_config=config,
        client_config=stream.client_config,
        checkpoint_store=MemoryCheckpointStore(),
    )


async def _latencies(stream: LocalStream, count: int) -> dict[str, list[float]]:
    """Milliseconds from put to delivery of ``count`` records, per consumer."""
    sent: dict[bytes, float] = {}
    got: dict[str, dict[bytes, float]] = {POLLING: {}, FAN_OUT: {}}

    async def read(name: str, consumer: Consumer) -> None:
        async for record in consumer:
            got[name].setdefault(record.data, time.perf_counter())
            record.ack()

    async with (
        _consumer(stream, False, LATEST) as polling,
        _consumer(stream, True, LATEST) as fan_out,
        Producer(stream.name, client_config=stream.client_config) as producer,
    ):
        readers = [
            asyncio.create_task(read(POLLING, polling)),
            asyncio.create_task(read(FAN_OUT, fan_out)),
        ]
        # Warm up until both see records: the subscriptions are open, the iterators made.
        n = 0
        while not (got[POLLING] and got[FAN_OUT]):
            await producer.put(f"warm-{n}".encode(), f"k{n}")
            n += 1
            await asyncio.sleep(0.2)
        for i in range(count):
            data = f"r-{i}".encode()
            await producer.put(data, f"k{i}")
            sent[data] = time.perf_counter()
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(set(sent) <= set(g) for g in got.values()):  # noqa: ASYNC110 (polls two readers' results)
            await asyncio.sleep(0.1)
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    return {
        name: [(at[data] - sent[data]) * 1000 for data in sent if data in at]
        for name, at in got.items()
    }


async def _fill(stream: LocalStream, count: int) -> None:
    config = ProducerConfig(aggregation_max_count=1000, record_max_buffered_time=0.5)
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as p:
        result = await p.put_many([(b"x" * 100, f"user-{i}") for i in range(count)])
        result.raise_for_failures()


async def _drain(stream: LocalStream, efo: bool, count: int) -> float:
    """User records per second from start() to the last of ``count`` records."""
    async with _consumer(stream, efo, TRIM_HORIZON) as consumer:
        started = time.perf_counter()
        seen = 0
        async for batch in consumer.batches():
            seen += len(batch)
            batch.ack()
            if seen >= count:
                break
        return count / (time.perf_counter() - started)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(quick: bool) -> list[Row]:
    count = 40 if quick else 200
    backlog = 20_000 if quick else 200_000
    with KinesisMock() as server:
        make = StreamFactory(server.client_config(), prefix="bench-efo")
        latency = asyncio.run(_latencies(make(shards=2), count))
        filled = make(shards=2)
        asyncio.run(_fill(filled, backlog))
        rates = {
            POLLING: asyncio.run(_drain(filled, False, backlog)),
            FAN_OUT: asyncio.run(_drain(filled, True, backlog)),
        }
    rows = []
    p50: dict[str, float] = {}
    for name, values in latency.items():
        missing = count - len(values)
        note = f"{missing} of {count} not delivered" if missing else ""
        if values:
            p50[name] = _percentile(values, 0.5)
        for label, q in (("p50", 0.5), ("p99", 0.99)):
            value = _percentile(values, q) if values else None
            rows.append(Row(f"{LATENCY} {label} (lower is better)", name, value, "ms", note=note))
    ratio = p50[FAN_OUT] / p50[POLLING] if len(p50) == 2 and p50[POLLING] else None
    rows.append(
        Row(
            f"{LATENCY} p50 (lower is better)",
            "fan-out p50 / polling p50",
            ratio,
            "x",
            maximum=0.5,
            note="the emulator pushes once a second (docs/efo.md)",
        )
    )
    rows.append(Row(THROUGHPUT, POLLING, rates[POLLING], "rec/s"))
    rows.append(Row(THROUGHPUT, FAN_OUT, rates[FAN_OUT], "rec/s", baseline=POLLING, target=1.0))
    return rows
