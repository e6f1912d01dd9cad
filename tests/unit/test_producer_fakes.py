"""The in-memory Kinesis of the unit tests (tests/fakes/kinesis.py) routes like Kinesis."""

from __future__ import annotations

import asyncio

from tests.fakes.kinesis import FakeKinesis


def test_fake_routes_by_hash_key_and_reads_back() -> None:
    fake = FakeKinesis(shards=2)
    low = {"Data": b"a", "PartitionKey": "k", "ExplicitHashKey": "5"}
    high = {"Data": b"b", "PartitionKey": "k", "ExplicitHashKey": str(2**128 - 2)}
    response = asyncio.run(fake.put_records(StreamName="s", Records=[low, high]))
    assert [r["ShardId"] for r in response["Records"]] == [
        "shardId-000000000000",
        "shardId-000000000001",
    ]
    assert sorted(r.data for r in fake.read_all()) == [b"a", b"b"]


def test_fake_split_moves_the_upper_half() -> None:
    fake = FakeKinesis(shards=1)
    left, right = fake.split("shardId-000000000000")
    assert fake.route({"PartitionKey": "k", "ExplicitHashKey": "1"}).shard_id == left
    assert fake.route({"PartitionKey": "k", "ExplicitHashKey": str(2**127 + 1)}).shard_id == right
