"""Helpers for the Faust integration tests: Kafka-less apps, writing records, reading them back.

Importable from the integration tests as ``faust_apps`` (pytest puts tests/integration on the
path); ``crash_worker`` is the app module a ``faust worker`` subprocess runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import faust

from kinesis_core.aggregation import deaggregate
from kinesis_core.consumer import ConsumerConfig
from kinesis_core.local import LocalStream
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.records import Position

# Small aggregates: many Kinesis records per shard, so positions have sequence numbers and
# sub-sequence numbers both moving, and GetRecords pages end inside a stream of aggregates.
SMALL_AGGREGATES = ProducerConfig(aggregation_max_size=512, record_max_buffered_time=0.02)
FAST_CONSUMER = ConsumerConfig(checkpoint_interval=0.05, idle_interval=0.2, max_records_per_call=10)


def kafka_free_app(name: str, datadir: Path, **conf: Any) -> faust.App:
    """A Faust app that runs without Kafka and without its web server."""
    app = faust.App(name, web_enabled=False, datadir=str(datadir), **conf)
    app.boot_strategy.enable_kafka = False
    return app


async def produce(stream: LocalStream, items: Sequence[tuple[bytes, str]]) -> None:
    """Write ``(data, partition_key)`` records through the core producer (KPL aggregates)."""
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=SMALL_AGGREGATES
    ) as producer:
        (await producer.put_many(items)).raise_for_failures()


def numbered(count: int, prefix: str = "") -> list[tuple[bytes, str]]:
    return [(f"{prefix}{i}".encode(), f"key-{i}") for i in range(count)]


def stream_contents(stream: LocalStream) -> dict[str, list[tuple[Position, bytes]]]:
    """Every user record in the stream, per shard, in order, deaggregated."""
    by_shard: dict[str, list[dict[str, Any]]] = {}
    for record in stream.records():
        by_shard.setdefault(record["ShardId"], []).append(record)
    return {
        shard_id: [(r.position, r.data) for r in deaggregate(records, shard_id)]
        for shard_id, records in by_shard.items()
    }


async def wait_until(
    check: Callable[[], bool | Awaitable[bool]], timeout: float, what: str
) -> None:
    """Poll ``check`` (a function or a coroutine function) until it returns True."""
    deadline = time.monotonic() + timeout
    while True:
        done = check()
        if not isinstance(done, bool):
            done = await done
        if done:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)
