"""An in-memory Kinesis for the producer's unit tests (and a check that it routes like Kinesis).

``FakeKinesis`` answers ListShards, DescribeStreamSummary (``max_record_size_kib``, None: no
such field, as before late 2025) and PutRecords: it routes every entry by its explicit hash key
(or the MD5 of its partition key) to the open shard that owns it, gives it the next sequence
number, and keeps it so a test can read it back through the KCL-style ``deaggregate``. Tests
script failures with ``fake.script``: a queue of callables that get the request entries and
return a response or raise. ``RecordingSink`` stands in for a caller's future in the
sans-I/O tests.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from kinesis_core.aggregation import deaggregate
from kinesis_core.hashing import hash_key
from kinesis_core.producer.result import Attempt
from kinesis_core.records import KinesisRecord
from kinesis_core.shard_map import ShardInfo, ShardTable, uniform_shards

Entry = dict[str, Any]
Behaviour = Callable[[list[Entry]], dict[str, Any]]


class RecordingSink:
    """A RecordSink that keeps every outcome, and counts a second outcome for an index."""

    def __init__(self) -> None:
        self.ok: dict[int, tuple[str, int, int, tuple[Attempt, ...]]] = {}
        self.bad: dict[int, tuple[str, str, tuple[Attempt, ...]]] = {}
        self.duplicates = 0

    def succeeded(
        self, index: int, shard_id: str, seq: int, sub: int, attempts: tuple[Attempt, ...]
    ) -> None:
        self.duplicates += index in self.ok or index in self.bad
        self.ok[index] = (shard_id, seq, sub, attempts)

    def succeeded_run(
        self,
        indexes: list[int],
        first_sub: int,
        shard_id: str,
        seq: int,
        attempts: tuple[Attempt, ...],
    ) -> None:
        for sub, index in enumerate(indexes, first_sub):
            self.succeeded(index, shard_id, seq, sub, attempts)

    def failed(self, index: int, code: str, message: str, attempts: tuple[Attempt, ...]) -> None:
        self.duplicates += index in self.ok or index in self.bad
        self.bad[index] = (code, message, attempts)


def client_error(
    code: str, message: str = "scripted", op: str = "PutRecords", status: int = 400
) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        op,
    )


class FakeKinesis:
    def __init__(self, shards: int = 4, delay: float = 0.0) -> None:
        self.shards: list[ShardInfo] = uniform_shards(shards)
        self.delay = delay
        self.script: deque[Behaviour] = deque()
        self.stored: dict[str, list[Entry]] = defaultdict(list)
        self.requests: list[list[Entry]] = []
        self.params: list[dict[str, Any]] = []
        """The arguments of every call but the records (how the stream was named...)."""
        self.list_calls = 0
        self.describe_calls = 0
        self.max_record_size_kib: int | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self._seq = itertools.count(1)

    # -- the API ---------------------------------------------------------------------------

    async def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        """ListShards; AT_LATEST (or no filter) lists the open shards, any other filter all."""
        self.list_calls += 1
        self.params.append({"op": "ListShards", **kwargs})
        latest = kwargs.get("ShardFilter", {"Type": "AT_LATEST"})["Type"] == "AT_LATEST"
        return {"Shards": [self._api_shard(s) for s in self.shards if s.is_open or not latest]}

    async def describe_stream_summary(self, **kwargs: Any) -> dict[str, Any]:
        self.describe_calls += 1
        self.params.append({"op": "DescribeStreamSummary", **kwargs})
        summary: dict[str, Any] = {
            "StreamStatus": "ACTIVE",
            "OpenShardCount": sum(s.is_open for s in self.shards),
        }
        if self.max_record_size_kib is not None:
            summary["MaxRecordSizeInKiB"] = self.max_record_size_kib
        return {"StreamDescriptionSummary": summary}

    async def put_records(self, *, Records: list[Entry], **kwargs: Any) -> dict[str, Any]:
        self.requests.append(Records)
        self.params.append({"op": "PutRecords", **kwargs})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            else:
                await asyncio.sleep(0)
            if self.script:
                return self.script.popleft()(Records)
            return self.accept(Records)
        finally:
            self.in_flight -= 1

    # -- helpers for tests -----------------------------------------------------------------

    def route(self, entry: Entry) -> ShardInfo:
        ehk = entry.get("ExplicitHashKey")
        h = int(ehk) if ehk is not None else hash_key(entry["PartitionKey"])
        owner = ShardTable(self.shards).owner(h)
        assert owner is not None
        return owner

    def write(self, entry: Entry) -> dict[str, Any]:
        shard = self.route(entry)
        seq = next(self._seq)
        self.stored[shard.shard_id].append(
            {
                "Data": entry["Data"],
                "PartitionKey": entry["PartitionKey"],
                "SequenceNumber": str(seq),
            }
        )
        return {"SequenceNumber": str(seq), "ShardId": shard.shard_id}

    def accept(self, entries: list[Entry]) -> dict[str, Any]:
        return {"FailedRecordCount": 0, "Records": [self.write(e) for e in entries]}

    def read_all(self, *, kcl: bool = True) -> list[KinesisRecord]:
        """Every user record stored, deaggregated per shard (with the KCL range filter)."""
        by_id = {s.shard_id: s for s in self.shards}
        out: list[KinesisRecord] = []
        for shard_id, records in self.stored.items():
            hash_range = by_id[shard_id].hash_range if kcl else None
            out.extend(deaggregate(records, shard_id, hash_range))
        return out

    def split(self, shard_id: str) -> tuple[str, str]:
        """Split an open shard in two halves; returns the children's ids."""
        parent = next(s for s in self.shards if s.shard_id == shard_id)
        mid = (parent.start_hash_key + parent.end_hash_key) // 2
        n = len(self.shards)
        left = ShardInfo(f"shardId-{n:012d}", parent.start_hash_key, mid, shard_id)
        right = ShardInfo(f"shardId-{n + 1:012d}", mid + 1, parent.end_hash_key, shard_id)
        self.shards = [
            ShardInfo(s.shard_id, s.start_hash_key, s.end_hash_key, ending_sequence_number=1)
            if s.shard_id == shard_id
            else s
            for s in self.shards
        ] + [left, right]
        return left.shard_id, right.shard_id

    def merge(self, first: str, second: str) -> str:
        """Merge two adjacent open shards; returns the child's id."""
        a = next(s for s in self.shards if s.shard_id == first)
        b = next(s for s in self.shards if s.shard_id == second)
        lo, hi = sorted((a, b), key=lambda s: s.start_hash_key)
        assert lo.end_hash_key + 1 == hi.start_hash_key, "not adjacent"
        child = ShardInfo(
            f"shardId-{len(self.shards):012d}",
            lo.start_hash_key,
            hi.end_hash_key,
            first,
            second,
        )
        self.shards = [
            ShardInfo(s.shard_id, s.start_hash_key, s.end_hash_key, ending_sequence_number=1)
            if s.shard_id in (first, second)
            else s
            for s in self.shards
        ] + [child]
        return child.shard_id

    @staticmethod
    def _api_shard(s: ShardInfo) -> dict[str, Any]:
        seq: dict[str, str] = {"StartingSequenceNumber": str(s.starting_sequence_number)}
        if s.ending_sequence_number is not None:
            seq["EndingSequenceNumber"] = str(s.ending_sequence_number)
        shard: dict[str, Any] = {
            "ShardId": s.shard_id,
            "HashKeyRange": {
                "StartingHashKey": str(s.start_hash_key),
                "EndingHashKey": str(s.end_hash_key),
            },
            "SequenceNumberRange": seq,
        }
        if s.parent_shard_id:
            shard["ParentShardId"] = s.parent_shard_id
        return shard


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
