"""Checkpoints and leases in a DynamoDB table with the KCL's lease-table schema.

A table written by a KCL application (2.x or 3.x, single-stream mode) reads here as it is, and
the KCL reads what this store writes: the same attribute names and types, the same sentinels
and sub-sequence numbers, every write conditional on ``leaseCounter``. One table per
application (the table name defaults to the application name), the shard id is the
``leaseKey``; rows whose ``entityType`` is not ``LEASE`` (KCL 3.5 keeps other entities in the
same table) are skipped. Attributes this store does not model (anything newer than the KCL
3.x fields) are never overwritten: every change is an ``UpdateItem`` of the attributes it
means to change.

==============================  ====  ==========================================================
attribute                       type  what this store does with it
==============================  ====  ==========================================================
leaseKey                        S     the shard id (hash key of the table)
leaseOwner                      S     the worker holding the lease; removed on release
leaseCounter                    N     +1 on every write, every write is conditional on it
checkpoint                      S     decimal sequence number, or TRIM_HORIZON / LATEST /
                                      AT_TIMESTAMP / SHARD_END
checkpointSubSequenceNumber     N     sub-record index inside a KPL aggregate (0 otherwise)
ownerSwitchesSinceCheckpoint    N     +1 when a lease changes hands, 0 after each checkpoint
parentShardId                   SS    parent shard ids (1 after a split, 2 after a merge)
childShardIds                   SS    written with SHARD_END
startingHashKey, endingHashKey  S     the shard's hash range, written when the row is created
streamCreatedMillis             N     creation time (epoch ms) of the stream the checkpoint is
                                      of; not a KCL attribute: KCL readers skip it and KCL
                                      writes (UpdateItem of their own attributes) keep it
applicationName, kinesisStream  S     the application and the stream (by name) whose lease the
                                      row is; written with every write, which is conditional on
                                      them (absent: a KCL's row, anyone's); not KCL attributes
pendingCheckpoint*              S/N/B never written; removed by each checkpoint (as the KCL)
checkpointOwner                 S     KCL 3.x hand-off marker: the worker handing the lease over
                                      (``leaseOwner`` is then the taker); set by a hand-off
                                      request, removed by every other lease write and by
                                      every checkpoint
throughputKBps                  N     KiB/s the owner read, written with renewals (KCL 3.x)
dedupWindow                     S     the shard's dedup window (JSON, at most 300,000 bytes),
                                      written by a checkpoint that gives one, kept by the
                                      others and by lease writes; not a KCL attribute
entityType                      S     LEASE on the rows this store creates; other types skipped
==============================  ====  ==========================================================

Worker rows (``entityType`` ``WORKER``, ``leaseKey`` ``worker:`` + the worker id, a
``leaseCounter`` bumped at every renewal round, ``applicationName`` and ``kinesisStream``) say
which workers are alive before they hold a lease; lease readers skip them as they skip every
non-``LEASE`` row. Their ``assignments`` is bumped by the leader when it assigned the worker
leases: the worker's renewal of its row returns it, and the worker then lists its leases.
The leader row (``leaseKey`` ``leader:``, ``leaderId`` and ``workerId`` the leader's id, a
``leaseCounter`` the leader bumps at every renewal round) names the worker that assigns the
leases. Its ``entityType`` is ``WORKER``: a reader that skips worker rows skips it (one that
reads them sees one more row of a live worker); it has no ``leaseOwner`` and no
``checkpoint``, so it is in no index and is no lease to any reader.

The table has the KCL 3.x index ``LeaseOwnerToLeaseKeyIndex`` (hash ``leaseOwner``, range
``leaseKey``, keys only): a worker lists its own leases there (:meth:`owned`). A table created
here gets it with the table; a table found without it gets it added (``UpdateTable``, when
``create_table``), and until it is ACTIVE :meth:`owned` reads the table instead.

:attr:`DynamoDBCheckpointStore.usage` counts the read and write units this store's calls
consumed, by DynamoDB's rules (reads: the items' bytes per call rounded up to 4 KB, half for an
eventually consistent read; writes: the item's bytes rounded up to 1 KB, at least one).

A row of another application or stream, read or met by a write's condition, raises a
ConfigurationError naming the table and both applications (or streams): two applications on
one table would each take the other's leases and read part of the stream. Once the table was
found, a ResourceNotFoundException means it was deleted under the worker:
:class:`~kinesis_core.checkpoint.base.CheckpointTableGoneError`, naming the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.classify import ErrorKind, classify, error_details
from kinesis_core.aws.client import create_dynamodb_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.aws.retry import NotYet, RetryPolicy, not_yet
from kinesis_core.checkpoint.base import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointTableGoneError,
    CheckpointValue,
    Sentinel,
    apply_lease,
    apply_put,
    same_incarnation,
)
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from types_aiobotocore_dynamodb.client import DynamoDBClient

__all__ = ["DynamoDBCheckpointStore", "TableUsage", "decode_lease", "encode_lease"]

logger = logging.getLogger(__name__)

LEASE_KEY = "leaseKey"
CHECKPOINT_OWNER = "checkpointOwner"
THROUGHPUT = "throughputKBps"
DEDUP_WINDOW = "dedupWindow"
WORKER = "WORKER"
WORKER_KEY = "worker:"
"""The ``leaseKey`` prefix of worker rows (never a shard id)."""
ASSIGNMENTS = "assignments"
"""On a worker row: bumped by the leader each round it assigned the worker leases."""
LEADER_KEY = "leader:"
"""The ``leaseKey`` of the leader row (never a shard id)."""
OWNER_INDEX = "LeaseOwnerToLeaseKeyIndex"
"""The KCL 3.x index from ``leaseOwner`` to ``leaseKey`` (keys only)."""
_OWNER_INDEX_KEYS = [
    {"AttributeName": "leaseOwner", "KeyType": "HASH"},
    {"AttributeName": LEASE_KEY, "KeyType": "RANGE"},
]
STREAM_CREATED = "streamCreatedMillis"
APPLICATION = "applicationName"
STREAM = "kinesisStream"
_OPTIONAL = ("parentShardId", "childShardIds", "startingHashKey", "endingHashKey")
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
TABLE_POLL = RetryPolicy(
    base=0.1,
    cap=2.0,
    jitter=Jitter.EQUAL,
    attempts=None,
    retry_on=frozenset({ErrorKind.IN_USE}),
    unknown=not_yet,
)
"""The looks at a lease table being created, until ACTIVE (the deadline is ``table_timeout``);
an error of DescribeTable raises."""
_REMOVED_BY_CHECKPOINT = (
    "pendingCheckpoint",
    "pendingCheckpointSubSequenceNumber",
    "pendingCheckpointState",
)
Item = Mapping[str, Any]
Items = list[Item]
Rows = list[Checkpoint]
Keys = list[str]


def _string(item: Item, name: str) -> str | None:
    value = item.get(name)
    return None if value is None else str(value["S"])


def _number(item: Item, name: str) -> int | None:
    value = item.get(name)
    return None if value is None else int(value["N"])


def _float(item: Item, name: str) -> float | None:
    value = item.get(name)
    return None if value is None else float(value["N"])


def _string_set(item: Item, name: str) -> tuple[str, ...]:
    value = item.get(name)
    return () if value is None else tuple(sorted(value["SS"]))


def _value_bytes(value: Mapping[str, Any]) -> int:
    """The bytes DynamoDB counts for one attribute value (numbers: about a byte per two
    digits, plus one)."""
    ((kind, inner),) = value.items()
    if kind == "S" or kind == "B":
        return len(inner.encode() if isinstance(inner, str) else inner)
    if kind == "N":
        return (len(str(inner).lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind in ("SS", "BS"):
        return sum(_value_bytes({kind[0]: v}) for v in inner)
    if kind == "NS":
        return sum(_value_bytes({"N": v}) for v in inner)
    return 1


def item_bytes(item: Item) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


@dataclasses.dataclass
class TableUsage:
    """Read and write capacity units the calls of one store consumed, counted by DynamoDB's
    rules from the items read and written (on-demand tables bill the same units)."""

    read_units: float = 0.0
    write_units: float = 0.0
    reads: int = 0
    """Calls that read (GetItem, and each page of a Scan or Query)."""
    writes: int = 0
    read_units_by_call: dict[str, float] = dataclasses.field(default_factory=dict)
    """Read units per kind of call: ``scan``, ``query`` (the owner index), ``get`` (a lease),
    ``leader`` (the leader row)."""

    def read(self, items: Sequence[Item], *, consistent: bool, call: str) -> None:
        """One GetItem, or one page of a Scan or Query, that read ``items``."""
        units = max(1, math.ceil(sum(item_bytes(i) for i in items) / 4096))
        spent = units if consistent else units / 2
        self.read_units += spent
        self.read_units_by_call[call] = self.read_units_by_call.get(call, 0.0) + spent
        self.reads += 1

    def wrote(self, item: Item | None) -> None:
        """One write of ``item`` (None: a small one, under 1 KB)."""
        self.write_units += max(1, math.ceil(item_bytes(item or {}) / 1024))
        self.writes += 1


def decode_lease(item: Item) -> Checkpoint | None:
    """A lease-table item as a Checkpoint; None for an item that is not a lease."""
    entity_type = _string(item, "entityType")
    if entity_type not in (None, "LEASE"):
        return None
    shard_id = _string(item, LEASE_KEY)
    checkpoint = _string(item, "checkpoint")
    if shard_id is None or checkpoint is None:
        raise ValidationError("checkpoint", f"lease item {shard_id!r} has no checkpoint attribute")
    value: CheckpointValue
    if checkpoint.isdigit():
        value = (int(checkpoint), _number(item, "checkpointSubSequenceNumber") or 0)
    else:
        try:
            value = Sentinel(checkpoint)
        except ValueError:
            raise ValidationError(
                "checkpoint",
                f"lease {shard_id!r}: {checkpoint!r} is neither a sequence number nor a sentinel",
            ) from None
    start, end = _string(item, "startingHashKey"), _string(item, "endingHashKey")
    return Checkpoint(
        shard_id,
        value,
        _number(item, "leaseCounter") or 0,
        _string(item, "leaseOwner"),
        _string_set(item, "parentShardId"),
        _string_set(item, "childShardIds"),
        None if not start or not end else (int(start), int(end)),
        _number(item, STREAM_CREATED),
        _string(item, CHECKPOINT_OWNER),
        _float(item, THROUGHPUT),
        _string(item, DEDUP_WINDOW),
    )


def _checkpoint_attributes(value: CheckpointValue) -> dict[str, Any]:
    if isinstance(value, Sentinel):
        sequence, sub = value.value, 0
    else:
        sequence, sub = str(value[0]), value[1]
    return {
        "checkpoint": {"S": sequence},
        "checkpointSubSequenceNumber": {"N": str(sub)},
    }


def _optional_attributes(
    parents: Sequence[str],
    children: Sequence[str],
    hash_range: tuple[int, int] | None,
    stream_created_ms: int | None,
) -> dict[str, Any]:
    """Parent and child sets (DynamoDB has no empty sets: absent when empty), hash range and
    the stream's creation time, those that are known."""
    out: dict[str, Any] = {}
    if parents:
        out["parentShardId"] = {"SS": list(parents)}
    if children:
        out["childShardIds"] = {"SS": list(children)}
    if hash_range is not None:
        out["startingHashKey"] = {"S": str(hash_range[0])}
        out["endingHashKey"] = {"S": str(hash_range[1])}
    if stream_created_ms is not None:
        out[STREAM_CREATED] = {"N": str(stream_created_ms)}
    return out


def encode_lease(row: Checkpoint) -> dict[str, Any]:
    """The full item of a new lease, as the KCL's serializer writes one."""
    item: dict[str, Any] = {
        LEASE_KEY: {"S": row.shard_id},
        "leaseCounter": {"N": str(row.counter)},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
        "entityType": {"S": "LEASE"},
        **_checkpoint_attributes(row.value),
        **_optional_attributes(
            row.parent_shard_ids, row.child_shard_ids, row.hash_range, row.stream_created_ms
        ),
    }
    if row.owner is not None:
        item["leaseOwner"] = {"S": row.owner}
    if row.checkpoint_owner is not None:
        item[CHECKPOINT_OWNER] = {"S": row.checkpoint_owner}
    if row.throughput_kbps is not None:
        item[THROUGHPUT] = {"N": repr(row.throughput_kbps)}
    if row.dedup_window is not None:
        item[DEDUP_WINDOW] = {"S": row.dedup_window}
    return item


def _normalized(row: Checkpoint) -> Checkpoint:
    """The row as it reads back (DynamoDB sets have no order)."""
    return Checkpoint(
        row.shard_id,
        row.value,
        row.counter,
        row.owner,
        tuple(sorted(row.parent_shard_ids)),
        tuple(sorted(row.child_shard_ids)),
        row.hash_range,
        row.stream_created_ms,
        row.checkpoint_owner,
        row.throughput_kbps,
        row.dedup_window,
    )


class _Update:
    """An UpdateExpression with its placeholders, built clause by clause."""

    def __init__(self, expected: Checkpoint, scope: _Scope) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {":counter": {"N": str(expected.counter)}}
        self._set: list[str] = []
        self._remove: list[str] = []
        self._add: list[str] = []
        mine = []
        for attribute, value in scope.attributes().items():
            self.set(attribute, value)
            mine.append(f"(attribute_not_exists(#{attribute}) OR #{attribute} = :{attribute})")
        owner = "attribute_not_exists(#leaseOwner)"
        self.names["#leaseOwner"] = "leaseOwner"
        self.names["#leaseCounter"] = "leaseCounter"
        if expected.owner is not None:
            owner = "#leaseOwner = :expectedOwner"
            self.values[":expectedOwner"] = {"S": expected.owner}
        handing = f"attribute_not_exists(#{CHECKPOINT_OWNER})"
        self.names[f"#{CHECKPOINT_OWNER}"] = CHECKPOINT_OWNER
        if expected.checkpoint_owner is not None:
            handing = f"#{CHECKPOINT_OWNER} = :expectedCheckpointOwner"
            self.values[":expectedCheckpointOwner"] = {"S": expected.checkpoint_owner}
        self.condition = " AND ".join(
            [f"#leaseCounter = :counter AND {owner} AND {handing}", *mine]
        )

    def _name(self, attribute: str) -> str:
        self.names[f"#{attribute}"] = attribute
        return f"#{attribute}"

    def set(self, attribute: str, value: Any) -> None:
        self.values[f":{attribute}"] = value
        self._set.append(f"{self._name(attribute)} = :{attribute}")

    def remove(self, attribute: str) -> None:
        self._remove.append(self._name(attribute))

    def add(self, attribute: str, value: Any) -> None:
        self.values[f":{attribute}"] = value
        self._add.append(f"{self._name(attribute)} :{attribute}")

    @property
    def expression(self) -> str:
        parts = []
        for keyword, clauses in (("SET", self._set), ("REMOVE", self._remove), ("ADD", self._add)):
            if clauses:
                parts.append(f"{keyword} {', '.join(clauses)}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True, slots=True)
class _Scope:
    """Whose rows a call reads and writes: a table, an application and a stream (by name)."""

    table: str
    application: str
    stream: str

    def attributes(self) -> dict[str, Any]:
        return {APPLICATION: {"S": self.application}, STREAM: {"S": self.stream}}

    def check(self, item: Item) -> None:
        """Refuse a row of another application or stream (absent: a KCL's row, anyone's)."""
        application, stream = _string(item, APPLICATION), _string(item, STREAM)
        if application not in (None, self.application):
            raise ConfigurationError(
                "application_name",
                f"lease table {self.table!r} holds the leases of application {application!r}, "
                f"not {self.application!r}: a lease table serves one application (two on one "
                "table would each read only the shards it took from the other); give this "
                "application its own table (table_name, or None for one named after it)",
            )
        if stream not in (None, self.stream):
            raise ConfigurationError(
                "stream",
                f"lease table {self.table!r} already holds the leases of stream {stream!r}; a "
                "KCL lease table serves one stream: give each stream its own application "
                "name or table_name",
            )

    @contextlib.contextmanager
    def present(self) -> Iterator[None]:
        """A ResourceNotFoundException from a table this store found or created: it was
        deleted since. CheckpointTableGoneError, naming it."""
        try:
            yield
        except ClientError as exc:
            if error_details(exc)[0] != "ResourceNotFoundException":
                raise
            raise CheckpointTableGoneError(
                self.table,
                f"DynamoDB lease table {self.table!r} no longer exists (deleted while this "
                f"worker of application {self.application!r} used it): its checkpoints and "
                "leases are gone, and a worker that creates it again reads every shard from "
                "its initial position; stop every worker before deleting a lease table",
            ) from exc


class _TableNotActive(NotYet):
    def __init__(self, table: str, status: str | None) -> None:
        super().__init__(f"lease table {table!r} is {status}, not ACTIVE")
        self.status = status


_ATTRIBUTES: list[Any] = [
    {"AttributeName": LEASE_KEY, "AttributeType": "S"},
    {"AttributeName": "leaseOwner", "AttributeType": "S"},
]


async def _active(client: DynamoDBClient, table: str) -> Mapping[str, Any]:
    """DescribeTable: :class:`_TableNotActive` until the table is ACTIVE; its description."""
    description = (await client.describe_table(TableName=table))["Table"]
    status = description.get("TableStatus")
    if status != "ACTIVE":
        raise _TableNotActive(table, status)
    return description


def _owner_index() -> Any:
    """The KCL 3.x ``LeaseOwnerToLeaseKeyIndex``: ``leaseOwner`` (hash) and ``leaseKey``
    (range), keys only."""
    return {
        "IndexName": OWNER_INDEX,
        "KeySchema": _OWNER_INDEX_KEYS,
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }


def _index_status(table: Mapping[str, Any]) -> str | None:
    """The status of the owner index in a table's description (None: no such index)."""
    for index in table.get("GlobalSecondaryIndexes", ()):
        if index.get("IndexName") == OWNER_INDEX:
            return str(index.get("IndexStatus", "ACTIVE"))
    return None


def _failed_condition(exc: ClientError) -> bool:
    """A conditional write lost: the stored row is not the one the write expected."""
    return classify(*error_details(exc)) is ErrorKind.CONFLICT


class DynamoDBCheckpointStore:
    """Checkpoints and leases in a KCL lease table.

    ``table_name`` None uses the application name, as the KCL does (one table per
    application, and one stream per table: the KCL's single-stream mode). ``create_table``
    creates a missing table on first use, keyed by ``leaseKey`` with on-demand billing;
    False requires an existing table. ``client`` is an aiobotocore DynamoDB client the
    caller owns; otherwise one is made from ``client_config`` (default: the environment)
    in the event loop of the first call, and closed by :meth:`close`. ``clock`` is what the
    waits for a table being created run on.
    """

    def __init__(
        self,
        table_name: str | None = None,
        *,
        client_config: ClientConfig | None = None,
        client: DynamoDBClient | None = None,
        create_table: bool = True,
        table_timeout: float = 120.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if table_name is not None:
            _check_table_name("table_name", table_name)
        if table_timeout <= 0:
            raise ConfigurationError("table_timeout", f"must be > 0 seconds, got {table_timeout}")
        self.table_name = table_name
        self.create_table = create_table
        self._table_timeout = table_timeout
        self._clock = clock
        self._client_config = client_config
        self._client = client
        self._exit = contextlib.AsyncExitStack()
        self._tables: dict[str, str] = {}
        """Table -> the stream it serves (checked in this process only)."""
        self._table_locks: dict[str, asyncio.Lock] = {}
        self._indexed: set[str] = set()
        """Tables whose owner index is ACTIVE."""
        self._unindexed_warned: set[str] = set()
        self._closed = False
        self.usage = TableUsage()
        """The read and write units this store's calls consumed so far."""

    # -- plumbing -----------------------------------------------------------------------------

    async def _dynamodb(self) -> DynamoDBClient:
        if self._closed:
            raise RuntimeError("DynamoDBCheckpointStore is closed")
        if self._client is None:
            config = self._client_config or ClientConfig.from_env()
            # A few attempts, not botocore's ten: a lease renewal that hangs in retries for
            # longer than the failover time is worse than one that fails and is tried again.
            self._client = await self._exit.enter_async_context(
                create_dynamodb_client(config, max_attempts=3)
            )
        return self._client

    async def _table(self, application: str, stream: str) -> tuple[DynamoDBClient, _Scope]:
        """The client and the table of ``application`` (created and ACTIVE), with whose rows
        are wanted."""
        client = await self._dynamodb()
        table = self.table_name or application
        served = self._tables.get(table)
        if served is not None:
            if _stream_name(served) != _stream_name(stream):
                raise ConfigurationError(
                    "stream",
                    f"lease table {table!r} already holds the leases of stream {served!r}; a "
                    "KCL lease table serves one stream: give each stream its own application "
                    "name or table_name",
                )
            return client, _Scope(table, application, _stream_name(stream))
        if self.table_name is None:
            _check_table_name("application_name", table)
        async with self._table_locks.setdefault(table, asyncio.Lock()):
            if table not in self._tables:
                await self._ensure_table(client, table)
                self._tables[table] = stream
        return client, _Scope(table, application, _stream_name(stream))

    async def _ensure_table(self, client: DynamoDBClient, table: str) -> None:
        """Find the table (or create it, with the owner index) and wait until it is ACTIVE
        (:data:`TABLE_POLL`); add the owner index to a table found without it."""
        try:
            description = await _active(client, table)
            await self._ensure_index(client, table, description)
            return
        except client.exceptions.ResourceNotFoundException:
            if not self.create_table:
                raise ConfigurationError(
                    "create_table", f"lease table {table!r} does not exist (create_table=False)"
                ) from None
            with contextlib.suppress(client.exceptions.ResourceInUseException):
                await client.create_table(
                    TableName=table,
                    KeySchema=[{"AttributeName": LEASE_KEY, "KeyType": "HASH"}],
                    AttributeDefinitions=_ATTRIBUTES,
                    GlobalSecondaryIndexes=[_owner_index()],
                    BillingMode="PAY_PER_REQUEST",
                )
        except _TableNotActive:
            pass  # being created: waited for below
        executor = AsyncExecutor(client, clock=self._clock)
        policy = dataclasses.replace(TABLE_POLL, deadline=self._table_timeout)
        what = f"the look at lease table {table!r}"
        try:
            await executor.attempt(lambda: _active(client, table), policy, what)
        except _TableNotActive as exc:
            raise ConfigurationError(
                "table_timeout",
                f"lease table {table!r} is still {exc.status} after {self._table_timeout:g} s",
            ) from exc

    async def _ensure_index(
        self, client: DynamoDBClient, table: str, description: Mapping[str, Any]
    ) -> None:
        """Add ``LeaseOwnerToLeaseKeyIndex`` to a table without it (``create_table``; on a
        provisioned table with the table's capacity, as the KCL 3.x does). DynamoDB builds it
        in the background; :meth:`owned` reads the table until it is ACTIVE. A refusal (no
        ``UpdateTable`` permission) is logged, and the workers read the table."""
        if not self.create_table or _index_status(description) is not None:
            return
        index = _owner_index()
        billing = description.get("BillingModeSummary", {}).get("BillingMode")
        capacity = description.get("ProvisionedThroughput", {})
        if billing != "PAY_PER_REQUEST" and capacity.get("ReadCapacityUnits"):
            index["ProvisionedThroughput"] = {
                "ReadCapacityUnits": capacity["ReadCapacityUnits"],
                "WriteCapacityUnits": capacity["WriteCapacityUnits"],
            }
        try:
            await client.update_table(
                TableName=table,
                AttributeDefinitions=_ATTRIBUTES,
                GlobalSecondaryIndexUpdates=[{"Create": index}],
            )
        except ClientError as exc:
            logger.warning("adding index %s to lease table %r failed: %r", OWNER_INDEX, table, exc)
            return
        logger.info("adding index %s to lease table %r", OWNER_INDEX, table)

    async def _conflict(
        self,
        client: DynamoDBClient,
        scope: _Scope,
        exc: ClientError,
        intended: Checkpoint,
        *,
        created: bool,
    ) -> Checkpoint:
        """A failed condition: CheckpointConflictError with the row as stored. An update
        whose intended row is already there succeeded after all: a retried request whose
        first attempt went through (the KCL's "spurious failure"); its counter and owner make
        it that request's result. Not so for a create, which any worker may make alike. A row
        of another application or stream raises ConfigurationError."""
        item = exc.response.get("Item")
        if item is None:
            # Not every DynamoDB (DynamoDB Local, old emulators) returns the item; read it.
            with scope.present():
                response = await client.get_item(
                    TableName=scope.table,
                    Key={LEASE_KEY: {"S": intended.shard_id}},
                    ConsistentRead=True,
                )
            item = response.get("Item")
            self.usage.read([item] if item else [], consistent=True, call="get")
        if item:
            scope.check(item)
        current = None if not item else decode_lease(item)
        if created:
            reason = "a row exists, none was expected"
        elif current is None:
            reason = "the expected row does not exist"
        elif current == _normalized(intended):
            return current
        else:
            reason = (
                f"counter is {current.counter} (owner {current.owner}), expected "
                f"{intended.counter - 1}"
            )
        raise CheckpointConflictError(intended.shard_id, current, reason) from None

    async def _update(
        self,
        client: DynamoDBClient,
        scope: _Scope,
        intended: Checkpoint,
        update: _Update,
    ) -> Checkpoint:
        try:
            with scope.present():
                response = await client.update_item(
                    TableName=scope.table,
                    Key={LEASE_KEY: {"S": intended.shard_id}},
                    UpdateExpression=update.expression,
                    ConditionExpression=update.condition,
                    ExpressionAttributeNames=update.names,
                    ExpressionAttributeValues=update.values,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise
            self.usage.wrote(exc.response.get("Item"))
            return await self._conflict(client, scope, exc, intended, created=False)
        self.usage.wrote(response["Attributes"])
        row = decode_lease(response["Attributes"])
        if row is None:
            raise CheckpointConflictError(intended.shard_id, None, "the item is not a lease")
        return row

    # -- the CheckpointStore protocol ---------------------------------------------------------

    async def get(self, application: str, stream: str, shard_id: str) -> Checkpoint | None:
        client, scope = await self._table(application, stream)
        with scope.present():
            response = await client.get_item(
                TableName=scope.table, Key={LEASE_KEY: {"S": shard_id}}, ConsistentRead=True
            )
        item = response.get("Item")
        self.usage.read([item] if item else [], consistent=True, call="get")
        if not item:
            return None
        scope.check(item)
        return decode_lease(item)

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        """Every lease of the table (a consistent scan, all pages)."""
        return (await self.snapshot(application, stream))[0]

    async def _scan(self, scope: _Scope, client: DynamoDBClient, **extra: Any) -> Items:
        """Every item of the table (a consistent scan, all pages), each checked for its
        application and stream."""
        items: Items = []
        kwargs: dict[str, Any] = {"TableName": scope.table, "ConsistentRead": True, **extra}
        while True:
            with scope.present():
                page = await client.scan(**kwargs)
            got = page.get("Items", [])
            self.usage.read(got, consistent=True, call="scan")
            for item in got:
                scope.check(item)
            items.extend(got)
            last = page.get("LastEvaluatedKey")
            if not last:
                return items
            kwargs["ExclusiveStartKey"] = last

    async def snapshot(self, application: str, stream: str) -> tuple[Rows, dict[str, int]]:
        """Every lease and every worker row, from one consistent scan of the table."""
        client, scope = await self._table(application, stream)
        rows: Rows = []
        workers: dict[str, int] = {}
        for item in await self._scan(scope, client):
            if _string(item, LEASE_KEY) == LEADER_KEY:
                continue
            if _string(item, "entityType") == WORKER:
                worker, counter = _string(item, "workerId"), _number(item, "leaseCounter")
                if worker is not None and counter is not None:
                    workers[worker] = counter
                continue
            row = decode_lease(item)
            if row is not None:
                rows.append(row)
        return rows, workers

    async def put(
        self,
        application: str,
        stream: str,
        shard_id: str,
        value: CheckpointValue,
        *,
        expected: Checkpoint | None,
        parent_shard_ids: Sequence[str] = (),
        child_shard_ids: Sequence[str] = (),
        hash_range: tuple[int, int] | None = None,
        stream_created_ms: int | None = None,
        dedup_window: str | None = None,
    ) -> Checkpoint:
        """Create a lease (``expected=None``) or write its checkpoint, as the KCL's
        ``createLeaseIfNotExists`` and ``updateLease`` do."""
        # The condition on the counter makes the stored row the expected one, so the rule is
        # checked against ``expected`` (a 56-digit sequence number has no DynamoDB number).
        intended = apply_put(
            expected,
            shard_id,
            value,
            expected,
            parent_shard_ids,
            child_shard_ids,
            hash_range,
            stream_created_ms,
            dedup_window,
        )
        if expected is None:
            return await self._create(application, stream, intended)
        client, scope = await self._table(application, stream)
        update = _Update(expected, scope)
        for name, attribute in _checkpoint_attributes(intended.value).items():
            update.set(name, attribute)
        update.set("ownerSwitchesSinceCheckpoint", {"N": "0"})
        update.set("leaseCounter", {"N": str(intended.counter)})
        given = _optional_attributes(
            parent_shard_ids, child_shard_ids, hash_range, stream_created_ms
        )
        for name, attribute in given.items():
            update.set(name, attribute)
        if dedup_window is not None:
            update.set(DEDUP_WINDOW, {"S": dedup_window})
        removed = [*_REMOVED_BY_CHECKPOINT, CHECKPOINT_OWNER]
        if not same_incarnation(expected, stream_created_ms):
            # A row of a stream that no longer exists starts over: its shard's ids go.
            removed += [name for name in _OPTIONAL if name not in given] + [THROUGHPUT]
            if dedup_window is None:
                removed.append(DEDUP_WINDOW)
        for name in removed:
            update.remove(name)
        return await self._update(client, scope, intended, update)

    async def _create(self, application: str, stream: str, row: Checkpoint) -> Checkpoint:
        client, scope = await self._table(application, stream)
        try:
            with scope.present():
                await client.put_item(
                    TableName=scope.table,
                    Item={**encode_lease(row), **scope.attributes()},
                    ConditionExpression="attribute_not_exists(#key)",
                    ExpressionAttributeNames={"#key": LEASE_KEY},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise
            self.usage.wrote(exc.response.get("Item"))
            return await self._conflict(client, scope, exc, row, created=True)
        self.usage.wrote(encode_lease(row))
        return _normalized(row)

    async def update_lease(
        self,
        application: str,
        stream: str,
        shard_id: str,
        *,
        expected: Checkpoint,
        owner: str | None,
        checkpoint_owner: str | None = None,
        throughput_kbps: float | None = None,
    ) -> Checkpoint:
        """Renew, take, release or ask to hand over, as the KCL's ``renewLease``,
        ``takeLease``, ``evictLease`` and ``initiateGracefulLeaseHandoff`` do (but every one
        of them conditional on the counter); a renewal's throughput goes to the KCL 3.x
        ``throughputKBps``."""
        intended = apply_lease(
            expected, shard_id, expected, owner, checkpoint_owner, throughput_kbps
        )
        client, scope = await self._table(application, stream)
        update = _Update(expected, scope)
        update.set("leaseCounter", {"N": str(intended.counter)})
        if owner is None:
            update.remove("leaseOwner")
        elif owner != expected.owner:
            update.set("leaseOwner", {"S": owner})
            if expected.owner is not None:
                update.add("ownerSwitchesSinceCheckpoint", {"N": "1"})
        if checkpoint_owner is None:
            update.remove(CHECKPOINT_OWNER)
        elif checkpoint_owner != expected.checkpoint_owner:
            update.set(CHECKPOINT_OWNER, {"S": checkpoint_owner})
        if throughput_kbps is not None:
            update.set(THROUGHPUT, {"N": repr(throughput_kbps)})
        return await self._update(client, scope, intended, update)

    async def heartbeat(
        self, application: str, stream: str, worker_id: str, *, leaving: bool = False
    ) -> None:
        """The worker row of ``worker_id``: counter +1 (created at 1), or deleted."""
        client, scope = await self._table(application, stream)
        key = {LEASE_KEY: {"S": WORKER_KEY + worker_id}}
        if leaving:
            self.usage.wrote(None)
            with scope.present():
                await client.delete_item(TableName=scope.table, Key=key)
            return
        await self.beat(application, stream, worker_id)

    async def beat(self, application: str, stream: str, worker_id: str) -> int:
        """:meth:`heartbeat`, returning the row's ``assignments`` (what the write returns
        costs no read)."""
        client, scope = await self._table(application, stream)
        key = {LEASE_KEY: {"S": WORKER_KEY + worker_id}}
        self.usage.wrote(None)
        with scope.present():
            response = await client.update_item(
                TableName=scope.table,
                ReturnValues="ALL_NEW",
                Key=key,
                UpdateExpression="SET #type = :type, #worker = :worker, #app = :app, "
                "#stream = :stream ADD #counter :one",
                ExpressionAttributeNames={
                    "#type": "entityType",
                    "#worker": "workerId",
                    "#counter": "leaseCounter",
                    "#app": APPLICATION,
                    "#stream": STREAM,
                },
                ExpressionAttributeValues={
                    ":type": {"S": WORKER},
                    ":worker": {"S": worker_id},
                    ":one": {"N": "1"},
                    ":app": {"S": scope.application},
                    ":stream": {"S": scope.stream},
                },
            )
        return _number(response.get("Attributes", {}), ASSIGNMENTS) or 0

    async def nudge(self, application: str, stream: str, worker_id: str) -> None:
        """``assignments`` +1 on the worker row of ``worker_id``, if it has one."""
        client, scope = await self._table(application, stream)
        self.usage.wrote(None)
        try:
            with scope.present():
                await client.update_item(
                    TableName=scope.table,
                    Key={LEASE_KEY: {"S": WORKER_KEY + worker_id}},
                    UpdateExpression="ADD #assignments :one",
                    ConditionExpression="attribute_exists(#key)",
                    ExpressionAttributeNames={"#assignments": ASSIGNMENTS, "#key": LEASE_KEY},
                    ExpressionAttributeValues={":one": {"N": "1"}},
                )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise

    async def forget_worker(
        self, application: str, stream: str, worker_id: str, counter: int
    ) -> None:
        """Delete the worker row of ``worker_id`` if its counter is still ``counter``."""
        client, scope = await self._table(application, stream)
        self.usage.wrote(None)
        try:
            with scope.present():
                await client.delete_item(
                    TableName=scope.table,
                    Key={LEASE_KEY: {"S": WORKER_KEY + worker_id}},
                    ConditionExpression="#counter = :counter",
                    ExpressionAttributeNames={"#counter": "leaseCounter"},
                    ExpressionAttributeValues={":counter": {"N": str(counter)}},
                )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise

    async def workers(self, application: str, stream: str) -> dict[str, int]:
        """Every worker row (a consistent scan of the table, all pages: DynamoDB bills a
        scan for every item it reads, so a filter would save nothing)."""
        return (await self.snapshot(application, stream))[1]

    # -- reads that grow with what a worker owns ----------------------------------------------

    async def owned(self, application: str, stream: str, worker_id: str) -> Keys:
        """The shard ids of ``worker_id``'s leases, from ``LeaseOwnerToLeaseKeyIndex`` (an
        eventually consistent query of keys); from a scan while the index is not ACTIVE."""
        client, scope = await self._table(application, stream)
        if not await self._index_active(client, scope):
            rows = await self.list(application, stream)
            return [row.shard_id for row in rows if row.owner == worker_id]
        keys: Keys = []
        kwargs: dict[str, Any] = {
            "TableName": scope.table,
            "IndexName": OWNER_INDEX,
            "KeyConditionExpression": "#owner = :owner",
            "ExpressionAttributeNames": {"#owner": "leaseOwner"},
            "ExpressionAttributeValues": {":owner": {"S": worker_id}},
        }
        while True:
            with scope.present():
                page = await client.query(**kwargs)
            got = page.get("Items", [])
            self.usage.read(got, consistent=False, call="query")
            keys.extend(str(item[LEASE_KEY]["S"]) for item in got)
            last = page.get("LastEvaluatedKey")
            if not last:
                return keys
            kwargs["ExclusiveStartKey"] = last

    async def _index_active(self, client: DynamoDBClient, scope: _Scope) -> bool:
        if scope.table in self._indexed:
            return True
        with scope.present():
            table = (await client.describe_table(TableName=scope.table))["Table"]
        status = _index_status(table)
        if status == "ACTIVE":
            self._indexed.add(scope.table)
            return True
        if scope.table not in self._unindexed_warned:
            self._unindexed_warned.add(scope.table)
            logger.warning(
                "lease table %r: index %s is %s; workers read the table instead until it is "
                "ACTIVE%s",
                scope.table,
                OWNER_INDEX,
                status or "missing",
                "" if status else " (create_table=False: add it as docs/leases.md says)",
            )
        return False

    async def leader(self, application: str, stream: str) -> tuple[str | None, int]:
        """The leader row (an eventually consistent read: the claim that follows is
        conditional)."""
        client, scope = await self._table(application, stream)
        with scope.present():
            response = await client.get_item(
                TableName=scope.table, Key={LEASE_KEY: {"S": LEADER_KEY}}
            )
        item = response.get("Item")
        self.usage.read([item] if item else [], consistent=False, call="leader")
        if not item:
            return None, 0
        scope.check(item)
        return _string(item, "leaderId"), _number(item, "leaseCounter") or 0

    async def claim_leader(
        self, application: str, stream: str, worker_id: str, expected: int | None
    ) -> int | None:
        """The leader row names ``worker_id``, counter +1, if its counter was ``expected``
        (None: no row)."""
        client, scope = await self._table(application, stream)
        condition = "attribute_not_exists(#key)" if expected is None else "#counter = :expected"
        values: dict[str, Any] = {
            ":type": {"S": WORKER},
            ":leader": {"S": worker_id},
            ":counter": {"N": str((expected or 0) + 1)},
            ":app": {"S": scope.application},
            ":stream": {"S": scope.stream},
        }
        names = {
            "#type": "entityType",
            "#leader": "leaderId",
            "#worker": "workerId",
            "#counter": "leaseCounter",
            "#app": APPLICATION,
            "#stream": STREAM,
        }
        if expected is None:
            names["#key"] = LEASE_KEY
        else:
            values[":expected"] = {"N": str(expected)}
        self.usage.wrote(None)
        try:
            with scope.present():
                await client.update_item(
                    TableName=scope.table,
                    Key={LEASE_KEY: {"S": LEADER_KEY}},
                    UpdateExpression="SET #type = :type, #leader = :leader, #worker = :leader, "
                    "#counter = :counter, #app = :app, #stream = :stream",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise
            return None
        return (expected or 0) + 1

    async def resign_leader(self, application: str, stream: str, worker_id: str) -> None:
        """Delete the leader row if it names ``worker_id``."""
        client, scope = await self._table(application, stream)
        self.usage.wrote(None)
        try:
            with scope.present():
                await client.delete_item(
                    TableName=scope.table,
                    Key={LEASE_KEY: {"S": LEADER_KEY}},
                    ConditionExpression="#leader = :me",
                    ExpressionAttributeNames={"#leader": "leaderId"},
                    ExpressionAttributeValues={":me": {"S": worker_id}},
                )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise

    async def close(self) -> None:
        """Close the client this store made (not one the caller passed in)."""
        if self._closed:
            return
        self._closed = True
        await self._exit.aclose()

    def __repr__(self) -> str:
        table = "one per application" if self.table_name is None else repr(self.table_name)
        return f"DynamoDBCheckpointStore(table {table})"

    async def __aenter__(self) -> DynamoDBCheckpointStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _check_table_name(field: str, name: str) -> None:
    if not _TABLE_NAME.fullmatch(name):
        raise ConfigurationError(
            field, f"a DynamoDB table name is 3-255 characters of A-Z a-z 0-9 _ . -, got {name!r}"
        )


def _stream_name(stream: str) -> str:
    """The name of a stream given by name or ARN."""
    return stream.rsplit("/", 1)[-1]
