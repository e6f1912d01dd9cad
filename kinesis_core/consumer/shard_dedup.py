"""One shard's deduplication in a consumer: drops what was delivered before, and gives the window
a checkpoint stores, sans-I/O.

Two windows: ``live`` holds every id registered for delivery and answers which records are
duplicates; ``stored`` holds the ids of the records up to the last checkpoint written, which
is what the checkpoint row keeps (a record after the checkpoint is delivered again after a
crash, so its id must not be stored with it). Between the two, the ids taken since, in shard
order, as segments (a run of counters over consecutive sub-sequence numbers, or one id), moved
to ``stored`` as the checkpoint passes them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kinesis_core.checkpoint.base import Sentinel
from kinesis_core.consumer.dedup import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_IDS,
    DedupWindow,
)
from kinesis_core.records import KinesisRecord, Position


@dataclass(frozen=True, kw_only=True)
class Deduplicate:
    """Drop records whose id was delivered before (docs/effectively-once.md): the bounds of
    each shard's window (:class:`~kinesis_core.consumer.dedup.DedupWindow`).

    - ``max_age``: seconds of arrival times the window covers at least;
    - ``max_ids``: ids it holds at most;
    - ``max_bytes``: the bytes of its stored form at most (it is part of the checkpoint row;
      up to 300,000).
    """

    max_age: float = DEFAULT_MAX_AGE
    max_ids: int = DEFAULT_MAX_IDS
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        self.window()  # validates the bounds, naming the field

    def window(self) -> DedupWindow:
        """An empty window under these bounds."""
        return DedupWindow(max_age=self.max_age, max_ids=self.max_ids, max_bytes=self.max_bytes)

    def start(self, own: str | None, parents: Sequence[str]) -> DedupWindow:
        """The window a shard starts with: its own stored one, else its parents' (a split's
        child gets its parent's, a merge's the union of both), else an empty one."""
        if own is not None:
            return self._loads(own)
        if parents:
            loaded = [self._loads(text) for text in parents]
            return DedupWindow.inherit(
                loaded, max_age=self.max_age, max_ids=self.max_ids, max_bytes=self.max_bytes
            )
        return self.window()

    def _loads(self, text: str) -> DedupWindow:
        return DedupWindow.loads(
            text, max_age=self.max_age, max_ids=self.max_ids, max_bytes=self.max_bytes
        )


class _Segment(NamedTuple):
    """Ids taken for delivery, not yet in the stored window: the records at ``sequence`` and
    sub-sequence numbers ``first`` to ``last``, with ids ``origin:low`` onwards (``low`` -1:
    one record whose id is ``origin``)."""

    sequence: int
    first: int
    last: int
    origin: str
    low: int
    arrival: float


class ShardDedup:
    """Drops a shard's duplicates before they are registered for delivery, and keeps the window
    of its checkpoint (see the module's docstring)."""

    def __init__(self, start: DedupWindow) -> None:
        self.live = start
        self.stored = DedupWindow.loads(
            start.dumps(), max_age=start.max_age, max_ids=start.max_ids, max_bytes=start.max_bytes
        )
        self._pending: deque[_Segment] = deque()
        self.dropped = 0
        """Records dropped as duplicates."""

    def admit(self, records: list[KinesisRecord]) -> list[KinesisRecord]:
        """The records of a response (shard order) that are not duplicates: ``records`` itself
        when none is. Their ids are taken."""
        kept: list[KinesisRecord] | None = None
        n = len(records)
        i = 0
        while i < n:
            record = records[i]
            rid = record.id_run
            if rid is None:
                j = i + 1
            elif type(rid) is tuple:
                j = _run_end(records, i, rid)
                first = record.sub_sequence_number
                if records[j - 1].sub_sequence_number - first != j - 1 - i:
                    j = _contiguous_end(records, i, j)
                drops = self._take_run(records, i, j, rid)
                if drops is not None:
                    kept = records[:i] if kept is None else kept
                    run = zip(records[i:j], drops, strict=True)
                    kept.extend(r for r, dropped in run if not dropped)
                    i = j
                    continue
            else:
                j = i + 1
                assert isinstance(rid, str)
                arrival = record.approximate_arrival_seconds or 0.0
                if self.live.seen(rid, arrival):
                    self.dropped += 1
                    kept = records[:i] if kept is None else kept
                    i = j
                    continue
                sequence, sub = record.position
                self._pending.append(_Segment(sequence, sub, sub, rid, -1, arrival))
            if kept is not None:
                kept.extend(records[i:j])
            i = j
        return records if kept is None else kept

    def _take_run(
        self, records: list[KinesisRecord], i: int, j: int, rid: tuple[str, int]
    ) -> list[bool] | None:
        """Take the ids of ``records[i:j]`` (a run over consecutive sub-sequence numbers):
        None if none was a duplicate, else which were."""
        prefix, counter = rid
        origin = prefix[:-1]
        sequence, first = records[i].position
        low = counter + first
        high = low + j - 1 - i
        arrival = records[i].approximate_arrival_seconds or 0.0
        drops = self.live.seen_run(origin, low, high, arrival)
        pending = self._pending
        if drops is None:
            pending.append(_Segment(sequence, first, first + j - 1 - i, origin, low, arrival))
            return None
        self.dropped += sum(drops)
        for k, dropped in enumerate(drops):
            if not dropped:
                pending.append(_Segment(sequence, first + k, first + k, origin, low + k, arrival))
        return drops

    def window_at(self, value: Position | Sentinel) -> str:
        """The stored form of the window of a checkpoint at ``value``: the ids of the records
        up to it (all of them at SHARD_END). Checkpoints only move forward, so this moves
        ``stored`` on."""
        pending = self._pending
        stored = self.stored
        if value is Sentinel.SHARD_END:
            while pending:
                segment = pending.popleft()
                _store(stored, segment, segment.last)
        elif not isinstance(value, Sentinel):  # a start sentinel: nothing delivered yet
            sub = value[1]
            while pending:
                segment = pending[0]
                if (segment.sequence, segment.last) <= value:
                    pending.popleft()
                    _store(stored, segment, segment.last)
                    continue
                if (segment.sequence, segment.first) <= value:
                    _store(stored, segment, sub)
                    pending[0] = segment._replace(
                        first=sub + 1, low=segment.low + sub + 1 - segment.first
                    )
                break
        return stored.dumps()


def _store(window: DedupWindow, segment: _Segment, last: int) -> None:
    """Put the ids of ``segment``'s records up to sub-sequence number ``last`` in ``window``."""
    if segment.low < 0:
        window.seen(segment.origin, segment.arrival)
    else:
        high = segment.low + last - segment.first
        window.seen_run(segment.origin, segment.low, high, segment.arrival)


def _run_end(records: list[KinesisRecord], i: int, rid: object) -> int:
    """The end of the block of records from ``i`` on that share the id run ``rid`` (the
    records of one aggregate: contiguous), by galloping then bisecting."""
    n = len(records)
    step = 1
    low = i  # records[low] shares it
    while low + step < n and records[low + step].id_run is rid:
        low += step
        step *= 2
    high = min(low + step, n)  # records[high] does not (or is the end)
    while high - low > 1:
        mid = (low + high) // 2
        if records[mid].id_run is rid:
            low = mid
        else:
            high = mid
    return high


def _contiguous_end(records: list[KinesisRecord], i: int, j: int) -> int:
    """The end of the run from ``i`` (before ``j``) over consecutive sub-sequence numbers: the
    records of an aggregate some of whose records another shard holds."""
    sub = records[i].sub_sequence_number
    k = i + 1
    while k < j and records[k].sub_sequence_number == sub + k - i:
        k += 1
    return k
