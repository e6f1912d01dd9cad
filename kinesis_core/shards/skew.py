"""How evenly a set of partition keys (or hash keys) spreads over a stream's shards.

A shard takes 1000 records/s and 1 MiB/s, so the busiest shard caps a stream's throughput: the
max/mean ratio of records per shard says how much of the stream's capacity a key set can use
(1.0 is perfect; 2.0 means the hottest shard is throttled at half the stream's capacity).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kinesis_core.shards.hashing import hash_key, parse_explicit_hash_key, validate_partition_key
from kinesis_core.shards.info import ShardInfo, uniform_shards
from kinesis_core.shards.shard_map import ShardTable


@dataclass(frozen=True)
class ShardLoad:
    shard: ShardInfo
    records: int


@dataclass(frozen=True)
class SkewReport:
    """Records per open shard (by hash range), plus records no open shard owns (a gap)."""

    loads: tuple[ShardLoad, ...]
    unowned: int = 0

    @property
    def total(self) -> int:
        return sum(load.records for load in self.loads)

    @property
    def mean(self) -> float:
        return self.total / len(self.loads) if self.loads else 0.0

    @property
    def max(self) -> int:
        return max((load.records for load in self.loads), default=0)

    @property
    def min(self) -> int:
        return min((load.records for load in self.loads), default=0)

    @property
    def ratio(self) -> float:
        """max / mean records per shard: 1.0 is even; 0.0 when there are no records."""
        mean = self.mean
        return self.max / mean if mean else 0.0

    def format_table(self) -> str:
        """A fixed-width table, one row per shard, then the summary line."""
        total = self.total
        rows = [
            f"{'shard':<24}{'start hash key':>40}{'end hash key':>40}{'records':>10}{'share':>8}"
        ]
        for load in self.loads:
            share = 100.0 * load.records / total if total else 0.0
            rows.append(
                f"{load.shard.shard_id:<24}{load.shard.start_hash_key:>40}"
                f"{load.shard.end_hash_key:>40}{load.records:>10}{share:>7.1f}%"
            )
        rows.append(
            f"max/mean: {self.ratio:.3f} ({total} records over {len(self.loads)} shards; "
            f"mean {self.mean:.2f}, max {self.max}, min {self.min})"
        )
        if self.unowned:
            rows.append(f"warning: no open shard owns the hash key of {self.unowned} record(s)")
        return "\n".join(rows)


def skew_report(
    shards: Sequence[ShardInfo] | int,
    *,
    partition_keys: Iterable[str] = (),
    hash_keys: Iterable[int | str] = (),
) -> SkewReport:
    """Count records per open shard for some partition keys and/or explicit hash keys.

    ``shards`` is a shard list (closed shards are ignored) or a count for an even split.
    Each key counts as one record: repeat a key to weight it.
    """
    table = ShardTable(uniform_shards(shards) if isinstance(shards, int) else shards)
    counts = [0] * len(table)
    unowned = 0
    keys = [hash_key(validate_partition_key(pk)) for pk in partition_keys]
    keys += [parse_explicit_hash_key(h, "hash_key") for h in hash_keys]
    for key in keys:
        i = table.index(key)
        if i is None:
            unowned += 1
        else:
            counts[i] += 1
    return SkewReport(
        loads=tuple(ShardLoad(s, c) for s, c in zip(table.shards, counts, strict=True)),
        unowned=unowned,
    )
