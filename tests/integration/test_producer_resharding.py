"""The producer while the stream is resharded under it (kinesis-mock): a split, a merge, and
UpdateShardCount up and down. Every record must land in a shard whose hash range holds its hash
key, its result must name that shard and the record's position there, and a KCL-style reader
(deaggregation with the shard's hash-range filter) must find every record where its result says.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from kinesis_core.aggregation import deaggregate
from kinesis_core.hashing import hash_key
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import BatchResult, Producer, ProducerConfig
from kinesis_core.records import KinesisRecord

pytestmark = pytest.mark.integration

BATCH = 60
# A short buffering time makes many small aggregates, so many are in flight across the change.
CONFIG = ProducerConfig(record_max_buffered_time=0.05)


def _range(shard: dict[str, Any]) -> tuple[int, int]:
    hash_range = shard["HashKeyRange"]
    return int(hash_range["StartingHashKey"]), int(hash_range["EndingHashKey"])


def _read_like_the_kcl(stream: LocalStream) -> dict[tuple[str, int, int], KinesisRecord]:
    ranges = {s["ShardId"]: _range(s) for s in stream.shards()}
    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in stream.records():
        by_shard[record["ShardId"]].append(record)
    read: dict[tuple[str, int, int], KinesisRecord] = {}
    for shard_id, records in by_shard.items():
        for r in deaggregate(records, shard_id, ranges[shard_id]):
            read[(shard_id, *r.position)] = r
    return read


def _produce_during(
    stream: LocalStream, change: Callable[[], object], *, settle_batches: int = 4
) -> tuple[list[tuple[bytes, str]], list[BatchResult]]:
    """Produce batches before, during and after ``change`` (run in a thread)."""
    sent: list[tuple[bytes, str]] = []

    async def main() -> list[BatchResult]:
        async with Producer(stream.name, client_config=stream.client_config, config=CONFIG) as p:
            futures = []

            async def batch() -> None:
                n = len(sent)
                records = [
                    (f"record-{n + i}".encode(), f"key-{(n + i) % 97}") for i in range(BATCH)
                ]
                sent.extend(records)
                futures.append(await p.submit_many(records))
                await asyncio.sleep(0.05)

            for _ in range(3):
                await batch()
            resharding = asyncio.ensure_future(asyncio.to_thread(change))
            while not resharding.done():
                await batch()
            await resharding
            for _ in range(settle_batches):
                await batch()
            return list(await asyncio.gather(*futures))

    return sent, asyncio.run(asyncio.wait_for(main(), 120))


def _check(stream: LocalStream, sent: list[tuple[bytes, str]], batches: list[BatchResult]) -> None:
    ranges = {s["ShardId"]: _range(s) for s in stream.shards()}
    read = _read_like_the_kcl(stream)
    results = [r for batch in batches for r in batch]
    assert len(results) == len(sent)
    for result, (data, pk) in zip(results, sent, strict=True):
        assert result.success, result
        assert result.shard_id is not None
        start, end = ranges[result.shard_id]
        assert start <= hash_key(pk) <= end, (pk, result.shard_id)
        found = read.get((result.shard_id, result.sequence_number, result.sub_sequence_number))
        assert found is not None, f"{pk}: no record at {result.shard_id} {result.position}"
        assert (found.data, found.partition_key) == (data, pk)
    assert {(r.data, r.partition_key) for r in read.values()} >= set(sent)


def test_produce_while_a_shard_is_split(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=2)
    parent = stream.shards()[0]["ShardId"]
    sent, batches = _produce_during(stream, lambda: stream.split(parent))
    _check(stream, sent, batches)
    children = [s for s in stream.shards() if s.get("ParentShardId") == parent]
    assert len(children) == 2
    written_to = {shard for batch in batches for shard in batch.shard_ids}
    assert {c["ShardId"] for c in children} <= written_to


def test_produce_while_two_shards_are_merged(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=3)
    first, second = (s["ShardId"] for s in stream.shards()[:2])
    sent, batches = _produce_during(stream, lambda: stream.merge(first, second))
    _check(stream, sent, batches)
    child = next(s for s in stream.shards() if s.get("AdjacentParentShardId") == second)
    assert child["ShardId"] in {shard for batch in batches for shard in batch.shard_ids}


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2)])
def test_produce_while_update_shard_count_scales(
    kinesis_stream: Any, before: int, after: int
) -> None:
    stream = kinesis_stream(shards=before)
    sent, batches = _produce_during(stream, lambda: stream.scale(after))
    _check(stream, sent, batches)
    open_now = {s["ShardId"] for s in stream.shards(open_only=True)}
    assert len(open_now) == after
    written_to = {shard for batch in batches for shard in batch.shard_ids}
    assert open_now <= written_to
