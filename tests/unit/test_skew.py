"""kinesis_core.shards.skew: records per shard and the max/mean ratio."""

from __future__ import annotations

import pytest

from kinesis_core.errors import ValidationError
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.shards.info import ShardInfo, uniform_shards
from kinesis_core.shards.skew import skew_report

HALF = 2**127


def records(report_shards: int | list[ShardInfo], n: int) -> list[int]:
    report = skew_report(report_shards, partition_keys=[str(i) for i in range(1, n + 1)])
    return [load.records for load in report.loads]


@pytest.mark.parametrize(
    ("n", "expected"), [(14, [3, 11]), (24, [9, 15]), (49, [23, 26]), (99, [45, 54])]
)
def test_seed_counts_of_incrementing_keys_on_two_shards(n: int, expected: list[int]) -> None:
    assert records(2, n) == expected


def test_ratio_and_summary() -> None:
    report = skew_report(2, partition_keys=[str(i) for i in range(1, 15)])
    assert report.total == 14
    assert report.mean == 7.0
    assert (report.max, report.min) == (11, 3)
    assert report.ratio == pytest.approx(11 / 7)
    assert report.unowned == 0
    assert [load.shard for load in report.loads] == uniform_shards(2)


def test_hash_keys_land_on_their_inclusive_ranges() -> None:
    report = skew_report(2, hash_keys=[0, HALF - 1, str(HALF), MAX_HASH_KEY, "5"])
    assert [load.records for load in report.loads] == [3, 2]


def test_partition_and_hash_keys_together() -> None:
    report = skew_report(2, partition_keys=["1"], hash_keys=[0])
    assert [load.records for load in report.loads] == [1, 1]


def test_repeated_keys_weigh_more() -> None:
    assert [x.records for x in skew_report(2, hash_keys=[0] * 5 + [HALF]).loads] == [5, 1]


def test_shard_list_ignores_closed_shards_and_counts_gaps() -> None:
    shards = [
        ShardInfo("parent", 0, MAX_HASH_KEY, ending_sequence_number=9),
        ShardInfo("a", 0, 99),
        ShardInfo("b", 200, MAX_HASH_KEY),
    ]
    report = skew_report(shards, hash_keys=[5, 150, 250, 300])
    assert [(x.shard.shard_id, x.records) for x in report.loads] == [("a", 1), ("b", 2)]
    assert report.unowned == 1
    assert "no open shard owns the hash key of 1 record(s)" in report.format_table()


def test_no_records() -> None:
    report = skew_report(4)
    assert report.total == 0
    assert report.ratio == 0.0
    assert report.mean == 0.0
    assert "max/mean: 0.000" in report.format_table()


def test_format_table() -> None:
    table = skew_report(2, partition_keys=[str(i) for i in range(1, 15)]).format_table()
    lines = table.splitlines()
    assert lines[0].split() == [
        "shard",
        "start",
        "hash",
        "key",
        "end",
        "hash",
        "key",
        "records",
        "share",
    ]
    assert lines[1].split() == ["shardId-000000000000", "0", str(HALF - 1), "3", "21.4%"]
    assert lines[2].split() == ["shardId-000000000001", str(HALF), str(MAX_HASH_KEY), "11", "78.6%"]
    assert lines[3] == "max/mean: 1.571 (14 records over 2 shards; mean 7.00, max 11, min 3)"


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ValidationError) as info:
        skew_report(2, partition_keys=[""])
    assert info.value.field == "partition_key"
    with pytest.raises(ValidationError) as info:
        skew_report(2, hash_keys=["-1"])
    assert info.value.field == "hash_key"
    with pytest.raises(ValueError, match=">= 1"):
        skew_report(0)


def test_many_random_keys_spread_evenly() -> None:
    report = skew_report(8, partition_keys=[f"user-{i}" for i in range(80_000)])
    assert report.ratio < 1.05
