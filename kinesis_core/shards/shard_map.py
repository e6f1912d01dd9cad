"""Which shard owns a hash key: a cached ListShards snapshot with O(log N) prediction
(sans-I/O).

The producer predicts each record's shard locally so it can aggregate per shard; asking Kinesis
per record would cost a round trip. This follows the C++ KPL's ``shard_map.cc``.
:class:`ShardMap` is one machine in the style of
:mod:`kinesis_core.consumer.shard_consumer`: one table, :data:`TRANSITIONS`, says for every
:class:`Phase` and :class:`Event` the next phase and the :class:`Action`; ``handle`` feeds one
event. The time is an argument (``now``) of the calls that need it.

::

    IDLE --START--> UPDATING --SUCCEEDED--> READY --INVALIDATED--> UPDATING
    UPDATING --FAILED--> FAILED --RETRY--> UPDATING

The map keeps no retry timing:
:class:`~kinesis_core.producer.shard_map_driver.ShardMapDriver` retries a failed refresh
through the executor with a :class:`~kinesis_core.aws.retry.RetryPolicy`. The shards
themselves are :mod:`kinesis_core.shards.info` values.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import rshift

from kinesis_core.errors import ConfigurationError
from kinesis_core.shards.info import ShardInfo

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
    """What :attr:`ShardMap.state` says: whether ``predict`` answers."""

    INVALID = "INVALID"
    """No usable snapshot: never refreshed, or the last refresh failed (a retry may be due)."""
    UPDATING = "UPDATING"
    """A refresh is in flight; ``predict`` returns None until it lands."""
    READY = "READY"
    """A snapshot is installed and ``predict`` answers."""


class Phase(enum.Enum):
    """The states of the machine; :attr:`ShardMap.state` shows IDLE and FAILED as INVALID."""

    IDLE = "idle"
    """Never refreshed."""
    UPDATING = "updating"
    """A ListShards refresh is in flight."""
    FAILED = "failed"
    """The last refresh failed; the driver retries it (``RETRY``)."""
    READY = "ready"
    """A snapshot is installed."""


class Event(enum.Enum):
    START = "start"
    """The driver starts: the first refresh."""
    SUCCEEDED = "succeeded"
    """The refresh in flight listed the shards."""
    FAILED = "failed"
    """The refresh in flight failed."""
    RETRY = "retry"
    """The driver tries a failed refresh again."""
    INVALIDATED = "invalidated"
    """A record landed elsewhere than predicted by the snapshot in use (the guard in
    :meth:`ShardMap.invalidate` passed)."""


class Action(enum.Enum):
    REFRESH = "refresh"
    """Start a refresh now: ListShards AT_LATEST, then ``SUCCEEDED`` or ``FAILED``."""


P, E, A = Phase, Event, Action

TRANSITIONS: Mapping[tuple[Phase, Event], tuple[Phase, tuple[Action, ...]] | None] = {
    (P.IDLE, E.START): (P.UPDATING, (A.REFRESH,)),
    (P.IDLE, E.SUCCEEDED): None,
    (P.IDLE, E.FAILED): None,
    (P.IDLE, E.RETRY): None,
    (P.IDLE, E.INVALIDATED): (P.IDLE, ()),
    (P.UPDATING, E.START): (P.UPDATING, ()),
    (P.UPDATING, E.SUCCEEDED): (P.READY, ()),
    (P.UPDATING, E.FAILED): (P.FAILED, ()),
    (P.UPDATING, E.RETRY): None,
    (P.UPDATING, E.INVALIDATED): (P.UPDATING, ()),
    (P.FAILED, E.START): (P.FAILED, ()),
    (P.FAILED, E.SUCCEEDED): None,
    (P.FAILED, E.FAILED): None,
    (P.FAILED, E.RETRY): (P.UPDATING, ()),
    (P.FAILED, E.INVALIDATED): (P.FAILED, ()),
    (P.READY, E.START): (P.READY, ()),
    (P.READY, E.SUCCEEDED): None,
    (P.READY, E.FAILED): None,
    (P.READY, E.RETRY): None,
    (P.READY, E.INVALIDATED): (P.UPDATING, (A.REFRESH,)),
}
"""Every (phase, event): the next phase and what to do, or None: the event is a bug
(:class:`ShardMapError`). A refresh asked for while one is in flight or due is not started
twice."""

_SHOWN = {
    P.IDLE: ShardMapState.INVALID,
    P.UPDATING: ShardMapState.UPDATING,
    P.FAILED: ShardMapState.INVALID,
    P.READY: ShardMapState.READY,
}


class ShardMapError(RuntimeError):
    """An event the map's phase does not expect (a bug in its driver)."""


class ShardMap:
    """Sans-I/O shard map. Feed events (:meth:`handle`, or the methods named after them); do
    what they return.

    ``start()`` and ``invalidate(...)`` return True when a refresh must start now (the
    :data:`Action.REFRESH`); ``refresh_succeeded(shards, now)`` installs a listing and
    ``refresh_failed()`` records a failure, after which ``retry_due()`` starts the next
    attempt. ``now`` (seconds on the driver's monotonic clock) dates the snapshots and the
    closed shards' TTL.
    """

    def __init__(self, *, closed_shard_ttl: float = 60.0) -> None:
        if not closed_shard_ttl >= 0:
            raise ConfigurationError(
                "closed_shard_ttl", f"need closed_shard_ttl >= 0, got {closed_shard_ttl}"
            )
        self._ttl = closed_shard_ttl
        self.phase = Phase.IDLE
        self._table = ShardTable(())
        self._closed: dict[str, tuple[ShardInfo, float]] = {}
        self._updated_at = -math.inf
        self._refreshes = 0

    @property
    def state(self) -> ShardMapState:
        return _SHOWN[self.phase]

    @property
    def updated_at(self) -> float:
        """Clock time of the last successful refresh (-inf before the first)."""
        return self._updated_at

    @property
    def retry_pending(self) -> bool:
        """INVALID after a failed refresh, waiting for ``retry_due``."""
        return self.phase is Phase.FAILED

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
        if self.phase is not Phase.READY:
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
        if self.phase is not Phase.READY:
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

    def hash_range(self, shard_id: str, now: float) -> tuple[int, int] | None:
        """[start, end] of an open shard, or of a closed one for ``closed_shard_ttl`` seconds
        (until ``now``)."""
        shard = self._table.get(shard_id)
        if shard is not None:
            return shard.hash_range
        closed = self._closed.get(shard_id)
        if closed is None:
            return None
        if closed[1] <= now:
            self._closed.pop(shard_id, None)
            return None
        return closed[0].hash_range

    # Events.

    def handle(self, event: Event) -> tuple[Action, ...]:
        """Feed one event; return what the driver must do now."""
        result = TRANSITIONS[self.phase, event]
        if result is None:
            raise ShardMapError(
                f"shard map: {event.value} is not expected while {self.phase.value}"
            )
        self.phase, actions = result
        return actions

    def start(self) -> bool:
        """The first refresh. True: start it now."""
        return Action.REFRESH in self.handle(Event.START)

    def refresh_succeeded(self, shards: Iterable[ShardInfo], now: float) -> None:
        """Install a ListShards result listed at ``now``; shards that left it (and closed
        shards in it) stay in ``hash_range`` for the TTL."""
        self.handle(Event.SUCCEEDED)
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
        self._updated_at = now
        self._refreshes += 1

    def learn(self, shards: Iterable[ShardInfo], now: float) -> None:
        """Remember the hash ranges of ``shards`` that are not in the snapshot (closed ones, or
        newer ones) for the TTL from ``now``: ``hash_range`` answers for them. Any state;
        predictions do not change. For a producer whose record landed on a shard born and
        closed between two refreshes (a fuller ListShards than AT_LATEST lists it)."""
        for shard in shards:
            if shard.shard_id not in self._table:
                self._closed[shard.shard_id] = (shard, now + self._ttl)

    def refresh_failed(self) -> None:
        """The refresh in flight failed: INVALID until ``retry_due``."""
        self.handle(Event.FAILED)

    def retry_due(self) -> None:
        """The driver tries the failed refresh again: UPDATING."""
        self.handle(Event.RETRY)

    def invalidate(self, seen_at: float, predicted_shard_id: str | None, now: float) -> bool:
        """A record landed elsewhere than predicted. True: start a refresh now.

        ``seen_at`` is the clock time the prediction was used (the request was sent). Ignored
        when not READY (a refresh is already in flight or due), when ``seen_at <= updated_at``
        (a newer snapshot already covers it), or when the predicted shard is no longer open in
        the snapshot (a refresh would teach nothing new). So callers may invalidate liberally.
        """
        self._purge(now)
        if seen_at <= self._updated_at:
            return False
        if predicted_shard_id is not None and predicted_shard_id not in self._table:
            return False
        return Action.REFRESH in self.handle(Event.INVALIDATED)

    def _purge(self, now: float) -> None:
        # list(): another thread may drop an entry in hash_range meanwhile.
        for sid, (_, until) in list(self._closed.items()):
            if until <= now:
                self._closed.pop(sid, None)
