"""The ack frontier: the checkpoint is the end of the contiguous acked prefix, whatever the
order of the acks."""

from __future__ import annotations

import gc
import weakref

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core.checkpoint import SHARD_END, Sentinel
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.records import KinesisRecord


def make_records(batch: RecordBatch, positions: list[tuple[int, int]]) -> list[KinesisRecord]:
    return [
        KinesisRecord(b"x", "pk", None, seq, sub, "shard-0", None, sub > 0, batch.record_ack)
        for seq, sub in positions
    ]


def add_batch(frontier: ShardFrontier, positions: list[tuple[int, int]]) -> RecordBatch:
    batch = frontier.new_batch()
    frontier.add(batch, make_records(batch, positions), 0)
    return batch


def test_a_consumed_batch_is_freed_without_the_cyclic_collector() -> None:
    """Records hold their batch weakly: a batch read, acked and dropped goes at once, and so
    do its records (before, record -> batch -> records was a cycle: every batch of tens of
    thousands of records waited for a full collection)."""
    frontier = ShardFrontier("shard-0", Sentinel.TRIM_HORIZON)
    batch = add_batch(frontier, [(10, 0), (11, 0)])
    first = batch.records[0]
    gone = weakref.ref(batch)
    enabled = gc.isenabled()
    gc.disable()
    try:
        batch.ack()
        del batch
        assert gone() is None
        first.ack()  # its batch is gone: nothing to do
        assert frontier.checkpoint == (11, 0)
    finally:
        if enabled:
            gc.enable()


def test_in_order_acks_move_the_checkpoint_record_by_record() -> None:
    frontier = ShardFrontier("shard-0", Sentinel.TRIM_HORIZON)
    batch = add_batch(frontier, [(10, 0), (10, 1), (11, 0)])
    assert frontier.checkpoint is Sentinel.TRIM_HORIZON
    batch.records[0].ack()
    assert frontier.checkpoint == (10, 0)
    batch.records[1].ack()
    assert frontier.checkpoint == (10, 1)
    batch.records[2].ack()
    assert frontier.checkpoint == (11, 0)
    assert frontier.drained
    assert frontier.pending == 0


def test_out_of_order_acks_wait_for_the_gap() -> None:
    frontier = ShardFrontier("shard-0")
    first = add_batch(frontier, [(1, 0), (2, 0), (3, 0)])
    second = add_batch(frontier, [(4, 0), (5, 0)])
    second.ack()
    first.records[2].ack()
    first.records[1].ack()
    assert frontier.checkpoint is None
    assert frontier.pending == 1
    first.records[0].ack()
    assert frontier.checkpoint == (5, 0)
    assert frontier.drained


def test_double_acks_and_foreign_records_change_nothing() -> None:
    frontier = ShardFrontier("shard-0")
    batch = add_batch(frontier, [(1, 0), (2, 0)])
    batch.records[0].ack()
    batch.records[0].ack()
    stranger = KinesisRecord(b"x", "pk", None, 2, 0, "shard-0", None, False, batch.ack_record)
    stranger.ack()
    assert frontier.checkpoint == (1, 0)
    assert frontier.pending == 1


def test_shard_end_only_after_every_record_is_acked() -> None:
    frontier = ShardFrontier("shard-0", (5, 0))
    batch = add_batch(frontier, [(6, 0), (7, 0)])
    frontier.end()
    assert frontier.checkpoint == (5, 0)
    batch.records[1].ack()
    assert frontier.checkpoint == (5, 0)
    batch.records[0].ack()
    assert frontier.checkpoint is SHARD_END
    with pytest.raises(RuntimeError):
        add_batch(frontier, [(8, 0)])


def test_an_ended_shard_with_undelivered_records_never_reaches_shard_end() -> None:
    """A consumer closed while a read-to-the-end shard's last batches were queued: the queued
    records are taken out undelivered, and the checkpoint stays before them."""
    frontier = ShardFrontier("shard-0", (5, 0))
    delivered = add_batch(frontier, [(6, 0), (7, 0)])
    queued = add_batch(frontier, [(8, 0)])
    half = add_batch(frontier, [(9, 0), (9, 1)])
    frontier.end()
    frontier.discard(queued)
    frontier.truncate(half, 1)
    delivered.ack()
    half.ack()
    assert frontier.drained
    assert frontier.cut
    assert frontier.checkpoint == (9, 0)


def test_batches_must_come_in_shard_order() -> None:
    frontier = ShardFrontier("shard-0")
    add_batch(frontier, [(5, 0), (5, 1)])
    with pytest.raises(ValueError, match="not after"):
        add_batch(frontier, [(5, 1)])


def test_undelivered_records_are_forgotten_not_skipped() -> None:
    frontier = ShardFrontier("shard-0")
    delivered = add_batch(frontier, [(1, 0), (2, 0), (3, 0)])
    queued = add_batch(frontier, [(4, 0)])
    frontier.discard(queued)
    frontier.truncate(delivered, 2)
    assert not frontier.drained
    delivered.records[1].ack()
    delivered.records[0].ack()
    delivered.records[2].ack()  # never delivered: ignored
    assert frontier.drained
    assert frontier.checkpoint == (2, 0)


def test_empty_batches_are_not_registered() -> None:
    frontier = ShardFrontier("shard-0", (3, 0))
    frontier.add(frontier.new_batch(), [], None)
    assert frontier.last_position is None
    assert frontier.drained
    assert frontier.checkpoint == (3, 0)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[list[tuple[int, int]]], list[tuple[int, int]]]:
    """Batches of ascending positions (aggregates give runs of sub-sequence numbers), and a
    random order of acks over a random subset of the records (some acked twice)."""
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    batches, seq = [], 100
    for size in sizes:
        positions = []
        while len(positions) < size:
            seq += draw(st.integers(1, 3))
            subs = draw(st.integers(1, 3))
            positions += [(seq, sub) for sub in range(subs)]
        batches.append(positions[:size])
    flat = [(b, i) for b, positions in enumerate(batches) for i in range(len(positions))]
    acks = draw(st.lists(st.sampled_from(flat), max_size=len(flat) * 2))
    return batches, acks


@given(scenarios(), st.booleans())
@settings(max_examples=300, deadline=None)
def test_checkpoint_is_the_max_contiguous_acked_prefix(
    scenario: tuple[list[list[tuple[int, int]]], list[tuple[int, int]]], batch_acks: bool
) -> None:
    batches_positions, acks = scenario
    frontier = ShardFrontier("shard-0", Sentinel.LATEST)
    batches = [add_batch(frontier, positions) for positions in batches_positions]
    order = [r for b in batches for r in b.records]
    acked: set[int] = set()
    for b, i in acks:
        record = batches[b].records[i]
        if batch_acks and i == 0:
            batches[b].ack()
            acked.update(id(r) for r in batches[b].records)
        else:
            record.ack()
            acked.add(id(record))
        prefix = 0
        while prefix < len(order) and id(order[prefix]) in acked:
            prefix += 1
        expected = order[prefix - 1].position if prefix else Sentinel.LATEST
        assert frontier.checkpoint == expected
        assert frontier.pending == len(order) - len(acked)
        if prefix < len(order):
            assert expected == Sentinel.LATEST or expected < order[prefix].position
    frontier.end()
    for record in order:
        record.ack()
    assert frontier.checkpoint is SHARD_END
