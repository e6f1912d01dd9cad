"""The dedup window of one shard: which record ids were delivered lately, sans-I/O.

``DedupWindow.seen(record_id, arrival)`` answers whether the id was taken already (a
duplicate) and takes it if not. The window is exact, never a probabilistic filter: it answers
True only for an id it was given before, and it remembers every id within its bounds:

- ``max_age``: ids that arrived (the record's ``ApproximateArrivalTimestamp``) at most this many
  seconds before the latest arrival the window saw;
- ``max_ids``: the last ``max_ids`` ids it took;
- ``max_bytes``: as many of the newest ids as its serialised form (``dumps``) holds in this
  many bytes, at most ``MAX_WINDOW_BYTES``, so that it fits in a checkpoint row (a DynamoDB
  item takes 400 KB).

Ids compress: an id shaped ``ORIGIN:COUNTER`` (:func:`~kinesis_core.record_ids.split_counter`:
automatic and derived ids, docs/effectively-once.md) extends its origin's newest range when that
range ends at ``COUNTER - 1``, so the consecutive ids of one producer session and shard take
one entry however many producers write to the shard between them; any other id is an entry of
its own (an exception), except that the ids :meth:`DedupWindow.seen_ids` takes together (a
response's records with ids of their callers) share an entry of up to ``CHUNK_IDS`` ids and
their arrival (a chunk), taken and forgotten together. :meth:`DedupWindow.seen_run` takes a run
of counters in one step.

The entries are kept in the order of their newest id, and the bounds forget from the front:
whole entries by age and bytes, the oldest counters of the front range by count. So the window
remembers every id it took within ``max_age`` while neither ``max_ids`` nor ``max_bytes``
binds, and may remember an id longer (an old counter stays in a range that grows).

Serialised (``dumps``), a window is JSON text: ``[1, base, latest, [origins], [entries]]``,
version 1, arrival times in epoch milliseconds (``base`` the first, null for a window that took
nothing yet; entries relative to it), a range ``[origin index, low, high - low, arrival of its
newest id]``, an exception ``[id, arrival]``, a chunk ``[arrival, [ids]]``. Its length in UTF-8
bytes is at most ``max_bytes``: the window counts every entry's bytes as it goes (``size``).

A child shard starts with its parents' windows (``inherit``): a split's children each get
the parent's, a merge's child the union of both parents'.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from math import ceil, floor

import msgspec

from kinesis_core.errors import ConfigurationError
from kinesis_core.record_ids import split_counter

VERSION = 1
"""The version of the serialised form (its first element)."""
MAX_WINDOW_BYTES = 300_000
"""The largest ``max_bytes``: a serialised window of this size leaves 100 KB of a DynamoDB
item's 400 KB for the rest of a checkpoint row."""
DEFAULT_MAX_AGE = 600.0
DEFAULT_MAX_IDS = 10_000_000
DEFAULT_MAX_BYTES = 128 * 1024
CHUNK_IDS = 256
"""The most ids of one chunk (the ids :meth:`DedupWindow.seen_ids` takes together): the bounds
forget a chunk whole, so this is how many ids at most they forget beyond what they must."""

_HEADER_BYTES = 64
"""An upper bound of the serialised form's bytes outside its origins and entries: brackets,
commas, the version and two times of up to 20 digits."""
_ORIGIN_INDEX_DIGITS = 6
"""What a range's origin index is counted as: a window holds fewer than a million origins
(each takes bytes, and ``max_bytes`` is at most ``MAX_WINDOW_BYTES``)."""
_encode = msgspec.json.encode


class _Entry:
    """A range ``origin:low`` to ``origin:high`` (``low >= 0``), an exception: the id
    ``origin`` itself (``low == high == -1``), or a chunk: the ``ids`` (``low == high ==
    -2``); the arrival of its newest id (epoch ms) and its serialised bytes."""

    __slots__ = ("high", "ids", "last", "low", "origin", "size")

    def __init__(
        self, origin: str, low: int, high: int, last: int, ids: list[str] | None = None
    ) -> None:
        self.origin = origin
        self.low = low
        self.high = high
        self.last = last
        self.ids = ids
        self.size = 0


class DedupWindow:
    """The record ids one shard delivered lately (see the module's docstring)."""

    def __init__(
        self,
        *,
        max_age: float = DEFAULT_MAX_AGE,
        max_ids: int = DEFAULT_MAX_IDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if isinstance(max_age, bool) or not isinstance(max_age, (int, float)):
            raise ConfigurationError("max_age", f"must be a number of seconds, got {max_age!r}")
        if not 0 < max_age <= 7 * 86_400:
            raise ConfigurationError(
                "max_age", f"must lie in (0, {7 * 86_400}] seconds, got {max_age}"
            )
        for name, value, low, high in (
            ("max_ids", max_ids, 1, 100_000_000),
            ("max_bytes", max_bytes, 1024, MAX_WINDOW_BYTES),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(name, f"must be an int, got {value!r}")
            if not low <= value <= high:
                raise ConfigurationError(name, f"must lie in [{low}, {high}], got {value}")
        self.max_age = float(max_age)
        self.max_ids = max_ids
        self.max_bytes = max_bytes
        self._max_age_ms = ceil(max_age * 1000)
        self._entries: OrderedDict[_Entry, None] = OrderedDict()
        """Every entry, in the order of its newest id."""
        self._exceptions: dict[str, _Entry] = {}
        self._ranges: dict[str, deque[_Entry]] = {}
        """The range entries of each origin, oldest first."""
        self._highest: dict[str, int] = {}
        """At least the highest counter of each origin's ranges (an id above it is new)."""
        self._epoch_ms: int | None = None
        """The first arrival (epoch ms) the window saw: entries keep their arrivals from it."""
        self._latest = 0
        self.ids = 0
        """How many ids it holds."""
        self.size = _HEADER_BYTES
        """At least the bytes of ``dumps()`` (exact but for the header's)."""

    def __len__(self) -> int:
        return self.ids

    @property
    def latest_ms(self) -> int | None:
        """The latest arrival it saw, in epoch milliseconds (None: none yet)."""
        return None if self._epoch_ms is None else self._latest

    @property
    def entries(self) -> int:
        """How many entries (ranges and exceptions) it holds."""
        return len(self._entries)

    def __contains__(self, record_id: str) -> bool:
        return self._holds(record_id, split_counter(record_id))

    def _holds(self, record_id: str, split: tuple[str, int] | None) -> bool:
        """``record_id in self``, its ``split_counter`` given."""
        if split is None:
            return record_id in self._exceptions
        origin, counter = split
        ranges = self._ranges.get(origin)
        if ranges is None or counter > self._highest[origin]:
            return False
        return any(e.low <= counter <= e.high for e in reversed(ranges))

    def seen(self, record_id: str, arrival: float) -> bool:
        """Whether ``record_id`` was taken before (a duplicate: True); if not, take it, as
        arrived at ``arrival`` (epoch seconds), and forget what falls out of the bounds."""
        split = split_counter(record_id)
        if self._holds(record_id, split):
            return True
        if split is None:
            self._append(_Entry(record_id, -1, -1, self._arrived(arrival)))
            self._evict()
        else:
            self._take_run(split[0], split[1], split[1], arrival)
        return False

    def seen_ids(
        self, ids: list[str], arrival: float, *, distinct: bool = False
    ) -> list[bool] | None:
        """:meth:`seen` for each of ``ids``, none shaped ``ORIGIN:COUNTER`` (the caller makes
        sure: no ``:`` in them), all arrived at ``arrival``: None when none was taken before
        and none is there twice (the common case: one step for them all, as chunks), else
        whether each was. ``distinct``: the caller knows none is there twice."""
        if self._exceptions.keys().isdisjoint(ids) and (distinct or len(set(ids)) == len(ids)):
            ms = self._arrived(arrival)
            for start in range(0, len(ids), CHUNK_IDS):
                self._append(_Entry("", -2, -2, ms, ids[start : start + CHUNK_IDS]))
            self._evict()
            return None
        answers = [self.seen(record_id, arrival) for record_id in ids]
        return answers if any(answers) else None

    def seen_run(self, origin: str, low: int, high: int, arrival: float) -> list[bool] | None:
        """:meth:`seen` for each of the ids ``ORIGIN:low`` to ``ORIGIN:high`` (``0 <= low <=
        high``), all arrived at ``arrival``: None when none was taken before (the common case,
        one step for the whole run, also for a run that lands below a later one of its origin),
        else whether each was."""
        ranges = self._ranges.get(origin)
        if (
            ranges is None
            or low > self._highest[origin]
            or not any(e.low <= high and low <= e.high for e in ranges)
        ):
            self._take_run(origin, low, high, arrival)
            return None
        answers = [self.seen(f"{origin}:{counter}", arrival) for counter in range(low, high + 1)]
        return answers if any(answers) else None

    def _arrived(self, arrival: float) -> int:
        """``arrival`` in epoch ms, which the window's times now count."""
        ms = floor(arrival * 1000)
        if self._epoch_ms is None:
            self._epoch_ms = ms
        if ms > self._latest:
            self._latest = ms
        return ms

    def _take_run(self, origin: str, low: int, high: int, arrival: float) -> None:
        """Take the new ids ``ORIGIN:low`` to ``ORIGIN:high``: they extend the origin's newest
        range if it ends just before them, else they are a new range."""
        ms = self._arrived(arrival)
        ranges = self._ranges.get(origin)
        newest = ranges[-1] if ranges else None
        if newest is not None and newest.high == low - 1:
            newest.high = high
            newest.last = max(newest.last, ms)
            self._entries.move_to_end(newest)
            self._resize(newest)
            self.ids += high - low + 1
        else:
            self._append(_Entry(origin, low, high, ms))
        if high > self._highest[origin]:
            self._highest[origin] = high
        self._evict()

    def _append(self, entry: _Entry) -> None:
        if entry.low >= 0:
            ranges = self._ranges.get(entry.origin)
            if ranges is None:
                ranges = self._ranges[entry.origin] = deque()
                self._highest[entry.origin] = entry.high
                self.size += len(_encode(entry.origin)) + 1
            ranges.append(entry)
            self.ids += entry.high - entry.low + 1
        elif entry.ids is None:
            self._exceptions[entry.origin] = entry
            self.ids += 1
        else:
            self._exceptions.update(dict.fromkeys(entry.ids, entry))
            self.ids += len(entry.ids)
        self._entries[entry] = None
        self._resize(entry)

    def _resize(self, entry: _Entry) -> None:
        """Count ``entry``'s serialised bytes (with its comma) anew."""
        base = self._epoch_ms or 0
        if entry.ids is not None:
            size = len(_encode(entry.ids)) + len(str(entry.last - base)) + 4
        elif entry.low < 0:
            size = len(_encode(entry.origin)) + len(str(entry.last - base)) + 4
        else:
            size = (
                _ORIGIN_INDEX_DIGITS
                + len(str(entry.low))
                + len(str(entry.high - entry.low))
                + len(str(entry.last - base))
                + 6
            )
        self.size += size - entry.size
        entry.size = size

    def _evict(self) -> None:
        """Forget the oldest entries out of the bounds (the oldest ids of a range first)."""
        entries = self._entries
        cutoff = self._latest - self._max_age_ms
        while entries:
            front = next(iter(entries))
            if not (front.last < cutoff or self.size > self.max_bytes or self.ids > self.max_ids):
                return
            excess = self.ids - self.max_ids
            if front.last >= cutoff and self.size <= self.max_bytes:
                if front.low >= 0 and excess < front.high - front.low + 1:
                    front.low += excess
                    self.ids -= excess
                    self._resize(front)  # a digit more is possible: the loop looks again
                    continue
                if front.ids is not None and excess < len(front.ids):
                    for record_id in front.ids[:excess]:
                        del self._exceptions[record_id]
                    front.ids = front.ids[excess:]
                    self.ids -= excess
                    self._resize(front)
                    continue
            self._pop()

    def _pop(self) -> None:
        entry, _ = self._entries.popitem(last=False)
        self.size -= entry.size
        if entry.ids is not None:
            deque(map(self._exceptions.__delitem__, entry.ids), maxlen=0)
            self.ids -= len(entry.ids)
            return
        if entry.low < 0:
            del self._exceptions[entry.origin]
            self.ids -= 1
            return
        self.ids -= entry.high - entry.low + 1
        ranges = self._ranges[entry.origin]
        if ranges[0] is entry:
            ranges.popleft()
        else:  # a range that grew after a newer one of its origin began, or a merge's
            ranges.remove(entry)
        if not ranges:
            del self._ranges[entry.origin]
            del self._highest[entry.origin]
            self.size -= len(_encode(entry.origin)) + 1

    # -- serialisation and lineage ---------------------------------------------------------

    def dumps(self) -> str:
        """The window as compact, versioned JSON text (the module's docstring), at most
        ``max_bytes`` bytes in UTF-8."""
        base = self._epoch_ms or 0
        origins: dict[str, int] = {}
        items: list[Sequence[object]] = []
        for e in self._entries:
            if e.ids is not None:
                items.append([e.last - base, e.ids])
            elif e.low < 0:
                items.append([e.origin, e.last - base])
            else:
                index = origins.setdefault(e.origin, len(origins))
                items.append([index, e.low, e.high - e.low, e.last - base])
        return _encode([VERSION, self._epoch_ms, self._latest, list(origins), items]).decode()

    @classmethod
    def loads(
        cls,
        text: str | bytes,
        *,
        max_age: float = DEFAULT_MAX_AGE,
        max_ids: int = DEFAULT_MAX_IDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> DedupWindow:
        """A window from ``dumps``'s text, under these bounds (it forgets what falls out of
        them). ValueError naming what is wrong for text that is not a window."""
        try:
            version, base, latest, origins, items = msgspec.json.decode(text)
        except (msgspec.DecodeError, TypeError, ValueError) as exc:
            raise ValueError(f"not a dedup window: {exc}") from None
        if version != VERSION:
            raise ValueError(f"dedup window version {version!r}: this library reads {VERSION}")
        window = cls(max_age=max_age, max_ids=max_ids, max_bytes=max_bytes)
        try:
            window._latest = int(latest)
            if base is not None:
                window._epoch_ms = int(base)
                window._extend(_parsed(items, [str(o) for o in origins], int(base)))
            elif items:
                raise ValueError("entries without a base time")
        except (TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"not a dedup window: {exc}") from None
        window._evict()
        return window

    @classmethod
    def inherit(
        cls,
        parents: Sequence[DedupWindow],
        *,
        max_age: float = DEFAULT_MAX_AGE,
        max_ids: int = DEFAULT_MAX_IDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> DedupWindow:
        """The window a child shard starts with: its parent's (a split; each child gets a
        copy), or the union of its parents' (a merge), entries in the order of their last
        arrival, under these bounds. An id in both parents counts twice towards ``max_ids``."""
        window = cls(max_age=max_age, max_ids=max_ids, max_bytes=max_bytes)
        bases = [p._epoch_ms for p in parents if p._epoch_ms is not None]
        if not bases:
            return window
        window._epoch_ms = min(bases)
        window._latest = max(p._latest for p in parents)
        merged = sorted(
            (e for p in parents for e in p._entries), key=lambda e: e.last
        )  # stable: each parent's order is kept between equal arrivals
        window._extend(
            _Entry(e.origin, e.low, e.high, e.last, None if e.ids is None else list(e.ids))
            for e in merged
        )
        window._evict()
        return window

    def _extend(self, entries: Iterable[_Entry]) -> None:
        """Append ``entries`` as they are (no range extended), skipping the ids of exceptions
        and chunks held already."""
        exceptions = self._exceptions
        for entry in entries:
            if entry.ids is not None:
                entry.ids = [i for i in entry.ids if i not in exceptions]
                if not entry.ids:
                    continue
            elif entry.low < 0:
                if entry.origin in exceptions:
                    continue
            elif entry.origin in self._highest:
                self._highest[entry.origin] = max(self._highest[entry.origin], entry.high)
            self._append(entry)


def _parsed(items: Sequence[Sequence[object]], origins: Sequence[str], base: int) -> list[_Entry]:
    out = []
    for item in items:
        if len(item) == 2 and type(item[0]) is int:
            arrival, ids = item
            if not isinstance(ids, list) or not ids or not all(type(i) is str for i in ids):
                raise ValueError(f"bad chunk entry {item!r:.80}")
            out.append(_Entry("", -2, -2, base + int(arrival), ids))  # type: ignore[call-overload]
        elif len(item) == 2:
            record_id, arrival = item
            if not isinstance(record_id, str) or not isinstance(arrival, int):
                raise ValueError(f"bad exception entry {item!r}")
            out.append(_Entry(record_id, -1, -1, base + arrival))
        elif len(item) == 4 and all(type(v) is int for v in item):
            index, low, span, last = (int(v) for v in item)  # type: ignore[call-overload]
            if index < 0 or low < 0 or span < 0:
                raise ValueError(f"bad range entry {item!r}")
            out.append(_Entry(origins[index], low, low + span, base + last))
        else:
            raise ValueError(f"bad entry {item!r}")
    return out
