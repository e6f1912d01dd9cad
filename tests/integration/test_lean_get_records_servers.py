"""The lean GetRecords path (kinesis_core/lean_get_records.py) on real servers: the same answers
and the same errors as botocore's, after one call that botocore makes to learn the route."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.client import create_kinesis_client, error_kind
from kinesis_core.consumer import TRIM_HORIZON, Consumer, fastparse
from kinesis_core.lean_get_records import LeanGetRecords
from kinesis_core.local import LocalStream
from kinesis_core.records import WireRecord

pytestmark = pytest.mark.integration


@pytest.fixture(params=["kinesis_stream", "moto_stream"])
def make_stream(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def _comparable(response: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (r["SequenceNumber"], r["PartitionKey"], r["Data"], r["ApproximateArrivalTimestamp"])
        for r in response["Records"]
    ]


def test_lean_answers_equal_botocores_and_skip_its_call_machinery(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    for i in range(5):
        stream.put(f"record-{i}".encode(), f"key-{i}")
    shard_id = stream.shards()[0]["ShardId"]

    async def main() -> None:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            fastparse.install(client)
            botocore_calls: list[str] = []
            client.meta.events.register(
                "before-call.kinesis.GetRecords", lambda **_: botocore_calls.append("call")
            )
            lean = LeanGetRecords.of(client)
            assert lean is not None
            assert LeanGetRecords.of(client) is lean
            iterator = (
                await client.get_shard_iterator(
                    StreamName=stream.name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )
            )["ShardIterator"]
            by_botocore = await client.get_records(ShardIterator=iterator, Limit=100)
            learned = len(botocore_calls)
            by_lean = await lean.get_records(iterator, 100, {})
            again = await lean.get_records(by_lean["NextShardIterator"], 100, {})
            assert len(botocore_calls) == learned, "the lean calls went through botocore"
            assert len(by_lean["Records"]) == 5
            assert all(isinstance(r, WireRecord) for r in by_lean["Records"])
            shaped = {"Records": fastparse.botocore_records(by_lean["Records"])}
            assert _comparable(shaped) == _comparable(by_botocore)
            assert by_lean["MillisBehindLatest"] == by_botocore["MillisBehindLatest"]
            assert by_lean["ResponseMetadata"]["HTTPStatusCode"] == 200
            assert again["Records"] == []

    asyncio.run(main())


def test_lean_errors_are_botocores_exceptions(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    shard_id = stream.shards()[0]["ShardId"]

    async def main() -> tuple[ClientError, ClientError]:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            lean = LeanGetRecords.of(client)
            assert lean is not None
            iterator = (
                await client.get_shard_iterator(
                    StreamName=stream.name, ShardId=shard_id, ShardIteratorType="LATEST"
                )
            )["ShardIterator"]
            await lean.get_records(iterator, 10, {})  # botocore's, which teaches the route
            bad = "AAAAAAAAAAH" + iterator[12:]
            with pytest.raises(ClientError) as by_botocore:
                await client.get_records(ShardIterator=bad, Limit=10)
            with pytest.raises(ClientError) as by_lean:
                await lean.get_records(bad, 10, {})
            return by_botocore.value, by_lean.value

    by_botocore, by_lean = asyncio.run(main())
    assert type(by_lean) is type(by_botocore)
    assert by_lean.response["Error"]["Code"] == by_botocore.response["Error"]["Code"]
    status = by_botocore.response["ResponseMetadata"]["HTTPStatusCode"]
    assert by_lean.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert by_lean.response["Error"]["Message"] == by_botocore.response["Error"]["Message"]
    assert error_kind(by_lean) is error_kind(by_botocore) is not None


def test_a_consumer_reads_everything_on_the_lean_path_and_without_it(make_stream: Any) -> None:
    stream: LocalStream = make_stream(2)
    sent = {f"r{i}".encode() for i in range(40)}
    for data in sent:
        stream.put(data, data.decode())

    async def read(lean: bool) -> set[bytes]:
        seen: set[bytes] = set()
        async with Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
            lean_get_records=lean,
            auto_ack=True,
        ) as consumer:
            async for record in consumer:
                seen.add(record.data)
                if seen >= sent:
                    break
        return seen

    async def main() -> None:
        assert await asyncio.wait_for(read(True), 30) == sent
        assert await asyncio.wait_for(read(False), 30) == sent

    asyncio.run(main())
