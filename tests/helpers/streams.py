"""Reading a local stream back in tests: every user record, deaggregated per shard."""

from __future__ import annotations

from typing import Any

from kinesis_core.aggregation import deaggregate
from kinesis_core.local import LocalStream
from kinesis_core.records import KinesisRecord


def user_records(stream: LocalStream) -> list[KinesisRecord]:
    """Every user record now in ``stream``, shard by shard, in order (record ids included)."""
    by_shard: dict[str, list[dict[str, Any]]] = {}
    for record in stream.records():
        by_shard.setdefault(record["ShardId"], []).append(record)
    return [r for shard, records in by_shard.items() for r in deaggregate(records, shard)]
