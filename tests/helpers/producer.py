"""The asyncio Producer against the in-memory Kinesis (tests/fakes/kinesis.py): how its unit
tests make one, feed it and check where every record landed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.shards.hashing import hash_key
from tests.fakes.kinesis import FakeKinesis

T = TypeVar("T")
FAST = {"record_max_buffered_time": 0.01, "rate_limit": 100_000}


def run(main: Callable[[], Awaitable[T]], limit: float = 20.0) -> T:
    async def guarded() -> T:
        return await asyncio.wait_for(main(), limit)

    return asyncio.run(guarded())


def producer(fake: FakeKinesis, **config: Any) -> Producer:
    return Producer("stream", client=fake, producer_config=ProducerConfig(**{**FAST, **config}))


def records(n: int, size: int = 50, prefix: str = "k") -> list[tuple[bytes, str]]:
    return [(f"{i:08d}".encode() + b"x" * size, f"{prefix}{i}") for i in range(n)]


def check_landed(fake: FakeKinesis, results: list[Any], sent: list[tuple[bytes, str]]) -> None:
    """Each record is read back by a KCL-style reader exactly where its result says."""
    by_position = {(r.shard_id, *r.position): r for r in fake.read_all()}
    for result, (data, pk) in zip(results, sent, strict=True):
        assert result.success, result
        read = by_position[(result.shard_id, *result.position)]
        assert (read.data, read.partition_key) == (data, pk)
        assert fake.shards[result.shard_id].contains(hash_key(pk))
