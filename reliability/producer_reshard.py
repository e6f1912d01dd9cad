"""Resharding under the producer: duplicates a KCL reader sees after 2 -> 4 -> 2.

Records go through ``Producer.put`` from many coroutines at once while the stream (kinesis-mock,
which reshards like Kinesis) is scaled 2 -> 4 -> 2 with UpdateShardCount; then, on a second
stream, while two shards merge. The stream is read as the KCL reads it (an aggregate with a
sub-record outside its shard's hash range is dropped whole). Every record must be found where
its result says; duplicates are the extra copies the reader sees. The producer puts an aggregate
again only when that reader would drop it: a merge alone must cost no duplicate, and 2 -> 4 -> 2
at most 1% (it cost 999 of 3,000, a third, before).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import WRONG_SHARD, Producer, RecordResult
from reliability._common import MakeStream, kcl_view, payload, record_id, shard_position
from reliability.result import SuiteResult

NAME = "producer reshard 2->4->2"
WORKERS = 60
MAX_DUPLICATES = 0.01


async def _put_concurrently(
    stream: LocalStream, first: int, count: int, change: Callable[[], object]
) -> list[RecordResult]:
    """``count`` records, one ``put`` each, by WORKERS coroutines, while ``change`` runs."""
    results: list[RecordResult | None] = [None] * count
    async with Producer(stream.name, client_config=stream.client_config) as producer:
        todo = iter(range(count))

        async def worker() -> None:
            for i in todo:
                results[i] = await producer.put(payload(first + i, 60), f"key-{first + i}")
                await asyncio.sleep(0.01)

        resharding = asyncio.ensure_future(asyncio.to_thread(change))
        await asyncio.gather(*(worker() for _ in range(WORKERS)))
        await resharding
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _reconcile(
    result: SuiteResult, stream: LocalStream, first: int, results: list[RecordResult]
) -> tuple[int, int]:
    """Count delivered, failed and lost records; return (duplicates, records put again)."""
    read = kcl_view(stream)
    at = {shard_position(r): r.data for r in read}
    copies = Counter(record_id(r.data) for r in read)
    for i, r in enumerate(results, first):
        result.attempted += 1
        where = (r.shard_id, *r.position) if r.shard_id and r.position else None
        if where is not None and at.get(where) == payload(i, 60):
            result.delivered += 1
        elif not r.success and r.error_code:
            result.failed += 1
        else:
            result.lost += 1
            result.problem(f"record {i}: reported {r.shard_id} {r.position}, not found there")
    duplicates = sum(n - 1 for n in copies.values())
    put_again = sum(any(a.error_code == WRONG_SHARD for a in r.attempts) for r in results)
    return duplicates, put_again


def producer_reshard(make_stream: MakeStream, *, records: int = 3_000) -> SuiteResult:
    result = SuiteResult(NAME, faults=3)
    started = time.monotonic()
    scaled = make_stream(2)
    merged = make_stream(2)
    try:

        def scale() -> None:
            scaled.scale(4)
            scaled.scale(2)

        first, second = (s["ShardId"] for s in merged.shards())
        during_scaling = asyncio.run(_put_concurrently(scaled, 0, records, scale))
        half = records // 2
        during_merge = asyncio.run(
            _put_concurrently(merged, records, half, lambda: merged.merge(first, second))
        )
        duplicates, put_again = _reconcile(result, scaled, 0, during_scaling)
        merge_duplicates, merge_put_again = _reconcile(result, merged, records, during_merge)
    finally:
        scaled.close()
        merged.close()
    result.duplicated = duplicates + merge_duplicates
    result.note(
        f"2 -> 4 -> 2 (UpdateShardCount) under {records:,} concurrent puts: {duplicates} "
        f"duplicates ({duplicates / records:.2%}; at most {MAX_DUPLICATES:.0%} allowed), "
        f"{put_again} records put again because a KCL reader would drop their aggregate"
    )
    result.note(
        f"a merge under {half:,} concurrent puts: {merge_duplicates} duplicates, "
        f"{merge_put_again} records put again"
    )
    if duplicates > MAX_DUPLICATES * records:
        result.problem(f"2 -> 4 -> 2 cost {duplicates} duplicates, over {MAX_DUPLICATES:.0%}")
    if merge_duplicates or merge_put_again:
        result.problem("a merge alone cost duplicates: every aggregate was in the child's range")
    result.seconds = time.monotonic() - started
    return result
