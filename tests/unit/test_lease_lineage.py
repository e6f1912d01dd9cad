"""What the lineage offers leases: start only held shards, from their stored checkpoints;
shards finished by other workers; shards given up; finished leases the KCL deleted."""

from __future__ import annotations

from kinesis_core.checkpoint import SHARD_END, Sentinel
from kinesis_core.consumer import LATEST, TRIM_HORIZON
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.shards.hashing import MAX_HASH_KEY


def node(shard_id: str, parents: tuple[str, ...] = (), is_open: bool = True) -> ShardNode:
    return ShardNode(shard_id, parents, (0, MAX_HASH_KEY), is_open)


SPLIT = [node("p", is_open=False), node("a", ("p",)), node("b", ("p",))]


def test_only_held_shards_start_from_their_stored_checkpoints() -> None:
    lineage = Lineage(LATEST)
    lineage.update([node("x"), node("y"), node("z")], {})
    started = lineage.take_ready({"x": (42, 7), "y": Sentinel.LATEST})
    assert {(d.node.shard_id, d.start) for d in started} == {("x", (42, 7)), ("y", LATEST)}
    assert lineage.state("z") is ShardState.WAITING_FOR_PARENT
    # A held lease already at SHARD_END (finished earlier) is not read again.
    assert lineage.take_ready({"z": SHARD_END}) == []
    assert lineage.state("z") is ShardState.ENDED


def test_a_parent_finished_by_another_worker_unblocks_the_children() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(SPLIT, {})
    held = {"a": Sentinel.TRIM_HORIZON, "b": Sentinel.TRIM_HORIZON}
    assert lineage.take_ready(held) == []  # p is another worker's, not finished
    lineage.observe({"p": (5, 0)})
    assert lineage.take_ready(held) == []
    lineage.observe({"p": SHARD_END})
    assert lineage.state("p") is ShardState.ENDED
    assert sorted(d.node.shard_id for d in lineage.take_ready(held)) == ["a", "b"]


def test_a_lost_shard_waits_again_and_restarts_from_the_new_checkpoint() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update([node("x")], {})
    assert [d.start for d in lineage.take_ready({"x": Sentinel.TRIM_HORIZON})] == [TRIM_HORIZON]
    lineage.release("x")
    assert lineage.state("x") is ShardState.WAITING_FOR_PARENT
    assert [d.start for d in lineage.take_ready({"x": (9, 1)})] == [(9, 1)]
    lineage.reader_done("x")
    lineage.release("x")  # lost while ending: another worker finishes it
    assert lineage.state("x") is ShardState.WAITING_FOR_PARENT
    lineage.observe({"x": SHARD_END})
    assert lineage.state("x") is ShardState.ENDED
    lineage.release("x")  # finished shards stay finished
    assert lineage.state("x") is ShardState.ENDED


def test_waiting_lists_the_leases_to_create_parents_first() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(list(reversed(SPLIT)), {"p": (3, 0)})
    assert [(d.node.shard_id, d.start) for d in lineage.waiting()] == [
        ("p", (3, 0)),
        ("b", TRIM_HORIZON),
        ("a", TRIM_HORIZON),
    ]


def test_an_ancestor_whose_lease_was_deleted_after_its_children_started_is_finished() -> None:
    """The KCL deletes a finished lease once its children have started: its shard is still
    listed (within retention) but has no row. It must not be read again."""
    history = [
        node("g", is_open=False),
        node("p", ("g",), is_open=False),
        node("c1", ("p",)),
        node("c2", ("p",)),
    ]
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(history, {"c1": (77, 0), "c2": Sentinel.TRIM_HORIZON})
    assert lineage.state("g") is ShardState.ENDED
    assert lineage.state("p") is ShardState.ENDED
    assert sorted(d.node.shard_id for d in lineage.take_ready()) == ["c1", "c2"]


def test_children_created_but_not_started_do_not_finish_their_parent() -> None:
    lineage = Lineage(TRIM_HORIZON)
    lineage.update(SPLIT, {"a": Sentinel.TRIM_HORIZON, "b": Sentinel.TRIM_HORIZON})
    assert [d.node.shard_id for d in lineage.take_ready()] == ["p"]
