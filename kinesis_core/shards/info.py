"""The shards of a stream as values: a ListShards entry (:class:`ShardInfo`), the ShardFilters
the readers and the producer list with, and the shards CreateStream makes (sans-I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kinesis_core.errors import ValidationError
from kinesis_core.shards.hashing import MAX_HASH_KEY, parse_explicit_hash_key

AT_LATEST: Mapping[str, str] = {"Type": "AT_LATEST"}
"""ShardFilter for the shards open now: all the producer can write to."""
AT_TRIM_HORIZON: Mapping[str, str] = {"Type": "AT_TRIM_HORIZON"}
"""ShardFilter for every shard still holding data, closed ones included."""


@dataclass(frozen=True)
class ShardInfo:
    """One shard of a ListShards response, with hash keys and sequence numbers as ints."""

    shard_id: str
    start_hash_key: int
    end_hash_key: int
    parent_shard_id: str | None = None
    adjacent_parent_shard_id: str | None = None
    starting_sequence_number: int = 0
    ending_sequence_number: int | None = None

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> ShardInfo:
        """Parse one entry of ``ListShards["Shards"]`` (or ``DescribeStream``)."""
        hash_range = shard["HashKeyRange"]
        start = parse_explicit_hash_key(
            hash_range["StartingHashKey"], "HashKeyRange.StartingHashKey"
        )
        end = parse_explicit_hash_key(hash_range["EndingHashKey"], "HashKeyRange.EndingHashKey")
        if start > end:
            raise ValidationError(
                "HashKeyRange", f"{shard['ShardId']}: starting hash key {start} > ending {end}"
            )
        seq = shard.get("SequenceNumberRange", {})
        ending = seq.get("EndingSequenceNumber")
        return cls(
            shard_id=shard["ShardId"],
            start_hash_key=start,
            end_hash_key=end,
            parent_shard_id=shard.get("ParentShardId"),
            adjacent_parent_shard_id=shard.get("AdjacentParentShardId"),
            starting_sequence_number=int(seq.get("StartingSequenceNumber", 0)),
            ending_sequence_number=None if ending is None else int(ending),
        )

    @property
    def is_open(self) -> bool:
        """A shard is open until resharding gives it an ending sequence number."""
        return self.ending_sequence_number is None

    @property
    def hash_range(self) -> tuple[int, int]:
        """The closed interval [start, end] of hash keys this shard owns."""
        return (self.start_hash_key, self.end_hash_key)

    @property
    def parents(self) -> tuple[str, ...]:
        """Parent ids: one after a split, two after a merge, none for an original shard."""
        return tuple(
            p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p is not None
        )

    def contains(self, hash_key: int) -> bool:
        return self.start_hash_key <= hash_key <= self.end_hash_key


def uniform_shards(count: int) -> list[ShardInfo]:
    """``count`` open shards splitting the key space evenly, as CreateStream does."""
    if count < 1:
        raise ValidationError("count", f"shard count must be >= 1, got {count}")
    step = (MAX_HASH_KEY + 1) // count
    return [
        ShardInfo(
            shard_id=f"shardId-{i:012d}",
            start_hash_key=i * step,
            end_hash_key=MAX_HASH_KEY if i == count - 1 else (i + 1) * step - 1,
        )
        for i in range(count)
    ]
