"""What the suites share: the stream as a KCL reader sees it, proxied configs, fault counts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.config import ClientConfig
from kinesis_core.local.faults import FaultKind, FaultStats
from kinesis_core.local.streams import LocalStream
from kinesis_core.records import KinesisRecord, Position
from kinesis_core.shards.hashing import MAX_RECORD_BYTES, hash_key, validate_record

MakeStream = Callable[[int], LocalStream]
"""``make(shards) -> LocalStream``: a fresh stream (the pytest fixtures and the runner's
``StreamFactory`` both fit)."""

ShardPosition = tuple[str, int, int]
"""(shard id, sequence number, sub-sequence number): where a user record sits."""


def kcl_view(stream: LocalStream) -> list[KinesisRecord]:
    """Every user record in the stream as the KCL delivers it: deaggregated, and with every
    aggregate that holds a sub-record outside its shard's hash range dropped whole."""
    ranges = {
        s["ShardId"]: (
            int(s["HashKeyRange"]["StartingHashKey"]),
            int(s["HashKeyRange"]["EndingHashKey"]),
        )
        for s in stream.shards()
    }
    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in stream.records():
        by_shard[record["ShardId"]].append(record)
    return [
        user_record
        for shard_id, records in by_shard.items()
        for user_record in deaggregate(records, shard_id, ranges[shard_id])
    ]


@contextlib.contextmanager
def unchecked_key(key: str) -> Iterator[None]:
    """Let records of partition key ``key`` past the producer's checks: they stand for a limit
    the service enforces that the checks do not know, so the service refuses them instead."""
    from kinesis_core.producer import pipeline

    def lenient(
        data: object,
        partition_key: object,
        explicit_hash_key: str | int | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ) -> int:
        if partition_key == key:
            return hash_key(key)
        return validate_record(data, partition_key, explicit_hash_key, max_record_bytes)

    with mock.patch.object(pipeline, "validate_record", lenient):
        yield


def shard_position(record: KinesisRecord) -> ShardPosition:
    return (record.shard_id, *record.position)


def positions_by_shard(records: list[KinesisRecord]) -> dict[str, list[Position]]:
    """The positions of ``records`` per shard, ascending."""
    out: dict[str, list[Position]] = defaultdict(list)
    for record in records:
        out[record.shard_id].append(record.position)
    for positions in out.values():
        positions.sort()
    return dict(out)


def via(config: ClientConfig, endpoint_url: str, **changes: Any) -> ClientConfig:
    """``config`` pointed at another endpoint (a fault proxy), with other fields changed."""
    return dataclasses.replace(config, endpoint_url=endpoint_url, **changes)


def faults_injected(stats: FaultStats) -> int:
    """Faults a proxy injected, latency not counted (a slow answer is not a failure)."""
    return stats.total() - stats.total(FaultKind.LATENCY)


def record_id(data: bytes) -> int:
    """The id the suites write at the start of every payload (``b"%09d|..."``)."""
    return int(data[:9])


def payload(record: int, size: int) -> bytes:
    """``size`` bytes (at least 10) that start with the record's id."""
    head = b"%09d|" % record
    return head + b"x" * max(size - len(head), 0)


async def log_each_record_until(
    consumer: Any, out: str, entry: Callable[[KinesisRecord], dict[str, Any]], stop: Any
) -> None:
    """Append ``entry(record)`` as a JSON line to ``out`` for every record ``consumer``
    delivers, flushed before the record is acked, until ``stop`` (an asyncio.Event) is set:
    a worker process's log of what it delivered, true up to a SIGKILL."""

    async def pump() -> None:
        # Blocking writes on purpose: a record is logged before it is acked, nothing between.
        with open(out, "a") as log:  # noqa: ASYNC230
            async for record in consumer:
                log.write(json.dumps(entry(record)) + "\n")
                log.flush()
                record.ack()

    task = asyncio.create_task(pump())
    await stop.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
