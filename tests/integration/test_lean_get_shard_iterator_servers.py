"""The lean GetShardIterator path (kinesis_core/aws/lean_get_shard_iterator.py) on kinesis-mock and
moto: iterators that read what botocore's read, and the same errors. (A consumer starting its
shards with one GetShardIterator through botocore: test_lean_get_records_servers.py.)"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.lean_get_shard_iterator import LeanGetShardIterator
from kinesis_core.local import LocalStream

pytestmark = pytest.mark.integration


@pytest.fixture(params=["kinesis_stream", "moto_stream"])
def make_stream(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def _botocore_calls(client: Any, operation: str) -> list[dict[str, Any]]:
    """The parameters of every ``operation`` call botocore makes on ``client`` from now on."""
    calls: list[dict[str, Any]] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        calls.append(params)

    client.meta.events.register(f"provide-client-params.kinesis.{operation}", note)
    return calls


async def _data(client: Any, iterator: str) -> list[bytes]:
    answer = await client.get_records(ShardIterator=iterator, Limit=100)
    return [record["Data"] for record in answer["Records"]]


def test_lean_iterators_read_what_botocores_read(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    sequence = [stream.put(f"r{i}".encode(), "key")["SequenceNumber"] for i in range(4)]
    shard = {"StreamName": stream.name, "ShardId": stream.shards()[0]["ShardId"]}
    positions: list[dict[str, Any]] = [
        {"ShardIteratorType": "TRIM_HORIZON"},
        {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": sequence[1]},
        {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": sequence[1]},
        {"ShardIteratorType": "LATEST"},
    ]

    async def main() -> None:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            through_botocore = _botocore_calls(client, "GetShardIterator")
            lean = LeanGetShardIterator.of(client)
            assert lean is not None
            first = await lean.get_shard_iterator({**shard, **positions[0]})
            assert len(through_botocore) == 1, "a route's first call is botocore's"
            for position in positions:
                theirs = await client.get_shard_iterator(**shard, **position)
                ours = await lean.get_shard_iterator({**shard, **position})
                assert ours["ResponseMetadata"]["HTTPStatusCode"] == 200
                assert await _data(client, ours["ShardIterator"]) == await _data(
                    client, theirs["ShardIterator"]
                ), position
            assert len(through_botocore) == 1 + len(positions), "a lean call went via botocore"
            assert await _data(client, first["ShardIterator"]) == [b"r0", b"r1", b"r2", b"r3"]

    asyncio.run(main())


def test_at_timestamp_goes_through_botocore(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    stream.put(b"old", "key")
    shard = {"StreamName": stream.name, "ShardId": stream.shards()[0]["ShardId"]}

    async def main() -> None:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            through_botocore = _botocore_calls(client, "GetShardIterator")
            lean = LeanGetShardIterator.of(client)
            assert lean is not None
            await lean.get_shard_iterator({**shard, "ShardIteratorType": "TRIM_HORIZON"})
            since = datetime(2020, 1, 1, tzinfo=timezone.utc)
            answer = await lean.get_shard_iterator(
                {**shard, "ShardIteratorType": "AT_TIMESTAMP", "Timestamp": since}
            )
            assert [call["ShardIteratorType"] for call in through_botocore] == [
                "TRIM_HORIZON",
                "AT_TIMESTAMP",
            ]
            assert await _data(client, answer["ShardIterator"]) == [b"old"]

    asyncio.run(main())


def test_lean_errors_are_botocores_exceptions(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    shard_id = stream.shards()[0]["ShardId"]
    wrong_shard = {"StreamName": stream.name, "ShardId": "shardId-000000000042"}
    wrong_number = {
        "StreamName": stream.name,
        "ShardId": shard_id,
        "ShardIteratorType": "AT_SEQUENCE_NUMBER",
        "StartingSequenceNumber": "not-a-number",
    }

    async def main() -> list[tuple[ClientError, ClientError]]:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            lean = LeanGetShardIterator.of(client)
            assert lean is not None
            await lean.get_shard_iterator(
                {"StreamName": stream.name, "ShardId": shard_id, "ShardIteratorType": "LATEST"}
            )
            pairs = []
            for params in ({**wrong_shard, "ShardIteratorType": "LATEST"}, wrong_number):
                with pytest.raises(ClientError) as by_botocore:
                    await client.get_shard_iterator(**params)
                with pytest.raises(ClientError) as by_lean:
                    await lean.get_shard_iterator(params)
                pairs.append((by_botocore.value, by_lean.value))
            return pairs

    for by_botocore, by_lean in asyncio.run(main()):
        assert type(by_lean) is type(by_botocore)
        assert by_lean.response["Error"] == by_botocore.response["Error"]
        status = by_botocore.response["ResponseMetadata"]["HTTPStatusCode"]
        assert by_lean.response["ResponseMetadata"]["HTTPStatusCode"] == status
        assert error_kind(by_lean) is error_kind(by_botocore)
