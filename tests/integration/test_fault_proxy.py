"""The fault proxy in front of moto: what botocore clients see for each fault, and the CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.client import (
    create_botocore_client,
    create_dynamodb_client,
    create_kinesis_client,
)
from kinesis_core.aws.config import ClientConfig
from kinesis_core.local import LocalStream, MotoServer, read_records
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig, FaultKind, FaultRule
from kinesis_core.local.shard_limits import ShardLimits, ShardUse
from kinesis_core.producer import Producer, ProducerConfig

pytestmark = pytest.mark.integration
StreamMaker = Callable[..., LocalStream]


def via(proxy: FaultProxy, config: ClientConfig, **overrides: Any) -> ClientConfig:
    """`config` with both endpoints pointed at the proxy."""
    url = proxy.endpoint_url
    return dataclasses.replace(config, endpoint_url=url, dynamodb_endpoint_url=url, **overrides)


def records(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"Data": f"{prefix}{i}".encode(), "PartitionKey": f"{prefix}{i}"} for i in range(n)]


def written(stream: LocalStream) -> list[bytes]:
    """The data of every record in the stream, read from the emulator directly."""
    return sorted(r["Data"] for r in read_records(stream.boto_client(), stream.name))


def test_passthrough_without_faults(moto_stream: StreamMaker) -> None:
    stream = moto_stream(shards=2)
    with FaultProxy(stream.endpoint_url) as proxy:
        kinesis = create_botocore_client(via(proxy, stream.client_config), "kinesis")
        try:
            put = kinesis.put_records(StreamName=stream.name, Records=records(50))
            assert put["FailedRecordCount"] == 0
            assert len(kinesis.list_shards(StreamName=stream.name)["Shards"]) == 2
            data = sorted(r["Data"] for r in read_records(kinesis, stream.name))
        finally:
            kinesis.close()
        stats = proxy.stats()
    assert data == sorted(r["Data"] for r in records(50))
    assert stats.total() == 0
    assert stats.requests["PutRecords"] == 1
    assert stats.requests["GetRecords"] >= 2


def test_passthrough_and_record_failures_on_kinesis_mock(kinesis_stream: StreamMaker) -> None:
    stream = kinesis_stream(shards=1)
    config = FaultConfig.from_rates(put_record_throttle=0.5)

    async def main() -> list[dict[str, Any]]:
        async with (
            FaultProxy(stream.endpoint_url, config, seed=2) as proxy,
            create_kinesis_client(via(proxy, stream.client_config), max_attempts=1) as kinesis,
        ):
            put = await kinesis.put_records(StreamName=stream.name, Records=records(20))
            assert len((await kinesis.list_shards(StreamName=stream.name))["Shards"]) == 1
            return put["Records"]

    results = asyncio.run(main())
    failed = {i for i, r in enumerate(results) if "ErrorCode" in r}
    assert 0 < len(failed) < 20
    assert written(stream) == sorted(
        r["Data"] for i, r in enumerate(records(20)) if i not in failed
    )


@pytest.mark.parametrize(
    ("kind", "operation", "code"),
    [
        (FaultKind.THROTTLE, "put_record", "ProvisionedThroughputExceededException"),
        (FaultKind.THROTTLE, "get_records", "ProvisionedThroughputExceededException"),
        (FaultKind.LIMIT_EXCEEDED, "list_shards", "LimitExceededException"),
        (FaultKind.INTERNAL_ERROR, "list_shards", "InternalFailure"),
        (FaultKind.SERVICE_UNAVAILABLE, "put_record", "ServiceUnavailable"),
        (FaultKind.EXPIRED_ITERATOR, "get_records", "ExpiredIteratorException"),
    ],
)
def test_kinesis_errors_raise_client_error_with_the_code(
    moto_stream: StreamMaker, kind: FaultKind, operation: str, code: str
) -> None:
    stream = moto_stream(shards=1)

    async def main() -> None:
        async with (
            FaultProxy(stream.endpoint_url) as proxy,
            create_kinesis_client(via(proxy, stream.client_config), max_attempts=1) as kinesis,
        ):
            iterator = (
                await kinesis.get_shard_iterator(
                    StreamName=stream.name,
                    ShardId="shardId-000000000000",
                    ShardIteratorType="TRIM_HORIZON",
                )
            )["ShardIterator"]
            calls = {
                "put_record": lambda: kinesis.put_record(
                    StreamName=stream.name, Data=b"x", PartitionKey="k"
                ),
                "get_records": lambda: kinesis.get_records(ShardIterator=iterator),
                "list_shards": lambda: kinesis.list_shards(StreamName=stream.name),
            }
            proxy.configure(FaultConfig((FaultRule(kind, 1.0),)))
            with pytest.raises(ClientError) as exc:
                await calls[operation]()
            assert exc.value.response["Error"]["Code"] == code
            assert "injected" in exc.value.response["Error"]["Message"]
            with proxy.no_faults():
                await calls[operation]()
            assert proxy.stats().total(kind) == 1

    asyncio.run(main())


def test_dynamodb_errors_raise_client_error_with_the_code(moto_server: MotoServer) -> None:
    table = f"faults-{uuid.uuid4().hex[:8]}"
    key = {"k": {"S": "a"}}

    async def main() -> None:
        async with (
            FaultProxy(moto_server.endpoint_url) as proxy,
            create_dynamodb_client(via(proxy, moto_server.client_config()), max_attempts=1) as ddb,
        ):
            await ddb.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            expected = [
                (FaultKind.THROTTLE, "ProvisionedThroughputExceededException"),
                (FaultKind.INTERNAL_ERROR, "InternalServerError"),
                (FaultKind.SERVICE_UNAVAILABLE, "ServiceUnavailable"),
            ]
            for kind, code in expected:
                proxy.configure(FaultConfig((FaultRule(kind, 1.0),)))
                with pytest.raises(ClientError) as exc:
                    await ddb.put_item(TableName=table, Item={**key, "v": {"N": "1"}})
                assert exc.value.response["Error"]["Code"] == code
            proxy.configure(FaultConfig.from_rates(limit_exceeded=1.0))
            with pytest.raises(ClientError) as exc:
                await ddb.describe_table(TableName=table)
            assert exc.value.response["Error"]["Code"] == "LimitExceededException"
            # Data-plane calls are not hit by limit_exceeded: the item round-trips.
            await ddb.put_item(TableName=table, Item={**key, "v": {"N": "2"}})
            item = await ddb.get_item(TableName=table, Key=key)
            assert item["Item"]["v"] == {"N": "2"}
            with proxy.no_faults():
                await ddb.delete_table(TableName=table)

    asyncio.run(main())


def test_failed_records_are_reported_and_not_written(moto_stream: StreamMaker) -> None:
    stream = moto_stream(shards=2)
    config = FaultConfig.from_rates(put_record_throttle=0.3, put_record_internal_error=0.1)
    sent = records(200)

    async def main() -> tuple[list[dict[str, Any]], int]:
        async with (
            FaultProxy(stream.endpoint_url, config, seed=3) as proxy,
            create_kinesis_client(via(proxy, stream.client_config), max_attempts=1) as kinesis,
        ):
            put = await kinesis.put_records(StreamName=stream.name, Records=sent)
            assert put["FailedRecordCount"] == proxy.stats().total()
            return put["Records"], put["FailedRecordCount"]

    results, failed_count = asyncio.run(main())
    failed = {i for i, r in enumerate(results) if "ErrorCode" in r}
    assert failed_count == len(failed)
    assert 0 < len(failed) < 200
    assert {results[i]["ErrorCode"] for i in failed} == {
        "ProvisionedThroughputExceededException",
        "InternalFailure",
    }
    assert all("SequenceNumber" not in results[i] for i in failed)
    assert all("SequenceNumber" in r for i, r in enumerate(results) if i not in failed)
    assert written(stream) == sorted(r["Data"] for i, r in enumerate(sent) if i not in failed)


@pytest.mark.parametrize(
    ("kind", "errors"),
    [
        (FaultKind.RESET, (ConnectionClosedError, EndpointConnectionError)),
        (FaultKind.STALL, (ReadTimeoutError,)),
        (FaultKind.TRUNCATE, (ConnectionClosedError,)),
    ],
)
def test_connection_faults_raise_connection_errors(
    moto_stream: StreamMaker, kind: FaultKind, errors: tuple[type[Exception], ...]
) -> None:
    stream = moto_stream(shards=1)
    config = FaultConfig((FaultRule(kind, 1.0),), stall_seconds=30)

    async def main() -> None:
        async with FaultProxy(stream.endpoint_url, config, seed=1) as proxy:
            client_config = via(proxy, stream.client_config, read_timeout=0.5)
            async with create_kinesis_client(client_config, max_attempts=1) as kinesis:
                with pytest.raises(errors):
                    await kinesis.put_record(StreamName=stream.name, Data=b"x", PartitionKey="k")
                with proxy.no_faults():
                    await kinesis.list_shards(StreamName=stream.name)
            assert proxy.stats().total(kind) == 1

    asyncio.run(main())
    # reset and stall never reach the emulator; truncate cuts the answer of a write that
    # happened (the ambiguous outcome behind at-least-once duplicates).
    assert written(stream) == ([b"x"] if kind is FaultKind.TRUNCATE else [])


def test_a_lost_answer_writes_the_records_and_fails_the_call(moto_stream: StreamMaker) -> None:
    stream = moto_stream(shards=2)
    sent = records(20)

    async def main() -> None:
        config = FaultConfig.from_rates(lost_answer=1.0)
        async with FaultProxy(stream.endpoint_url, config, seed=1) as proxy:
            async with create_kinesis_client(
                via(proxy, stream.client_config), max_attempts=1
            ) as kinesis:
                with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
                    await kinesis.put_records(StreamName=stream.name, Records=sent)
                # Other calls are answered: lost_answer hits PutRecords alone by default.
                await kinesis.put_record(StreamName=stream.name, Data=b"alone", PartitionKey="k")
            assert proxy.stats().total(FaultKind.LOST_ANSWER) == 1

    asyncio.run(main())
    # The client saw a failure, yet the service wrote every record: a retry writes them twice.
    assert written(stream) == sorted([b"alone", *(r["Data"] for r in sent)])


def test_latency_delays_but_answers(moto_stream: StreamMaker) -> None:
    stream = moto_stream(shards=1)
    config = FaultConfig.from_rates(latency_ms=5, latency_jitter_ms=5)

    async def main() -> None:
        async with (
            FaultProxy(stream.endpoint_url, config) as proxy,
            create_kinesis_client(via(proxy, stream.client_config), max_attempts=1) as kinesis,
        ):
            for _ in range(3):
                await kinesis.list_shards(StreamName=stream.name)
            assert proxy.stats().injected == {(FaultKind.LATENCY, "ListShards"): 3}

    asyncio.run(main())


def test_same_seed_gives_the_same_outcomes(moto_stream: StreamMaker) -> None:
    stream = moto_stream(shards=1)
    config = FaultConfig.from_rates(throttle=0.3, limit_exceeded=0.3, internal_error=0.1)

    async def outcomes(seed: int) -> list[str]:
        seen = []
        async with (
            FaultProxy(stream.endpoint_url, config, seed=seed) as proxy,
            create_kinesis_client(via(proxy, stream.client_config), max_attempts=1) as kinesis,
        ):
            for i in range(30):
                try:
                    if i % 2:
                        await kinesis.list_shards(StreamName=stream.name)
                    else:
                        await kinesis.put_record(
                            StreamName=stream.name, Data=b"x", PartitionKey=str(i)
                        )
                    seen.append("ok")
                except ClientError as exc:
                    seen.append(exc.response["Error"]["Code"])
        return seen

    first = asyncio.run(outcomes(11))
    assert asyncio.run(outcomes(11)) == first
    assert "ok" in first
    assert {"ProvisionedThroughputExceededException", "LimitExceededException"} <= set(first)


def test_sync_context_manager_with_runtime_switches(moto_stream: StreamMaker) -> None:
    stream = moto_stream(shards=1)
    throttle_listing = FaultConfig.from_rates(throttle=1.0, operations=["ListShards"])
    with FaultProxy(stream.endpoint_url, throttle_listing) as proxy:
        kinesis = create_botocore_client(
            via(proxy, stream.client_config), "kinesis", max_attempts=1
        )
        try:
            with pytest.raises(ClientError):
                kinesis.list_shards(StreamName=stream.name)
            proxy.pause()
            assert kinesis.list_shards(StreamName=stream.name)["Shards"]
            proxy.resume()
            with pytest.raises(ClientError):
                kinesis.list_shards(StreamName=stream.name)
            proxy.configure(FaultConfig())
            assert kinesis.list_shards(StreamName=stream.name)["Shards"]
        finally:
            kinesis.close()
        stats = proxy.stats()
    assert stats.injected == {(FaultKind.THROTTLE, "ListShards"): 2}
    assert stats.requests == {"ListShards": 3}
    print(stats.summary())


@pytest.mark.timeout(60)
def test_cli_prints_its_endpoint_and_exits_cleanly_on_sigint(moto_server: MotoServer) -> None:
    command = [
        sys.executable,
        "-m",
        "kinesis_core.local.fault_cli",
        "--upstream",
        moto_server.endpoint_url,
        "--seed",
        "7",
        "--throttle",
        "1.0@ListShards",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            first_line = proc.stdout.readline()
            assert first_line.startswith("endpoint: http://127.0.0.1:")
            endpoint = first_line.split()[1]
            config = dataclasses.replace(moto_server.client_config(), endpoint_url=endpoint)
            kinesis = create_botocore_client(config, "kinesis", max_attempts=1)
            try:
                with pytest.raises(ClientError) as exc:
                    kinesis.list_shards(StreamName="no-such-stream")
            finally:
                kinesis.close()
            assert exc.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0
    assert "faults injected: throttle=1 (ListShards=1); requests seen: 1" in rest


def test_shard_limits_throttle_the_records_over_each_shard(moto_stream: StreamMaker) -> None:
    """Each shard takes its records per second; the others fail one by one in PutRecords, and
    PutRecord fails whole; the proxy learned the shards through the upstream."""
    stream = moto_stream(shards=2)
    limits = ShardLimits(records_per_second=40, shard_map_ttl=600)
    sent = records(300)
    with FaultProxy(stream.endpoint_url, FaultConfig(shard_limits=limits)) as proxy:
        kinesis = create_botocore_client(
            via(proxy, stream.client_config), "kinesis", max_attempts=1
        )
        try:
            results = kinesis.put_records(StreamName=stream.name, Records=sent)["Records"]
            error = None
            for record in sent:  # every shard is empty now: one of these is throttled
                try:
                    kinesis.put_record(StreamName=stream.name, **record)
                except ClientError as exc:
                    error = exc.response["Error"]
                    break
        finally:
            kinesis.close()
        stats = proxy.stats()
    assert error is not None
    assert error["Code"] == "ProvisionedThroughputExceededException"
    assert error["Message"].startswith("Rate exceeded for shard shardId-")
    failed = {i for i, r in enumerate(results) if "ErrorCode" in r}
    # Two shards of 40 records each, plus what a second of refill adds at most.
    assert 80 <= 300 - len(failed) <= 160
    assert {results[i]["ErrorCode"] for i in failed} == {"ProvisionedThroughputExceededException"}
    accepted = {r["ShardId"] for i, r in enumerate(results) if i not in failed}
    assert accepted == {"shardId-000000000000", "shardId-000000000001"}
    assert stats.injected[(FaultKind.SHARD_LIMIT, "PutRecords")] == len(failed)
    assert stats.injected[(FaultKind.SHARD_LIMIT, "PutRecord")] == 1
    assert stats.shard_use.throttled_records == len(failed) + 1
    assert stats.requests.get("ListShards") is None  # the proxy's own listing is not counted
    put_one_by_one = stats.requests["PutRecord"] - 1
    expected = [r["Data"] for i, r in enumerate(sent) if i not in failed]
    assert written(stream) == sorted(expected + [r["Data"] for r in sent[:put_one_by_one]])


def test_the_producer_writes_everything_through_the_shard_limits(moto_stream: StreamMaker) -> None:
    """The core producer against tight limits: throttled records are retried until every one
    is written, exactly once."""
    stream = moto_stream(shards=2)
    limits = ShardLimits(bytes_per_second=20_000)
    sent = [(f"value-{i:05d}".encode() * 20, f"key-{i}") for i in range(400)]  # 220 B each

    async def main() -> ShardUse:
        async with FaultProxy(stream.endpoint_url, FaultConfig(shard_limits=limits)) as proxy:
            config = via(proxy, stream.client_config)
            small_aggregates = ProducerConfig(aggregation_max_size=5_000)
            async with Producer(
                stream.name, client_config=config, producer_config=small_aggregates
            ) as producer:
                (await producer.put_many(sent)).raise_for_failures()
            return proxy.stats().shard_use

    use = asyncio.run(main())
    assert use.records > 0
    assert use.throttled_records > 0  # the producer's limiter allows 150% of the limit
    user_records = sorted(r.data for r in deaggregate(stream.records(), stream.name))
    assert user_records == sorted(data for data, _ in sent)
