"""Lineage: parents before children for splits and merges, start points, gone shards."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from kinesis_core.checkpoint import SHARD_END, Sentinel
from kinesis_core.consumer import LATEST, TRIM_HORIZON, AtTimestamp
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.shards.info import ShardInfo

HALF = MAX_HASH_KEY // 2


def node(shard_id: str, parents: tuple[str, ...] = (), is_open: bool = True) -> ShardNode:
    return ShardNode(shard_id, parents, (0, MAX_HASH_KEY), is_open)


def split_history() -> list[ShardNode]:
    """p split into a and b, then a and b merged into m."""
    return [
        node("p", is_open=False),
        node("a", ("p",), is_open=False),
        node("b", ("p",), is_open=False),
        node("m", ("a", "b")),
    ]


def ready_ids(lineage: Lineage) -> list[str]:
    return sorted(d.node.shard_id for d in lineage.take_ready())


def finish(lineage: Lineage, shard_id: str) -> None:
    lineage.reader_done(shard_id)
    lineage.shard_ended(shard_id)


def test_split_then_merge_reads_parents_first() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(split_history(), {})
    first = lineage.take_ready()
    assert [d.node.shard_id for d in first] == ["p"]
    assert first[0].start == TRIM_HORIZON
    assert lineage.state("m") is ShardState.WAITING_FOR_PARENT
    assert ready_ids(lineage) == []
    lineage.reader_done("p")
    assert lineage.state("p") is ShardState.ENDING
    assert ready_ids(lineage) == []  # SHARD_END not stored yet
    lineage.shard_ended("p")
    assert ready_ids(lineage) == ["a", "b"]
    finish(lineage, "a")
    assert ready_ids(lineage) == []  # a merge waits for both parents
    finish(lineage, "b")
    assert ready_ids(lineage) == ["m"]


def test_stored_checkpoints_decide_the_start() -> None:
    lineage = Lineage(LATEST)
    lineage.update(split_history(), {"p": SHARD_END, "a": (42, 3), "b": Sentinel.TRIM_HORIZON})
    assert lineage.state("p") is ShardState.ENDED
    decisions = {d.node.shard_id: d.start for d in lineage.take_ready()}
    assert decisions == {"a": (42, 3), "b": TRIM_HORIZON}
    # m descends from shards this consumer reads: all of it, after them, whatever LATEST says.
    finish(lineage, "a")
    finish(lineage, "b")
    assert [d.start for d in lineage.take_ready()] == [TRIM_HORIZON]


def test_latest_skips_closed_shards_and_starts_open_ones_at_once() -> None:
    lineage = Lineage(LATEST)
    lineage.update(split_history(), {})
    assert lineage.state("p") is ShardState.SKIPPED
    decisions = lineage.take_ready()
    assert [(d.node.shard_id, d.start) for d in decisions] == [("m", LATEST)]


def test_parents_gone_past_retention_do_not_block() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update([node("c", ("trimmed-1", "trimmed-2"))], {})
    assert [d.start for d in lineage.take_ready()] == [TRIM_HORIZON]


def test_a_waiting_shard_that_vanishes_unblocks_its_children() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update([node("g", is_open=False), node("p", ("g",), False), node("c", ("p",))], {})
    assert ready_ids(lineage) == ["g"]
    lineage.update([node("g", is_open=False), node("c", ("p",))], {})
    assert lineage.state("p") is ShardState.SKIPPED
    finish(lineage, "g")
    assert ready_ids(lineage) == ["c"]


def test_children_announced_at_shard_end() -> None:
    lineage = Lineage(LATEST)
    lineage.update([node("p")], {})
    assert ready_ids(lineage) == ["p"]
    children = [
        ShardNode.from_child_shard(
            {
                "ShardId": cid,
                "ParentShards": ["p"],
                "HashKeyRange": {"StartingHashKey": str(lo), "EndingHashKey": str(hi)},
            }
        )
        for cid, lo, hi in (("c1", 0, HALF), ("c2", HALF + 1, MAX_HASH_KEY))
    ]
    lineage.add_children(children)
    assert lineage.node("c2") is not None
    assert lineage.node("c2").hash_range == (HALF + 1, MAX_HASH_KEY)  # type: ignore[union-attr]
    assert ready_ids(lineage) == []
    finish(lineage, "p")
    assert [d.start for d in lineage.take_ready()] == [TRIM_HORIZON, TRIM_HORIZON]


def test_at_timestamp_children_keep_the_timestamp() -> None:
    position = AtTimestamp(1_700_000_000)
    lineage = Lineage(position)
    lineage.update([node("p", is_open=False), node("c", ("p",))], {"c": Sentinel.AT_TIMESTAMP})
    assert [d.start for d in lineage.take_ready()] == [position]
    finish(lineage, "p")
    assert [d.start for d in lineage.take_ready()] == [position]


def test_from_shard_info() -> None:
    info = ShardInfo("s", 5, 9, "p1", "p2", 100, 200)
    assert ShardNode.from_shard_info(info) == ShardNode("s", ("p1", "p2"), (5, 9), False)


@st.composite
def histories(draw: st.DrawFn) -> list[ShardNode]:
    """A random resharding history: splits and merges of adjacent open shards."""
    count = draw(st.integers(1, 3))
    step = (MAX_HASH_KEY + 1) // count
    open_shards = [
        (f"s{i}", i * step, MAX_HASH_KEY if i == count - 1 else (i + 1) * step - 1, ())
        for i in range(count)
    ]
    closed: list[tuple[str, int, int, tuple[str, ...]]] = []
    next_id = count
    for op in draw(st.lists(st.sampled_from(["split", "merge"]), max_size=8)):
        if op == "merge" and len(open_shards) >= 2:
            i = draw(st.integers(0, len(open_shards) - 2))
            a, b = open_shards[i], open_shards[i + 1]
            child = (f"s{next_id}", a[1], b[2], (a[0], b[0]))
            closed += [a, b]
            open_shards[i : i + 2] = [child]
            next_id += 1
        else:
            i = draw(st.integers(0, len(open_shards) - 1))
            parent = open_shards[i]
            middle = (parent[1] + parent[2]) // 2
            children = [
                (f"s{next_id}", parent[1], middle, (parent[0],)),
                (f"s{next_id + 1}", middle + 1, parent[2], (parent[0],)),
            ]
            closed.append(parent)
            open_shards[i : i + 1] = children
            next_id += 2
    nodes = [ShardNode(s, p, (lo, hi), False) for s, lo, hi, p in closed]
    nodes += [ShardNode(s, p, (lo, hi), True) for s, lo, hi, p in open_shards]
    return draw(st.permutations(nodes))


@given(histories(), st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_every_shard_is_read_once_and_only_after_its_parents(
    nodes: list[ShardNode], rnd: random.Random
) -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(nodes, {})
    by_id = {n.shard_id: n for n in nodes}
    started: list[str] = []
    reading: list[str] = []
    while True:
        for decision in lineage.take_ready():
            shard_id = decision.node.shard_id
            assert shard_id not in started
            for parent in by_id[shard_id].parents:
                assert lineage.state(parent) is ShardState.ENDED
            started.append(shard_id)
            reading.append(shard_id)
        if not reading:
            break
        done = reading.pop(rnd.randrange(len(reading)))
        finish(lineage, done)
    assert sorted(started) == sorted(by_id)
