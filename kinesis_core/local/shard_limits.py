"""Sans-I/O write limits of Kinesis shards: the fault proxy's shard-limit mode.

What AWS documents, and what is modelled here:

* Each shard takes up to 1,000 records and 1 MiB of writes per second ("in both on-demand and
  provisioned capacity modes"); a record's size is its data plus its partition key.
* The quotas are "determined per shard and per second" (AWS re:Post, "Why is my Kinesis data
  stream throttling?"): a burst inside one second throttles even when the minute's average is
  under the limit. No burst allowance is published for records under 1 MiB, so each shard's
  two token buckets hold one second's worth (``burst_seconds=1``) and refill continuously.
* Records above 1 MiB (streams whose maximum record size was raised, up to 10 MiB) "temporarily
  burst beyond sustained write throughput": the stream's write capacity is "a tank that refills
  at a steady rate", which a large record empties. Modelled by the byte bucket: a record larger
  than the bucket is let through when the bucket is full and leaves it in debt, refilled at
  1 MiB/s before the next record of that shard passes.
* PutRecords fails only the records over their shard's limits, each with ErrorCode
  ``ProvisionedThroughputExceededException`` ("Rate exceeded for shard ... in stream ...")
  while the others are written; PutRecord fails whole with that exception (HTTP 400).
  A throttled record is not written and takes no tokens.

Records are charged to the shard their hash key maps to, from the stream's open shards, which
the driver learns through the upstream (ListShards) when a stream is first written to, and again
every ``shard_map_ttl`` seconds (a resharded stream). A record whose stream's shards could not
be listed, or whose key no open shard owns, is not limited.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.producer.limiter import TokenBucket
from kinesis_core.shards.hashing import (
    SHARD_BYTES_PER_SECOND,
    SHARD_RECORDS_PER_SECOND,
    hash_key,
    parse_explicit_hash_key,
)
from kinesis_core.shards.info import ShardInfo
from kinesis_core.shards.shard_map import ShardTable
from kinesis_core.stream import StreamRef

THROTTLED = "ProvisionedThroughputExceededException"
RETRY_LISTING_AFTER = 1.0
"""Seconds before the shards of a stream whose listing failed are asked for again."""


@dataclass(frozen=True)
class ShardLimits:
    """The write limits of every shard. The defaults are the AWS ones."""

    records_per_second: float = SHARD_RECORDS_PER_SECOND
    bytes_per_second: float = SHARD_BYTES_PER_SECOND
    """Data plus partition key (UTF-8), per second."""
    burst_seconds: float = 1.0
    """How many seconds' worth each bucket holds: what a shard takes at once after a pause."""
    shard_map_ttl: float = 30.0
    """Seconds a stream's learned shards are trusted before they are listed again."""

    def __post_init__(self) -> None:
        for name in ("records_per_second", "bytes_per_second", "burst_seconds", "shard_map_ttl"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ConfigurationError(name, f"must be a finite number > 0, got {value}")


@dataclass(frozen=True)
class ShardUse:
    """Writes seen by the shard limits: records and bytes let through, records throttled."""

    records: int = 0
    bytes: int = 0
    throttled_records: int = 0
    throttled_bytes: int = 0

    @property
    def throttled_share(self) -> float:
        """Throttled records over all records checked (0 when none was)."""
        total = self.records + self.throttled_records
        return self.throttled_records / total if total else 0.0


class _Shard:
    __slots__ = ("bytes", "records")

    def __init__(self, limits: ShardLimits, now: float) -> None:
        burst = limits.burst_seconds
        self.records = TokenBucket(
            limits.records_per_second, limits.records_per_second * burst, now
        )
        self.bytes = TokenBucket(limits.bytes_per_second, limits.bytes_per_second * burst, now)


class ShardCapacity:
    """Two token buckets per shard of every stream written to, and the shard maps they need.

    Sans-I/O: every method takes the time as ``now`` (seconds, any monotonic origin).
    """

    def __init__(self, limits: ShardLimits) -> None:
        self.limits = limits
        self._tables: dict[str, tuple[ShardTable, float]] = {}
        """Stream name -> (open shards, time after which they are listed again)."""
        self._shards: dict[tuple[str, str], _Shard] = {}
        self._use = [0, 0, 0, 0]

    def use(self) -> ShardUse:
        return ShardUse(*self._use)

    def reset_use(self) -> None:
        self._use = [0, 0, 0, 0]

    def needs_shards(self, stream: str, now: float) -> bool:
        """True if the shards of ``stream`` must be listed before its records are checked."""
        known = self._tables.get(stream)
        return known is None or now >= known[1]

    def learn(self, stream: str, shards: Iterable[Mapping[str, Any]], now: float) -> None:
        """The entries of ListShards' ``Shards`` (every page) for ``stream``: its open shards
        are charged from now on. Buckets of shards still open keep their tokens."""
        table = ShardTable(ShardInfo.from_api(shard) for shard in shards)
        self._tables[stream] = (table, now + self.limits.shard_map_ttl)

    def listing_failed(self, stream: str, now: float) -> None:
        """The shards could not be listed: its records go unlimited, and the listing is retried
        after RETRY_LISTING_AFTER seconds."""
        previous = self._tables.get(stream)
        table = previous[0] if previous is not None else ShardTable(())
        self._tables[stream] = (table, now + RETRY_LISTING_AFTER)

    def admit(
        self,
        stream: str,
        entries: Sequence[Mapping[str, Any]],
        now: float,
        skip: frozenset[int] = frozenset(),
    ) -> dict[int, str]:
        """Check the records of one request in order (PutRecords' ``Records``, or the body of a
        PutRecord as the one entry); the ones at indices in ``skip`` are not checked. Returns
        the indices of the throttled records, each with its error message; the others take
        their tokens."""
        known = self._tables.get(stream)
        table = known[0] if known is not None else None
        throttled: dict[int, str] = {}
        for index, entry in enumerate(entries):
            if index in skip:
                continue
            size = _size(entry)
            shard_id = None if table is None else _owner(table, entry)
            if shard_id is None:
                self._count(0, size)
                continue
            shard = self._shards.get((stream, shard_id))
            if shard is None:
                shard = self._shards[(stream, shard_id)] = _Shard(self.limits, now)
            shard.records.refill(now)
            shard.bytes.refill(now)
            if shard.records.can_take(1) and shard.bytes.can_take(size):
                shard.records.tokens -= 1
                shard.bytes.tokens -= size
                self._count(0, size)
            else:
                self._count(2, size)
                throttled[index] = f"Rate exceeded for shard {shard_id} in stream {stream}."
        return throttled

    def _count(self, at: int, size: int) -> None:
        self._use[at] += 1
        self._use[at + 1] += size


def request_stream(request: Mapping[str, Any]) -> StreamRef | None:
    """The stream a PutRecord(s) body names (StreamARN or StreamName), None if none is valid."""
    value = request.get("StreamARN") or request.get("StreamName")
    if not isinstance(value, str):
        return None
    try:
        return StreamRef.of(value)
    except KinesisConnectorError:
        return None


def _size(entry: Mapping[str, Any]) -> int:
    """Data (base64 in the request) plus partition key, in bytes."""
    data = entry.get("Data")
    key = entry.get("PartitionKey")
    size = 0
    if isinstance(data, str):
        size = len(data) * 3 // 4 - data[-2:].count("=")
    if isinstance(key, str):
        size += len(key.encode("utf-8", "surrogatepass"))
    return size


def _owner(table: ShardTable, entry: Mapping[str, Any]) -> str | None:
    explicit = entry.get("ExplicitHashKey")
    key = entry.get("PartitionKey")
    try:
        if explicit is not None:
            value = parse_explicit_hash_key(explicit)
        elif isinstance(key, str):
            value = hash_key(key)
        else:
            return None
    except (KinesisConnectorError, UnicodeEncodeError):
        return None  # the upstream refuses it
    owner = table.owner(value)
    return None if owner is None else owner.shard_id
