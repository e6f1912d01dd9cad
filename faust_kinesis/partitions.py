"""Kinesis shards as Faust topic partitions: the topic is the stream, the partition the number
in the shard id (Faust partitions are ints)."""

from __future__ import annotations

from faust.types import TP

from kinesis_core.errors import ValidationError


def shard_number(shard_id: str) -> int:
    """The number in ``shardId-000000000007``."""
    digits = shard_id.rpartition("-")[2]
    if not digits.isdigit():
        raise ValidationError("shard_id", f"not a Kinesis shard id: {shard_id!r}")
    return int(digits)


def shard_tp(stream: str, shard_id: str) -> TP:
    """The Faust ``TP`` of a shard of ``stream``."""
    return TP(stream, shard_number(shard_id))
