"""One shard's deduplication in a consumer: drops what was delivered before, and gives the window
a checkpoint stores, sans-I/O.

Two windows: ``live`` holds every id registered for delivery and answers which records are
duplicates; ``stored`` holds the ids of the records up to the last checkpoint written, which
is what the checkpoint row keeps (a record after the checkpoint is delivered again after a
crash, so its id must not be stored with it). Between the two, the ids taken since, in shard
order, as segments (a run of counters over consecutive sub-sequence numbers, or one id) and
blocks (the ids of their own of consecutive records), moved to ``stored`` as the checkpoint
passes them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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


class _Block(NamedTuple):
    """Ids taken for delivery together, not yet in the stored window: ``ids``, those of
    consecutive records at ``keys`` (their sequence numbers as the service sends them and
    sub-sequence numbers; not the records, whose data must not outlive their processing),
    ``first`` and ``last`` the first and last of those positions, taken as arrived at
    ``arrival``."""

    first: Position
    last: Position
    keys: list[tuple[str, int]]
    ids: list[str]
    arrival: float


class ShardDedup:
    """Drops a shard's duplicates before they are registered for delivery, and keeps the window
    of its checkpoint (see the module's docstring)."""

    def __init__(self, start: DedupWindow) -> None:
        self.live = start
        self.stored = DedupWindow.loads(
            start.dumps(), max_age=start.max_age, max_ids=start.max_ids, max_bytes=start.max_bytes
        )
        self._pending: deque[_Segment | _Block] = deque()
        self._text: str | None = None
        """``stored`` serialised, until it takes more ids."""
        self.dropped = 0
        """Records dropped as duplicates."""

    def admit(self, records: list[KinesisRecord]) -> list[KinesisRecord]:
        """The records of a response (shard order) that are not duplicates: ``records`` itself
        when none is. Their ids are taken."""
        runs: list[Any] = [r.id_run for r in records]
        if set(map(type, runs)) == {str}:  # every record has an id of its own: one block
            drops = self._take_ids(records, runs, 0, len(records))
            if drops is None:
                return records
            return [r for r, dropped in zip(records, drops, strict=True) if not dropped]
        kept: list[KinesisRecord] | None = None
        n = len(records)
        i = 0
        while i < n:
            rid = runs[i]
            if rid is None:
                j, drops = i + 1, None
            elif type(rid) is tuple:
                j = _run_end(runs, i, rid)
                first = records[i].sub_sequence_number
                if records[j - 1].sub_sequence_number - first != j - 1 - i:
                    j = _contiguous_end(records, i, j)
                drops = self._take_run(records, i, j, rid)
            else:
                j = i + 1
                while j < n and type(runs[j]) is str:
                    j += 1
                drops = self._take_ids(records, runs[i:j], i, j)
            if drops is not None:
                kept = records[:i] if kept is None else kept
                taken = zip(records[i:j], drops, strict=True)
                kept.extend(r for r, dropped in taken if not dropped)
            elif kept is not None:
                kept.extend(records[i:j])
            i = j
        return records if kept is None else kept

    def _take_ids(
        self, records: list[KinesisRecord], ids: list[str], i: int, j: int
    ) -> list[bool] | None:
        """Take ``ids``, those of ``records[i:j]``, ids of their own: at once when none is
        shaped ``ORIGIN:COUNTER``, else one by one. None if none was a duplicate, else which
        were."""
        block = records[i:j]
        first = block[0].approximate_arrival_seconds or 0.0
        arrival = max(first, block[-1].approximate_arrival_seconds or 0.0)
        pending = self._pending
        if ":" not in "".join(ids):
            drops = self.live.seen_ids(ids, arrival)
            if drops is None:
                keys = [(r.sequence_number, r.sub_sequence_number) for r in block]
                pending.append(_Block(block[0].position, block[-1].position, keys, ids, arrival))
                return None
        else:
            drops = [self.live.seen(record_id, arrival) for record_id in ids]
        for record, record_id, dropped in zip(block, ids, drops, strict=True):
            if not dropped:
                sequence, sub = record.position
                pending.append(_Segment(sequence, sub, sub, record_id, -1, arrival))
        dropped_here = sum(drops)
        self.dropped += dropped_here
        return drops if dropped_here else None

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
        ``stored`` on; a checkpoint that passed no new id gets the text serialised before."""
        pending = self._pending
        passed: list[_Segment | _Block] = []
        if value is Sentinel.SHARD_END:
            passed.extend(pending)
            pending.clear()
        elif not isinstance(value, Sentinel):  # a start sentinel: nothing delivered yet
            while pending:
                item = pending[0]
                if _last(item) <= value:
                    passed.append(pending.popleft())
                    continue
                if _first(item) <= value:
                    done, pending[0] = _split(item, value)
                    passed.append(done)
                break
        if passed or self._text is None:
            for item in passed:
                _store(self.stored, item)
            self._text = self.stored.dumps()
        return self._text


def _first(item: _Segment | _Block) -> Position:
    return item.first if isinstance(item, _Block) else (item.sequence, item.first)


def _last(item: _Segment | _Block) -> Position:
    return item.last if isinstance(item, _Block) else (item.sequence, item.last)


def _split(item: _Segment | _Block, value: Position) -> tuple[_Segment | _Block, _Segment | _Block]:
    """``item``'s ids up to ``value`` and after it (it holds ids on both sides)."""
    if isinstance(item, _Block):
        keys, ids = item.keys, item.ids
        k = bisect_right(keys, value, key=_position)
        return (
            item._replace(last=_position(keys[k - 1]), keys=keys[:k], ids=ids[:k]),
            item._replace(first=_position(keys[k]), keys=keys[k:], ids=ids[k:]),
        )
    sub = value[1]
    done = item._replace(last=sub)
    return done, item._replace(first=sub + 1, low=item.low + sub + 1 - item.first)


def _position(key: tuple[str, int]) -> Position:
    return int(key[0]), key[1]


def _store(window: DedupWindow, item: _Segment | _Block) -> None:
    """Put ``item``'s ids in ``window``."""
    if isinstance(item, _Block):
        window.seen_ids(item.ids, item.arrival, distinct=True)
    elif item.low < 0:
        window.seen(item.origin, item.arrival)
    else:
        window.seen_run(item.origin, item.low, item.low + item.last - item.first, item.arrival)


def _run_end(runs: list[Any], i: int, rid: object) -> int:
    """The end of the block of records from ``i`` on whose ``id_run`` (``runs``) is the run
    ``rid`` (the records of one aggregate: contiguous), by galloping then bisecting."""
    n = len(runs)
    step = 1
    low = i  # runs[low] is it
    while low + step < n and runs[low + step] is rid:
        low += step
        step *= 2
    high = min(low + step, n)  # runs[high] is not (or is the end)
    while high - low > 1:
        mid = (low + high) // 2
        if runs[mid] is rid:
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
