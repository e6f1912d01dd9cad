"""Which shard owns a hash key: a cached ListShards snapshot with O(log N) prediction
(sans-I/O).

The producer predicts each record's shard locally so it can aggregate per shard; asking Kinesis
per record would cost a round trip. This follows the C++ KPL's ``shard_map.cc``.
:class:`ShardMap`'s states are INVALID (no snapshot), UPDATING (a ListShards refresh is in
flight) and READY (``predict`` answers). Events go in (``start``, ``refresh_succeeded``,
``refresh_failed``, ``retry_due``, ``invalidate``); decisions come out (start a refresh:
``True``; wait this many seconds, then send ``retry_due``). The time comes from the ``clock``
the driver gives it. :class:`~kinesis_core.producer.shard_map_driver.ShardMapDriver` runs the
refreshes; the shards themselves are :mod:`kinesis_core.shards.info` values.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import rshift

from kinesis_core.errors import ConfigurationError
from kinesis_core.shards.info import ShardInfo

Clock = Callable[[], float]


_SLOT_BITS = 12
_SLOT_SHIFT = 128 - _SLOT_BITS
_SLOTS = 1 << _SLOT_BITS


class ShardTable:
    """The open shards of a shard list, sorted by end hash key, for bisect lookups.

    The owner of ``h`` is the open shard with the smallest end hash key >= ``h``; ranges of
    open shards are contiguous, so ``bisect_left`` over the end keys finds it. Closed shards
    are dropped here (moto ignores ShardFilter and returns them too).

    ``_slots`` answers most lookups without the bisect (a third of ``predict``'s cost): the
    key space cut in 4096 slots by the top 12 bits of a key, each slot holding the position of
    the shard that bisect finds for every key in it, or -1 when that varies inside the slot;
    ``_slot_ids`` the same as shard ids (None for -1), for lookups done in C.
    """

    __slots__ = ("_by_id", "_ends", "_ids", "_shards", "_slot_ids", "_slots", "_starts")

    def __init__(self, shards: Iterable[ShardInfo]) -> None:
        self._shards = tuple(sorted((s for s in shards if s.is_open), key=lambda s: s.end_hash_key))
        self._ends = tuple(s.end_hash_key for s in self._shards)
        self._starts = tuple(s.start_hash_key for s in self._shards)
        self._ids = tuple(s.shard_id for s in self._shards)
        self._by_id = {s.shard_id: s for s in self._shards}
        slots = [-1] * _SLOTS
        low = 0  # keys below this have an earlier shard's end >= them
        for i, shard in enumerate(self._shards):
            # Slots wholly inside [max(low, start), end]: bisect gives i and i owns them.
            first = (max(low, shard.start_hash_key) + (1 << _SLOT_SHIFT) - 1) >> _SLOT_SHIFT
            last = min((shard.end_hash_key + 1) >> _SLOT_SHIFT, _SLOTS)
            if first < last:
                slots[first:last] = [i] * (last - first)
            low = shard.end_hash_key + 1
        self._slots = slots
        self._slot_ids: list[str | None] = [self._ids[i] if i >= 0 else None for i in slots]

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        return self._shards

    def index(self, hash_key: int) -> int | None:
        """Position in :attr:`shards` of the owner of ``hash_key``; None if no shard owns it."""
        i = bisect.bisect_left(self._ends, hash_key)
        if i == len(self._ends) or self._starts[i] > hash_key:
            return None
        return i

    def owner(self, hash_key: int) -> ShardInfo | None:
        i = self.index(hash_key)
        return None if i is None else self._shards[i]

    def get(self, shard_id: str) -> ShardInfo | None:
        return self._by_id.get(shard_id)

    def __contains__(self, shard_id: object) -> bool:
        return shard_id in self._by_id

    def __len__(self) -> int:
        return len(self._shards)


class ShardMapState(enum.Enum):
    INVALID = "INVALID"
    """No usable snapshot: never refreshed, or the last refresh failed (a retry may be due)."""
    UPDATING = "UPDATING"
    """A refresh is in flight; ``predict`` returns None until it lands."""
    READY = "READY"
    """A snapshot is installed and ``predict`` answers."""


class ShardMap:
    """Sans-I/O shard map. Call the event methods; do what they return.

    ==================  ==============  ===============  ==============  ===================
    event               INVALID (idle)  INVALID (retry)  UPDATING        READY
    ==================  ==============  ===============  ==============  ===================
    start()             UPDATING, True  False            False           False
    refresh_succeeded   error           error            READY           error
    refresh_failed      error           error            INVALID, delay  error
    retry_due()         error           UPDATING         error           error
    invalidate(...)     False           False            False           guard: UPDATING/True
    ==================  ==============  ===============  ==============  ===================

    ``True`` means: start a refresh now (ListShards AT_LATEST, then ``refresh_succeeded`` or
    ``refresh_failed``). ``refresh_failed`` returns the delay after which to send
    ``retry_due``: 1 s doubling to 30 s, back to 1 s after a success. ``clock`` (seconds,
    monotonic: the driver's) dates the snapshots and the closed shards' TTL.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        closed_shard_ttl: float = 60.0,
        min_backoff: float = 1.0,
        max_backoff: float = 30.0,
    ) -> None:
        if closed_shard_ttl < 0 or min_backoff <= 0 or max_backoff < min_backoff:
            raise ConfigurationError(
                "min_backoff" if closed_shard_ttl >= 0 else "closed_shard_ttl",
                "need closed_shard_ttl >= 0 and 0 < min_backoff <= max_backoff, got "
                f"{closed_shard_ttl}, {min_backoff}, {max_backoff}",
            )
        self._ttl = closed_shard_ttl
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._clock = clock
        self._state = ShardMapState.INVALID
        self._retry_pending = False
        self._backoff = min_backoff
        self._table = ShardTable(())
        self._closed: dict[str, tuple[ShardInfo, float]] = {}
        self._updated_at = -math.inf
        self._refreshes = 0

    @property
    def state(self) -> ShardMapState:
        return self._state

    @property
    def updated_at(self) -> float:
        """Clock time of the last successful refresh (-inf before the first)."""
        return self._updated_at

    @property
    def retry_pending(self) -> bool:
        """INVALID after a failed refresh, waiting for ``retry_due``."""
        return self._retry_pending

    @property
    def refreshes(self) -> int:
        """Successful refreshes so far."""
        return self._refreshes

    @property
    def open_shards(self) -> tuple[ShardInfo, ...]:
        """Open shards of the last snapshot, by end hash key (kept while UPDATING/INVALID)."""
        return self._table.shards

    def predict(self, hash_key: int) -> str | None:
        """The shard that owns ``hash_key``, or None when not READY or no open shard owns it."""
        if self._state is not ShardMapState.READY:
            return None
        # The producer asks once per user record: the slot table, else ShardTable.index
        # inlined; one call instead of three.
        table = self._table
        top = hash_key >> _SLOT_SHIFT
        i = table._slots[top] if 0 <= top < _SLOTS else -1
        if i < 0:
            ends = table._ends
            i = bisect.bisect_left(ends, hash_key)
            if i == len(ends) or table._starts[i] > hash_key:
                return None
        return table._ids[i]

    def predict_many(self, hash_keys: Sequence[int]) -> list[str | None]:
        """:meth:`predict` of each key, in order. The slot table answers the keys whose slot
        holds no shard's edge in one pass in C (the producer predicts every user record);
        only the others take ``predict``."""
        if self._state is not ShardMapState.READY:
            return [None] * len(hash_keys)
        if not hash_keys or min(hash_keys) < 0 or max(hash_keys) >> _SLOT_SHIFT >= _SLOTS:
            return list(map(self.predict, hash_keys))
        slot_ids = self._table._slot_ids
        owners = list(map(slot_ids.__getitem__, map(rshift, hash_keys, repeat(_SLOT_SHIFT))))
        if None in owners:
            predict = self.predict
            owners = [
                predict(key) if owner is None else owner
                for owner, key in zip(owners, hash_keys, strict=True)
            ]
        return owners

    def hash_range(self, shard_id: str) -> tuple[int, int] | None:
        """[start, end] of an open shard, or of a closed one for ``closed_shard_ttl`` seconds."""
        shard = self._table.get(shard_id)
        if shard is not None:
            return shard.hash_range
        closed = self._closed.get(shard_id)
        if closed is None:
            return None
        if closed[1] <= self._clock():
            self._closed.pop(shard_id, None)
            return None
        return closed[0].hash_range

    # Events.

    def start(self) -> bool:
        """The first refresh. True: start it now."""
        if self._state is not ShardMapState.INVALID or self._retry_pending:
            return False
        self._state = ShardMapState.UPDATING
        return True

    def refresh_succeeded(self, shards: Iterable[ShardInfo]) -> None:
        """Install a ListShards result; shards that left it (and closed shards in it) stay in
        ``hash_range`` for the TTL."""
        self._expect_updating("refresh_succeeded")
        now = self._clock()
        shards = list(shards)
        table = ShardTable(shards)
        for old in self._table.shards:
            if old.shard_id not in table:
                self._closed[old.shard_id] = (old, now + self._ttl)
        for shard in shards:
            if not shard.is_open:
                self._closed[shard.shard_id] = (shard, now + self._ttl)
        for shard in table.shards:
            self._closed.pop(shard.shard_id, None)
        self._purge(now)
        self._table = table
        self._state = ShardMapState.READY
        self._updated_at = now
        self._backoff = self._min_backoff
        self._refreshes += 1

    def learn(self, shards: Iterable[ShardInfo]) -> None:
        """Remember the hash ranges of ``shards`` that are not in the snapshot (closed ones, or
        newer ones) for the TTL: ``hash_range`` answers for them. Any state; predictions do
        not change. For a producer whose record landed on a shard born and closed between two
        refreshes (a fuller ListShards than AT_LATEST lists it)."""
        now = self._clock()
        for shard in shards:
            if shard.shard_id not in self._table:
                self._closed[shard.shard_id] = (shard, now + self._ttl)

    def refresh_failed(self) -> float:
        """The refresh failed: INVALID; returns the seconds to wait before ``retry_due``."""
        self._expect_updating("refresh_failed")
        delay = self._backoff
        self._backoff = min(self._backoff * 2, self._max_backoff)
        self._state = ShardMapState.INVALID
        self._retry_pending = True
        return delay

    def retry_due(self) -> None:
        """The backoff after a failed refresh elapsed: start the next attempt now."""
        if not self._retry_pending:
            raise RuntimeError(f"retry_due without a failed refresh (state {self._state.name})")
        self._retry_pending = False
        self._state = ShardMapState.UPDATING

    def invalidate(self, seen_at: float, predicted_shard_id: str | None) -> bool:
        """A record landed elsewhere than predicted. True: start a refresh now.

        ``seen_at`` is the clock time the prediction was used (the request was sent). Ignored
        when not READY (a refresh is already in flight or due), when ``seen_at <= updated_at``
        (a newer snapshot already covers it), or when the predicted shard is no longer open in
        the snapshot (a refresh would teach nothing new). So callers may invalidate liberally.
        """
        self._purge(self._clock())
        if self._state is not ShardMapState.READY or seen_at <= self._updated_at:
            return False
        if predicted_shard_id is not None and predicted_shard_id not in self._table:
            return False
        self._state = ShardMapState.UPDATING
        return True

    def _expect_updating(self, event: str) -> None:
        if self._state is not ShardMapState.UPDATING:
            raise RuntimeError(f"{event} while {self._state.name}: no refresh was in flight")

    def _purge(self, now: float) -> None:
        # list(): another thread may drop an entry in hash_range meanwhile.
        for sid, (_, until) in list(self._closed.items()):
            if until <= now:
                self._closed.pop(sid, None)
