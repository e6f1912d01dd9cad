"""Per-shard rate limiting: two token buckets per shard and a queue of what waits for tokens.

Like the KPL's ``Limiter`` (1.0.6 and later): a shard may take ``rate_limit`` percent of its
1000 records/s and 1 MiB/s, tokens grow with time when asked (no background task), a shard's
queue drains in order and stops at the first record that does not get tokens, and a record that
expires while it waits is handed back as expired. The byte bucket holds ``BURST_BYTES`` (10 MiB)
and refills at the byte rate: a shard writes 1 MiB/s but absorbs a burst of about 10 MiB, which
is how Kinesis takes records of up to 10 MiB. So a few large records go at once, and a stream of
them is paced at the byte rate instead of being sent to be throttled. Beyond the KPL (whose
``add_error`` is a TODO), a shard that answers with throttling has its rate halved, at most once
per ``CUT_INTERVAL``, down to ``MIN_MULTIPLIER`` of the limit, and regains
``RECOVERY_PER_SECOND`` of it per second after. Records with no predicted shard are not limited
(the KPL does the same).

Two more reasons keep a shard's queue waiting, tokens or not: ``hold`` (a retry backoff after
the shard's records failed) and ``one_at_a_time`` (``preserve_order``: once a Kinesis record of
a shard is released, the next one waits for ``unblock``, which the pipeline calls when the
outcome of the first is known).
"""

from __future__ import annotations

from collections import deque

from kinesis_core.producer.items import KinesisRecordOut
from kinesis_core.shards.hashing import SHARD_BYTES_PER_SECOND, SHARD_RECORDS_PER_SECOND

BURST_BYTES = 10 * 1024 * 1024
"""Capacity of a shard's byte bucket: the burst a shard takes (the KPL's, and the service's:
"a Kinesis data stream can burst up to 10 MiB, while averaging 1 MiB per second")."""
MIN_MULTIPLIER = 0.05
RECOVERY_PER_SECOND = 0.1
CUT_INTERVAL = 0.1


class TokenBucket:
    """Tokens that grow at ``rate`` per second up to ``capacity``; starts full.

    A take larger than the capacity succeeds when the bucket is full and leaves it in debt, so an
    item bigger than one second's worth still goes out, at the rate's pace.
    """

    __slots__ = ("capacity", "last", "rate", "tokens")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity
        self.last = now

    def refill(self, now: float) -> None:
        if now > self.last:
            self.tokens = min(self.capacity, self.tokens + self.rate * (now - self.last))
            self.last = now

    def can_take(self, cost: float) -> bool:
        return self.tokens >= cost or self.tokens >= self.capacity

    def wait_time(self, cost: float) -> float:
        """Seconds until ``can_take(cost)`` holds at the current rate."""
        missing = min(cost, self.capacity) - self.tokens
        return max(0.0, missing / self.rate)


class ShardLimiter:
    """The record and byte buckets of one shard, their adaptive multiplier and queue."""

    __slots__ = (
        "blocked",
        "bytes",
        "held_until",
        "last_cut",
        "min_expiration",
        "multiplier",
        "queue",
        "records",
    )

    def __init__(self, records_per_second: float, bytes_per_second: float, now: float) -> None:
        self.records = TokenBucket(records_per_second, records_per_second, now)
        self.bytes = TokenBucket(bytes_per_second, max(BURST_BYTES, bytes_per_second), now)
        self.queue: deque[KinesisRecordOut] = deque()
        self.min_expiration = float("inf")
        self.multiplier = 1.0
        self.last_cut = float("-inf")
        self.held_until = float("-inf")
        """The queue waits until then (a retry backoff)."""
        self.blocked = False
        """The queue waits until ``unblock`` (``one_at_a_time``: a record of it is in flight)."""

    def paused(self, now: float) -> bool:
        return self.blocked or self.held_until > now

    def refill(self, now: float, nominal_records: float, nominal_bytes: float) -> None:
        if self.multiplier < 1.0:
            elapsed = now - self.records.last
            if elapsed > 0:
                self.multiplier = min(1.0, self.multiplier + RECOVERY_PER_SECOND * elapsed)
                self.records.rate = nominal_records * self.multiplier
                self.bytes.rate = nominal_bytes * self.multiplier
        self.records.refill(now)
        self.bytes.refill(now)

    def try_take(self, kr: KinesisRecordOut) -> bool:
        if self.records.can_take(1) and self.bytes.can_take(kr.size):
            self.records.tokens -= 1
            self.bytes.tokens -= kr.size
            return True
        return False

    def wait_time(self, kr: KinesisRecordOut) -> float:
        return max(self.records.wait_time(1), self.bytes.wait_time(kr.size))


class Limiter:
    """Token buckets for every shard; sans-I/O: ``put`` and ``drain`` take the time as input."""

    def __init__(
        self, rate_limit_percent: int, *, adaptive: bool = True, one_at_a_time: bool = False
    ) -> None:
        self.records_per_second = SHARD_RECORDS_PER_SECOND * rate_limit_percent / 100
        self.bytes_per_second = SHARD_BYTES_PER_SECOND * rate_limit_percent / 100
        self.adaptive = adaptive
        self.one_at_a_time = one_at_a_time
        """Block a shard as soon as one of its records is released (``preserve_order``)."""
        self._shards: dict[str, ShardLimiter] = {}
        self._backlogged: set[str] = set()
        """Shards with records in their queue."""
        self._next_wakeup: float | None = None

    def shard(self, shard_id: str, now: float) -> ShardLimiter:
        sl = self._shards.get(shard_id)
        if sl is None:
            sl = self._shards[shard_id] = ShardLimiter(
                self.records_per_second, self.bytes_per_second, now
            )
        return sl

    def put(self, kr: KinesisRecordOut, now: float) -> bool:
        """True when ``kr`` may be sent now; otherwise it is queued until ``drain`` frees it."""
        shard_id = kr.shard_id
        if shard_id is None:
            return True
        sl = self.shard(shard_id, now)
        if not sl.queue and not sl.paused(now):
            sl.refill(now, self.records_per_second, self.bytes_per_second)
            if sl.try_take(kr):
                if self.one_at_a_time:
                    sl.blocked = True
                return True
        sl.queue.append(kr)
        self._waiting(shard_id, sl, kr, now)
        return False

    def push_front(self, kr: KinesisRecordOut, now: float) -> None:
        """Queue ``kr`` ahead of everything its shard has waiting (a retry that must not be
        overtaken); it still needs tokens, and waits out a hold or a block."""
        shard_id = kr.shard_id
        assert shard_id is not None
        sl = self.shard(shard_id, now)
        sl.queue.appendleft(kr)
        self._waiting(shard_id, sl, kr, now)

    def _waiting(self, shard_id: str, sl: ShardLimiter, kr: KinesisRecordOut, now: float) -> None:
        sl.min_expiration = min(sl.min_expiration, kr.expiration)
        if shard_id not in self._backlogged:
            self._backlogged.add(shard_id)
            self._wake_at(self._wake_time(sl, now))
        else:
            self._wake_at(min(kr.expiration, self._wake_time(sl, now)))

    def _wake_time(self, sl: ShardLimiter, now: float) -> float:
        """When ``sl``'s queue next needs a look: its head may go, or something expires."""
        if sl.blocked:
            return sl.min_expiration
        start = max(now, sl.held_until)
        return min(start + sl.wait_time(sl.queue[0]), sl.min_expiration)

    def _wake_at(self, wake: float) -> None:
        if wake != float("inf") and (self._next_wakeup is None or wake < self._next_wakeup):
            self._next_wakeup = wake

    def hold(self, shard_id: str, until: float, now: float) -> None:
        """Keep ``shard_id``'s queue waiting until ``until`` (a retry backoff)."""
        sl = self.shard(shard_id, now)
        sl.held_until = max(sl.held_until, until)
        if sl.queue:
            self._backlogged.add(shard_id)
            self._wake_at(self._wake_time(sl, now))

    def unblock(self, shard_id: str, now: float) -> None:
        """Let ``shard_id``'s queue go on (``drain`` releases what its tokens allow)."""
        sl = self._shards.get(shard_id)
        if sl is None or not sl.blocked:
            return
        sl.blocked = False
        if sl.queue:
            self._backlogged.add(shard_id)
            self._wake_at(self._wake_time(sl, now))

    def held(self, shard_id: str, now: float) -> bool:
        """Whether ``shard_id`` waits out a retry backoff at ``now``."""
        sl = self._shards.get(shard_id)
        return sl is not None and sl.held_until > now

    def blocked(self, shard_id: str) -> bool:
        """Whether ``shard_id`` waits for ``unblock``."""
        sl = self._shards.get(shard_id)
        return sl is not None and sl.blocked

    def drain(self, now: float) -> tuple[list[KinesisRecordOut], list[KinesisRecordOut]]:
        """Release what the buckets allow now, and take out what expired while it waited."""
        released: list[KinesisRecordOut] = []
        expired: list[KinesisRecordOut] = []
        next_wakeup: float | None = None
        for shard_id in list(self._backlogged):
            sl = self._shards[shard_id]
            queue = sl.queue
            if sl.min_expiration <= now:
                keep = [kr for kr in queue if kr.expiration > now]
                expired.extend(kr for kr in queue if kr.expiration <= now)
                queue.clear()
                queue.extend(keep)
                sl.min_expiration = min((kr.expiration for kr in queue), default=float("inf"))
            sl.refill(now, self.records_per_second, self.bytes_per_second)
            if not sl.paused(now):
                while queue and sl.try_take(queue[0]):
                    released.append(queue.popleft())
                    if self.one_at_a_time:
                        sl.blocked = True
                        break
            if not queue:
                self._backlogged.discard(shard_id)
                sl.min_expiration = float("inf")
                continue
            wake = self._wake_time(sl, now)
            if wake != float("inf") and (next_wakeup is None or wake < next_wakeup):
                next_wakeup = wake
        self._next_wakeup = next_wakeup
        return released, expired

    def next_wakeup(self) -> float | None:
        """When a queued record can next get tokens or expires; None when nothing waits."""
        return self._next_wakeup

    def throttled(self, shard_id: str, now: float) -> None:
        """Kinesis throttled ``shard_id``: halve its rate (once per ``CUT_INTERVAL``)."""
        if not self.adaptive:
            return
        sl = self.shard(shard_id, now)
        sl.refill(now, self.records_per_second, self.bytes_per_second)
        if now - sl.last_cut < CUT_INTERVAL:
            return
        sl.last_cut = now
        sl.multiplier = max(MIN_MULTIPLIER, sl.multiplier / 2)
        sl.records.rate = self.records_per_second * sl.multiplier
        sl.bytes.rate = self.bytes_per_second * sl.multiplier
        sl.records.tokens = min(sl.records.tokens, 0.0)
        sl.bytes.tokens = min(sl.bytes.tokens, 0.0)

    def multiplier(self, shard_id: str) -> float:
        """The fraction of the configured rate ``shard_id`` runs at now (1.0 when unthrottled)."""
        sl = self._shards.get(shard_id)
        return 1.0 if sl is None else sl.multiplier

    def take_all(self) -> list[KinesisRecordOut]:
        """Empty every queue (shutdown or crash) and return what was in them."""
        out: list[KinesisRecordOut] = []
        for shard_id in self._backlogged:
            out.extend(self._shards[shard_id].queue)
            self._shards[shard_id].queue.clear()
            self._shards[shard_id].min_expiration = float("inf")
        for sl in self._shards.values():
            sl.blocked = False
        self._backlogged.clear()
        self._next_wakeup = None
        return out

    @property
    def queued(self) -> int:
        """Kinesis records waiting for tokens."""
        return sum(len(self._shards[s].queue) for s in self._backlogged)
