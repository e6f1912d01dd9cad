"""An in-memory Kinesis: the one fake of the Kinesis API that the unit tests of the producer,
the consumer, leases and the Beam source share (tests against kinesis-mock and moto prove the
same features for real).

Faithful where those depend on it:

- PutRecords routes every entry by its explicit hash key (or the MD5 of its partition key) to
  the open shard that owns it and gives it the next sequence number;
- ``split`` / ``merge`` close shards the way resharding does: a closed parent keeps its
  records, lists an EndingSequenceNumber, and its last GetRecords page carries ChildShards and
  no NextShardIterator;
- ListShards pages (2 shards a page, so pagination is always exercised) and honours the
  AT_LATEST ShardFilter (any other filter, or none, lists every shard);
- GetShardIterator at TRIM_HORIZON, LATEST, AT_TIMESTAMP, AT_ and AFTER_SEQUENCE_NUMBER.

Failures on demand: ``faults[operation]`` (or ``faults[operation, shard_id]`` for the calls that
name a shard) is a list of exceptions the next calls raise, one each; ``script`` is a queue of
callables that answer the next PutRecords calls instead of the fake (they get the entries).
Every call is logged in ``calls``; ``count`` counts them.

``FakeKinesis`` has aiobotocore's async methods (give it as ``client=``); ``fake.sync`` has the
same calls as a botocore client has them, for synchronous code (the Beam source).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from botocore.exceptions import ClientError

from kinesis_core.aggregation import deaggregate, encode_aggregate
from kinesis_core.records import KinesisRecord, SubRecord
from kinesis_core.shards.hashing import MAX_HASH_KEY, hash_key

Entry = dict[str, Any]
Behaviour = Callable[[list[Entry]], dict[str, Any]]

FIRST_SEQUENCE_NUMBER = 49_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000
"""Sequence numbers as long as the service's (56 digits), increasing across the stream."""

PAGE_SIZE = 2


def client_error(
    code: str, message: str = "scripted", operation: str = "PutRecords", status: int = 400
) -> ClientError:
    """The error botocore raises for an error answer of the service."""
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        operation,
    )


@dataclass
class FakeShard:
    """A shard: its hash key range [start, end], parents, records; children once closed."""

    shard_id: str
    start: int
    end: int
    parents: tuple[str, ...] = ()
    records: list[Entry] = field(default_factory=list)
    children: list[FakeShard] | None = None

    @property
    def closed(self) -> bool:
        return self.children is not None

    @property
    def hash_range(self) -> tuple[int, int]:
        return self.start, self.end

    def contains(self, key: int) -> bool:
        return self.start <= key <= self.end

    def api(self) -> dict[str, Any]:
        """This shard as ListShards lists it."""
        shard: dict[str, Any] = {
            "ShardId": self.shard_id,
            "HashKeyRange": {"StartingHashKey": str(self.start), "EndingHashKey": str(self.end)},
            "SequenceNumberRange": {"StartingSequenceNumber": "0"},
        }
        if self.closed:
            shard["SequenceNumberRange"]["EndingSequenceNumber"] = "9" * 56
        if self.parents:
            shard["ParentShardId"] = self.parents[0]
        if len(self.parents) > 1:
            shard["AdjacentParentShardId"] = self.parents[1]
        return shard


class Call(NamedTuple):
    """One call the fake answered (or failed): its operation, the shard it named, if any, and
    its parameters (without PutRecords' records, which are in ``requests``)."""

    operation: str
    shard_id: str | None
    params: dict[str, Any]


class FakeKinesis:
    """The Kinesis API of one stream, in memory. ``shards`` is a count of shards splitting the
    hash key space evenly (``shardId-000000000000``, ...) or the shards themselves."""

    def __init__(
        self,
        shards: int | Iterable[FakeShard] = 4,
        *,
        delay: float = 0.0,
        arrival: datetime | None = None,
    ) -> None:
        self.shards: dict[str, FakeShard] = {}
        self._ids = itertools.count()
        if isinstance(shards, int):
            step = (MAX_HASH_KEY + 1) // shards
            for i in range(shards):
                end = MAX_HASH_KEY if i == shards - 1 else (i + 1) * step - 1
                self._add(FakeShard(self._new_id(), i * step, end))
        else:
            for shard in shards:
                self._add(shard)
        self.delay = delay
        """How long each PutRecords call takes."""
        self.arrival = arrival
        """The ApproximateArrivalTimestamp of every record put, or None for the time of put."""
        self.child_shards = True
        """False: a closed shard ends without ChildShards (as kinesis-mock's GetRecords does)."""
        self.faults: defaultdict[str | tuple[str, str], list[Exception]] = defaultdict(list)
        self.script: deque[Behaviour] = deque()
        self.calls: list[Call] = []
        self.shard_filters: list[dict[str, Any] | None] = []
        """The ShardFilter of every listing (its first ListShards page), None where none."""
        self.requests: list[list[Entry]] = []
        """The records of every PutRecords call."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._seq = itertools.count(FIRST_SEQUENCE_NUMBER)
        self.created = datetime(2024, 1, 1, tzinfo=timezone.utc)
        """The StreamCreationTimestamp DescribeStreamSummary answers (the stream's identity)."""
        self.max_record_size_kib: int | None = None
        """The MaxRecordSizeInKiB DescribeStreamSummary answers; None: no such field, as before
        late 2025 (1 MiB)."""
        self.sync = SyncKinesis(self)

    # -- the API, as aiobotocore's client has it ---------------------------------------------

    async def list_shards(self, **params: Any) -> dict[str, Any]:
        return self._list_shards(params)

    async def describe_stream_summary(self, **params: Any) -> dict[str, Any]:
        return self._describe_stream_summary(params)

    async def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        return self._get_shard_iterator(params)

    async def get_records(self, **params: Any) -> dict[str, Any]:
        return self._get_records(params)

    async def put_records(self, *, Records: list[Entry], **params: Any) -> dict[str, Any]:
        self.requests.append(Records)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            self._call("PutRecords", params)
            if self.script:
                return self.script.popleft()(Records)
            return self.accept(Records)
        finally:
            self.in_flight -= 1

    # -- the stream, for tests -----------------------------------------------------------------

    def put(
        self,
        partition_key: str,
        data: bytes,
        *,
        key: int | None = None,
        shard: str | None = None,
        at: datetime | None = None,
    ) -> int:
        """Store a record, as PutRecord would: on ``shard`` if given, else on the open shard
        owning ``key`` (the partition key's hash key by default). Returns its sequence
        number."""
        target = self.shards[shard] if shard is not None else self.owner(partition_key, key)
        sequence_number = next(self._seq)
        target.records.append(
            {
                "SequenceNumber": str(sequence_number),
                "Data": data,
                "PartitionKey": partition_key,
                "ApproximateArrivalTimestamp": at or self.arrival or datetime.now(timezone.utc),
            }
        )
        return sequence_number

    def put_aggregate(self, subs: list[SubRecord]) -> int:
        """Store one KPL aggregate of ``subs``, routed by the first one's partition key."""
        return self.put(subs[0].partition_key, encode_aggregate(subs))

    def owner(self, partition_key: str, key: int | None = None) -> FakeShard:
        """The open shard owning ``key`` (by default the hash key of ``partition_key``)."""
        key = hash_key(partition_key) if key is None else key
        return next(s for s in self.open_shards() if s.contains(key))

    def route(self, entry: Entry) -> FakeShard:
        """The open shard a PutRecords entry lands on."""
        explicit = entry.get("ExplicitHashKey")
        return self.owner(entry["PartitionKey"], None if explicit is None else int(explicit))

    def write(self, entry: Entry) -> dict[str, Any]:
        """Store one PutRecords entry; its entry of the PutRecords answer."""
        shard = self.route(entry)
        sequence_number = self.put(entry["PartitionKey"], entry["Data"], shard=shard.shard_id)
        return {"SequenceNumber": str(sequence_number), "ShardId": shard.shard_id}

    def accept(self, entries: list[Entry]) -> dict[str, Any]:
        """The answer of a PutRecords call that stores every entry."""
        return {"FailedRecordCount": 0, "Records": [self.write(e) for e in entries]}

    def open_shards(self) -> list[FakeShard]:
        return sorted((s for s in self.shards.values() if not s.closed), key=lambda s: s.start)

    def read_all(self, *, kcl: bool = True) -> list[KinesisRecord]:
        """Every user record stored, deaggregated per shard (with the KCL's hash range filter
        unless ``kcl`` is False)."""
        out: list[KinesisRecord] = []
        for shard in self.shards.values():
            hash_range = shard.hash_range if kcl else None
            out.extend(deaggregate(shard.records, shard.shard_id, hash_range))
        return out

    def reshard(self, shard_id: str, *children: FakeShard) -> None:
        """Close ``shard_id``: it ends with ``children`` (added as shards if new)."""
        self.shards[shard_id].children = list(children)
        for child in children:
            self.shards.setdefault(child.shard_id, child)

    def split(self, shard_id: str) -> tuple[str, str]:
        """Split an open shard in two halves; returns the children's ids."""
        parent = self.shards[shard_id]
        middle = (parent.start + parent.end) // 2
        left = FakeShard(self._new_id(), parent.start, middle, (shard_id,))
        right = FakeShard(self._new_id(), middle + 1, parent.end, (shard_id,))
        self.reshard(shard_id, left, right)
        return left.shard_id, right.shard_id

    def merge(self, first: str, second: str) -> str:
        """Merge two adjacent open shards; returns the child's id."""
        low, high = sorted((self.shards[first], self.shards[second]), key=lambda s: s.start)
        assert low.end + 1 == high.start, "not adjacent"
        child = FakeShard(self._new_id(), low.start, high.end, (first, second))
        self.reshard(first, child)
        self.reshard(second, child)
        return child.shard_id

    def count(self, operation: str, shard_id: str | None = None) -> int:
        """How many ``operation`` calls were made (naming ``shard_id``, if given)."""
        return sum(
            call.operation == operation and shard_id in (None, call.shard_id) for call in self.calls
        )

    # -- the calls, answered -------------------------------------------------------------------

    def _call(self, operation: str, params: Mapping[str, Any], shard_id: str | None = None) -> None:
        """Log the call, then raise its next scripted fault, if any."""
        self.calls.append(Call(operation, shard_id, dict(params)))
        keys: list[str | tuple[str, str]] = [operation]
        if shard_id is not None:
            keys.insert(0, (operation, shard_id))
        for key in keys:
            if self.faults.get(key):
                raise self.faults[key].pop(0)

    def _describe_stream_summary(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self._call("DescribeStreamSummary", params)
        summary: dict[str, Any] = {
            "StreamStatus": "ACTIVE",
            "StreamCreationTimestamp": self.created,
            "RetentionPeriodHours": 24,
            "OpenShardCount": sum(not shard.closed for shard in self.shards.values()),
        }
        if self.max_record_size_kib is not None:
            summary["MaxRecordSizeInKiB"] = self.max_record_size_kib
        return {"StreamDescriptionSummary": summary}

    def _list_shards(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self._call("ListShards", params)
        if "NextToken" in params:
            latest, _, start_text = params["NextToken"].partition(":")
            start, open_only = int(start_text), latest == "latest"
        else:
            shard_filter = params.get("ShardFilter")
            self.shard_filters.append(shard_filter)
            start = 0
            open_only = shard_filter is not None and shard_filter["Type"] == "AT_LATEST"
        listed = [s for s in self.shards.values() if not (open_only and s.closed)]
        response: dict[str, Any] = {"Shards": [s.api() for s in listed[start : start + PAGE_SIZE]]}
        if start + PAGE_SIZE < len(listed):
            response["NextToken"] = f"{'latest' if open_only else 'all'}:{start + PAGE_SIZE}"
        return response

    def _get_shard_iterator(self, params: Mapping[str, Any]) -> dict[str, Any]:
        shard = self.shards[params["ShardId"]]
        self._call("GetShardIterator", params, shard.shard_id)
        kind = params["ShardIteratorType"]
        if kind == "TRIM_HORIZON":
            index = 0
        elif kind == "LATEST":
            index = len(shard.records)
        elif kind == "AT_TIMESTAMP":
            index = next(
                (
                    i
                    for i, r in enumerate(shard.records)
                    if r["ApproximateArrivalTimestamp"] >= params["Timestamp"]
                ),
                len(shard.records),
            )
        else:
            target = int(params["StartingSequenceNumber"])
            after = kind == "AFTER_SEQUENCE_NUMBER"
            index = next(
                (
                    i
                    for i, r in enumerate(shard.records)
                    if (s := int(r["SequenceNumber"])) > target or (s == target and not after)
                ),
                len(shard.records),
            )
        return {"ShardIterator": f"{shard.shard_id}|{index}"}

    def _get_records(self, params: Mapping[str, Any]) -> dict[str, Any]:
        shard_id, index_text = params["ShardIterator"].split("|")
        self._call("GetRecords", params, shard_id)
        shard = self.shards[shard_id]
        start = int(index_text)
        page = shard.records[start : start + params.get("Limit", 10_000)]
        end = start + len(page)
        response: dict[str, Any] = {
            "Records": page,
            "MillisBehindLatest": 0 if end == len(shard.records) else 5000,
        }
        if shard.children is not None and end == len(shard.records):
            if self.child_shards:
                response["ChildShards"] = [
                    {
                        "ShardId": child.shard_id,
                        "ParentShards": list(child.parents),
                        "HashKeyRange": {
                            "StartingHashKey": str(child.start),
                            "EndingHashKey": str(child.end),
                        },
                    }
                    for child in shard.children
                ]
        else:
            response["NextShardIterator"] = f"{shard_id}|{end}"
        return response

    def _add(self, shard: FakeShard) -> None:
        self.shards[shard.shard_id] = shard

    def _new_id(self) -> str:
        shard_id = f"shardId-{next(self._ids):012d}"
        return self._new_id() if shard_id in self.shards else shard_id


class SyncKinesis:
    """The same stream through a synchronous client, as botocore's (the Beam source's)."""

    def __init__(self, fake: FakeKinesis) -> None:
        self._fake = fake

    def list_shards(self, **params: Any) -> dict[str, Any]:
        return self._fake._list_shards(params)

    def describe_stream_summary(self, **params: Any) -> dict[str, Any]:
        return self._fake._describe_stream_summary(params)

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        return self._fake._get_shard_iterator(params)

    def get_records(self, **params: Any) -> dict[str, Any]:
        return self._fake._get_records(params)

    def close(self) -> None:
        """botocore's client releases its connections here; there are none."""
