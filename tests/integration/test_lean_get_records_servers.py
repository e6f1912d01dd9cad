"""The lean GetRecords path (kinesis_core/aws/lean_get_records.py) on real servers: the same answers
and the same errors as botocore's, after one call that botocore makes to learn the route; and
a consumer reading on it and without it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.request
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws import fastparse
from kinesis_core.aws.client import create_botocore_client, create_kinesis_client
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import LocalStream, MotoServer
from kinesis_core.records import WireRecord

pytestmark = pytest.mark.integration


@pytest.fixture(params=["kinesis_stream", "moto_stream"])
def make_stream(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


async def _iterator(client: Any, stream: LocalStream, shard_id: str, kind: str) -> str:
    answer = await client.get_shard_iterator(
        StreamName=stream.name, ShardId=shard_id, ShardIteratorType=kind
    )
    iterator: str = answer["ShardIterator"]
    return iterator


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
            iterator = await _iterator(client, stream, shard_id, "TRIM_HORIZON")
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
            iterator = await _iterator(client, stream, shard_id, "LATEST")
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
    """On the lean path the consumer also starts its shards with one GetShardIterator through
    botocore (the others wait until it is sent, then go the lean way); without it, one per
    shard."""
    stream: LocalStream = make_stream(8)
    sent = {f"r{i}".encode() for i in range(40)}
    for data in sent:
        stream.put(data, data.decode())

    async def read(lean: bool) -> tuple[set[bytes], int]:
        seen: set[bytes] = set()
        iterators: list[str] = []
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            client.meta.events.register(
                "provide-client-params.kinesis.GetShardIterator",
                lambda **_: iterators.append("botocore"),
            )
            async with Consumer(
                stream.name,
                client=client,
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
        return seen, len(iterators)

    async def main() -> None:
        assert await asyncio.wait_for(read(True), 30) == (sent, 1)
        assert await asyncio.wait_for(read(False), 30) == (sent, 8)

    asyncio.run(main())


def test_lean_signatures_pass_motos_signature_check() -> None:
    """moto with authentication on checks each request's SigV4 signature as AWS does: the lean
    calls after a route's first (signed here, not by botocore) pass it, and the same calls
    with a wrong secret are refused."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "kinesis:*", "Resource": "*"}],
    }
    with MotoServer() as server:
        stream = server.create_stream("signed", 1)
        stream.put(b"signed-record", "key")
        shard_id = stream.shards()[0]["ShardId"]
        iam = create_botocore_client(server.client_config(), "iam")
        try:
            iam.create_user(UserName="reader")
            iam.put_user_policy(
                UserName="reader", PolicyName="kinesis", PolicyDocument=json.dumps(policy)
            )
            key = iam.create_access_key(UserName="reader")["AccessKey"]
        finally:
            iam.close()
        switch_on = urllib.request.Request(
            f"{server.endpoint_url}/moto-api/reset-auth",
            data=b"0",  # requests allowed before authentication is checked
            headers={"Content-Type": "text/plain"},
            method="POST",
        )
        with urllib.request.urlopen(switch_on, timeout=10) as answer:
            assert answer.status == 200
        config = dataclasses.replace(
            server.client_config(),
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )

        async def read(config: Any) -> list[bytes]:
            async with create_kinesis_client(config, max_attempts=1) as client:
                lean = LeanGetRecords.of(client)
                assert lean is not None
                iterator = await _iterator(client, stream, shard_id, "TRIM_HORIZON")
                data = []
                for _ in range(3):  # the first learns the route, the others are signed here
                    answer = await lean.get_records(iterator, 100, {})
                    data += [record["Data"] for record in answer["Records"]]
                    iterator = answer["NextShardIterator"]
                assert list(lean._own_signature.values()) == [True]
                return data

        assert asyncio.run(read(config)) == [b"signed-record"]
        wrong = dataclasses.replace(config, aws_secret_access_key="not-the-secret")
        with pytest.raises(ClientError, match=r"[Ss]ignature"):
            asyncio.run(read(wrong))
