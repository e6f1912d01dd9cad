"""Regression tests for bugs the reliability suites found (fixed in 0fef402).

- The producer stalled for good when every request in flight completed in the same loop
  iteration while more requests were ready (always with ``max_connections=1``): a finishing
  send counted itself as busy when it looked for the next request to start.
- Records that waited for a free connection were sent after their TTL ran out.
- moto's server gave two concurrent PutRecords on one shard the same sequence number and kept
  one of the records (its Kinesis backend is not thread-safe, its server is threaded).

The consumer that neither raises nor ends when its stream is deleted is the "stream deleted
while in use" case of test_reliability_bad_input.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

import pytest

from kinesis_core.aws.client import create_botocore_client
from kinesis_core.local import LocalStream, StreamFactory
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig
from kinesis_core.producer import EXPIRED, BatchResult, Producer, ProducerConfig
from reliability._common import via

pytestmark = pytest.mark.integration


async def put_many(
    stream: LocalStream, config: ProducerConfig, endpoint: str
) -> tuple[BatchResult | None, float]:
    """12 records, one request each, and when they were put (after the producer started);
    None if they are not all finished after 20 s (the producer is then closed with a timeout:
    a plain close would wait for them forever)."""
    producer = Producer(
        stream.name, client_config=via(stream.client_config, endpoint), producer_config=config
    )
    await producer.start()
    put_at = time.monotonic()
    future = await producer.submit_many([(b"r%d" % i, f"k{i}") for i in range(12)])
    try:
        return await asyncio.wait_for(asyncio.shield(future), 20), put_at
    except asyncio.TimeoutError:
        return None, put_at
    finally:
        await producer.close(timeout=1.0)


def test_a_producer_with_one_connection_does_not_hang(moto_stream: StreamFactory) -> None:
    stream = moto_stream(1)
    config = ProducerConfig(
        max_connections=1,
        aggregation_enabled=False,
        collection_max_count=1,
        record_max_buffered_time=0.01,
    )
    batch, _ = asyncio.run(put_many(stream, config, stream.endpoint_url))
    assert batch is not None, "put_many of 12 records never finished: the producer stopped"
    assert batch.ok


def test_records_are_never_sent_after_their_ttl(moto_stream: StreamFactory) -> None:
    stream = moto_stream(1)
    ttl = 1.0
    config = ProducerConfig(
        record_ttl=ttl,
        max_connections=2,
        aggregation_enabled=False,
        collection_max_count=1,
        record_max_buffered_time=0.01,
    )
    slow = FaultConfig.from_rates(latency_ms=500, operations=["PutRecords"])
    with FaultProxy(stream.endpoint_url, slow) as proxy:
        batch, started = asyncio.run(put_many(stream, config, proxy.endpoint_url))
    assert batch is not None, "the producer stopped sending (see the test above)"
    # Two requests at a time, half a second each: most records wait for a connection longer
    # than their TTL. They must fail with Expired, not be written late (counted from their
    # put, not from the producer's start, which a busy machine makes slow).
    sent_late = [
        round(a.started_at - started, 2)
        for r in batch
        for a in r.attempts
        if a.error_code != EXPIRED and a.started_at - started > ttl + 0.25
    ]
    assert sent_late == []
    assert all(r.success or r.error_code == EXPIRED for r in batch)


def test_moto_gives_every_acknowledged_record_its_own_sequence_number(
    moto_stream: StreamFactory,
) -> None:
    stream = moto_stream(1)
    client = stream.boto_client()
    # moto looks up the last sequence number in a list of all of them: the more records the
    # shard holds, the wider the window between reading it and storing the new record.
    for _ in range(40):
        client.put_records(
            StreamName=stream.name, Records=[{"Data": b"old", "PartitionKey": "k"}] * 500
        )

    def writer(t: int) -> list[str]:
        own = create_botocore_client(stream.client_config, "kinesis")
        try:
            sequence_numbers: list[str] = []
            for i in range(20):
                records: list[dict[str, Any]] = [
                    {"Data": b"%d-%d-%d" % (t, i, j), "PartitionKey": "k"} for j in range(10)
                ]
                answer = own.put_records(StreamName=stream.name, Records=records)
                sequence_numbers += [r["SequenceNumber"] for r in answer["Records"]]
            return sequence_numbers
        finally:
            own.close()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        acknowledged = [n for ns in pool.map(writer, range(16)) for n in ns]
    assert len(set(acknowledged)) == len(acknowledged)
