"""The Spark source's offset rules and option parsing (spark_kinesis.offsets, .options): marks,
the incarnation check, parents before children, the read limit's shares, the task slices, and
option errors that name the option."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kinesis_core.consumer.incarnation import StreamRecreatedError
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.positions import LATEST, TRIM_HORIZON, AtTimestamp
from kinesis_core.errors import ConfigurationError
from spark_kinesis.offsets import (
    BEFORE,
    SHARD_END,
    WHOLE,
    ShardSlice,
    StreamOffset,
    admit,
    allot,
    initial_offset,
    parse_mark,
    position_mark,
    prune,
    resolve_initial,
    slices,
    start_mark,
    unknown_children,
)
from spark_kinesis.options import SinkSpec, SourceSpec

TOP = 2**128 - 1
HALF = 2**127

# A split of shard 0 into 1 and 2, then a merge of 2 and 3 (3 a sibling of 0) into 4.
S0 = ShardNode("s0", (), (0, HALF - 1), False)
S3 = ShardNode("s3", (), (HALF, TOP), False)
S1 = ShardNode("s1", ("s0",), (0, HALF // 2 - 1), True)
S2 = ShardNode("s2", ("s0",), (HALF // 2, HALF - 1), False)
S4 = ShardNode("s4", ("s2", "s3"), (HALF // 2, TOP), True)
NODES = [S0, S3, S1, S2, S4]


def offset(**shards: str) -> StreamOffset:
    return StreamOffset("events", 1000, shards)


def test_marks_round_trip_positions_of_any_size() -> None:
    big = (49_680_753_371_155_370_943_657_230_959_653_049_768_616_189_946_887_143_426, 42)
    assert parse_mark(position_mark(big)) == big
    assert parse_mark(SHARD_END) is None
    assert parse_mark("TRIM_HORIZON") is TRIM_HORIZON
    at = AtTimestamp(datetime(2026, 1, 31, 12, 0, 0, 123000, tzinfo=timezone.utc))
    assert parse_mark(start_mark(at)) == at
    with pytest.raises(ValueError, match="not a shard mark"):
        parse_mark("12:x")


def test_marks_through_and_before_a_whole_kinesis_record() -> None:
    sequence = 49_680_753_371_155_370_943_657_230_959_653_049_768_616_189_946_887_143_426
    whole = parse_mark(str(sequence))
    assert whole == (sequence, WHOLE)
    assert position_mark((sequence, WHOLE)) == str(sequence)
    assert isinstance(whole, tuple)
    assert (sequence, 10_000) < whole < (sequence + 1, 0)
    before = parse_mark(f"before:{sequence}")
    assert before == (sequence, BEFORE)
    assert position_mark((sequence, BEFORE)) == f"before:{sequence}"
    assert isinstance(before, tuple)
    assert (sequence - 1, WHOLE) < before < (sequence, 0)
    with pytest.raises(ValueError, match="not a shard mark"):
        parse_mark("before:x")


def test_latest_is_resolved_to_the_query_start_so_replays_name_the_same_records() -> None:
    now = datetime(2026, 3, 1, tzinfo=timezone.utc)
    assert resolve_initial(LATEST, now) == AtTimestamp(now)
    assert resolve_initial(TRIM_HORIZON, now) is TRIM_HORIZON
    with pytest.raises(ValueError, match="resolve LATEST"):
        start_mark(LATEST)


def test_offsets_round_trip_through_json_and_refuse_another_incarnation() -> None:
    first = offset(s1="TRIM_HORIZON", s4="5:0")
    again = StreamOffset.from_json(first.to_json())
    assert again == first
    again.check("events", 1000)
    with pytest.raises(StreamRecreatedError, match="deleted and created again"):
        again.check("events", 2000)
    with pytest.raises(ConfigurationError, match="streamName"):
        again.check("orders", 1000)
    with pytest.raises(ValueError, match="not an offset"):
        StreamOffset.from_json({"shards": {}})


def test_the_first_offset_has_the_shards_without_unfinished_parents() -> None:
    first = initial_offset("events", 1000, NODES, TRIM_HORIZON)
    assert first.shards == {"s0": "TRIM_HORIZON", "s3": "TRIM_HORIZON"}


def test_a_child_joins_only_once_every_parent_is_at_shard_end_in_the_start() -> None:
    # s0 still reading: nobody joins.
    assert admit(offset(s0="7:0", s3="TRIM_HORIZON"), NODES, TRIM_HORIZON) == {}
    # s0 ended in a batch that ran: its children join, at the start of their shards.
    joined = admit(offset(s0=SHARD_END, s3="9:3"), NODES, TRIM_HORIZON)
    assert joined == {"s1": "TRIM_HORIZON", "s2": "TRIM_HORIZON"}
    # The merge child waits for both parents.
    start = offset(s0=SHARD_END, s1="1:0", s2=SHARD_END, s3="9:3")
    assert admit(start, NODES, TRIM_HORIZON) == {}
    start = start.with_marks({"s3": SHARD_END})
    assert admit(start, NODES, TRIM_HORIZON) == {"s4": "TRIM_HORIZON"}


def test_children_of_a_query_started_at_latest_are_read_whole() -> None:
    # A driver restarted long after the split must not start the children at its own start.
    joined = admit(offset(s0=SHARD_END, s3="9:3"), NODES, LATEST)
    assert joined == {"s1": "TRIM_HORIZON", "s2": "TRIM_HORIZON"}
    at = AtTimestamp(datetime(2026, 1, 31, tzinfo=timezone.utc))
    joined = admit(offset(s0=SHARD_END, s3="9:3"), NODES, at)
    assert joined == {"s1": start_mark(at), "s2": start_mark(at)}


def test_ancestors_left_out_of_the_offsets_count_as_finished() -> None:
    # Started at a timestamp after the split: s0 is not in the offsets; s2's end lets s4
    # join once s3 ends too.
    start = offset(s1="1:0", s2=SHARD_END, s3=SHARD_END)
    assert admit(start, NODES, TRIM_HORIZON) == {"s4": "TRIM_HORIZON"}


def test_an_ended_shard_leaves_the_offsets_once_all_its_children_are_in_them() -> None:
    # s0 ended; its children not joined yet, or joined and not read: it stays (a child at its
    # start does not tell that its parents finished).
    for kept in (
        offset(s0=SHARD_END, s3="9:3"),
        offset(s0=SHARD_END, s1="TRIM_HORIZON", s2="TRIM_HORIZON", s3="9:3"),
        offset(s0=SHARD_END, s1="4:0", s2="TRIM_HORIZON", s3="9:3"),
    ):
        assert prune(kept, NODES) == kept
    reading = offset(s0=SHARD_END, s1="4:0", s2="before:6", s3="9:3")
    pruned = prune(reading, NODES)
    assert pruned.shards == {"s1": "4:0", "s2": "before:6", "s3": "9:3"}
    # A merge parent waits for the child, which waits for both parents.
    joined = offset(s1="4:0", s2=SHARD_END, s3=SHARD_END, s4="TRIM_HORIZON")
    assert prune(joined, NODES) == joined
    merged = prune(offset(s1="4:0", s2=SHARD_END, s3=SHARD_END, s4="8:1"), NODES)
    assert merged.shards == {"s1": "4:0", "s4": "8:1"}
    # Pruned ancestors, still listed, count as finished: nobody joins again.
    assert admit(pruned, NODES, TRIM_HORIZON) == {}
    assert admit(merged, NODES, TRIM_HORIZON) == {}
    # A pruned shard has no slice.
    assert slices(reading, pruned) == []


def test_a_listing_is_due_for_an_ended_shard_whose_children_are_unknown() -> None:
    start = offset(s0=SHARD_END, s3="1:0")
    assert unknown_children(start, [S0, S3]) == ["s0"]
    assert unknown_children(start, NODES) == []


@pytest.mark.parametrize(
    ("available", "limit", "expected"),
    [
        ({"a": 5, "b": 7}, None, {"a": 5, "b": 7}),
        ({"a": 5, "b": 7}, 100, {"a": 5, "b": 7}),
        ({"a": 5, "b": 7}, 6, {"a": 3, "b": 3}),
        ({"a": 1, "b": 70, "c": 0}, 10, {"a": 1, "b": 9, "c": 0}),
        ({"a": 4, "b": 4, "c": 4}, 1, {"a": 1, "b": 0, "c": 0}),
    ],
)
def test_the_read_limit_is_shared_and_unused_shares_go_to_the_others(
    available: dict[str, int], limit: int | None, expected: dict[str, int]
) -> None:
    taken = allot(available, limit)
    assert taken == expected
    assert all(taken[s] <= available[s] for s in available)


def test_a_task_per_shard_that_moved_and_none_for_a_shard_that_just_joined() -> None:
    start = offset(s0="TRIM_HORIZON", s3="4:0")
    end = offset(s0="9:2", s3="4:0", s1="TRIM_HORIZON")
    assert slices(start, end) == [ShardSlice("s0", "TRIM_HORIZON", "9:2")]


LOCAL = {"streamName": "events", "endpointUrl": "http://127.0.0.1:4567", "region": "us-east-1"}


def test_source_options_in_any_case_with_their_defaults() -> None:
    spec = SourceSpec.parse({**LOCAL, "MAXRECORDSPERTRIGGER": "500", "checkpointLocation": "/x"})
    assert spec.stream.name == "events"
    assert spec.client_config.endpoint_url == "http://127.0.0.1:4567"
    assert spec.initial_position is TRIM_HORIZON
    assert spec.max_records_per_trigger == 500
    at = SourceSpec.parse(
        {**LOCAL, "initialPosition": "at_timestamp", "initialTimestamp": "2026-01-31T12:00:00Z"}
    )
    assert at.initial_position == AtTimestamp(datetime(2026, 1, 31, 12, tzinfo=timezone.utc))
    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
    by_arn = SourceSpec.parse({"streamARN": arn})
    assert (by_arn.stream.name, by_arn.client_config.region_name) == ("orders", "eu-west-1")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "streamName"),
        ({**LOCAL, "streamARN": "arn:aws:kinesis:eu-west-1:123456789012:stream/x"}, "streamName"),
        ({**LOCAL, "maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ({**LOCAL, "maxRecordsPerTrigger": "many"}, "maxRecordsPerTrigger"),
        ({**LOCAL, "maxRecordsPerCall": "10001"}, "maxRecordsPerCall"),
        ({**LOCAL, "maxFetchSeconds": "nan"}, "maxFetchSeconds"),
        ({**LOCAL, "idleIntervalSeconds": "0.1"}, "idleIntervalSeconds"),
        ({**LOCAL, "initialPosition": "EARLIEST"}, "initialPosition"),
        ({**LOCAL, "initialPosition": "AT_TIMESTAMP"}, "initialTimestamp"),
        ({**LOCAL, "initialTimestamp": "2026-01-01"}, "initialTimestamp"),
        (
            {**LOCAL, "initialPosition": "AT_TIMESTAMP", "initialTimestamp": "yesterday"},
            "initialTimestamp",
        ),
        ({**LOCAL, "awsAccessKeyId": "AKIA"}, "awsSecretKey"),
        ({**LOCAL, "maxRecordPerTrigger": "5"}, "maxRecordPerTrigger"),
        ({**LOCAL, "endpointUrl": "127.0.0.1:4567"}, "endpoint_url"),
    ],
)
def test_bad_source_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SourceSpec.parse(options)
    assert caught.value.field == named


def test_sink_options_and_their_errors() -> None:
    spec = SinkSpec.parse({**LOCAL, "partitionKeyColumn": "user", "aggregation": "FALSE"})
    assert (spec.data_column, spec.partition_key_column) == ("data", "user")
    assert spec.explicit_hash_key_column is None
    assert not spec.aggregation
    with pytest.raises(ConfigurationError) as caught:
        SinkSpec.parse({**LOCAL, "preserveOrder": "yes"})
    assert caught.value.field == "preserveOrder"
    with pytest.raises(ConfigurationError) as caught:
        SinkSpec.parse({**LOCAL, "maxRecordsPerTrigger": "5"})
    assert caught.value.field == "maxRecordsPerTrigger"


def test_a_slice_is_read_once_its_reader_is_past_the_end_delivered_or_not() -> None:
    from kinesis_core.records import KinesisRecord
    from spark_kinesis._shards import _reached

    def at(sub: int) -> list[KinesisRecord]:
        return [KinesisRecord(b"", "k", None, "10", sub, "s", None, True)]

    # An aggregate the hash-range filter dropped still ends a slice through or before it.
    assert _reached((10, WHOLE), 10, [])
    assert _reached((10, BEFORE), 10, [])
    assert not _reached((10, WHOLE), 9, [])
    assert not _reached((10, BEFORE), None, [])
    # A user record's mark: reached at that user record, or past its Kinesis record.
    assert not _reached((10, 3), 10, at(2))
    assert _reached((10, 3), 10, at(3))
    assert _reached((10, 3), 11, [])
