"""The DynamoDB store's item format against the KCL's lease serializer, and its wait for a
table being created (no server).

``kcl_read`` is a line-by-line port of ``DynamoDBLeaseSerializer.fromDynamoRecord`` (KCL 3.5.1,
awslabs/amazon-kinesis-client @ 024eb86e): what a KCL worker would make of an item.
"""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.checkpoint import Checkpoint, Sentinel
from kinesis_core.checkpoint.dynamodb import (
    DynamoDBCheckpointStore,
    _Scope,
    _Update,
    decode_lease,
    encode_lease,
)
from kinesis_core.errors import ConfigurationError, ValidationError
from tests.fakes.clock import RecordingClock

BIG = 49_680_446_358_758_688_350_039_136_273_873_520_000_000_000_000_000_002  # 56 digits
MAX_HASH = 2**128 - 1


def kcl_read(item: dict[str, Any]) -> dict[str, Any] | None:
    """What the KCL's fromDynamoRecord reads from an item (None: not a lease)."""

    def s(name: str) -> str | None:
        return item[name]["S"] if name in item else None

    def n(name: str) -> int | None:
        return int(item[name]["N"]) if name in item else None

    def ss(name: str) -> set[str] | None:
        return set(item[name]["SS"]) if name in item else None

    entity_type = s("entityType")
    if entity_type is not None and entity_type != "LEASE":
        return None
    lease: dict[str, Any] = {
        "leaseKey": s("leaseKey"),
        "leaseOwner": s("leaseOwner"),
        "leaseCounter": n("leaseCounter"),
        "ownerSwitchesSinceCheckpoint": n("ownerSwitchesSinceCheckpoint"),
        # new ExtendedSequenceNumber(safeGetString(checkpoint), safeGetLong(subSequenceNumber))
        "checkpoint": (s("checkpoint"), n("checkpointSubSequenceNumber")),
        "parentShardIds": ss("parentShardId"),
        "childShardIds": ss("childShardIds"),
        "pendingCheckpoint": None,
        "hashKeyRange": None,
    }
    if s("pendingCheckpoint"):
        lease["pendingCheckpoint"] = (
            s("pendingCheckpoint"),
            n("pendingCheckpointSubSequenceNumber"),
        )
    if s("startingHashKey") and s("endingHashKey"):
        lease["hashKeyRange"] = (int(s("startingHashKey") or 0), int(s("endingHashKey") or 0))
    return lease


def kcl_item(**overrides: Any) -> dict[str, Any]:
    """An item as KCL 3.5's toDynamoRecord writes it for a lease held by a KCL worker."""
    item: dict[str, Any] = {
        "leaseKey": {"S": "shardId-000000000003"},
        "leaseCounter": {"N": "4711"},
        "leaseOwner": {"S": "kcl-worker-1"},
        "ownerSwitchesSinceCheckpoint": {"N": "2"},
        "checkpoint": {"S": str(BIG)},
        "checkpointSubSequenceNumber": {"N": "17"},
        "parentShardId": {"SS": ["shardId-000000000001", "shardId-000000000000"]},
        "startingHashKey": {"S": "0"},
        "endingHashKey": {"S": str(MAX_HASH)},
        "throughputKBps": {"N": "12.5"},
        "entityType": {"S": "LEASE"},
    }
    item.update(overrides)
    return item


def test_a_kcl_lease_item_reads_as_a_checkpoint() -> None:
    row = decode_lease(kcl_item())
    assert row == Checkpoint(
        "shardId-000000000003",
        (BIG, 17),
        4711,
        "kcl-worker-1",
        ("shardId-000000000000", "shardId-000000000001"),
        (),
        (0, MAX_HASH),
        throughput_kbps=12.5,  # the KCL 3.x throughputKBps
    )


@pytest.mark.parametrize("sentinel", list(Sentinel))
def test_sentinels_read_and_write_as_the_kcl_names_them(sentinel: Sentinel) -> None:
    item = kcl_item(checkpoint={"S": sentinel.value}, checkpointSubSequenceNumber={"N": "0"})
    row = decode_lease(item)
    assert row is not None
    assert row.value is sentinel
    written = encode_lease(row)
    assert written["checkpoint"] == {"S": sentinel.value}
    assert written["checkpointSubSequenceNumber"] == {"N": "0"}


def test_items_of_older_kcls_and_other_entities() -> None:
    old = kcl_item()
    for name in ("entityType", "startingHashKey", "endingHashKey", "leaseOwner", "parentShardId"):
        del old[name]
    row = decode_lease(old)
    assert row is not None
    assert (row.owner, row.parent_shard_ids, row.hash_range) == (None, (), None)
    for other in ("LEADER", "STREAM", "CLIENT_VERSION_MIGRATION", "WORKER_METRIC_STATS"):
        assert decode_lease(kcl_item(entityType={"S": other})) is None


@pytest.mark.parametrize("bad", ["", "12a", "NOT_A_SENTINEL"])
def test_an_unreadable_checkpoint_names_the_lease(bad: str) -> None:
    with pytest.raises(ValidationError, match="shardId-000000000003") as info:
        decode_lease(kcl_item(checkpoint={"S": bad}))
    assert info.value.field == "checkpoint"
    with pytest.raises(ValidationError, match="no checkpoint"):
        decode_lease({"leaseKey": {"S": "s"}, "leaseCounter": {"N": "1"}})


def test_new_leases_are_written_as_the_kcl_writes_them() -> None:
    row = Checkpoint(
        "shardId-000000000009",
        Sentinel.TRIM_HORIZON,
        1,
        None,
        ("shardId-000000000004", "shardId-000000000005"),
        (),
        (2**127, MAX_HASH),
    )
    item = encode_lease(row)
    assert item == {
        "leaseKey": {"S": "shardId-000000000009"},
        "leaseCounter": {"N": "1"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "checkpoint": {"S": "TRIM_HORIZON"},
        "checkpointSubSequenceNumber": {"N": "0"},
        "parentShardId": {"SS": ["shardId-000000000004", "shardId-000000000005"]},
        "startingHashKey": {"S": str(2**127)},
        "endingHashKey": {"S": str(MAX_HASH)},
        "entityType": {"S": "LEASE"},
    }
    assert kcl_read(item) == {
        "leaseKey": "shardId-000000000009",
        "leaseOwner": None,
        "leaseCounter": 1,
        "ownerSwitchesSinceCheckpoint": 0,
        "checkpoint": ("TRIM_HORIZON", 0),
        "parentShardIds": {"shardId-000000000004", "shardId-000000000005"},
        "childShardIds": None,
        "pendingCheckpoint": None,
        "hashKeyRange": (2**127, MAX_HASH),
    }
    assert decode_lease(item) == row
    positioned = encode_lease(Checkpoint("s", (BIG, 3), 7, "me", (), ("c1", "c2")))
    assert "parentShardId" not in positioned  # DynamoDB has no empty sets; the KCL omits them
    lease = kcl_read(positioned)
    assert lease is not None
    assert lease["checkpoint"] == (str(BIG), 3)
    assert lease["leaseOwner"] == "me"
    assert lease["childShardIds"] == {"c1", "c2"}


def test_the_stream_incarnation_is_an_attribute_the_kcl_reads_past() -> None:
    row = Checkpoint("s", (BIG, 3), 7, "me", stream_created_ms=1_700_000_000_123)
    item = encode_lease(row)
    assert item["streamCreatedMillis"] == {"N": "1700000000123"}
    assert decode_lease(item) == row
    without = dict(item)
    del without["streamCreatedMillis"]
    assert kcl_read(item) == kcl_read(without)
    legacy = decode_lease(kcl_item())
    assert legacy is not None
    assert legacy.stream_created_ms is None


def test_the_dedup_window_is_an_attribute_the_kcl_reads_past() -> None:
    window = '[1,1700000000000,1700000000500,["o"],[[0,0,99,500]]]'
    row = Checkpoint("s", (BIG, 3), 7, "me", dedup_window=window)
    item = encode_lease(row)
    assert item["dedupWindow"] == {"S": window}
    assert decode_lease(item) == row
    without = dict(item)
    del without["dedupWindow"]
    assert kcl_read(item) == kcl_read(without)
    assert "dedupWindow" not in encode_lease(Checkpoint("s", (BIG, 3), 7, "me"))
    legacy = decode_lease(kcl_item())
    assert legacy is not None
    assert legacy.dedup_window is None


SCOPED = (
    " AND (attribute_not_exists(#applicationName) OR #applicationName = :applicationName)"
    " AND (attribute_not_exists(#kinesisStream) OR #kinesisStream = :kinesisStream)"
)


def test_update_expressions_are_conditional_on_the_counter_and_the_owners() -> None:
    scope = _Scope("table", "app", "orders")
    held = Checkpoint("s", (5, 0), 8, "me")
    update = _Update(held, scope)
    update.set("leaseCounter", {"N": "9"})
    update.remove("checkpointOwner")
    update.add("ownerSwitchesSinceCheckpoint", {"N": "1"})
    assert update.condition == (
        "#leaseCounter = :counter AND #leaseOwner = :expectedOwner AND "
        "attribute_not_exists(#checkpointOwner)" + SCOPED
    )
    assert update.values[":counter"] == {"N": "8"}
    # Every write says whose row it is, and is refused on a row of another application.
    assert update.values[":applicationName"] == {"S": "app"}
    assert update.values[":kinesisStream"] == {"S": "orders"}
    assert update.values[":expectedOwner"] == {"S": "me"}
    assert update.expression == (
        "SET #applicationName = :applicationName, #kinesisStream = :kinesisStream, "
        "#leaseCounter = :leaseCounter REMOVE #checkpointOwner "
        "ADD #ownerSwitchesSinceCheckpoint :ownerSwitchesSinceCheckpoint"
    )
    assert set(update.names.values()) == {
        "leaseCounter",
        "leaseOwner",
        "checkpointOwner",
        "ownerSwitchesSinceCheckpoint",
        "applicationName",
        "kinesisStream",
    }
    unowned = _Update(Checkpoint("s", Sentinel.LATEST, 1, None), scope)
    assert unowned.condition == (
        "#leaseCounter = :counter AND attribute_not_exists(#leaseOwner) AND "
        "attribute_not_exists(#checkpointOwner)" + SCOPED
    )
    handing = _Update(Checkpoint("s", (5, 0), 8, "taker", checkpoint_owner="me"), scope)
    assert handing.condition == (
        "#leaseCounter = :counter AND #leaseOwner = :expectedOwner AND "
        "#checkpointOwner = :expectedCheckpointOwner" + SCOPED
    )
    assert handing.values[":expectedCheckpointOwner"] == {"S": "me"}


# -- a table being created -----------------------------------------------------------------


class _Tables:
    """A DynamoDB client whose table answers ``statuses`` to DescribeTable, one after the
    other (the last one then on), after a first ResourceNotFoundException when ``missing``."""

    class exceptions:
        class ResourceNotFoundException(Exception):
            pass

        class ResourceInUseException(Exception):
            pass

    def __init__(self, statuses: list[str], *, missing: bool = False) -> None:
        self.statuses = statuses
        self.missing = missing
        self.created = 0
        self.looks = 0

    async def describe_table(self, TableName: str) -> dict[str, Any]:
        self.looks += 1
        if self.missing:
            self.missing = False
            raise self.exceptions.ResourceNotFoundException(TableName)
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"Table": {"TableStatus": status}}

    async def create_table(self, **kwargs: Any) -> dict[str, Any]:
        self.created += 1
        return {}

    async def scan(self, **kwargs: Any) -> dict[str, Any]:
        return {"Items": []}


def test_a_table_being_created_is_waited_for_on_the_stores_clock() -> None:
    client = _Tables(["CREATING", "CREATING", "CREATING", "ACTIVE"], missing=True)
    clock = RecordingClock()

    async def main() -> list[Checkpoint]:
        store = DynamoDBCheckpointStore(client=client, clock=clock)  # type: ignore[arg-type]
        return await store.list("app", "stream")

    assert clock.run(main()) == []
    assert client.created == 1
    assert client.looks == 5  # not found, three CREATING, ACTIVE
    assert len(clock.waits) == 3
    assert all(0.05 <= wait <= 0.4 for wait in clock.waits)  # TABLE_POLL: equal jitter


def test_a_table_never_active_fails_at_table_timeout_with_its_looks() -> None:
    client = _Tables(["CREATING"])
    clock = RecordingClock()

    async def main() -> None:
        store = DynamoDBCheckpointStore(client=client, clock=clock, table_timeout=30.0)  # type: ignore[arg-type]
        await store.list("app", "stream")

    with pytest.raises(ConfigurationError, match="table_timeout") as info:
        clock.run(main())
    assert "lease table 'app' is still CREATING after 30 s" in str(info.value)
    assert sum(clock.waits) == pytest.approx(30.0)  # the last wait ends at the deadline
    notes = getattr(info.value.__cause__, "__notes__", [])
    assert any("failed attempts" in note and "CREATING" in note for note in notes)
