"""Which leases a worker should hold: the KCL 2.x lease taker as a sans-I/O state machine.

Liveness is read from the table, never from clocks on other hosts: a lease is alive while its
``leaseCounter`` keeps moving (its owner renews by bumping it), and expired once the counter has
not moved for the failover time, as seen by this worker's own clock between its own scans
(``DynamoDBLeaseTaker.updateAllLeases``). A lease seen for the first time counts as just renewed
if it has an owner, and as never renewed if it has none.

Balancing (``computeLeasesToTake`` and ``chooseLeasesToSteal``): the target is
``ceil(leases / workers)`` where workers are the owners of live leases plus this one. Leases
not renewed for three failover times, and new unowned ones, are taken first whatever the target
(the KCL's priority lease assignment); then expired or released leases up to the target; only
when none is available, a lease is stolen from the most loaded worker, at most
``max_leases_to_steal`` at a time. A steal is just a take conditional on the counter: the
victim learns it when its next renewal fails.

Events in (a table scan, a take, a renewal, a loss), decisions out (the leases to take, the
held leases whose renewals stopped working); the clock comes in as ``now`` (seconds, monotonic).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from kinesis_core.checkpoint.base import Checkpoint
from kinesis_core.errors import ConfigurationError

EPSILON = 0.025
"""The KCL's ``epsilonMillis`` (25 ms), in seconds."""
VERY_OLD_FACTOR = 3
"""The KCL's ``veryOldLeaseDurationNanosMultiplier``."""


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """How a consumer shares a stream with other workers through leases (KCL defaults).

    - ``worker_id``: this worker's name in ``leaseOwner``; unique per running worker. None:
      the worker makes one when it starts, from its host, its process and a random part
      (:func:`~kinesis_core.lease.manager.default_worker_id`).
    - ``failover_time``: a lease whose counter has not moved for this long (seconds) may be
      taken by another worker (the KCL's ``failoverTimeMillis``, 10 s).
    - ``renew_interval``: seconds between renewals; default ``failover_time / 3 - 0.025``.
    - ``take_interval``: seconds between table scans that take and balance leases; default
      ``(failover_time + 0.025) * 2``.
    - ``parent_poll_interval``: how often a held child shard looks whether its parents have
      been finished by other workers (the KCL's ``parentShardPollIntervalMillis``, 10 s).
    - ``max_leases_for_worker``: cap on the leases this worker holds (None: no cap).
    - ``max_leases_to_steal``: leases stolen from the most loaded worker per scan (1).
    - ``priority_takes``: take new and long-dead leases first, whatever the target (True).
    """

    worker_id: str | None = None
    failover_time: float = 10.0
    renew_interval: float | None = None
    take_interval: float | None = None
    parent_poll_interval: float = 10.0
    max_leases_for_worker: int | None = None
    max_leases_to_steal: int = 1
    priority_takes: bool = True

    def __post_init__(self) -> None:
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str) or not self.worker_id
        ):
            raise ConfigurationError(
                "worker_id", f"must be a non-empty string or None, got {self.worker_id!r}"
            )
        for name in ("failover_time", "parent_poll_interval"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(name, f"must be > 0 seconds, got {getattr(self, name)!r}")
        if not 0 < self.renew_every < self.failover_time:
            raise ConfigurationError(
                "renew_interval",
                f"must be > 0 and below failover_time ({self.failover_time} s), got "
                f"{self.renew_every!r}",
            )
        if not self.take_every > 0:
            raise ConfigurationError(
                "take_interval", f"must be > 0 seconds, got {self.take_every!r}"
            )
        if self.max_leases_for_worker is not None and self.max_leases_for_worker < 1:
            raise ConfigurationError(
                "max_leases_for_worker", f"must be >= 1 or None, got {self.max_leases_for_worker}"
            )
        if self.max_leases_to_steal < 1:
            raise ConfigurationError(
                "max_leases_to_steal", f"must be >= 1, got {self.max_leases_to_steal}"
            )

    @property
    def renew_every(self) -> float:
        """The renewal interval in effect."""
        if self.renew_interval is not None:
            return self.renew_interval
        return self.failover_time / 3 - EPSILON

    @property
    def take_every(self) -> float:
        """The take/balance interval in effect."""
        if self.take_interval is not None:
            return self.take_interval
        return (self.failover_time + EPSILON) * 2


@dataclass(frozen=True, slots=True)
class Take:
    """A decision: take this lease, conditional on the row as scanned."""

    row: Checkpoint
    steal: bool
    """True when the lease is taken from a live owner (balancing)."""


@dataclass(frozen=True, slots=True)
class _Seen:
    row: Checkpoint
    changed_at: float | None
    """When a scan last saw the counter move; None: never (new and unowned)."""


class LeaseCoordinator:
    """The lease decisions of one worker (sans-I/O)."""

    def __init__(
        self,
        config: LeaseConfig,
        *,
        rng: random.Random | None = None,
        worker_id: str | None = None,
    ) -> None:
        """``worker_id`` (the one its worker made) when ``config`` names none."""
        self.config = config
        chosen = worker_id or config.worker_id
        if not chosen:
            raise ConfigurationError(
                "worker_id", "LeaseConfig.worker_id is None: give the worker's own id"
            )
        self.worker_id = chosen
        self._rng = rng or random.Random()  # noqa: S311 (spreads contention, not a secret)
        self._view: dict[str, _Seen] = {}
        self._held: dict[str, float] = {}
        """Held lease -> when its last successful write (take, renewal or checkpoint) was sent."""

    # -- held leases ------------------------------------------------------------------------

    def holds(self, shard_id: str) -> bool:
        return shard_id in self._held

    @property
    def held(self) -> list[str]:
        return sorted(self._held)

    def acquired(self, shard_id: str, sent_at: float) -> None:
        """A take of ours succeeded; ``sent_at`` is when the request was sent."""
        self._held[shard_id] = sent_at

    def renewed(self, shard_id: str, sent_at: float) -> None:
        """A renewal (or a checkpoint, which bumps the counter too) succeeded."""
        if shard_id in self._held:
            self._held[shard_id] = max(self._held[shard_id], sent_at)

    def dropped(self, shard_id: str) -> None:
        """The lease is gone from this worker: lost to another, or released."""
        self._held.pop(shard_id, None)

    def expired_held(self, now: float) -> list[str]:
        """Held leases not renewed for the failover time: another worker may hold them by now,
        so this one must stop. They are dropped; the caller stops their shards."""
        limit = self.config.failover_time
        gone = sorted(s for s, at in self._held.items() if now - at > limit)
        for shard_id in gone:
            del self._held[shard_id]
        return gone

    # -- the table view ---------------------------------------------------------------------

    def scan(self, now: float, rows: Iterable[Checkpoint]) -> None:
        """A full read of the lease table, finished at ``now``."""
        view: dict[str, _Seen] = {}
        for row in rows:
            old = self._view.get(row.shard_id)
            if old is None:
                changed_at = None if row.owner is None else now
            elif old.row.counter != row.counter:
                changed_at = now
            else:
                changed_at = old.changed_at
            view[row.shard_id] = _Seen(row, changed_at)
        self._view = view

    def _available(self, seen: _Seen, now: float) -> bool:
        return (
            seen.row.owner is None
            or seen.changed_at is None
            or now - seen.changed_at > self.config.failover_time
        )

    def _very_old(self, seen: _Seen, now: float) -> bool:
        return (
            seen.changed_at is None
            or now - seen.changed_at > VERY_OLD_FACTOR * self.config.failover_time
        )

    def owners(self, now: float, eligible: Collection[str]) -> dict[str, int]:
        """Live leases per worker (this one always included), as the last scan saw them."""
        counts = {self.worker_id: sum(1 for s in self._held if s in eligible)}
        for shard_id, seen in self._view.items():
            if shard_id in self._held or shard_id not in eligible:
                continue
            owner = seen.row.owner
            # A lease still in our name that we no longer hold counts for nobody: it expires.
            if owner is None or owner == self.worker_id or self._available(seen, now):
                continue
            counts[owner] = counts.get(owner, 0) + 1
        return counts

    def plan(self, now: float, eligible: Collection[str]) -> list[Take]:
        """The leases to take now. ``eligible``: the shards that may be leased at all (listed
        in the stream and not finished)."""
        candidates = {
            s: seen for s, seen in self._view.items() if s in eligible and s not in self._held
        }
        total = len(candidates) + sum(1 for s in self._held if s in eligible)
        if total == 0:
            return []
        counts = self.owners(now, eligible)
        workers = len(counts)
        cap = self.config.max_leases_for_worker or total
        target = min(1 if workers >= total else math.ceil(total / workers), cap)
        mine = counts[self.worker_id]
        if self.config.priority_takes:
            very_old = sorted(s for s, seen in candidates.items() if self._very_old(seen, now))
            if very_old:
                self._rng.shuffle(very_old)
                room = max(0, min(cap - mine, len(very_old)))
                return [Take(candidates[s].row, steal=False) for s in very_old[:room]]
        needed = target - mine
        if needed <= 0:
            return []
        available = sorted(s for s, seen in candidates.items() if self._available(seen, now))
        if available:
            self._rng.shuffle(available)
            return [Take(candidates[s].row, steal=False) for s in available[:needed]]
        return self._steals(now, candidates, counts, needed, target)

    def _steals(
        self,
        now: float,
        candidates: dict[str, _Seen],
        counts: dict[str, int],
        needed: int,
        target: int,
    ) -> list[Take]:
        victim, load = max(counts.items(), key=lambda item: (item[1], item[0]))
        if load < target:
            return []
        count = min(needed, load - target)
        if needed > 1 and count == 0:
            count = 1
        count = min(count, self.config.max_leases_to_steal)
        leases = sorted(
            s
            for s, seen in candidates.items()
            if seen.row.owner == victim and not self._available(seen, now)
        )
        self._rng.shuffle(leases)
        return [Take(candidates[s].row, steal=True) for s in leases[:count]]
