"""The things that flow through the pipeline: user records, Kinesis records, PutRecords batches.

The hot path makes one user record per record and nothing else. It is a ``msgspec.Struct``
that the garbage collector does not track: a plain tuple is cheaper to make, but the
collector examines every new tuple, and a struct is never examined. Kinesis
records and batches are made per aggregate and per request, a few hundred times less often,
so they can be slotted classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from kinesis_core.producer.result import History


class UserRecord(msgspec.Struct, gc=False, frozen=True):
    """One record a caller gave, as the pipeline carries it to its result.

    ``explicit_hash_key`` is the decimal string the caller gave (normalised) or None; ``sink``
    is the key of the record's sink in the pipeline's registry; ``index`` is the record's index
    for its sink; ``attempts`` is the (bounded) history of earlier trips (empty on the first);
    ``arrival`` is when the producer accepted it, the start of its TTL. Its id
    (``ProducerConfig.record_ids``), the same on every trip, is ``record_id``, the caller's,
    or else ``id_origin:id_counter`` (``id_origin`` None: none), an automatic id or a
    caller's shaped so, kept apart so that the aggregator can see runs of consecutive
    counters. Nothing it holds
    refers back to it (no cycle can pass through it), which is what lets the collector skip it.
    """

    hash_key: int
    data: bytes
    partition_key: str
    explicit_hash_key: str | None
    sink: int
    index: int
    attempts: History
    arrival: float
    record_id: str | None = None
    id_origin: str | None = None
    id_counter: int = 0


class KinesisRecordOut:
    """One entry of a PutRecords request: an aggregate of user records, or a single one."""

    __slots__ = (
        "buffered_since",
        "data",
        "data_bytes",
        "deadline",
        "expiration",
        "explicit_hash_key",
        "partition_key",
        "payload",
        "records",
        "shard_id",
        "size",
    )

    def __init__(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        records: list[UserRecord],
        shard_id: str | None,
        size: int,
        deadline: float,
        expiration: float,
        buffered_since: float,
        data_bytes: int,
        payload: int,
    ) -> None:
        self.data = data
        self.partition_key = partition_key
        self.explicit_hash_key = explicit_hash_key
        self.records = records
        self.shard_id = shard_id
        """The shard it was predicted for; None when the shard map had no answer."""
        self.size = size
        """Data plus partition key bytes: what counts against Kinesis's limits."""
        self.deadline = deadline
        """When it should be sent at the latest (the earliest deadline of its records)."""
        self.expiration = expiration
        """When its oldest record's TTL runs out."""
        self.buffered_since = buffered_since
        """Mean time its records entered the aggregator (for the BufferingTime metric)."""
        self.data_bytes = data_bytes
        """The data bytes of its user records (counted when it was built, with ``payload``,
        where its records were at hand, rather than when its answer comes)."""
        self.payload = payload
        """The data bytes and partition key code points of its user records: what the
        budget (``records_cost``) counts for them."""

    def entry(self) -> dict[str, object]:
        """The PutRecords request entry."""
        if self.explicit_hash_key is None:
            return {"Data": self.data, "PartitionKey": self.partition_key}
        return {
            "Data": self.data,
            "PartitionKey": self.partition_key,
            "ExplicitHashKey": self.explicit_hash_key,
        }

    def __repr__(self) -> str:
        return (
            f"KinesisRecordOut(shard_id={self.shard_id!r}, user_records={len(self.records)}, "
            f"size={self.size})"
        )


class PutBatch:
    """The Kinesis records of one PutRecords request."""

    __slots__ = ("abandoned", "expiration", "records", "size")

    def __init__(self, records: list[KinesisRecordOut], size: int) -> None:
        self.records = records
        self.size = size
        self.expiration = min((kr.expiration for kr in records), default=float("inf"))
        """When the TTL of its oldest record runs out."""
        self.abandoned = False
        """Set when its records were failed by a shutdown or crash while it was in flight,
        so a late response cannot finish them a second time."""

    @property
    def user_record_count(self) -> int:
        return sum(len(kr.records) for kr in self.records)

    def split(self) -> tuple[PutBatch, PutBatch]:
        """Its two halves (it holds at least two Kinesis records), as two requests."""
        half = len(self.records) // 2
        first, second = self.records[:half], self.records[half:]
        return (
            PutBatch(first, sum(kr.size for kr in first)),
            PutBatch(second, sum(kr.size for kr in second)),
        )
