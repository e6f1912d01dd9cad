"""The source's offsets and the decisions made on them (sans-I/O).

An offset is what Spark writes to the query's checkpoint before a micro-batch runs: the stream,
its incarnation (creation time) and one mark per shard:

- ``"TRIM_HORIZON"`` or ``"AT_TIMESTAMP:<epoch ms>"``: nothing read yet, the shard starts there;
- ``"<sequence number>"``: read through this Kinesis record, every user record of a KPL
  aggregate included (the marks the driver makes: it never deaggregates);
- ``"before:<sequence number>"``: read up to this Kinesis record, not into it (the end a
  probe found: the first record after an earlier look);
- ``"<sequence number>:<sub-sequence number>"``: read through this user record (inclusive);
- ``"SHARD_END"``: read to the shard's end.

A batch reads each shard from its mark in the batch's start offset to its mark in the end
offset. Records are immutable and their order in a shard fixed, so the same two offsets give
the same records every time: a replayed batch is the batch that ran.

A shard enters the offsets with its start mark only once every parent is ``SHARD_END`` in the
start offset of the batch being planned, i.e. in a batch that has run: a child's records come
in a later batch than its parents' last ones (:func:`admit`, with the core's
:class:`~kinesis_core.consumer.lineage.Lineage`). :func:`allot` shares a batch's record limit
between the shards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kinesis_core.checkpoint.base import CheckpointValue, Sentinel
from kinesis_core.consumer.incarnation import StreamRecreatedError, epoch_ms, timestamp_text
from kinesis_core.consumer.lineage import Lineage, ShardNode, StartPoint
from kinesis_core.consumer.positions import TRIM_HORIZON, AtTimestamp, InitialPosition
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import Position

SHARD_END = "SHARD_END"
_AT_TIMESTAMP = "AT_TIMESTAMP:"
_BEFORE = "before:"
WHOLE = 2**63 - 1
"""The sub-sequence number of a position through a whole Kinesis record: above any user
record's index in an aggregate."""
BEFORE = -1
"""The sub-sequence number of a position up to a Kinesis record, not into it: below any user
record's index."""


def position_mark(position: Position) -> str:
    """The mark of a record read through (a whole Kinesis record: its sequence number; up to
    a Kinesis record: ``before:`` it)."""
    if position[1] == WHOLE:
        return str(position[0])
    if position[1] == BEFORE:
        return f"{_BEFORE}{position[0]}"
    return f"{position[0]}:{position[1]}"


def start_mark(start: StartPoint) -> str:
    """The mark of a start point: a position, TRIM_HORIZON or AT_TIMESTAMP."""
    if isinstance(start, tuple):
        return position_mark(start)
    if start.timestamp is not None:
        return f"{_AT_TIMESTAMP}{epoch_ms(start.timestamp)}"
    if start.sentinel is Sentinel.TRIM_HORIZON:
        return Sentinel.TRIM_HORIZON.value
    raise ValueError(f"{start!r} has no mark: resolve LATEST to a timestamp first")


def parse_mark(mark: str) -> StartPoint | None:
    """The start point a mark stands for; None for ``SHARD_END``."""
    if mark == SHARD_END:
        return None
    if mark == Sentinel.TRIM_HORIZON.value:
        return TRIM_HORIZON
    if mark.startswith(_AT_TIMESTAMP):
        return AtTimestamp(int(mark[len(_AT_TIMESTAMP) :]) / 1000)
    if mark.isdigit():
        return (int(mark), WHOLE)
    if mark.startswith(_BEFORE) and mark[len(_BEFORE) :].isdigit():
        return (int(mark[len(_BEFORE) :]), BEFORE)
    sequence, _, sub = mark.partition(":")
    if not (sequence.isdigit() and sub.isdigit()):
        raise ValueError(f"not a shard mark: {mark!r}")
    return (int(sequence), int(sub))


def checkpoint_value(mark: str) -> CheckpointValue:
    """The mark as the lineage's checkpoints spell it."""
    start = parse_mark(mark)
    if start is None:
        return Sentinel.SHARD_END
    if isinstance(start, tuple):
        return start
    return start.sentinel


@dataclass(frozen=True)
class StreamOffset:
    """One offset of the source: the stream, its creation time and a mark per shard."""

    stream: str
    created_ms: int
    shards: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "created": self.created_ms, "shards": dict(self.shards)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> StreamOffset:
        try:
            shards = value["shards"]
            offset = cls(str(value["stream"]), int(value["created"]), dict(shards))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not an offset of the Kinesis source: {value!r:.200}") from exc
        for mark in offset.shards.values():
            parse_mark(mark)
        return offset

    def check(self, stream: str, created_ms: int) -> None:
        """Refuse an offset of another stream, or of another incarnation of this one (deleted
        and created again: same shard ids, other sequence numbers)."""
        if self.stream != stream:
            raise ConfigurationError(
                "streamName",
                f"the query's checkpoint has offsets of stream {self.stream!r}, not {stream!r}; "
                "start the query with a new checkpointLocation",
            )
        if self.created_ms != created_ms:
            raise StreamRecreatedError(
                f"the query's checkpoint has offsets of stream {stream!r} as created "
                f"{timestamp_text(self.created_ms)}; the stream now was created "
                f"{timestamp_text(created_ms)} (deleted and created again). Its positions "
                "mean nothing in the new stream: start the query with a new checkpointLocation",
                stream=stream,
                stored_created_ms=(self.created_ms,),
                created_ms=created_ms,
            )

    def with_marks(self, marks: Mapping[str, str]) -> StreamOffset:
        return StreamOffset(self.stream, self.created_ms, {**self.shards, **marks})


def resolve_initial(initial: InitialPosition, now: datetime) -> InitialPosition:
    """LATEST as the query's start time: a mark must name the same records on every replay."""
    if initial.sentinel is Sentinel.LATEST:
        return AtTimestamp(now.astimezone(timezone.utc))
    return initial


def _lineage(
    initial: InitialPosition, nodes: Iterable[ShardNode], marks: Mapping[str, str]
) -> Lineage:
    lineage = Lineage(initial)
    lineage.update(nodes, {shard_id: checkpoint_value(mark) for shard_id, mark in marks.items()})
    return lineage


def initial_offset(
    stream: str, created_ms: int, nodes: Iterable[ShardNode], initial: InitialPosition
) -> StreamOffset:
    """The first offset of a query: the shards with no unfinished parent, at ``initial``
    (LATEST resolved to a timestamp)."""
    ready = _lineage(initial, nodes, {}).take_ready()
    return StreamOffset(
        stream, created_ms, {start.node.shard_id: start_mark(start.start) for start in ready}
    )


def admit(
    offset: StreamOffset, nodes: Iterable[ShardNode], initial: InitialPosition
) -> dict[str, str]:
    """The start marks of the shards that may join after ``offset`` (the start of the batch
    being planned): those not in it whose parents are all ``SHARD_END`` in it (or were
    finished before: ancestors of shards in it, or gone from the listing). A joining shard is
    read whole (TRIM_HORIZON), or from the query's AT_TIMESTAMP ``initial``: a child's records
    all come after its parents', which were read. LATEST stands for TRIM_HORIZON here (it was
    the query's start, and a restarted driver must not take its own start for it)."""
    if initial.sentinel is Sentinel.LATEST:
        initial = TRIM_HORIZON
    lineage = _lineage(initial, nodes, offset.shards)
    return {
        start.node.shard_id: start_mark(start.start)
        for start in lineage.take_ready()
        if start.node.shard_id not in offset.shards
    }


def _read_from(mark: str | None) -> bool:
    return mark is not None and not isinstance(parse_mark(mark), InitialPosition)


def prune(offset: StreamOffset, nodes: Iterable[ShardNode]) -> StreamOffset:
    """``offset`` without the shards at ``SHARD_END`` whose children have all read something
    (a position or ``SHARD_END`` in it, not a start mark): an ancestor of shards that did
    counts as finished (:func:`admit`), so an offset stays as large as the shards being read,
    however often the stream reshards."""
    children: dict[str, list[str]] = {}
    for node in nodes:
        for parent in node.parents:
            children.setdefault(parent, []).append(node.shard_id)
    done = [
        shard_id
        for shard_id, mark in offset.shards.items()
        if mark == SHARD_END
        and shard_id in children
        and all(_read_from(offset.shards.get(child)) for child in children[shard_id])
    ]
    if not done:
        return offset
    kept = {s: m for s, m in offset.shards.items() if s not in done}
    return StreamOffset(offset.stream, offset.created_ms, kept)


def unknown_children(offset: StreamOffset, nodes: Iterable[ShardNode]) -> list[str]:
    """The shards at ``SHARD_END`` in ``offset`` whose children ``nodes`` does not know: a
    listing is due."""
    parents = {parent for node in nodes for parent in node.parents}
    return [s for s, mark in offset.shards.items() if mark == SHARD_END and s not in parents]


def allot(available: Mapping[str, int], limit: int | None) -> dict[str, int]:
    """How many of each shard's ``available`` records a batch takes under ``limit`` records
    in all: an equal share each, a shard's unused share going to the others."""
    if limit is None or sum(available.values()) <= limit:
        return dict(available)
    taken = dict.fromkeys(available, 0)
    left = limit
    wanting = sorted((n, s) for s, n in available.items() if n > 0)
    while left > 0 and wanting:
        share = max(left // len(wanting), 1)
        rest = []
        for n, shard_id in wanting:
            take = min(n - taken[shard_id], share, left)
            taken[shard_id] += take
            left -= take
            if taken[shard_id] < n:
                rest.append((n, shard_id))
            if left == 0:
                break
        wanting = rest
    return taken


@dataclass(frozen=True)
class ShardSlice:
    """What one task reads: a shard from after ``start`` through ``end`` (marks)."""

    shard_id: str
    start: str
    end: str


def slices(start: StreamOffset, end: StreamOffset) -> list[ShardSlice]:
    """The shards that moved between two offsets, one slice (one task) each. A shard that
    joined in ``end`` has its start mark there: it is read from the next batch on."""
    return [
        ShardSlice(shard_id, start.shards[shard_id], mark)
        for shard_id, mark in end.shards.items()
        if shard_id in start.shards and start.shards[shard_id] != mark
    ]
