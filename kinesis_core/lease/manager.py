"""The asyncio side of leases: the renewer, the taker, and the one door to a held lease's row.

:class:`LeaseManager` moves rows between the store and the sans-I/O
:class:`~kinesis_core.lease.coordinator.LeaseCoordinator`. Every write to a held lease (renewal,
checkpoint, release) goes through it, one at a time per lease, conditional on the counter it
last wrote: a write that loses its condition means another worker holds the lease now, so the
lease is dropped at once and a :class:`~.events.LeaseLost` tells the consumer to stop the
shard. A lease whose renewals keep failing (no answer from the store) is dropped the same way
once the failover time has passed since its last successful write, since other workers may
take it from then on. A store that says no retry will help (its table was deleted or replaced:
:class:`~kinesis_core.checkpoint.base.CheckpointTableGoneError`; the table belongs to another
application or stream: :class:`~kinesis_core.errors.ConfigurationError`) ends every lease at
once, at the first renewal, scan or checkpoint that meets it (:class:`~.events.LeasesFailed`).

On a store that can list a worker's own leases (:class:`~kinesis_core.checkpoint.base.
AssignedLeaseStore`: DynamoDB) one worker leads: elected through the store's leader row, it
alone reads the whole table every take interval, takes its own share and assigns the others
theirs (a take, or a hand-off request, written in their name), and bumps their worker rows'
``assignments``. Every worker sees that in the answer to its next worker-row renewal and then
lists its own leases (the owner index), starting those assigned to it; it lists them every
take interval too, in case. A worker's
first round after it starts is its own full read and take, as on the other stores, where
every worker reads the table every take interval and takes for itself.

The manager calls nothing back: what happens to the leases it queues as events
(:mod:`kinesis_core.lease.events`), in order, for the consumer to take.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import uuid
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any

from kinesis_core.checkpoint.base import (
    AssignedLeaseStore,
    Checkpoint,
    CheckpointConflictError,
    CheckpointTableGoneError,
    CheckpointValue,
    LeaseStore,
    checkpoint_order,
    same_incarnation,
)
from kinesis_core.consumer.checkpointer import landed
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease.coordinator import LeaseConfig, LeaseCoordinator, Take
from kinesis_core.lease.events import (
    HandOffAsked,
    LeaseAcquired,
    LeaseEvent,
    LeaseLost,
    LeasesFailed,
    TableScanned,
)
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock, wait_event
from kinesis_core.telemetry.names import LeaseChange
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

logger = logging.getLogger(__name__)

FATAL = (CheckpointTableGoneError, ConfigurationError)
"""What a store raises when no retry can help: the leases end at once."""


def default_worker_id() -> str:
    """Host, process and a random part: unique per process, readable in the lease table."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseManager:
    """Leases of one worker on one (application, stream).

    ``eligible()`` names the shards that may be leased now. What happens to the leases comes
    out as events (:mod:`~kinesis_core.lease.events`), in order: :meth:`take_events` takes
    those queued, :meth:`next_events` waits for some; :class:`~.events.LeaseAcquired` and
    :class:`~.events.LeaseLost` when a lease is taken or lost, :class:`~.events.TableScanned`
    for every table scan. ``config.worker_id`` None: the worker's name is
    :func:`default_worker_id`'s. Every wait is on ``clock``.

    Hand-offs (the KCL 3.x graceful lease hand-off): a lease asked from a live owner is marked
    (``leaseOwner`` this worker, ``checkpointOwner`` the owner) and counts as held, but is
    not started (not in :meth:`held`) until the owner's final checkpoint cleared the marker,
    or ``handoff_timeout`` passed (then it is taken as it is). An owner learns of the request
    at its next renewal or checkpoint: the lease is no longer held, its row is renewed as it
    is while the owner finishes, and :meth:`hand_over` writes the final checkpoint; with
    ``graceful_handoff`` a :class:`~.events.HandOffAsked` says when (the owner calls
    :meth:`hand_over` once its acks are in), without it the manager hands over at once.

    ``throughput(shard_id)``: the KiB/s read from a held shard since the last call, written
    into the lease at each renewal (``throughputKBps``) for the throughput assignment.

    A :class:`~.events.LeasesFailed` comes once, when the store raises one of :data:`FATAL`:
    every held lease was dropped (a :class:`~.events.LeaseLost` for each) and no lease is
    taken any more.
    """

    def __init__(
        self,
        store: LeaseStore,
        application: str,
        stream: str,
        config: LeaseConfig,
        *,
        eligible: Callable[[], Collection[str]],
        graceful_handoff: bool = False,
        throughput: Callable[[str], float | None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        recorder: ConsumerRecorder = NO_RECORDER,
    ) -> None:
        self.store = store
        self.application = application
        self.stream = stream
        self.config = config
        self.worker_id = config.worker_id or default_worker_id()
        """This worker's name in the lease table."""
        self.coordinator = LeaseCoordinator(config, rng=rng, worker_id=self.worker_id)
        self._eligible = eligible
        self._graceful_handoff = graceful_handoff
        self._throughput = throughput
        self._events: list[LeaseEvent] = []
        self._has_events = asyncio.Event()
        self.failure: BaseException | None = None
        """The error that ended every lease (one of :data:`FATAL`), if any."""
        self._clock = clock
        self.recorder = recorder
        """Told of every checkpoint written and every lease taken, stolen, lost or released
        (a hand-off fires ``LeaseChange.HANDED_OVER``)."""
        self.stream_created_ms: int | None = None
        """The creation time of the stream, written with every checkpoint (the incarnation
        the positions belong to); set once the stream was described."""
        self._rows: dict[str, Checkpoint] = {}
        """Per lease, the row as this worker last wrote it; for a held lease its counter
        fences the next write."""
        self._known: set[str] = set()
        """Shards with a row in the table (last scan, plus the rows created since)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._poke = asyncio.Event()
        # Loops end between two rounds, never by cancellation: a take or renewal cut off in
        # flight may have been written, and its lease would be ours without our knowing.
        self._no_takes = asyncio.Event()
        self._no_renewals = asyncio.Event()
        self._taker: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._renewing: dict[str, asyncio.Task[None]] = {}
        """Renewals in flight, at most one per lease."""
        self._background: set[asyncio.Task[None]] = set()
        self._pending: dict[str, tuple[float, int]] = {}
        """Leases asked from their owners, not handed over yet -> when the request was sent,
        and the counter it left."""
        self._handing: dict[str, Checkpoint] = {}
        """Leases this worker is handing over -> their rows (``checkpoint_owner`` us)."""
        self._beating: asyncio.Task[None] | None = None
        self.assigned = isinstance(store, AssignedLeaseStore)
        """Whether a leader assigns the leases (the store lists a worker's own leases)."""
        self.leading = False
        """Whether this worker is the leader now."""
        self._leader_counter = 0
        self._leader_seen: tuple[str, int, float] | None = None
        """The leader row as last read: its worker, its counter, when the counter last moved."""
        self._finding: asyncio.Task[None] | None = None
        self._planned = 0
        self._nudged = 0
        """The worker row's ``assignments`` as last seen."""
        self._to_find = 0
        """Listings of this worker's leases still to make (the leader assigned some)."""
        self._found_at = self._clock.now()
        """The leases the last round decided to take or ask for."""

    @property
    def has_events(self) -> bool:
        """Whether events wait to be taken."""
        return bool(self._events)

    def take_events(self) -> list[LeaseEvent]:
        """The events queued since the last take, oldest first."""
        events, self._events = self._events, []
        self._has_events.clear()
        return events

    async def next_events(self) -> list[LeaseEvent]:
        """The next events, once there are some."""
        await self._has_events.wait()
        return self.take_events()

    def _emit(self, event: LeaseEvent) -> None:
        if isinstance(event, TableScanned):
            # A scan supersedes the ones not taken yet: the queue stays bounded when nobody
            # takes the events for a while.
            self._events = [e for e in self._events if not isinstance(e, TableScanned)]
        self._events.append(event)
        self._has_events.set()

    def _lock(self, shard_id: str) -> asyncio.Lock:
        return self._locks.setdefault(shard_id, asyncio.Lock())

    def held(self) -> dict[str, CheckpointValue]:
        """The leases this worker holds and may read, with their stored checkpoints (not
        those still being handed over to it)."""
        return {s: self._rows[s].value for s in self.coordinator.held if s not in self._pending}

    def handing(self, shard_id: str) -> bool:
        """Whether this worker is handing the lease over (asked for by another worker)."""
        return shard_id in self._handing

    def row(self, shard_id: str) -> Checkpoint | None:
        """The row of a lease as this worker last wrote it (held or not any more)."""
        return self._rows.get(shard_id)

    def observe(self, row: Checkpoint) -> None:
        """A row read from the table (by a listing): it exists."""
        self._known.add(row.shard_id)

    def has_row(self, shard_id: str) -> bool:
        return shard_id in self._known

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start renewing and taking (the first scan runs at once)."""
        self._taker = asyncio.create_task(self._take_loop(), name="kinesis-lease-taker")
        self._renewer = asyncio.create_task(self._renew_loop(), name="kinesis-lease-renewer")

    def poke(self) -> None:
        """Scan and take now rather than at the next interval (new leases were created)."""
        self._poke.set()

    async def stop_taking(self) -> None:
        """No more takes; the held leases are still renewed (a consumer closing gracefully
        keeps them while it waits for its last acks). With a leader, the worker row goes now
        (no lease is assigned to this worker any more) and so does the leader row, if it is
        this worker's."""
        self._no_takes.set()
        self._poke.set()
        await _finish(self._taker)
        if isinstance(self.store, AssignedLeaseStore):
            # No lease is assigned to a worker without a row, and the leader row is free.
            await _finish(self._beating)
            try:
                await self._retire(self.store)
            except Exception:
                logger.warning("removing the rows of %s failed", self.worker_id, exc_info=True)

    async def close(self) -> None:
        """Stop taking and renewing, then release every held lease (and those being handed
        over to this worker): a graceful stop (checkpoint first, then call this) lets other
        workers take them at once. The worker row goes too."""
        await self.stop_taking()
        self._no_renewals.set()
        await _finish(self._renewer)
        await _finish(self._beating)
        await _finish(self._finding)
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(self.release(s) for s in self.coordinator.held))
        self._handing.clear()
        if isinstance(self.store, AssignedLeaseStore):
            try:
                await self._leave(self.store)
            except Exception:
                logger.warning("leaving the leases of %s failed", self.worker_id, exc_info=True)
        try:
            await self.store.heartbeat(self.application, self.stream, self.worker_id, leaving=True)
        except Exception:
            logger.warning("removing the worker row of %s failed", self.worker_id, exc_info=True)

    # -- writes -------------------------------------------------------------------------------

    async def create(
        self,
        shard_id: str,
        value: CheckpointValue,
        parents: Sequence[str],
        hash_range: tuple[int, int] | None,
    ) -> bool:
        """Create an unowned lease unless the table has one; True if this call created it."""
        try:
            await self.store.put(
                self.application,
                self.stream,
                shard_id,
                value,
                expected=None,
                parent_shard_ids=parents,
                hash_range=hash_range,
                stream_created_ms=self.stream_created_ms,
            )
        except CheckpointConflictError:
            self._known.add(shard_id)
            return False
        except FATAL as exc:
            self._fail(exc)
            raise
        self._known.add(shard_id)
        logger.info("created the lease of %s at %s", shard_id, value)
        return True

    async def write(
        self,
        shard_id: str,
        value: CheckpointValue,
        parents: Sequence[str] = (),
        children: Sequence[str] = (),
        dedup_window: str | None = None,
    ) -> bool:
        """Checkpoint a held lease; False (nothing written) if this worker does not hold it
        (or waits for it to be handed over).

        ``children`` (at SHARD_END) go to ``childShardIds``; ``dedup_window`` is the shard's
        dedup window as of ``value``."""
        async with self._lock(shard_id):
            if not self.coordinator.holds(shard_id) or shard_id in self._pending:
                return False
            current = self._rows[shard_id]
            created = self.stream_created_ms
            if same_incarnation(current, created) and (
                current.value == value or checkpoint_order(value) < checkpoint_order(current.value)
            ):
                return True
            sent_at = self._clock.now()

            def keep(row: Checkpoint) -> None:
                self._rows[shard_id] = row
                self.coordinator.renewed(shard_id, sent_at)

            try:
                # Waited for even if this is cancelled: the next write expects its row.
                await landed(
                    self.store.put(
                        self.application,
                        self.stream,
                        shard_id,
                        value,
                        expected=current,
                        parent_shard_ids=parents,
                        child_shard_ids=children,
                        stream_created_ms=created,
                        dedup_window=dedup_window,
                    ),
                    keep,
                )
            except CheckpointConflictError as exc:
                self._refused(shard_id, exc, "checkpoint")
                return False
            except FATAL as exc:
                self._fail(exc)
                raise
            self.recorder.checkpoint(shard_id)
            return True

    async def hand_over(
        self,
        shard_id: str,
        value: CheckpointValue | None,
        parents: Sequence[str] = (),
        dedup_window: str | None = None,
    ) -> bool:
        """The final checkpoint of a lease being handed over (``value`` None: the stored one
        stays, and its window), with the shard's dedup window as of ``value``; it clears the
        hand-off marker, and the lease is the taker's. False if the lease is no longer being
        handed over by this worker (the taker gave up waiting)."""
        async with self._lock(shard_id):
            row = self._handing.get(shard_id)
            if row is None:
                return False
            if value is None or checkpoint_order(value) < checkpoint_order(row.value):
                value, dedup_window = row.value, None
            try:
                new = await self.store.put(
                    self.application,
                    self.stream,
                    shard_id,
                    value,
                    expected=row,
                    parent_shard_ids=parents,
                    stream_created_ms=self.stream_created_ms,
                    dedup_window=dedup_window,
                )
            except CheckpointConflictError as exc:
                del self._handing[shard_id]
                self._lose(shard_id, f"final checkpoint of the hand-off refused: {exc}")
                return False
            del self._handing[shard_id]
            self._rows[shard_id] = new
        self.recorder.checkpoint(shard_id)
        self.recorder.lease(LeaseChange.HANDED_OVER)
        logger.info("handed the lease of %s over to %s at %s", shard_id, new.owner, value)
        return True

    async def release(self, shard_id: str) -> None:
        """Give a held lease up (owner removed, counter bumped): others may take it at once."""
        async with self._lock(shard_id):
            if not self.coordinator.holds(shard_id):
                return
            self.coordinator.dropped(shard_id)
            self._pending.pop(shard_id, None)
            expected = self._rows[shard_id]
            for _ in range(3):
                try:
                    self._rows[shard_id] = await self.store.update_lease(
                        self.application, self.stream, shard_id, expected=expected, owner=None
                    )
                    break
                except CheckpointConflictError as exc:
                    # Still in our name: a write of ours whose answer never came (a renewal
                    # given up on) moved the counter. Release that row.
                    if exc.current is None or exc.current.owner != self.worker_id:
                        return
                    expected = exc.current
                except Exception:
                    logger.warning("releasing the lease of %s failed; it expires", shard_id)
                    return
            else:
                return
        self.recorder.lease(LeaseChange.RELEASED)
        logger.info("released the lease of %s", shard_id)

    def _spawn(self, work: Coroutine[Any, Any, object], what: str) -> None:
        """``work`` in the background; a failure is logged (it is tried again later)."""

        async def run() -> None:
            try:
                await work
            except FATAL as exc:
                self._fail(exc)
            except Exception as exc:
                logger.warning("%s failed: %r", what, exc)

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def release_soon(self, shard_id: str) -> None:
        """:meth:`release` in the background (for synchronous callers)."""
        self._spawn(self.release(shard_id), f"releasing the lease of {shard_id}")

    def _refused(self, shard_id: str, exc: CheckpointConflictError, what: str) -> None:
        """A write to a held lease lost its condition: another worker asked for the lease
        (a hand-off: this worker finishes the shard, then :meth:`hand_over`), or took it."""
        current = exc.current
        if (
            current is None
            or current.checkpoint_owner != self.worker_id
            or current.owner == self.worker_id
        ):
            self._lose(shard_id, f"{what} refused: {exc}")
            return
        self.coordinator.dropped(shard_id)
        self._handing[shard_id] = self._rows[shard_id] = current
        logger.info("%s asked for the lease of %s; handing it over", current.owner, shard_id)
        if self._graceful_handoff:
            self._emit(HandOffAsked(shard_id))
        else:
            self.hand_over_soon(shard_id)

    def hand_over_soon(self, shard_id: str) -> None:
        """:meth:`hand_over` at the stored checkpoint, in the background (a lease whose shard
        this worker does not read)."""
        self._spawn(self.hand_over(shard_id, None), f"handing the lease of {shard_id} over")

    def _fail(self, exc: BaseException) -> None:
        """The store raised an error no retry fixes: drop every lease now (their shards stop),
        take no more, and say so (:class:`~.events.LeasesFailed`)."""
        if self.failure is not None:
            return
        self.failure = exc
        logger.error("the leases of %s on %s end: %s", self.worker_id, self.stream, exc)
        self._no_takes.set()
        self._poke.set()
        self._pending.clear()
        self._handing.clear()
        for shard_id in self.coordinator.held:
            self.coordinator.dropped(shard_id)
            self.recorder.lease(LeaseChange.LOST)
            self._emit(LeaseLost(shard_id))
        self._emit(LeasesFailed(exc))

    def _lose(self, shard_id: str, reason: str) -> None:
        self.coordinator.dropped(shard_id)
        logger.warning("lost the lease of %s: %s", shard_id, reason)
        self.recorder.lease(LeaseChange.LOST)
        self._emit(LeaseLost(shard_id))

    # -- renewer ------------------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        """Every ``renew_interval``: drop the leases not renewed within the failover time,
        then start a renewal of each held lease that has none in flight. A slow renewal holds
        up neither the others nor the expiry check, and is never cut off: a write cancelled
        in flight may still land, leaving the lease's counter unknown to us."""
        every = self.config.renew_every
        while True:
            if await wait_event(self._clock, self._no_renewals, every):
                break
            retired = self.assigned and self._no_takes.is_set()
            if not retired and (self._beating is None or self._beating.done()):
                self._beating = asyncio.create_task(self._beat(), name="kinesis-worker-row")
            if (
                self.assigned
                and not self.leading
                and not self._no_takes.is_set()
                and (self._finding is None or self._finding.done())
                and (self._to_find or self._clock.now() - self._found_at >= self.config.take_every)
            ):
                self._finding = asyncio.create_task(self._find(), name="kinesis-lease-finder")
            for shard_id in self.coordinator.expired_held(self._clock.now()):
                logger.warning(
                    "lost the lease of %s: not renewed within the failover time", shard_id
                )
                self._pending.pop(shard_id, None)
                self.recorder.lease(LeaseChange.LOST)
                self._emit(LeaseLost(shard_id))
            for shard_id in [*self.coordinator.held, *self._handing]:
                if shard_id not in self._renewing:
                    self._renewing[shard_id] = asyncio.create_task(self._renew(shard_id))
        await asyncio.gather(*self._renewing.values(), return_exceptions=True)

    async def _beat(self) -> None:
        """This worker's row: alive (other workers count it before it holds a lease); and
        the leader row, while this worker leads."""
        try:
            if isinstance(self.store, AssignedLeaseStore):
                nudged = await self.store.beat(self.application, self.stream, self.worker_id)
                if nudged != self._nudged:
                    # The leader assigned leases: list them (again at the next renewals, a
                    # few times, in case the index lags the table).
                    self._nudged, self._to_find = nudged, 3
            else:
                await self.store.heartbeat(self.application, self.stream, self.worker_id)
            if self.leading and isinstance(self.store, AssignedLeaseStore):
                counter = await self.store.claim_leader(
                    self.application, self.stream, self.worker_id, self._leader_counter
                )
                if counter is None:
                    self.leading = False
                    logger.warning(
                        "%s no longer leads: another worker took the leader row", self.worker_id
                    )
                else:
                    self._leader_counter = counter
        except FATAL as exc:
            self._fail(exc)
        except Exception as exc:
            logger.warning("writing the worker row of %s failed: %r", self.worker_id, exc)

    async def _renew(self, shard_id: str) -> None:
        try:
            await self._renew_once(shard_id)
        except FATAL as exc:
            self._fail(exc)
        except Exception as exc:
            logger.warning("renewing the lease of %s failed (%r); trying again", shard_id, exc)
        finally:
            del self._renewing[shard_id]

    async def _renew_once(self, shard_id: str) -> None:
        async with self._lock(shard_id):
            if shard_id in self._handing:
                await self._renew_handing(shard_id)
                return
            if not self.coordinator.holds(shard_id):
                return
            if shard_id in self._pending:
                await self._await_hand_over(shard_id)
                return
            sent_at = self._clock.now()
            measured = None if self._throughput is None else self._throughput(shard_id)
            try:
                row = await self.store.update_lease(
                    self.application,
                    self.stream,
                    shard_id,
                    expected=self._rows[shard_id],
                    owner=self.worker_id,
                    throughput_kbps=None if measured is None else round(measured, 3),
                )
            except CheckpointConflictError as exc:
                self._refused(shard_id, exc, "renewal")
                return
            self._rows[shard_id] = row
            self.coordinator.renewed(shard_id, sent_at)

    async def _renew_handing(self, shard_id: str) -> None:
        """A lease being handed over stays alive, marker and all, until the final checkpoint;
        once the taker gave up waiting and took it, it is lost."""
        row = self._handing[shard_id]
        try:
            new = await self.store.update_lease(
                self.application,
                self.stream,
                shard_id,
                expected=row,
                owner=row.owner,
                checkpoint_owner=self.worker_id,
            )
        except CheckpointConflictError as exc:
            if self._handing.pop(shard_id, None) is not None:
                self._lose(shard_id, f"taken before the hand-off finished: {exc}")
            return
        if shard_id in self._handing:  # not dropped while the row was written
            self._handing[shard_id] = self._rows[shard_id] = new

    async def _await_hand_over(self, shard_id: str) -> None:
        """A lease asked from its owner: started once the owner's final checkpoint cleared
        the marker, or taken as it is after ``handoff_timeout`` (``failover_time`` if the owner
        never renewed the marked row: it may not know, and deliver until then)."""
        sent_at = self._clock.now()
        row = await self.store.get(self.application, self.stream, shard_id)
        asked = self._pending.get(shard_id)
        if asked is None:
            return  # expired while the row was read: lost already
        if row is None or row.owner != self.worker_id:
            del self._pending[shard_id]
            self._lose(shard_id, "taken by another worker during the hand-off")
            return
        if row.checkpoint_owner is not None:
            asked_at, counter = asked
            # An owner that renewed the marked row knows of the request and has stopped
            # delivering: it gets handoff_timeout. One that did not may not have seen it
            # (cut off from the table, still delivering until its failover time runs out).
            limit = (
                self.config.handoff_every if row.counter != counter else self.config.failover_time
            )
            if sent_at - asked_at <= limit:
                self.coordinator.renewed(shard_id, sent_at)
                return
            logger.warning(
                "%s did not hand the lease of %s over within %s s; taking it",
                row.checkpoint_owner,
                shard_id,
                limit,
            )
            for _ in range(3):
                try:
                    row = await self.store.update_lease(
                        self.application, self.stream, shard_id, expected=row, owner=self.worker_id
                    )
                    break
                except CheckpointConflictError as exc:
                    # The owner renewed meanwhile: once more on its row, if still marked.
                    current = exc.current
                    if current is None or current.owner != self.worker_id:
                        return
                    row = current
                    if row.checkpoint_owner is None:
                        break  # handed over after all
            else:
                return  # look again at the next round
        if self._pending.pop(shard_id, None) is None:
            return  # expired while the row was written: lost already
        self._rows[shard_id] = row
        self.coordinator.renewed(shard_id, sent_at)
        logger.info("the lease of %s was handed over at %s", shard_id, row.value)
        self._emit(LeaseAcquired(shard_id))
        self.poke()  # more to ask for, maybe: no need to wait for the next interval

    # -- taker --------------------------------------------------------------------------------

    async def _take_loop(self) -> None:
        # Announce this worker, then let one renewal interval pass: workers started together
        # see each other in their first scans and split the new leases without stealing.
        await self._beat()
        if await wait_event(self._clock, self._no_takes, self.config.renew_every):
            return
        own = True
        young_until = self._clock.now() + 2 * self.config.take_every
        while not self._no_takes.is_set():
            # Rounds start every take interval, however long a round takes (a slow scan must
            # not stretch the time to see a change: balance is bounded in take intervals).
            started = self._clock.now()
            try:
                # With a leader, a worker reads the table while it leads, and in its first
                # two take intervals while it finds leases to take or ask for (it takes its
                # share itself, at once, as the workers it starts with or joins do).
                leads = self.assigned and await self._elect()
                if not self.assigned or leads or own:
                    await self.take_round()
                    own = bool(self._planned) and self._clock.now() < young_until
            except FATAL as exc:
                self._fail(exc)
            except Exception:
                logger.warning("scanning the lease table failed; retrying", exc_info=True)
            left = started + self.config.take_every - self._clock.now()
            await wait_event(self._clock, self._poke, max(left, 0.0))
            self._poke.clear()

    async def _read_table(self) -> tuple[list[Checkpoint], dict[str, int]]:
        if isinstance(self.store, AssignedLeaseStore):
            return await self.store.snapshot(self.application, self.stream)
        rows, workers = await asyncio.gather(
            self.store.list(self.application, self.stream),
            self.store.workers(self.application, self.stream),
        )
        return rows, workers

    async def _elect(self) -> bool:
        """Whether this worker leads: it does while its renewals of the leader row hold; it
        claims the row when there is none, or when its counter has not moved for the failover
        time (as this worker's clock saw it between its own reads, as for a lease)."""
        store = self.store
        assert isinstance(store, AssignedLeaseStore)
        if self.leading:
            return True
        leader, counter = await store.leader(self.application, self.stream)
        now = self._clock.now()
        if leader is not None and leader != self.worker_id:
            seen = self._leader_seen
            if seen is None or seen[:2] != (leader, counter):
                self._leader_seen = (leader, counter, now)
                return False
            if now - seen[2] <= self.config.failover_time:
                return False
        claimed = await store.claim_leader(
            self.application, self.stream, self.worker_id, None if leader is None else counter
        )
        if claimed is None:
            return False
        self._leader_seen = None
        self.leading = True
        self._leader_counter = claimed
        logger.info(
            "%s leads the leases of %s%s",
            self.worker_id,
            self.stream,
            "" if leader in (None, self.worker_id) else f" (after {leader}, not renewed)",
        )
        return True

    async def take_round(self) -> list[str]:
        """Scan the table, take what the coordinator says (and, leading, assign the other
        live workers theirs); return the shards taken."""
        rows, workers = await self._read_table()
        now = self._clock.now()
        self.coordinator.scan(now, rows, workers)
        for worker, counter in self.coordinator.dead_workers(now).items():
            # A worker that died keeps its row: a worker starting later would count it.
            self._spawn(
                self.store.forget_worker(self.application, self.stream, worker, counter),
                f"forgetting the worker row of {worker}",
            )
        self._known = {row.shard_id for row in rows}
        self._emit(TableScanned(tuple(rows)))
        if self._no_takes.is_set():
            return []
        eligible = self._eligible()
        takes = self.coordinator.plan(now, eligible)
        self._planned = len(takes)
        assignments = self.coordinator.assign(now, eligible, takes) if self.leading else []
        taken, assigned = await asyncio.gather(
            asyncio.gather(*(self._take(take) for take in takes)),
            asyncio.gather(*(self._assign(worker, take) for worker, take in assignments)),
        )
        if isinstance(self.store, AssignedLeaseStore):
            told = {worker for (worker, _), ok in zip(assignments, assigned, strict=True) if ok}
            await asyncio.gather(
                *(self.store.nudge(self.application, self.stream, w) for w in sorted(told)),
                return_exceptions=True,
            )
        return [take.row.shard_id for take, ok in zip(takes, taken, strict=True) if ok]

    async def _assign(self, worker: str, take: Take) -> bool:
        """The leader's write of a lease into another worker's name: a take of a free or
        expired lease, or a hand-off request to a live owner (as the worker's own take
        would be). A request lost only to the owner's own renewal is made again on the row
        the condition returned, up to three times; otherwise the next round looks again."""
        row = take.row
        for _ in range(3):
            try:
                await self.store.update_lease(
                    self.application,
                    self.stream,
                    row.shard_id,
                    expected=row,
                    owner=worker,
                    checkpoint_owner=row.owner if take.steal else None,
                )
            except CheckpointConflictError as exc:
                current = exc.current
                if current is None or current.checkpoint_owner is not None:
                    return False
                if take.steal:
                    still = current.owner == row.owner and current.owner != worker
                else:
                    still = current.owner is None
                if not still:
                    return False
                row = current
                continue
            except FATAL as exc:
                self._fail(exc)
                return False
            except Exception as exc:
                logger.warning("assigning the lease of %s failed: %r", row.shard_id, exc)
                return False
            logger.info(
                "%s the lease of %s for %s",
                "asked" if take.steal else "assigned",
                row.shard_id,
                worker,
            )
            return True
        return False

    async def _find(self) -> None:
        """The leases assigned to this worker (the owner index), each read again (the index
        lags the table) and started: a free one by a renewal in this worker's name (a take),
        one being handed over by waiting for its owner's final checkpoint."""
        store = self.store
        assert isinstance(store, AssignedLeaseStore)
        self._found_at = self._clock.now()
        try:
            keys = await store.owned(self.application, self.stream, self.worker_id)
            new = [k for k in keys if not self.coordinator.holds(k) and k not in self._handing]
            self._to_find = max(0, self._to_find - 1) if not new else 0
            if not new:
                return
            rows = await asyncio.gather(*(store.get(self.application, self.stream, k) for k in new))
            mine = [
                row
                for row in rows
                if row is not None
                and row.owner == self.worker_id
                and row.checkpoint_owner != self.worker_id
            ]
            if not mine:
                return
            self._known.update(row.shard_id for row in mine)
            self._emit(TableScanned(tuple(mine)))
            await asyncio.gather(*(self._adopt(row) for row in mine))
        except FATAL as exc:
            self._fail(exc)
        except Exception as exc:
            logger.warning("listing the leases of %s failed: %r", self.worker_id, exc)

    async def _retire(self, store: AssignedLeaseStore) -> None:
        """A worker that takes no more leases (leases assigned) removes its worker row, so
        that the leader assigns it none, and gives the leader row up if it holds it."""
        await store.heartbeat(self.application, self.stream, self.worker_id, leaving=True)
        if self.leading:
            self.leading = False
            await store.resign_leader(self.application, self.stream, self.worker_id)

    async def _leave(self, store: AssignedLeaseStore) -> None:
        """A stopping worker (leases assigned) releases the leases the leader assigned to it
        that it never started."""
        for shard_id in await store.owned(self.application, self.stream, self.worker_id):
            row = await store.get(self.application, self.stream, shard_id)
            if row is not None and row.owner == self.worker_id:
                with contextlib.suppress(CheckpointConflictError):
                    await store.update_lease(
                        self.application, self.stream, shard_id, expected=row, owner=None
                    )

    async def _adopt(self, row: Checkpoint) -> None:
        if self._no_takes.is_set():
            return
        shard_id = row.shard_id
        if row.checkpoint_owner is None:
            await self._take(Take(row, steal=False))
            return
        async with self._lock(shard_id):
            if self.coordinator.holds(shard_id):
                return
            now = self._clock.now()
            self._rows[shard_id] = row
            self.coordinator.acquired(shard_id, now)
            self._pending[shard_id] = (now, row.counter)
        self.recorder.lease(LeaseChange.STOLEN)
        logger.info("asked for the lease of %s from %s", shard_id, row.checkpoint_owner)

    async def _take(self, take: Take) -> bool:
        shard_id = take.row.shard_id
        async with self._lock(shard_id):
            if self.coordinator.holds(shard_id):
                return False
            asked = take
            for _ in range(3):
                sent_at = self._clock.now()
                try:
                    row = await self.store.update_lease(
                        self.application,
                        self.stream,
                        shard_id,
                        expected=take.row,
                        owner=self.worker_id,
                        # A live owner is asked to hand the lease over (it stays its reader).
                        checkpoint_owner=take.row.owner if take.steal else None,
                    )
                    break
                except CheckpointConflictError as exc:
                    retry = self.coordinator.retake(take, exc.current)
                    if retry is None:
                        self._lost_take(asked, exc.current)
                        return False
                    take = retry
                except FATAL as exc:
                    self._fail(exc)
                    return False
                except Exception as exc:
                    logger.warning("taking the lease of %s failed: %r", shard_id, exc)
                    return False
            else:
                # The owner wrote three times during three requests: look again next round.
                return False
            self._rows[shard_id] = row
            self.coordinator.acquired(shard_id, sent_at)
            if take.steal:
                self._pending[shard_id] = (sent_at, row.counter)
        self.recorder.lease(LeaseChange.STOLEN if take.steal else LeaseChange.TAKEN)
        logger.info(
            "%s the lease of %s%s",
            "asked for" if take.steal else "took",
            shard_id,
            f" from {take.row.owner}" if take.row.owner not in (None, self.worker_id) else "",
        )
        if not take.steal:
            self._emit(LeaseAcquired(shard_id))
        return True

    def _lost_take(self, take: Take, current: Checkpoint | None) -> None:
        """Another worker took the lease first, or its owner turned out alive: this worker's
        view of the table is stale, so it scans again at once rather than a take interval
        later (two workers that took the same new leases at once both reach their share in
        the next round)."""
        logger.info(
            "did not %s the lease of %s: it is now %s's%s",
            "ask for" if take.steal else "take",
            take.row.shard_id,
            None if current is None else current.owner,
            "" if current is None or current.checkpoint_owner is None else " (in a hand-off)",
        )
        self.poke()


async def _finish(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
