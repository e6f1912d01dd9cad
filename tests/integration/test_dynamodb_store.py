"""The DynamoDB checkpoint store against moto's DynamoDB server: the KCL's table format both
ways, conditional writes, table creation; and a KCL-written table handed over to a Consumer
reading kinesis-mock (and back: what a KCL would resume from after us)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aggregation import AggregateBuilder, deaggregate
from kinesis_core.aws.client import create_botocore_client, create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.checkpoint import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    DynamoDBCheckpointStore,
    LeaseStore,
    Sentinel,
)
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.consumer.dedup import MAX_WINDOW_BYTES
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseConfig

pytestmark = pytest.mark.integration

BIG = 49_680_446_358_758_688_350_039_136_273_873_520_000_000_000_000_000_002  # 56 digits
MAX_HASH = 2**128 - 1


def app_name() -> str:
    return f"app-{uuid.uuid4().hex[:10]}"


def raw(config: ClientConfig) -> Any:
    return create_botocore_client(config, "dynamodb")


def create_table(config: ClientConfig, table: str) -> None:
    client = raw(config)
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.close()


def items(config: ClientConfig, table: str) -> dict[str, dict[str, Any]]:
    client = raw(config)
    try:
        found = client.scan(TableName=table, ConsistentRead=True)["Items"]
    finally:
        client.close()
    return {item["leaseKey"]["S"]: item for item in found}


def test_checkpoints_compare_and_set_and_never_go_back(moto_server: Any) -> None:
    config = moto_server.client_config()
    app = app_name()

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            assert isinstance(store, CheckpointStore)
            assert isinstance(store, LeaseStore)
            assert await store.get(app, "s", "shard-1") is None
            first = await store.put(
                app,
                "s",
                "shard-1",
                Sentinel.TRIM_HORIZON,
                expected=None,
                parent_shard_ids=["p2", "p1"],
                hash_range=(0, MAX_HASH),
            )
            assert first == Checkpoint(
                "shard-1", Sentinel.TRIM_HORIZON, 1, None, ("p1", "p2"), (), (0, MAX_HASH)
            )
            second = await store.put(app, "s", "shard-1", (BIG, 7), expected=first)
            assert (second.position, second.counter, second.parent_shard_ids) == (
                (BIG, 7),
                2,
                ("p1", "p2"),
            )
            assert await store.get(app, "s", "shard-1") == second
            with pytest.raises(CheckpointConflictError) as exists:
                await store.put(app, "s", "shard-1", (1, 0), expected=None)
            assert exists.value.current == second
            with pytest.raises(CheckpointConflictError) as stale:
                await store.put(app, "s", "shard-1", (BIG + 1, 0), expected=first)
            assert stale.value.current == second
            with pytest.raises(CheckpointConflictError, match="behind"):
                await store.put(app, "s", "shard-1", (BIG, 6), expected=second)
            with pytest.raises(CheckpointConflictError, match="does not exist"):
                await store.put(
                    app, "s", "shard-2", (1, 0), expected=Checkpoint("shard-2", (0, 0), 1)
                )
            end = await store.put(
                app, "s", "shard-1", SHARD_END, expected=second, child_shard_ids=["c1", "c2"]
            )
            assert end.is_shard_end
            assert end.child_shard_ids == ("c1", "c2")
            assert [r.shard_id for r in await store.list(app, "s")] == ["shard-1"]
            # A retried request whose first attempt went through (the KCL's "spurious
            # failure"): the condition fails, but the row is the one intended.
            again = await store.put(
                app, "s", "shard-1", SHARD_END, expected=second, child_shard_ids=["c2", "c1"]
            )
            assert again == end

    asyncio.run(main())


def test_leases_renew_take_release_and_one_table_per_stream(moto_server: Any) -> None:
    config = moto_server.client_config()
    app = app_name()

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            row = await store.put(app, "s", "shard-1", Sentinel.LATEST, expected=None)
            mine = await store.update_lease(app, "s", "shard-1", expected=row, owner="a")
            renewed = await store.update_lease(app, "s", "shard-1", expected=mine, owner="a")
            assert (renewed.owner, renewed.counter) == ("a", 3)
            # The same renewal again: already done, so accepted (a spurious failure).
            assert await store.update_lease(app, "s", "shard-1", expected=mine, owner="a") == (
                renewed
            )
            with pytest.raises(CheckpointConflictError) as lost:
                await store.update_lease(app, "s", "shard-1", expected=mine, owner="b")
            assert lost.value.current == renewed
            released = await store.update_lease(app, "s", "shard-1", expected=renewed, owner=None)
            assert (released.owner, released.counter) == (None, 4)
            with pytest.raises(ConfigurationError, match="one stream"):
                await store.get(app, "other-stream", "shard-1")
            # A stream given by ARN is the same stream.
            assert await store.get(app, "arn:aws:kinesis:us-east-1:1:stream/s", "shard-1")

    asyncio.run(main())


def test_hand_off_marker_throughput_and_worker_rows(moto_server: Any) -> None:
    """checkpointOwner and throughputKBps as the KCL 3.x writes them; worker rows beside the
    leases, invisible to lease reads."""
    config = moto_server.client_config()
    app = app_name()

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            row = await store.put(app, "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
            held = await store.update_lease(
                app, "s", "shard-1", expected=row, owner="a", throughput_kbps=12.5
            )
            asked = await store.update_lease(
                app, "s", "shard-1", expected=held, owner="b", checkpoint_owner="a"
            )
            assert (asked.owner, asked.checkpoint_owner, asked.throughput_kbps) == (
                "b",
                "a",
                12.5,
            )
            with pytest.raises(CheckpointConflictError):
                await store.put(app, "s", "shard-1", (5, 0), expected=held)
            final = await store.put(app, "s", "shard-1", (5, 0), expected=asked)
            assert (final.owner, final.checkpoint_owner) == ("b", None)
            assert await store.get(app, "s", "shard-1") == final
            await store.heartbeat(app, "s", "w1")
            await store.heartbeat(app, "s", "w1")
            await store.heartbeat(app, "s", "w2")
            assert await store.workers(app, "s") == {"w1": 2, "w2": 1}
            assert [r.shard_id for r in await store.list(app, "s")] == ["shard-1"]
            await store.forget_worker(app, "s", "w1", 1)  # moved since: kept
            await store.heartbeat(app, "s", "w2", leaving=True)
            assert await store.workers(app, "s") == {"w1": 2}
            await store.forget_worker(app, "s", "w1", 2)
            assert await store.workers(app, "s") == {}
        item = items(config, app)["shard-1"]
        assert item["throughputKBps"] == {"N": "12.5"}
        assert "checkpointOwner" not in item

    asyncio.run(main())


def test_two_workers_taking_the_same_lease_at_once_one_wins(moto_server: Any) -> None:
    config = moto_server.client_config()
    app = app_name()

    async def main() -> None:
        stores = [DynamoDBCheckpointStore(client_config=config) for _ in range(4)]
        try:
            created = await asyncio.gather(
                *(s.put(app, "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None) for s in stores),
                return_exceptions=True,
            )
            rows = [r for r in created if isinstance(r, Checkpoint)]
            assert len(rows) == 1
            assert all(isinstance(r, CheckpointConflictError) for r in created if r not in rows)
            scanned = await stores[0].get(app, "s", "shard-1")
            assert scanned is not None
            for _ in range(5):
                results = await asyncio.gather(
                    *(
                        s.update_lease(app, "s", "shard-1", expected=scanned, owner=f"w{i}")
                        for i, s in enumerate(stores)
                    ),
                    return_exceptions=True,
                )
                winners = [r for r in results if isinstance(r, Checkpoint)]
                losers = [r for r in results if isinstance(r, CheckpointConflictError)]
                assert len(winners) == 1
                assert len(losers) == len(stores) - 1
                assert all(e.current == winners[0] for e in losers)
                scanned = winners[0]
            assert scanned.counter == 6
        finally:
            for store in stores:
                await store.close()

    asyncio.run(main())


def test_table_on_demand_existing_or_required(moto_server: Any) -> None:
    config = moto_server.client_config()
    app, existing, missing = app_name(), app_name(), app_name()
    create_table(config, existing)

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            await store.put(app, "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
        async with DynamoDBCheckpointStore(existing, client_config=config) as store:
            await store.put("any-app", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
            assert [r.shard_id for r in await store.list("any-app", "s")] == ["shard-1"]
        async with DynamoDBCheckpointStore(client_config=config, create_table=False) as store:
            with pytest.raises(ConfigurationError, match="does not exist"):
                await store.list(missing, "s")
        with pytest.raises(ConfigurationError, match="table name"):
            DynamoDBCheckpointStore("no spaces allowed")
        async with DynamoDBCheckpointStore(client_config=config) as store:
            with pytest.raises(ConfigurationError, match="application_name"):
                await store.list("x", "s")

    asyncio.run(main())
    client = raw(config)
    table = client.describe_table(TableName=app)["Table"]
    added = client.describe_table(TableName=existing)["Table"]
    client.close()
    assert table["KeySchema"] == [{"AttributeName": "leaseKey", "KeyType": "HASH"}]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    # The KCL 3.x index, with the table, and added to a table found without it.
    for described in (table, added):
        assert {"AttributeName": "leaseOwner", "AttributeType": "S"} in described[
            "AttributeDefinitions"
        ]
        (index,) = described["GlobalSecondaryIndexes"]
        assert index["IndexName"] == "LeaseOwnerToLeaseKeyIndex"
        assert index["KeySchema"] == [
            {"AttributeName": "leaseOwner", "KeyType": "HASH"},
            {"AttributeName": "leaseKey", "KeyType": "RANGE"},
        ]
        assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_own_leases_through_the_index_and_the_leader_row(moto_server: Any) -> None:
    """A worker lists its own leases through the index; the leader row is claimed by one
    worker at a time and is neither a lease nor in the index."""
    config = moto_server.client_config()
    app = app_name()

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            for shard in ("s1", "s2", "s3"):
                await store.put(app, "st", shard, Sentinel.TRIM_HORIZON, expected=None)
            for shard, owner in (("s1", "w1"), ("s3", "w1"), ("s2", "w2")):
                row = await store.get(app, "st", shard)
                assert row is not None
                await store.update_lease(app, "st", shard, expected=row, owner=owner)
            await store.heartbeat(app, "st", "w1")
            assert await store.leader(app, "st") == (None, 0)
            assert await store.claim_leader(app, "st", "w1", None) == 1
            assert await store.claim_leader(app, "st", "w2", None) is None
            assert await store.claim_leader(app, "st", "w1", 1) == 2
            assert await store.claim_leader(app, "st", "w2", 1) is None
            assert await store.leader(app, "st") == ("w1", 2)
            assert sorted(await store.owned(app, "st", "w1")) == ["s1", "s3"]
            assert await store.owned(app, "st", "w2") == ["s2"]
            rows, workers = await store.snapshot(app, "st")
            assert sorted(r.shard_id for r in rows) == ["s1", "s2", "s3"]
            assert workers == {"w1": 1}
            await store.resign_leader(app, "st", "w2")
            assert await store.leader(app, "st") == ("w1", 2)
            await store.resign_leader(app, "st", "w1")
            assert await store.leader(app, "st") == (None, 0)
            assert store.usage.read_units > 0
            assert store.usage.write_units >= 9

    asyncio.run(main())


def kcl_items() -> list[dict[str, Any]]:
    """Items as a KCL 2.x/3.x application leaves them (DynamoDBLeaseSerializer.toDynamoRecord),
    plus a KCL 3.5 coordinator row in the same table."""
    return [
        {
            "leaseKey": {"S": "shardId-000000000000"},
            "leaseOwner": {"S": "kcl-worker-1"},
            "leaseCounter": {"N": "120"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
            "checkpoint": {"S": "SHARD_END"},
            "checkpointSubSequenceNumber": {"N": "0"},
            "childShardIds": {"SS": ["shardId-000000000001", "shardId-000000000002"]},
            "startingHashKey": {"S": "0"},
            "endingHashKey": {"S": str(MAX_HASH)},
            "entityType": {"S": "LEASE"},
        },
        {
            "leaseKey": {"S": "shardId-000000000001"},
            "leaseOwner": {"S": "kcl-worker-1"},
            "leaseCounter": {"N": "57"},
            "ownerSwitchesSinceCheckpoint": {"N": "3"},
            "checkpoint": {"S": str(BIG)},
            "checkpointSubSequenceNumber": {"N": "4"},
            "pendingCheckpoint": {"S": str(BIG + 10)},
            "pendingCheckpointSubSequenceNumber": {"N": "0"},
            "parentShardId": {"SS": ["shardId-000000000000"]},
            "startingHashKey": {"S": "0"},
            "endingHashKey": {"S": str(2**127 - 1)},
            "throughputKBps": {"N": "3.25"},
            "checkpointOwner": {"S": "kcl-worker-2"},
            "entityType": {"S": "LEASE"},
        },
        {  # a KCL 2.x row: no entityType, no hash range, never owned
            "leaseKey": {"S": "shardId-000000000002"},
            "leaseCounter": {"N": "0"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
            "checkpoint": {"S": "TRIM_HORIZON"},
            "checkpointSubSequenceNumber": {"N": "0"},
            "parentShardId": {"SS": ["shardId-000000000000"]},
        },
        {
            "leaseKey": {"S": "Leader"},
            "entityType": {"S": "LEADER"},
            "leaderOwner": {"S": "kcl-worker-1"},
        },
    ]


def test_a_kcl_table_is_read_and_our_writes_keep_its_format(moto_server: Any) -> None:
    config = moto_server.client_config()
    app = app_name()
    create_table(config, app)
    client = raw(config)
    for item in kcl_items():
        client.put_item(TableName=app, Item=item)
    client.close()

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            rows = {r.shard_id: r for r in await store.list(app, "s")}
            assert set(rows) == {f"shardId-00000000000{i}" for i in range(3)}  # no leader row
            ended, middle, fresh = (rows[f"shardId-00000000000{i}"] for i in range(3))
            assert ended.value is SHARD_END
            assert ended.child_shard_ids == ("shardId-000000000001", "shardId-000000000002")
            assert (middle.value, middle.owner, middle.counter) == ((BIG, 4), "kcl-worker-1", 57)
            assert middle.parent_shard_ids == ("shardId-000000000000",)
            assert middle.hash_range == (0, 2**127 - 1)
            assert (fresh.value, fresh.owner, fresh.counter) == (Sentinel.TRIM_HORIZON, None, 0)
            # Take (from a KCL worker), renew, checkpoint, release.
            taken = await store.update_lease(app, "s", middle.shard_id, expected=middle, owner="py")
            taken = await store.update_lease(app, "s", middle.shard_id, expected=taken, owner="py")
            moved = await store.put(app, "s", middle.shard_id, (BIG + 5, 0), expected=taken)
            await store.update_lease(app, "s", middle.shard_id, expected=moved, owner=None)
            mine = await store.update_lease(app, "s", fresh.shard_id, expected=fresh, owner="py")
            assert (mine.owner, mine.counter) == ("py", 1)

    asyncio.run(main())
    after = items(config, app)
    middle = after["shardId-000000000001"]
    # Each write bumped leaseCounter by exactly one: take, renew, checkpoint, release.
    assert middle["leaseCounter"] == {"N": "61"}
    assert "leaseOwner" not in middle
    assert middle["checkpoint"] == {"S": str(BIG + 5)}
    assert middle["checkpointSubSequenceNumber"] == {"N": "0"}
    # The take counted an owner switch; the checkpoint reset the count (as the KCL does).
    assert middle["ownerSwitchesSinceCheckpoint"] == {"N": "0"}
    # The KCL's checkpoint clears the two-phase fields; the take cleared the hand-off marker.
    for gone in ("pendingCheckpoint", "pendingCheckpointSubSequenceNumber", "checkpointOwner"):
        assert gone not in middle
    # What this store does not model is left alone.
    assert middle["throughputKBps"] == {"N": "3.25"}
    assert middle["parentShardId"] == {"SS": ["shardId-000000000000"]}
    assert middle["startingHashKey"] == {"S": "0"}
    assert middle["entityType"] == {"S": "LEASE"}
    fresh = after["shardId-000000000002"]
    assert fresh["leaseOwner"] == {"S": "py"}
    assert fresh["ownerSwitchesSinceCheckpoint"] == {"N": "0"}  # taken from nobody: no switch
    assert after["Leader"] == kcl_items()[3]  # not a lease: untouched
    assert after["shardId-000000000000"] == kcl_items()[0]


def test_owner_switches_count_takes_between_checkpoints(moto_server: Any) -> None:
    config = moto_server.client_config()
    app = app_name()

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            row = await store.put(app, "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
            for owner in ("a", "b", "a"):
                row = await store.update_lease(app, "s", "shard-1", expected=row, owner=owner)

    asyncio.run(main())
    assert items(config, app)["shard-1"]["ownerSwitchesSinceCheckpoint"] == {"N": "2"}


NOW = 1_700_000_000_000


def test_the_stream_incarnation_is_an_extra_attribute_kcl_writes_keep(moto_server: Any) -> None:
    """Rows carry ``streamCreatedMillis``; a KCL lease row without it is adopted on our first
    write; a KCL checkpoint (UpdateItem of its own attributes) keeps it; a write for another
    incarnation starts the row over, its old shard's attributes removed."""
    config = moto_server.client_config()
    app = app_name()
    create_table(config, app)
    client = raw(config)
    client.put_item(TableName=app, Item=kcl_items()[1])

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            (legacy,) = await store.list(app, "s")
            assert legacy.stream_created_ms is None
            adopted = await store.put(
                app, "s", legacy.shard_id, (BIG + 1, 0), expected=legacy, stream_created_ms=NOW
            )
            assert adopted.stream_created_ms == NOW
            assert await store.get(app, "s", legacy.shard_id) == adopted

    asyncio.run(main())
    key = {"leaseKey": {"S": "shardId-000000000001"}}
    assert items(config, app)["shardId-000000000001"]["streamCreatedMillis"] == {"N": str(NOW)}
    # A KCL worker's updateLease: AttributeUpdates of its own attributes only.
    client.update_item(
        TableName=app,
        Key=key,
        AttributeUpdates={
            "checkpoint": {"Value": {"S": str(BIG + 2)}, "Action": "PUT"},
            "leaseCounter": {"Value": {"N": "59"}, "Action": "PUT"},
        },
    )
    client.close()
    assert items(config, app)["shardId-000000000001"]["streamCreatedMillis"] == {"N": str(NOW)}

    async def recreated() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            row = await store.get(app, "s", "shardId-000000000001")
            assert row is not None
            assert row.stream_created_ms == NOW
            fresh = await store.put(
                app,
                "s",
                row.shard_id,
                Sentinel.TRIM_HORIZON,
                expected=row,
                stream_created_ms=NOW + 1,
            )
            assert fresh == Checkpoint(
                row.shard_id, Sentinel.TRIM_HORIZON, 60, "kcl-worker-1", stream_created_ms=NOW + 1
            )
            assert await store.get(app, "s", row.shard_id) == fresh

    asyncio.run(recreated())
    item = items(config, app)["shardId-000000000001"]
    for gone in ("parentShardId", "startingHashKey", "endingHashKey"):
        assert gone not in item


LARGEST_WINDOW = "é" * (MAX_WINDOW_BYTES // 2)
"""A dedup window of the largest size (``MAX_WINDOW_BYTES`` in UTF-8, as DynamoDB counts it)."""


def test_the_dedup_window_is_kept_by_lease_writes_and_fits_at_its_largest(
    moto_server: Any,
) -> None:
    """``dedupWindow`` (S): written by a put that gives one, kept by puts without one and by
    lease writes, removed by a put for another incarnation; a row carrying the largest window
    is within DynamoDB's 400 KB item limit (which moto's server enforces)."""
    config = moto_server.client_config()
    app = app_name()
    small = '[1,1700000000000,1700000000500,["o"],[[0,0,99,500]]]'
    assert len(LARGEST_WINDOW.encode()) == MAX_WINDOW_BYTES

    async def main() -> None:
        async with DynamoDBCheckpointStore(client_config=config) as store:
            row = await store.put(
                app,
                "s",
                "shardId-000000000000",
                Sentinel.TRIM_HORIZON,
                expected=None,
                parent_shard_ids=["shardId-000000000001", "shardId-000000000002"],
                hash_range=(0, MAX_HASH),
                stream_created_ms=NOW,
                dedup_window=LARGEST_WINDOW,
            )
            assert row.dedup_window == LARGEST_WINDOW
            held = await store.update_lease(
                app, "s", row.shard_id, expected=row, owner="w" * 200, throughput_kbps=12.5
            )
            asked = await store.update_lease(
                app, "s", row.shard_id, expected=held, owner="b", checkpoint_owner=held.owner
            )
            assert (held.dedup_window, asked.dedup_window) == (LARGEST_WINDOW, LARGEST_WINDOW)
            kept = await store.put(app, "s", row.shard_id, (BIG, 7), expected=asked)
            assert kept.dedup_window == LARGEST_WINDOW
            assert await store.get(app, "s", row.shard_id) == kept
            (listed,), _ = await store.snapshot(app, "s")
            assert listed == kept
            replaced = await store.put(
                app, "s", row.shard_id, (BIG, 8), expected=kept, dedup_window=small
            )
            # A retried request whose first attempt went through: its row is the one intended.
            again = await store.put(
                app, "s", row.shard_id, (BIG, 8), expected=kept, dedup_window=small
            )
            assert replaced.dedup_window == again.dedup_window == small
            assert again == replaced
            with pytest.raises(ClientError, match="maximum allowed size"):
                await store.put(
                    app,
                    "s",
                    "shardId-000000000003",
                    Sentinel.TRIM_HORIZON,
                    expected=None,
                    dedup_window=LARGEST_WINDOW + "x" * 110_000,
                )
            other = await store.put(
                app,
                "s",
                row.shard_id,
                Sentinel.TRIM_HORIZON,
                expected=replaced,
                stream_created_ms=NOW + 1,
            )
            assert other.dedup_window is None
            assert await store.get(app, "s", row.shard_id) == other

    asyncio.run(main())
    stored = items(config, app)
    assert "dedupWindow" not in stored["shardId-000000000000"]
    assert "shardId-000000000003" not in stored


# -- hand-over between a KCL application and a Consumer (kinesis-mock for Kinesis) -------------

PER_AGGREGATE = 10


def produce_aggregates(stream: Any, count: int) -> list[str]:
    """``count`` KPL aggregates on the stream's single shard; returns the data in order."""
    client = stream.boto_client()
    data: list[str] = []
    for a in range(count):
        builder = AggregateBuilder()
        for j in range(PER_AGGREGATE):
            text = f"a{a}-{j}"
            builder.add(f"pk-{a}-{j}", None, text.encode())
            data.append(text)
        client.put_records(
            StreamName=stream.name,
            Records=[
                {
                    "Data": builder.build(),
                    "PartitionKey": builder.container_partition_key,
                    "ExplicitHashKey": builder.container_explicit_hash_key,
                }
            ],
        )
    return data


async def kcl_resume(config: ClientConfig, stream: str, shard: str, row: Checkpoint) -> list[str]:
    """What a KCL worker reads after taking this lease: GetShardIterator AT_SEQUENCE_NUMBER of
    the checkpoint, deaggregate, drop every record whose (sequence, sub-sequence) is at or
    below it (IteratorBuilder.request, ProcessTask.filterAndGetMaxExtendedSequenceNumber)."""
    assert row.position is not None
    async with create_kinesis_client(config) as client:
        iterator = (
            await client.get_shard_iterator(
                StreamName=stream,
                ShardId=shard,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                StartingSequenceNumber=str(row.position[0]),
            )
        )["ShardIterator"]
        response = await client.get_records(ShardIterator=iterator)
    records = deaggregate(response["Records"], shard)
    return [r.data.decode() for r in records if r.position > row.position]


def test_a_kcl_table_is_handed_over_and_back(kinesis_stream: Any, moto_server: Any) -> None:
    stream = kinesis_stream(shards=1)
    kinesis = stream.client_config
    dynamodb = moto_server.client_config()
    app = app_name()
    data = produce_aggregates(stream, 4)

    async def shard_and_sequences() -> tuple[str, list[int]]:
        async with create_kinesis_client(kinesis) as client:
            (info,) = await list_all_shards(client, stream.name)
            iterator = (
                await client.get_shard_iterator(
                    StreamName=stream.name, ShardId=info.shard_id, ShardIteratorType="TRIM_HORIZON"
                )
            )["ShardIterator"]
            response = await client.get_records(ShardIterator=iterator)
        return info.shard_id, [int(r["SequenceNumber"]) for r in response["Records"]]

    shard, sequences = asyncio.run(shard_and_sequences())
    # A KCL worker (now dead) processed the first aggregate and 3 records of the second one.
    create_table(dynamodb, app)
    client = raw(dynamodb)
    client.put_item(
        TableName=app,
        Item={
            "leaseKey": {"S": shard},
            "leaseOwner": {"S": "kcl-worker-1"},
            "leaseCounter": {"N": "99"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"},
            "checkpoint": {"S": str(sequences[1])},
            "checkpointSubSequenceNumber": {"N": "2"},
            "entityType": {"S": "LEASE"},
        },
    )
    client.close()

    async def consume(count: int) -> tuple[list[str], Checkpoint | None]:
        store = DynamoDBCheckpointStore(client_config=dynamodb)
        leases = LeaseConfig(worker_id="py-1", failover_time=1.0, take_interval=0.3)
        out: list[str] = []
        async with (
            store,
            Consumer(
                stream.name,
                client_config=kinesis,
                checkpoint_store=store,
                application_name=app,
                initial_position=TRIM_HORIZON,
                idle_interval=0.2,
                leases=leases,
            ) as consumer,
        ):
            async for record in consumer:
                out.append(record.data.decode())
                record.ack()
                if len(out) == count:
                    break
            await consumer.close()
            return out, await store.get(app, stream.name, shard)

    # The dead KCL worker's lease is taken after the failover time; reading resumes inside
    # the second aggregate, just after the checkpointed sub-record.
    read, row = asyncio.run(consume(12))
    assert read == data[PER_AGGREGATE + 3 : PER_AGGREGATE + 15]
    assert row is not None
    assert row.owner is None  # released on close
    assert row.position == (sequences[2], 4)
    # A KCL worker taking this lease now would read exactly the rest.
    assert asyncio.run(kcl_resume(kinesis, stream.name, shard, row)) == data[PER_AGGREGATE + 15 :]


def test_rows_are_scoped_by_application_and_stream_across_processes(moto_server: Any) -> None:
    """Two applications (or two streams) on one table, each in its own process (store), are
    refused with the table and both names: by the rows they read, and by the condition of
    every write (two creating leases at the same moment). A KCL's rows, which carry neither
    attribute, are anyone's; our writes mark them."""
    config = moto_server.client_config()
    table = app_name()

    async def main() -> None:
        async with (
            DynamoDBCheckpointStore(table, client_config=config) as one,
            DynamoDBCheckpointStore(table, client_config=config) as two,
            DynamoDBCheckpointStore(table, client_config=config) as other_stream,
        ):
            row = await one.put("appOne", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
            with pytest.raises(ConfigurationError, match="'appOne', not 'appTwo'") as refused:
                await two.list("appTwo", "s")
            assert refused.value.field == "application_name"
            assert f"lease table {table!r}" in str(refused.value)
            # A write that never read the row: refused by its condition, named the same way.
            with pytest.raises(ConfigurationError, match="'appOne', not 'appTwo'"):
                await two.put("appTwo", "s", "shard-1", Sentinel.TRIM_HORIZON, expected=None)
            with pytest.raises(ConfigurationError, match="'appOne', not 'appTwo'"):
                await two.update_lease("appTwo", "s", "shard-1", expected=row, owner="two")
            with pytest.raises(ConfigurationError, match="one stream") as stream_refused:
                await other_stream.update_lease(
                    "appOne", "other", "shard-1", expected=row, owner="x"
                )
            assert stream_refused.value.field == "stream"
            assert await one.get("appOne", "s", "shard-1") == row  # nothing was written

    asyncio.run(main())
    item = items(config, table)["shard-1"]
    assert (item["applicationName"], item["kinesisStream"]) == ({"S": "appOne"}, {"S": "s"})
