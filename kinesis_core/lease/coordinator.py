"""Which leases a worker should hold: the KCL 2.x lease taker as a sans-I/O state machine.

Liveness is read from the table, never from clocks on other hosts: a lease is alive while its
``leaseCounter`` keeps moving (its owner renews by bumping it), and expired once the counter has
not moved for the failover time, as seen by this worker's own clock between its own scans
(``DynamoDBLeaseTaker.updateAllLeases``). A lease seen for the first time counts as just renewed
if it has an owner, and as never renewed if it has none.

Balancing (``computeLeasesToTake`` and ``chooseLeasesToSteal``): the target is
``ceil(leases / workers)`` where workers are the owners of live leases, the workers whose
worker rows are alive (announced before they hold anything) and this one. Leases that had an
owner and were not renewed for three failover times are taken first whatever the target (the
KCL's priority lease assignment); then new, expired or released leases up to the target,
leaving enough for every other live worker to reach ``leases // workers`` (so workers started
together split the new leases instead of one taking them all, and the leases of a dead worker
are spread over the others); only when
none is available, leases are asked from the workers above the target (and one from a
worker at ``leases // workers + 1``, when this one is two or more below it), at most
``max_leases_to_steal`` per scan, spread over those workers. Such a steal is a hand-off
request (:class:`Take` ``steal``): the owner finishes what it delivered, checkpoints and hands
the lease over.

Events in (a table scan, a take, a renewal, a loss), decisions out (the leases to take, the
held leases whose renewals stopped working); the clock comes in as ``now`` (seconds, monotonic).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from kinesis_core.checkpoint.base import Checkpoint
from kinesis_core.errors import ConfigurationError

EPSILON = 0.025
"""The KCL's ``epsilonMillis`` (25 ms), in seconds."""
VERY_OLD_FACTOR = 3
"""The KCL's ``veryOldLeaseDurationNanosMultiplier``."""
REBALANCE_THRESHOLD = 0.1
"""Throughput assignment: a worker asks for a lease only from a worker more than 10% above
the mean load (the KCL 3.x ``reBalanceThresholdPercentage``)."""
MIN_WEIGHT = 0.01
"""Throughput assignment: the least a lease weighs (KiB/s), so idle shards still spread."""
Assignment = Literal["lease_count", "throughput"]


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
    - ``max_leases_to_steal``: leases asked from busier workers per scan (1).
    - ``priority_takes``: take long-dead leases first, whatever the target (True).
    - ``handoff_timeout``: how long a worker that asked for a lease waits for its owner's
      final checkpoint before it takes the lease anyway (the KCL 3.x
      ``gracefulLeaseHandoffTimeoutMillis``); the owner waits for the acks of what it
      delivered for at most this long too. Default ``failover_time / 2``.
    - ``assignment``: ``"lease_count"`` (default: the same number of leases each, within one)
      or ``"throughput"``: the same read throughput each, from the KiB/s every owner writes
      into its leases (``throughputKBps``) at each renewal; a lease never measured counts as
      the mean of those measured.
    """

    worker_id: str | None = None
    failover_time: float = 10.0
    renew_interval: float | None = None
    take_interval: float | None = None
    parent_poll_interval: float = 10.0
    max_leases_for_worker: int | None = None
    max_leases_to_steal: int = 1
    priority_takes: bool = True
    handoff_timeout: float | None = None
    assignment: Assignment = "lease_count"

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
        if self.assignment not in ("lease_count", "throughput"):
            raise ConfigurationError(
                "assignment",
                f'must be "lease_count" or "throughput", got {self.assignment!r:.80}',
            )
        if not self.handoff_every > 0:
            raise ConfigurationError(
                "handoff_timeout", f"must be > 0 seconds, got {self.handoff_every!r}"
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

    @property
    def handoff_every(self) -> float:
        """The hand-off timeout in effect."""
        if self.handoff_timeout is not None:
            return self.handoff_timeout
        return self.failover_time / 2


@dataclass(frozen=True, slots=True)
class Take:
    """A decision: take this lease, conditional on the row as scanned."""

    row: Checkpoint
    steal: bool
    """True when the lease is asked from a live owner (balancing): a hand-off request."""


@dataclass(frozen=True, slots=True)
class _Seen:
    row: Checkpoint
    changed_at: float | None
    """When a scan last saw the counter move; None: never (new and unowned)."""


@dataclass(frozen=True, slots=True)
class _Beat:
    counter: int
    changed_at: float


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
        self._beats: dict[str, _Beat] = {}
        """Worker rows: their counters, and when a scan last saw each move."""
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

    def scan(
        self, now: float, rows: Iterable[Checkpoint], workers: Mapping[str, int] | None = None
    ) -> None:
        """A full read of the lease table (and of its worker rows), finished at ``now``.
        A worker row counts as alive while its counter moves, like a lease (seen for the first
        time: just renewed)."""
        if workers is not None:
            beats = {}
            for worker, counter in workers.items():
                beat = self._beats.get(worker)
                same = beat is not None and beat.counter == counter
                beats[worker] = _Beat(counter, beat.changed_at if same and beat else now)
            self._beats = beats
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

    def assign(
        self, now: float, eligible: Collection[str], taken: Iterable[Take]
    ) -> list[tuple[str, Take]]:
        """The leader's decisions for the other live workers, after its own ``taken``: for
        each worker in turn (by id), what it would take itself if it saw the table as the
        last scan did with the decisions made before it applied (so no two workers get the
        same lease, and each takes what the rules above give it: its share of the free
        leases, or hand-off requests to the busiest). A worker younger than three take
        intervals (its worker row's counter, bumped every renewal interval, says how old it is)
        is assigned nothing: it takes its share itself (a worker reads the table and takes for
        itself in its first two take intervals, while it finds something to take). Pairs of
        (worker, take)."""
        view = dict(self._view)
        _claim(view, self.worker_id, taken, now)
        out: list[tuple[str, Take]] = []
        for worker in sorted(self.live_workers(now) - {self.worker_id}):
            beat = self._beats.get(worker)
            # Its rounds of its own end two take intervals after its first beat; one more take
            # interval for a round still running.
            age = 0.0 if beat is None else (beat.counter - 1) * self.config.renew_every
            if age < 3 * self.config.take_every:
                continue
            other = LeaseCoordinator(self.config, rng=self._rng, worker_id=worker)
            other._view = view
            other._beats = self._beats
            other._held = {
                s: now
                for s, seen in view.items()
                if seen.row.owner == worker and not other._available(seen, now)
            }
            takes = other.plan(now, eligible)
            _claim(view, worker, takes, now)
            out.extend((worker, take) for take in takes)
        return out

    def retake(self, take: Take, current: Checkpoint | None) -> Take | None:
        """A take lost its condition and the row is now ``current``: the same take on that row
        if the decision still stands, else None (another worker won it, or the owner is alive).

        A request to a live owner still stands when only the owner's own writes moved the
        counter (a renewal or a checkpoint between the scan and the request: at a renewal
        every half second and a checkpoint a second, a scan that takes a while under load
        would see nearly every request lose). A free lease is still free when it has no owner.
        A lease taken because it looked expired is not taken again: its counter moved, so its
        owner is alive. A lease in a hand-off is nobody's to take."""
        if current is None or current.checkpoint_owner is not None:
            return None
        if take.steal:
            still = current.owner == take.row.owner and current.owner != self.worker_id
        else:
            still = current.owner is None
        return Take(current, take.steal) if still else None

    def _available(self, seen: _Seen, now: float) -> bool:
        return (
            seen.row.owner is None
            or seen.changed_at is None
            or now - seen.changed_at > self.config.failover_time
        )

    def _very_old(self, seen: _Seen, now: float) -> bool:
        """Owned, and not renewed for three failover times: its worker is long dead."""
        return (
            seen.row.owner is not None
            and seen.changed_at is not None
            and now - seen.changed_at > VERY_OLD_FACTOR * self.config.failover_time
        )

    def live_workers(self, now: float) -> set[str]:
        """The workers whose worker rows moved within the failover time (this one always)."""
        limit = self.config.failover_time
        alive = {w for w, beat in self._beats.items() if now - beat.changed_at <= limit}
        return alive | {self.worker_id}

    def dead_workers(self, now: float) -> dict[str, int]:
        """Worker rows that stood still for the failover time (their workers died): worker ->
        the counter they stood at."""
        limit = self.config.failover_time
        return {
            w: beat.counter
            for w, beat in self._beats.items()
            if now - beat.changed_at > limit and w != self.worker_id
        }

    def owners(self, now: float, eligible: Collection[str]) -> dict[str, int]:
        """Live leases per worker, as the last scan saw them: every live worker (this one
        always) counts, holding leases or not."""
        counts = dict.fromkeys(self.live_workers(now), 0)
        counts[self.worker_id] = sum(1 for s in self._held if s in eligible)
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
        if self.config.assignment == "throughput":
            return self._plan_throughput(now, candidates, eligible, counts)
        needed = target - mine
        if needed <= 0:
            return []
        available = sorted(s for s, seen in candidates.items() if self._available(seen, now))
        if available:
            # Up to the target, but leaving enough for every other worker to reach
            # ``total // workers``: whoever scans last must not have to steal its share.
            base = total // workers
            me = self.worker_id
            reserve = sum(max(0, base - load) for w, load in counts.items() if w != me)
            room = min(needed, max(len(available) - reserve, base - mine))
            chosen = self._deal(available, counts, target)[: max(room, 0)]
            return [Take(candidates[s].row, steal=False) for s in chosen]
        return self._steals(now, candidates, counts, needed, target, total // workers)

    def _deal(self, available: list[str], counts: Mapping[str, int], target: int) -> list[str]:
        """``available`` (sorted) in the order this worker takes them: first the leases dealt
        to it when they are dealt one at a time, in turn, to the workers below the target (in
        the order of their ids), then those dealt to nobody, then the others' (both shuffled).
        Every worker that saw the same scan deals alike, so workers taking at the same moment
        (started together, or the survivors of a stop) take different leases, not the same
        ones with one winner."""
        need = {w: target - load for w, load in sorted(counts.items()) if load < target}
        dealt: dict[str, list[str]] = {w: [] for w in need}
        leases = deque(available)
        while leases and any(need.values()):
            for worker in need:
                if need[worker] > 0 and leases:
                    dealt[worker].append(leases.popleft())
                    need[worker] -= 1
        mine = dealt.get(self.worker_id, [])
        others = [s for w, shards in dealt.items() if w != self.worker_id for s in shards]
        undealt = list(leases)
        self._rng.shuffle(undealt)
        self._rng.shuffle(others)
        return [*mine, *undealt, *others]

    def _steals(
        self,
        now: float,
        candidates: dict[str, _Seen],
        counts: dict[str, int],
        needed: int,
        target: int,
        base: int,
    ) -> list[Take]:
        """Hand-off requests, so that every worker ends with ``base`` (``leases // workers``)
        or one more: from every worker above the target what it has above it, and if that is
        not enough for this one to reach ``base``, one from each worker at ``base + 1`` that
        holds two or more than this one (so that two workers never trade a lease back and
        forth). Taken one at a time round those workers, busiest first, so that workers joining
        together take from different workers."""
        mine = counts[self.worker_id]
        others = {w: load for w, load in counts.items() if w != self.worker_id}
        excess = {w: max(0, load - target) for w, load in others.items()}
        got = sum(excess.values())
        for w in sorted(others, key=lambda w: -others[w]):
            left = others[w] - excess[w]
            if mine + got < base and left == base + 1 and left >= mine + got + 2:
                excess[w] += 1
                got += 1
        excess = {w: n for w, n in excess.items() if n}
        if not excess:
            return []
        leases: dict[str, list[str]] = {w: [] for w in excess}
        for shard_id in sorted(candidates):
            seen = candidates[shard_id]
            owner = seen.row.owner
            # A lease being handed over already is nobody's to ask for.
            if (
                owner in leases
                and seen.row.checkpoint_owner is None
                and not self._available(seen, now)
            ):
                leases[owner].append(shard_id)
        order = sorted(excess, key=lambda w: (-excess[w], self._rng.random()))
        for shards in leases.values():
            self._rng.shuffle(shards)
        budget = min(needed, self.config.max_leases_to_steal)
        chosen: list[Take] = []
        while budget and any(excess[w] and leases[w] for w in order):
            for victim in order:
                if budget and excess[victim] and leases[victim]:
                    chosen.append(Take(candidates[leases[victim].pop()].row, steal=True))
                    excess[victim] -= 1
                    budget -= 1
        return chosen

    def _plan_throughput(
        self,
        now: float,
        candidates: dict[str, _Seen],
        eligible: Collection[str],
        counts: dict[str, int],
    ) -> list[Take]:
        """Throughput assignment: each live worker's load is the throughput of its leases,
        and every worker aims at the mean. Available leases are taken heaviest first while
        this worker stays at or under the mean (a worker with none takes one whatever its
        weight); then, with none available, leases are asked from the busiest worker while
        it is more than 10% above the mean, each one no heavier than half the gap between the
        two (so that a move never makes this worker the busier one, and two workers never
        trade a lease back and forth)."""
        weights = self._weights(eligible)
        me = self.worker_id
        loads = dict.fromkeys(counts, 0.0)
        leases: dict[str, list[str]] = {w: [] for w in counts}
        for shard_id in eligible:
            if shard_id in self._held:
                loads[me] += weights[shard_id]
                continue
            seen = candidates.get(shard_id)
            owner = None if seen is None else seen.row.owner
            if seen is not None and owner in loads and not self._available(seen, now):
                assert owner is not None
                loads[owner] += weights[shard_id]
                if seen.row.checkpoint_owner is None:
                    leases[owner].append(shard_id)
        mean = sum(weights.values()) / len(loads)
        cap = (self.config.max_leases_for_worker or len(eligible)) - counts[me]
        available = sorted(
            (s for s, seen in candidates.items() if self._available(seen, now)),
            key=lambda s: (-weights[s], s),
        )
        takes: list[Take] = []
        for shard_id in available:
            weight = weights[shard_id]
            if len(takes) < cap and (loads[me] == 0 or loads[me] + weight <= mean):
                takes.append(Take(candidates[shard_id].row, steal=False))
                loads[me] += weight
        if available:
            return takes
        budget = min(cap, self.config.max_leases_to_steal)
        while budget > 0:
            victim = max(loads, key=lambda w: (loads[w], w))
            gap = loads[victim] - loads[me]
            if victim == me or loads[victim] <= mean * (1 + REBALANCE_THRESHOLD):
                break
            fitting = [s for s in leases[victim] if weights[s] <= gap / 2]
            if not fitting:
                break
            shard_id = max(fitting, key=lambda s: (weights[s], s))
            leases[victim].remove(shard_id)
            takes.append(Take(candidates[shard_id].row, steal=True))
            loads[victim] -= weights[shard_id]
            loads[me] += weights[shard_id]
            budget -= 1
        return takes

    def _weights(self, eligible: Collection[str]) -> dict[str, float]:
        """Each eligible lease's throughput as the last scan saw it; the mean of those
        measured for the others (1.0 when none is)."""
        measured = {
            s: seen.row.throughput_kbps
            for s, seen in self._view.items()
            if s in eligible and seen.row.throughput_kbps is not None
        }
        default = sum(measured.values()) / len(measured) if measured else 1.0
        return {s: max(measured.get(s, default), MIN_WEIGHT) for s in eligible}


def _claim(view: dict[str, _Seen], worker: str, takes: Iterable[Take], now: float) -> None:
    """``takes`` of ``worker`` as done, in a copy of the view."""
    for take in takes:
        row = take.row
        owned = dataclasses.replace(
            row,
            owner=worker,
            checkpoint_owner=row.owner if take.steal else None,
            counter=row.counter + 1,
        )
        view[row.shard_id] = _Seen(owned, now)
