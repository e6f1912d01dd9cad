"""The parent/child graph of a stream's shards: which shard may be read, and from where.

The KCL rule: a shard is read only when every parent is finished, i.e. read to its end with
SHARD_END checkpointed, or gone from the stream (trimmed past retention). Splits give one
parent, merges two. Sans-I/O: the driver feeds listings, checkpoints and shard ends in and
takes the shards to start out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kinesis_core.checkpoint.base import CheckpointValue, Sentinel
from kinesis_core.consumer.positions import LATEST, TRIM_HORIZON, InitialPosition
from kinesis_core.records import Position
from kinesis_core.shards.info import ShardInfo


class ShardState(str, enum.Enum):
    """Where a shard is in its life, as this consumer sees it."""

    WAITING_FOR_PARENT = "waiting_for_parent"
    READING = "reading"
    ENDING = "ending"
    """Read to its end; waiting for the last acks and the SHARD_END checkpoint."""
    ENDED = "ended"
    SKIPPED = "skipped"
    """Not read: closed before a LATEST start, or gone from the stream."""


_FINISHED = frozenset({ShardState.ENDED, ShardState.SKIPPED})


@dataclass(frozen=True, slots=True)
class ShardNode:
    """What the lineage needs to know of a shard, from ListShards or from ChildShards."""

    shard_id: str
    parents: tuple[str, ...]
    hash_range: tuple[int, int]
    is_open: bool

    @classmethod
    def from_shard_info(cls, info: ShardInfo) -> ShardNode:
        return cls(info.shard_id, info.parents, info.hash_range, info.is_open)

    @classmethod
    def children_of(cls, shard_id: str, shards: Sequence[ShardInfo]) -> tuple[ShardNode, ...]:
        """The children of ``shard_id`` in a complete listing."""
        return tuple(cls.from_shard_info(s) for s in shards if shard_id in s.parents)

    @classmethod
    def from_child_shard(cls, child: Mapping[str, Any]) -> ShardNode:
        """A ``ChildShards`` entry of a GetRecords response at the end of a shard."""
        hash_range = child["HashKeyRange"]
        return cls(
            child["ShardId"],
            tuple(child.get("ParentShards", ())),
            (int(hash_range["StartingHashKey"]), int(hash_range["EndingHashKey"])),
            True,
        )


StartPoint = Position | InitialPosition
"""A checkpointed position to resume after, or an initial position."""


@dataclass(frozen=True, slots=True)
class StartShard:
    """A decision: start reading this shard from this point."""

    node: ShardNode
    start: StartPoint


class Lineage:
    """Shard states and start points of one stream, for one consumer."""

    def __init__(self, initial_position: InitialPosition) -> None:
        self.initial_position = initial_position
        self._nodes: dict[str, ShardNode] = {}
        self._states: dict[str, ShardState] = {}
        self._starts: dict[str, StartPoint] = {}

    def node(self, shard_id: str) -> ShardNode | None:
        return self._nodes.get(shard_id)

    def state(self, shard_id: str) -> ShardState | None:
        return self._states.get(shard_id)

    def states(self) -> dict[str, ShardState]:
        return dict(self._states)

    def update(
        self, shards: Iterable[ShardNode], checkpoints: Mapping[str, CheckpointValue]
    ) -> None:
        """Take in a full listing of the stream and the stored checkpoints.

        New shards get a state and a start point, parents before children. A known shard
        that is still waiting and no longer listed is gone, and blocks nobody. A shard with no
        checkpoint whose descendant has started (checkpointed a position or SHARD_END) was
        finished before, its row since deleted (the KCL deletes finished leases): it is ENDED.
        """
        listed = {node.shard_id: node for node in shards}
        for shard_id, state in self._states.items():
            if state is ShardState.WAITING_FOR_PARENT and shard_id not in listed:
                self._states[shard_id] = ShardState.SKIPPED
        checkpoints = {**checkpoints, **_finished_ancestors(listed, checkpoints)}
        for node in listed.values():
            self._add(node, listed, checkpoints)
        self.observe(checkpoints)

    def observe(self, checkpoints: Mapping[str, CheckpointValue]) -> None:
        """Stored checkpoints written by other workers: a waiting shard whose checkpoint is
        SHARD_END was finished by one of them."""
        for shard_id, value in checkpoints.items():
            waiting = self._states.get(shard_id) is ShardState.WAITING_FOR_PARENT
            if value is Sentinel.SHARD_END and waiting:
                self._states[shard_id] = ShardState.ENDED

    def add_children(self, children: Iterable[ShardNode]) -> None:
        """Children announced by a parent at its end (GetRecords ``ChildShards``)."""
        known = {child.shard_id: child for child in children}
        for child in known.values():
            self._add(child, known, {})

    def _add(
        self,
        node: ShardNode,
        listed: Mapping[str, ShardNode],
        checkpoints: Mapping[str, CheckpointValue],
    ) -> None:
        if node.shard_id in self._states:
            return
        for parent in node.parents:
            if parent in listed:
                self._add(listed[parent], listed, checkpoints)
        self._nodes[node.shard_id] = node
        value = checkpoints.get(node.shard_id)
        if value is Sentinel.SHARD_END:
            self._states[node.shard_id] = ShardState.ENDED
            return
        start = self._start_point(node, value)
        if start is None:
            self._states[node.shard_id] = ShardState.SKIPPED
            return
        self._states[node.shard_id] = ShardState.WAITING_FOR_PARENT
        self._starts[node.shard_id] = start

    def _start_point(self, node: ShardNode, value: CheckpointValue | None) -> StartPoint | None:
        if isinstance(value, tuple):
            return value
        initial = self.initial_position
        if value is not None:
            if value is Sentinel.AT_TIMESTAMP and initial.timestamp is None:
                return TRIM_HORIZON
            if value is Sentinel.AT_TIMESTAMP:
                return initial
            return LATEST if value is Sentinel.LATEST else TRIM_HORIZON
        tracked_parent = any(
            self._states.get(parent, ShardState.SKIPPED) is not ShardState.SKIPPED
            for parent in node.parents
        )
        if tracked_parent:
            # A descendant of a shard this consumer reads: all of it, after its parents.
            return initial if initial.timestamp is not None else TRIM_HORIZON
        if initial.sentinel is Sentinel.LATEST and not node.is_open:
            return None
        return initial

    def take_ready(self, held: Mapping[str, CheckpointValue] | None = None) -> list[StartShard]:
        """The waiting shards whose parents are all finished, now marked READING.

        With leases, ``held`` maps the shards this worker holds to their stored checkpoints:
        only those start, each from its checkpoint as it is now.
        """
        if held is not None:
            self.observe(held)
        ready = []
        for shard_id, state in self._states.items():
            if state is not ShardState.WAITING_FOR_PARENT or not self._parents_finished(shard_id):
                continue
            if held is None:
                ready.append(StartShard(self._nodes[shard_id], self._starts[shard_id]))
            elif shard_id in held:
                start = self._start_point(self._nodes[shard_id], held[shard_id])
                assert start is not None  # only a missing checkpoint can mean "skip"
                ready.append(StartShard(self._nodes[shard_id], start))
        for decision in ready:
            self._states[decision.node.shard_id] = ShardState.READING
        return ready

    def waiting(self) -> list[StartShard]:
        """The shards still to be read and where each would start, parents first (the leases
        a worker creates for them)."""
        return [
            StartShard(self._nodes[shard_id], self._starts[shard_id])
            for shard_id, state in self._states.items()
            if state is ShardState.WAITING_FOR_PARENT
        ]

    def release(self, shard_id: str) -> None:
        """This worker stopped reading the shard before its end (its lease went to another
        worker): it waits again, like any shard this worker does not hold."""
        if self._states.get(shard_id) in (ShardState.READING, ShardState.ENDING):
            self._states[shard_id] = ShardState.WAITING_FOR_PARENT

    def _parents_finished(self, shard_id: str) -> bool:
        return all(
            self._states.get(parent, ShardState.SKIPPED) in _FINISHED
            for parent in self._nodes[shard_id].parents
        )

    def reader_done(self, shard_id: str) -> None:
        """The reader reached the end of the shard; SHARD_END is not written yet."""
        self._expect(shard_id, ShardState.READING)
        self._states[shard_id] = ShardState.ENDING

    def shard_ended(self, shard_id: str) -> None:
        """SHARD_END is checkpointed: the children may start."""
        self._expect(shard_id, ShardState.ENDING)
        self._states[shard_id] = ShardState.ENDED

    def shard_gone(self, shard_id: str) -> None:
        """The shard vanished under its reader (trimmed or deleted): it blocks nobody."""
        self._states[shard_id] = ShardState.SKIPPED

    def _expect(self, shard_id: str, state: ShardState) -> None:
        if self._states.get(shard_id) is not state:
            raise RuntimeError(
                f"shard {shard_id} is {self._states.get(shard_id)}, expected {state.value}"
            )


def _finished_ancestors(
    listed: Mapping[str, ShardNode], checkpoints: Mapping[str, CheckpointValue]
) -> dict[str, CheckpointValue]:
    """SHARD_END for every listed ancestor without a checkpoint of a shard that has started."""
    stack = [
        listed[shard_id]
        for shard_id, value in checkpoints.items()
        if shard_id in listed and (isinstance(value, tuple) or value is Sentinel.SHARD_END)
    ]
    seen: set[str] = set()
    while stack:
        for parent in stack.pop().parents:
            if parent in listed and parent not in seen:
                seen.add(parent)
                stack.append(listed[parent])
    return {shard_id: Sentinel.SHARD_END for shard_id in seen if shard_id not in checkpoints}
