"""The producer's checks against what a real Kinesis API server (kinesis-mock) enforces, and the
records the server refuses although they passed them: partition key lengths counted as the
server counts them, a request-level refusal pinned on one record (the others are written, that
one fails at once with the server's message), and a stream named by its ARN."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws.client import create_botocore_client
from kinesis_core.errors import ValidationError
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import Producer, ProducerConfig, RecordResult
from kinesis_core.shards.hashing import validate_partition_key
from reliability._common import kcl_view, unchecked_key

pytestmark = pytest.mark.integration

KEYS = {
    "128 emoji (256 UTF-16 units)": "😀" * 128,
    "129 emoji (258 UTF-16 units)": "😀" * 129,
    "256 emoji (512 UTF-16 units, 1,024 UTF-8 bytes)": "😀" * 256,
    "256 e-acute (512 UTF-8 bytes)": "é" * 256,
    "257 e-acute": "é" * 257,
    "256 ASCII": "k" * 256,
    "257 ASCII": "k" * 257,
    "256 CJK (768 UTF-8 bytes)": "日" * 256,
}


def _server_answer(stream: LocalStream, key: str) -> str:
    """ "ok", or the error code the server refuses ``key`` with."""
    client = create_botocore_client(stream.client_config, "kinesis", max_attempts=1)
    try:
        client.put_record(StreamName=stream.name, Data=b"x", PartitionKey=key)
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    finally:
        client.close()
    return "ok"


def test_partition_keys_are_checked_exactly_as_the_server_counts_them(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    for label, key in KEYS.items():
        try:
            validate_partition_key(key)
            ours = "ok"
        except ValidationError:
            ours = "InvalidArgumentException"
        assert ours == _server_answer(stream, key), label


def test_fifty_good_records_are_written_and_the_one_the_server_refuses_fails_at_once(
    kinesis_stream: Any,
) -> None:
    """Aggregation off: one PutRecords of 51 records that the server refuses whole
    (InvalidArgumentException) for the one key it finds too long. That record passes our checks
    here only because the test lets it past them: it stands for any limit the service enforces
    and we do not know."""
    stream = kinesis_stream(shards=2)
    config = ProducerConfig(aggregation_enabled=False, record_ttl=30.0)
    good = [(b"good-%d" % i, f"key-{i}") for i in range(50)]

    async def main() -> tuple[list[RecordResult], RecordResult, float]:
        async with Producer(
            stream.name, client_config=stream.client_config, producer_config=config
        ) as p:
            loop = asyncio.get_running_loop()
            started = loop.time()
            futures = [await p.submit(data, key) for data, key in good[:25]]
            too_long = "k" * 300
            with unchecked_key(too_long):
                bad = await p.submit(b"bad", too_long)
            futures += [await p.submit(data, key) for data, key in good[25:]]
            results = list(await asyncio.gather(*futures))
            return results, await bad, loop.time() - started

    results, bad, seconds = asyncio.run(main())
    assert all(r.success for r in results)
    assert not bad.success
    assert bad.error_code == "InvalidArgumentException"
    assert "Partition key must be between 1 and 256 in length" in (bad.error_message or "")
    assert seconds < 10.0  # at once: the TTL is 30 s
    written = {r["Data"] for r in stream.records()}
    assert written == {data for data, _ in good}


def test_a_stream_given_by_its_arn_is_written_by_arn(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=2)
    client = create_botocore_client(stream.client_config, "kinesis")
    try:
        arn = client.describe_stream_summary(StreamName=stream.name)["StreamDescriptionSummary"][
            "StreamARN"
        ]
    finally:
        client.close()

    async def main() -> Any:
        async with Producer(arn, client_config=stream.client_config) as p:
            assert p.stream_name == stream.name
            return await p.put_many([(b"by-arn-%d" % i, f"k{i}") for i in range(20)])

    batch = asyncio.run(main())
    assert batch.ok
    assert {r.data for r in kcl_view(stream)} == {b"by-arn-%d" % i for i in range(20)}
