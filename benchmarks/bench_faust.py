"""Faust: events/s through one agent reading a KinesisChannel vs the same agent on app.channel().

Data: a 4-shard moto stream pre-filled through the core producer (KPL aggregates, 100-byte
values). The same values, as ready-made Faust events, are the baseline's input: a feeder task
puts them into a plain in-memory ``app.channel()`` as fast as the agent takes them.

Both apps run in-process without Kafka (``enable_kafka = False``) and with raw values, so the
agent gets the same bytes either way. The channel's pacing to the shard's 2 MiB/s of reads is off
(moto does not limit reads). Measured: events per second from the first event the
agent sees to the last (app and consumer start-up excluded), the channel's acks and
checkpoint bookkeeping included. Target: the Kinesis channel at >= 0.9x the in-memory one
(issue 27).
The same window is also measured in the process's CPU time (events per CPU-second, a group of
its own): on a machine shared with other work the wall-clock ratio moves with the load of the
moment, the CPU-time one much less. The in-memory channel's events are made before its clock
starts (the feeder only puts them); the Kinesis channel makes its events in the window.
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NamedTuple

import faust
from faust.types.tuples import Message

from benchmarks._table import Row
from faust_kinesis import KinesisChannel
from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import ConsumerConfig
from kinesis_core.local import MotoServer
from kinesis_core.producer import Producer

SHARDS = 4
VALUE = b"v" * 100
GROUP = "faust: one agent"


class _Rate(NamedTuple):
    wall: float
    """events/s"""
    cpu: float
    """events per CPU-second of this process"""


def _app(name: str, datadir: Path) -> faust.App:
    app = faust.App(name, web_enabled=False, datadir=str(datadir), value_serializer="raw")
    app.boot_strategy.enable_kafka = False
    return app


async def _fill(stream: str, config: ClientConfig, count: int) -> None:
    async with Producer(stream, client_config=config) as producer:
        result = await producer.put_many([(VALUE, f"key-{i}") for i in range(count)])
        result.raise_for_failures()


async def _through_agent(
    app: faust.App, channel: Any, count: int, feed: Callable[[], Coroutine[Any, Any, None]]
) -> _Rate:
    """Events/s and events per CPU-second of one counting agent over ``channel``, first
    event to last."""
    done = asyncio.Event()
    seen = 0
    first = first_cpu = 0.0

    @app.agent(channel)
    async def count_events(events: Any) -> None:
        nonlocal seen, first, first_cpu
        async for _ in events:
            if not seen:
                first, first_cpu = time.perf_counter(), time.process_time()
            seen += 1
            if seen == count:
                done.set()

    await app.start()
    feeder = asyncio.ensure_future(feed())
    try:
        await asyncio.wait_for(done.wait(), 300)
        elapsed = time.perf_counter() - first
        cpu = time.process_time() - first_cpu
    finally:
        await feeder
        await app.stop()
    return _Rate(count / elapsed, count / cpu)


async def _kinesis(stream: str, config: ClientConfig, count: int, datadir: Path) -> _Rate:
    app = _app("bench-kinesis", datadir)
    channel = KinesisChannel(
        app,
        stream,
        client_config=config,
        checkpoint_store=MemoryCheckpointStore(),
        consumer_config=ConsumerConfig(max_read_bytes_per_second=math.inf),  # moto: no limit
    )

    async def nothing() -> None:
        return None

    return await _through_agent(app, channel, count, nothing)


async def _in_memory(count: int, datadir: Path) -> _Rate:
    app = _app("bench-memory", datadir)
    channel = app.channel()
    events = [
        app.create_event(
            key.encode(),
            VALUE,
            None,
            Message("bench", 0, i, 0.0, 0, None, key.encode(), VALUE, None, generation_id=0),
        )
        for i, key in enumerate(f"key-{i}" for i in range(count))
    ]

    async def feed() -> None:
        app.flow_control.resume()  # no Kafka, so nobody else resumes it
        for event in events:
            await channel.put(event)

    return await _through_agent(app, channel, count, feed)


def run(quick: bool) -> list[Row]:
    count = 20_000 if quick else 60_000
    runs = 1 if quick else 3
    logging.getLogger("faust").setLevel(logging.ERROR)
    ours: list[_Rate] = []
    baseline: list[_Rate] = []
    with MotoServer() as moto, tempfile.TemporaryDirectory() as tmp:
        stream = moto.create_stream("faust", SHARDS)
        config = moto.client_config()
        asyncio.run(_fill(stream.name, config, count))
        for i in range(runs):
            # Alternate, so that load from elsewhere on the machine hits both.
            ours.append(asyncio.run(_kinesis(stream.name, config, count, Path(tmp) / f"k{i}")))
            baseline.append(asyncio.run(_in_memory(count, Path(tmp) / f"m{i}")))
    note = f"{count:,} records, moto, KPL aggregates"
    cpu_group = f"{GROUP}, per CPU-second"
    return [
        Row(GROUP, "app.channel()", max(r.wall for r in baseline), "events/s", note="in-memory"),
        Row(
            GROUP,
            "KinesisChannel",
            max(r.wall for r in ours),
            "events/s",
            "app.channel()",
            0.9,
            note,
            quote_baseline=True,
        ),
        Row(cpu_group, "app.channel()", max(r.cpu for r in baseline), "ev/cpu-s"),
        Row(
            cpu_group,
            "KinesisChannel",
            max(r.cpu for r in ours),
            "ev/cpu-s",
            "app.channel()",
            note="the process's CPU time, same window",
        ),
    ]
