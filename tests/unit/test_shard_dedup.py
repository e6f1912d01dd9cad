"""A shard's deduplication in the consumer (kinesis_core/consumer/shard_dedup.py): what it drops,
and the window a checkpoint stores (the ids up to it, never past it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core.checkpoint.base import SHARD_END, Sentinel
from kinesis_core.consumer.dedup import DedupWindow
from kinesis_core.consumer.shard_dedup import Deduplicate, ShardDedup
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import KinesisRecord

ARRIVAL = 1_700_000_000.0


def record(
    sequence: int, sub: int, record_id: str | tuple[str, int] | None, data: bytes = b"x"
) -> KinesisRecord:
    return KinesisRecord(
        data,
        "pk",
        None,
        str(sequence),
        sub,
        "shardId-000000000000",
        ARRIVAL,
        True,
        id_run=record_id,
    )


def aggregate(
    sequence: int, origin: str, first: int, subs: range | list[int]
) -> list[KinesisRecord]:
    """The records of one aggregate whose ids are the run ``origin:first`` onwards (sub-record
    ``k`` has counter ``first + k``); ``subs`` those of them this shard holds."""
    run = (origin + ":", first)
    return [record(sequence, sub, run) for sub in subs]


def ids(records: list[KinesisRecord]) -> list[str | None]:
    return [r.record_id for r in records]


def fresh() -> ShardDedup:
    return ShardDedup(Deduplicate().window())


def test_records_that_are_no_duplicates_come_back_as_they_are() -> None:
    dedup = fresh()
    records = aggregate(1, "s.0", 0, range(500)) + aggregate(2, "s.0", 500, range(3))
    assert dedup.admit(records) is records
    assert len(dedup.live) == 503
    assert dedup.live.entries == 1
    assert dedup.dropped == 0


def test_an_aggregate_written_again_is_dropped_whole() -> None:
    dedup = fresh()
    dedup.admit(aggregate(1, "s.0", 0, range(10)))
    again = aggregate(2, "s.0", 0, range(10)) + aggregate(3, "s.0", 10, range(2))
    assert ids(dedup.admit(again)) == ["s.0:10", "s.0:11"]
    assert dedup.dropped == 10


def test_a_partly_repeated_run_keeps_only_its_new_records() -> None:
    dedup = fresh()
    dedup.admit(aggregate(1, "s.0", 0, range(5)))
    kept = dedup.admit([record(2, 0, None), *aggregate(3, "s.0", 3, range(4))])
    assert ids(kept) == [None, "s.0:5", "s.0:6"]
    assert dedup.dropped == 2


def test_ids_of_their_own_and_records_without_ids() -> None:
    dedup = fresh()
    first = [record(1, 0, "order-1"), record(2, 0, None), record(3, 0, "1.0.a.0:0")]
    assert dedup.admit(first) is first
    kept = dedup.admit([record(4, 0, "order-1"), record(5, 0, None), record(6, 0, "1.0.a.0:0")])
    assert ids(kept) == [None]
    assert dedup.dropped == 2


def test_a_run_with_gaps_takes_the_ids_of_the_records_it_holds() -> None:
    """A child shard holds some records of an aggregate its parent's producer wrote."""
    dedup = fresh()
    dedup.admit(aggregate(1, "s.0", 100, [0, 1, 3, 4, 7]))
    assert [f"s.0:{n}" in dedup.live for n in range(100, 108)] == [
        True,
        True,
        False,
        True,
        True,
        False,
        False,
        True,
    ]
    assert ids(dedup.admit(aggregate(2, "s.0", 100, range(8)))) == ["s.0:102", "s.0:105", "s.0:106"]


def test_the_stored_window_holds_the_ids_up_to_the_checkpoint_only() -> None:
    dedup = fresh()
    dedup.admit([*aggregate(1, "s.0", 0, range(10)), record(2, 0, "own")])
    dedup.admit(aggregate(3, "s.0", 10, range(10)))
    text = dedup.window_at((1, 4))
    stored = DedupWindow.loads(text)
    assert [f"s.0:{n}" in stored for n in (0, 4, 5, 19)] == [True, True, False, False]
    assert "own" not in stored
    # After a crash at that checkpoint, the records after it come again and are delivered.
    again = ShardDedup(Deduplicate().start(text, ()))
    replay = [*aggregate(1, "s.0", 0, range(5, 10)), record(2, 0, "own")]
    assert again.admit(replay) is replay
    # Checkpoints move on: mid-run, then past a whole segment, then to the end.
    assert "own" in DedupWindow.loads(dedup.window_at((2, 0)))
    assert "s.0:14" not in DedupWindow.loads(dedup.window_at((2, 0)))
    assert "s.0:14" in DedupWindow.loads(dedup.window_at((3, 4)))
    assert "s.0:15" not in DedupWindow.loads(dedup.window_at((3, 4)))
    assert len(DedupWindow.loads(dedup.window_at(SHARD_END))) == 21


def test_a_checkpoint_inside_a_block_of_ids_of_their_own_stores_its_first_part() -> None:
    dedup = fresh()
    records = [record(7, sub, f"order-{sub}") for sub in range(5)]
    assert dedup.admit(records) is records
    stored = DedupWindow.loads(dedup.window_at((7, 2)))
    assert [f"order-{n}" in stored for n in range(5)] == [True, True, True, False, False]
    stored = DedupWindow.loads(dedup.window_at((7, 4)))
    assert all(f"order-{n}" in stored for n in range(5))


def test_a_start_value_stores_the_window_the_shard_started_with() -> None:
    start = Deduplicate().window()
    start.seen("before", ARRIVAL)
    dedup = ShardDedup(start)
    dedup.admit([record(1, 0, "after")])
    stored = DedupWindow.loads(dedup.window_at(Sentinel.TRIM_HORIZON))
    assert "before" in stored
    assert "after" not in stored


def test_children_start_with_their_parents_final_windows() -> None:
    config = Deduplicate()
    left, right = fresh(), fresh()
    left.admit(aggregate(1, "a.0", 0, range(3)))
    right.admit([record(1, 0, "b")])
    parents = [left.window_at(SHARD_END), right.window_at(SHARD_END)]
    merged = ShardDedup(config.start(None, parents))
    kept = merged.admit([*aggregate(9, "a.0", 0, range(4)), record(10, 0, "b")])
    assert ids(kept) == ["a.0:3"]
    # A child's own window, once stored, is what it resumes with.
    own = merged.window_at(SHARD_END)
    assert "a.0:3" in config.start(own, parents)
    assert "a.0:3" not in config.start(None, parents)


def test_bad_bounds_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match="max_bytes"):
        Deduplicate(max_bytes=10)
    with pytest.raises(ConfigurationError, match="max_age"):
        Deduplicate(max_age=-1)


@st.composite
def shard_reads(draw: st.DrawFn) -> list[list[KinesisRecord]]:
    """Responses of a shard: aggregates of runs (some written again after a lost answer), ids
    of their own, records without ids."""
    responses: list[list[KinesisRecord]] = []
    sequence = 0
    counter = 0
    written: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(1, 12))):
        response: list[KinesisRecord] = []
        for _ in range(draw(st.integers(1, 4))):
            sequence += 1
            kind = draw(st.sampled_from(["run", "run", "again", "own", "none"]))
            if kind == "again" and written:
                first, size = draw(st.sampled_from(written))
                response += aggregate(sequence, "p.0", first, range(size))
            elif kind in ("run", "again"):
                size = draw(st.integers(1, 6))
                written.append((counter, size))
                response += aggregate(sequence, "p.0", counter, range(size))
                counter += size
            elif kind == "own":
                response.append(record(sequence, 0, f"own-{draw(st.integers(0, 5))}"))
            else:
                response.append(record(sequence, 0, None))
        responses.append(response)
    return responses


@settings(max_examples=150, deadline=None)
@given(shard_reads(), st.data())
def test_a_crash_at_any_checkpoint_loses_nothing_and_repeats_only_what_followed_it(
    responses: list[list[KinesisRecord]], data: st.DataObject
) -> None:
    every = [r for response in responses for r in response]
    dedup = fresh()
    delivered = [r for response in responses for r in dedup.admit(response)]
    # Delivered: the first record of each id, every record without one.
    first_of: dict[str, KinesisRecord] = {}
    for r in every:
        if r.record_id is not None:
            first_of.setdefault(r.record_id, r)
    expected = [r for r in every if r.record_id is None or first_of[r.record_id] is r]
    assert delivered == expected
    # A checkpoint at any delivered record; a crash; the records after it read again.
    at = data.draw(st.sampled_from(delivered)).position
    text = dedup.window_at(at)
    again = ShardDedup(Deduplicate().start(text, ()))
    after = [r for r in every if r.position > at]
    redelivered = again.admit(after)
    before = [r for r in delivered if r.position <= at]
    assert {r.record_id for r in before + redelivered} == {r.record_id for r in every}
    assert [r for r in redelivered if r.record_id is not None and r in before] == []
    assert redelivered == [r for r in delivered if r.position > at]
