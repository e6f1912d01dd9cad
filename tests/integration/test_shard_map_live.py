"""ShardMapDriver against kinesis-mock: predictions match where PutRecords puts records."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.cli import main
from kinesis_core.producer.shard_map_driver import ShardMapDriver
from kinesis_core.shards.hashing import hash_key
from kinesis_core.shards.info import AT_LATEST
from kinesis_core.shards.shard_map import ShardMapState

pytestmark = pytest.mark.integration


async def put_and_check(client: Any, stream: str, driver: ShardMapDriver, keys: list[str]) -> None:
    """PutRecords ``keys`` and assert each record landed on the predicted shard."""
    response = await client.put_records(
        StreamName=stream, Records=[{"Data": b"x", "PartitionKey": k} for k in keys]
    )
    assert response.get("FailedRecordCount", 0) == 0
    predicted = [driver.map.predict(hash_key(k)) for k in keys]
    assert predicted == [r["ShardId"] for r in response["Records"]]


async def put_explicit(client: Any, stream: str, hash_keys: list[int]) -> list[str]:
    response = await client.put_records(
        StreamName=stream,
        Records=[{"Data": b"x", "PartitionKey": "p", "ExplicitHashKey": str(h)} for h in hash_keys],
    )
    assert response.get("FailedRecordCount", 0) == 0
    return [r["ShardId"] for r in response["Records"]]


def test_predictions_match_put_records_and_a_split_is_learned(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=3)

    async def main() -> None:
        async with create_kinesis_client(stream.client_config) as client:
            async with ShardMapDriver(stream.name, client.list_shards) as driver:
                assert driver.map.state is ShardMapState.READY
                assert len(driver.map.open_shards) == 3
                await put_and_check(client, stream.name, driver, [f"user-{i}" for i in range(150)])

                # Every range edge goes where the map says.
                edges = [h for s in driver.map.open_shards for h in s.hash_range]
                landed = await put_explicit(client, stream.name, edges)
                assert landed == [driver.map.predict(h) for h in edges]

                parent = driver.map.open_shards[0]
                start, end = parent.hash_range
                low, high = await asyncio.to_thread(stream.split, parent.shard_id)

                # A record predicted for the parent now lands on a child: invalidate.
                sent_at = driver.clock()
                assert driver.map.predict(start) == parent.shard_id
                assert await put_explicit(client, stream.name, [start]) == [low]
                assert driver.invalidate(sent_at, parent.shard_id)
                await driver.wait_ready(30)

                assert driver.map.predict(start) == low
                assert driver.map.predict(end) == high
                assert len(driver.map.open_shards) == 4
                assert parent.shard_id not in {s.shard_id for s in driver.map.open_shards}
                assert driver.hash_range(parent.shard_id) == (start, end)
                assert driver.hash_range(low)[0] == start
                assert driver.hash_range(high)[1] == end
                # The snapshot is fresh: a late answer for the parent changes nothing.
                assert not driver.invalidate(sent_at, parent.shard_id)
                await put_and_check(client, stream.name, driver, [f"user-{i}" for i in range(150)])

            # Paging for real: kinesis-mock refuses StreamName next to NextToken.
            every = await list_all_shards(client, stream.name, page_size=2)
            assert len(every) == 5
            assert [s.shard_id for s in every if not s.is_open] == [parent.shard_id]
            latest = await list_all_shards(client, stream.name, AT_LATEST, page_size=1)
            assert sorted(s.shard_id for s in latest) == sorted(
                s.shard_id for s in every if s.is_open
            )

    asyncio.run(main())


def test_skew_cli_reads_the_shards_of_a_stream(
    kinesis_stream: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = kinesis_stream(shards=2)
    config = stream.client_config
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", config.aws_access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", config.aws_secret_access_key)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    argv = ["skew", "--stream", stream.name, "--endpoint-url", stream.endpoint_url]
    argv += ["--region", config.region_name, "--keys", *[str(i) for i in range(1, 15)]]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-2] for line in lines[1:3]] == ["3", "11"]
    assert lines[-1].startswith("max/mean: 1.571 (14 records over 2 shards")
