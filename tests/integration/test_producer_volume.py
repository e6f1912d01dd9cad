"""Volume against moto: 200,000 records through a small memory budget, every one read back
where its result says; the blocking facade; and botocore's own retries off for real."""

from __future__ import annotations

import asyncio
import gc
from collections import defaultdict
from typing import Any

import pytest

from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.botocore_private import http_session
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.direct_http import direct_http
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import BatchResult, BlockingProducer, Producer, ProducerConfig
from kinesis_core.runtime.heap import freeze_start_up_heap

pytestmark = pytest.mark.integration

RECORDS = 200_000
CHUNK = 5_000


def _records(start: int, count: int) -> list[tuple[bytes, str]]:
    return [(b"%09d" % i + b"." * 91, f"key-{i % 5003}") for i in range(start, start + count)]


def _positions(stream: LocalStream) -> dict[tuple[str, int, int], tuple[bytes, str]]:
    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in stream.records():
        by_shard[record["ShardId"]].append(record)
    return {
        (shard_id, *r.position): (r.data, r.partition_key)
        for shard_id, records in by_shard.items()
        for r in deaggregate(records, shard_id)
    }


def test_two_hundred_thousand_records_through_a_small_budget(moto_stream: Any) -> None:
    stream = moto_stream(shards=8)
    config = ProducerConfig(
        rate_limit=10_000,  # moto has no shard limits; the limiter must not be what we measure
        max_outstanding_records=20_000,
        max_outstanding_bytes=8 * 1024 * 1024,
    )
    peak = 0

    async def main() -> tuple[list[BatchResult], Any]:
        nonlocal peak
        async with Producer(
            stream.name, client_config=stream.client_config, producer_config=config
        ) as p:
            futures = []
            for start in range(0, RECORDS, CHUNK):
                futures.append(await p.submit_many(_records(start, CHUNK)))
                peak = max(peak, p.outstanding_records)
            results = list(await asyncio.gather(*futures))
            return results, p.metrics()

    batches, metrics = asyncio.run(asyncio.wait_for(main(), 240))
    assert all(batch.ok for batch in batches)
    assert peak <= config.max_outstanding_records
    assert metrics.user_records_put == RECORDS
    assert metrics.kinesis_records_put < RECORDS / 100  # aggregated
    assert metrics.errors_by_code == {}

    written = _positions(stream)
    assert len(written) == RECORDS
    for start, batch in zip(range(0, RECORDS, CHUNK), batches, strict=True):
        for (data, pk), shard, seq, sub in zip(
            _records(start, CHUNK),
            batch.shard_ids,
            batch.sequence_numbers,
            batch.sub_sequence_numbers,
            strict=True,
        ):
            assert written[(shard, int(seq), sub)] == (data, pk)  # type: ignore[index]


def test_blocking_producer_from_threads(moto_stream: Any) -> None:
    stream = moto_stream(shards=4)
    with BlockingProducer(stream.name, client_config=stream.client_config) as producer:
        futures = [producer.submit_many(_records(i * 2_000, 2_000)) for i in range(5)]
        single = producer.put(b"single", "single")
        batches = [f.result(60) for f in futures]
    assert single.success
    assert all(batch.ok for batch in batches)
    assert len(_positions(stream)) == 10_001


def test_put_records_errors_are_not_retried_by_botocore(moto_stream: Any) -> None:
    """A PutRecords call to a missing stream fails once per producer attempt, not 3-5 times:
    counted where the paths send, the client's HTTP session (botocore sends a stream's first
    request) and the client's direct session (the lean path, the others)."""
    stream = moto_stream(shards=1)
    config = ProducerConfig(record_ttl=0.5, record_max_buffered_time=0.05)

    async def main() -> Any:
        async with (
            create_kinesis_client(stream.client_config, max_attempts=1) as client,
            Producer(stream.name, client=client, producer_config=config) as p,
        ):
            calls = 0
            session = http_session(client)
            original = session.send

            async def counting(request: Any) -> Any:
                nonlocal calls
                target = request.headers.get("X-Amz-Target")
                if target in (b"Kinesis_20131202.PutRecords", "Kinesis_20131202.PutRecords"):
                    calls += 1
                return await original(request)

            session.send = counting
            direct = direct_http(client)
            assert direct is not None
            direct_post = direct.post

            async def counting_direct(url: str, headers: Any, body: bytes) -> Any:
                nonlocal calls
                if headers.get("X-Amz-Target") == "Kinesis_20131202.PutRecords":
                    calls += 1
                return await direct_post(url, headers, body)

            direct.post = counting_direct  # type: ignore[method-assign]
            await asyncio.to_thread(stream.delete)
            result = await p.put(b"x", "k")
            return result, calls

    result, calls = asyncio.run(asyncio.wait_for(main(), 60))
    assert not result.success
    assert result.error_code == "Expired"
    # one attempt per call, plus the Expired one (past six, the middle ones are counted)
    attempts = len(result.attempts) + (result.elided.count if result.elided else 0)
    assert attempts - 1 == calls
    assert result.attempts[0].error_code == "ResourceNotFoundException"
    # botocore sent the first request, the lean path the others: the same error code
    assert {a.error_code for a in result.attempts[:-1]} == {"ResourceNotFoundException"}


def test_a_started_producer_freezes_the_start_up_heap(moto_stream: Any) -> None:
    """What was alive when the first producer started (the SDK's models, the client, the
    application's start-up objects) is out of the collector's reach, as for the consumer."""
    stream = moto_stream(shards=1)
    freeze_start_up_heap.cache_clear()
    gc.unfreeze()

    async def main() -> int:
        async with Producer(stream.name, client_config=stream.client_config) as p:
            assert (await p.put(b"x", "k")).success
            return gc.get_freeze_count()

    assert asyncio.run(main()) > 0


@pytest.mark.parametrize("lean", [True, False])
def test_after_a_streams_first_request_botocore_sends_none(moto_stream: Any, lean: bool) -> None:
    """The lean PutRecords path: botocore sends the stream's first request (learning where and
    how to sign), the producer the others on the client's direct session; every record lands
    where its result says. ``lean_put_records=False`` sends them all through botocore."""
    stream = moto_stream(shards=2)
    config = ProducerConfig(lean_put_records=lean)

    async def main() -> tuple[list[BatchResult], int, int]:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            through_botocore = 0
            sent = 0
            session = http_session(client)
            original = session.send

            def botocore_sends(**_: Any) -> None:
                nonlocal through_botocore
                through_botocore += 1

            async def counting(request: Any) -> Any:
                nonlocal sent
                sent += 1
                return await original(request)

            direct = direct_http(client)
            assert direct is not None
            direct_post = direct.post

            async def counting_direct(url: str, headers: Any, body: bytes) -> Any:
                nonlocal sent
                sent += 1
                return await direct_post(url, headers, body)

            client.meta.events.register("before-send.kinesis.PutRecords", botocore_sends)
            async with Producer(stream.name, client=client, producer_config=config) as p:
                session.send = counting
                direct.post = counting_direct  # type: ignore[method-assign]
                results = []
                for i in range(3):
                    results.append(await p.put_many(_records(i * 100, 100)))
                    await p.flush()
            return results, through_botocore, sent

    results, through_botocore, sent = asyncio.run(main())
    assert all(result.ok for result in results)
    assert sent >= 3
    assert through_botocore == (1 if lean else sent)
    positions = _positions(stream)
    for i, result in enumerate(results):
        for j, record in enumerate(result):
            assert record.position is not None
            assert record.shard_id is not None
            key = (record.shard_id, *record.position)
            assert positions[key] == _records(i * 100, 100)[j]
