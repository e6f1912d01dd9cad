"""The producer while the stream is resharded under it (kinesis-mock): a split, a merge, and
UpdateShardCount up and down. Every record must land in a shard whose hash range holds its hash
key, its result must name that shard and the record's position there, and a KCL-style reader
(deaggregation with the shard's hash-range filter: an aggregate with any sub-record outside the
shard's range is dropped whole, as aws-kinesis-agg and the KCL do) must find every record where
its result says. An aggregate is put again only when that reader would drop it, so resharding
costs few duplicates (it cost a third of the records before).
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from kinesis_core.aggregation import deaggregate
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import WRONG_SHARD, BatchResult, Producer, ProducerConfig
from kinesis_core.records import KinesisRecord
from kinesis_core.shards.hashing import hash_key

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
        async with Producer(
            stream.name, client_config=stream.client_config, producer_config=CONFIG
        ) as p:
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
        found = read.get((result.shard_id, *result.position))
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


def _put_concurrently_during(
    stream: LocalStream, change: Callable[[], object], records: int, workers: int = 60
) -> tuple[list[tuple[bytes, str]], list[Any]]:
    """``records`` records, each through its own ``Producer.put``, by ``workers`` coroutines,
    while ``change`` runs (in a thread) from the first records on."""
    sent = [(b"%06d|payload" % i, f"key-{i}") for i in range(records)]
    results: list[Any] = [None] * records

    async def main() -> None:
        async with Producer(stream.name, client_config=stream.client_config) as p:
            todo = iter(range(records))

            async def worker() -> None:
                for i in todo:
                    results[i] = await p.put(*sent[i])
                    await asyncio.sleep(0.01)

            resharding = asyncio.ensure_future(asyncio.to_thread(change))
            await asyncio.gather(*(worker() for _ in range(workers)))
            await resharding

    asyncio.run(asyncio.wait_for(main(), 300))
    return sent, results


def _duplicates(stream: LocalStream, sent: list[tuple[bytes, str]]) -> int:
    copies = Counter(r.data for r in _read_like_the_kcl(stream).values())
    assert set(copies) >= {data for data, _ in sent}  # the reader finds every record: lost = 0
    return sum(n - 1 for n in copies.values())


def test_concurrent_puts_while_scaling_2_4_2_are_all_found_with_few_duplicates(
    kinesis_stream: Any,
) -> None:
    stream = kinesis_stream(shards=2)

    def scale() -> None:
        stream.scale(4)
        stream.scale(2)

    sent, results = _put_concurrently_during(stream, scale, 3000)
    _check_each(stream, sent, results)
    duplicates = _duplicates(stream, sent)
    assert duplicates <= 0.01 * len(sent), f"{duplicates} duplicates"
    assert len(stream.shards(open_only=True)) == 2


def test_concurrent_puts_while_two_shards_merge_write_no_duplicate(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=2)
    first, second = (s["ShardId"] for s in stream.shards())
    sent, results = _put_concurrently_during(stream, lambda: stream.merge(first, second), 1500)
    _check_each(stream, sent, results)
    assert _duplicates(stream, sent) == 0
    assert not [r for r in results if any(a.error_code == WRONG_SHARD for a in r.attempts)]


def _check_each(stream: LocalStream, sent: list[tuple[bytes, str]], results: list[Any]) -> None:
    ranges = {s["ShardId"]: _range(s) for s in stream.shards()}
    read = _read_like_the_kcl(stream)
    for result, (data, pk) in zip(results, sent, strict=True):
        assert result.success, result
        start, end = ranges[result.shard_id]
        assert start <= hash_key(pk) <= end, (pk, result.shard_id)
        found = read.get((result.shard_id, *result.position))
        assert found is not None, f"{pk}: no record at {result.shard_id} {result.position}"
        assert (found.data, found.partition_key) == (data, pk)
