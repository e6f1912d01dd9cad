"""The asyncio side of leases: the renewer, the taker, and the one door to a held lease's row.

:class:`LeaseManager` moves rows between the store and the sans-I/O
:class:`~kinesis_core.lease.coordinator.LeaseCoordinator`. Every write to a held lease (renewal,
checkpoint, release) goes through it, one at a time per lease, conditional on the counter it
last wrote: a write that loses its condition means another worker holds the lease now, so the
lease is dropped at once and ``on_lost`` tells the consumer to stop the shard. A lease whose
renewals keep failing (no answer from the store) is dropped the same way once the failover time
has passed since its last successful write, since other workers may take it from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Collection, Sequence

from kinesis_core.checkpoint.base import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointValue,
    LeaseStore,
    checkpoint_order,
    same_incarnation,
)
from kinesis_core.consumer.checkpointer import landed
from kinesis_core.lease.coordinator import LeaseConfig, LeaseCoordinator, Take
from kinesis_core.telemetry.names import LeaseChange
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

logger = logging.getLogger(__name__)


class LeaseManager:
    """Leases of one worker on one (application, stream).

    ``eligible()`` names the shards that may be leased now; ``on_acquired(shard_id)`` and
    ``on_lost(shard_id)`` are called (synchronously) when a lease is taken or lost;
    ``on_scan(rows)`` sees every table scan.
    """

    def __init__(
        self,
        store: LeaseStore,
        application: str,
        stream: str,
        config: LeaseConfig,
        *,
        eligible: Callable[[], Collection[str]],
        on_acquired: Callable[[str], None],
        on_lost: Callable[[str], None],
        on_scan: Callable[[list[Checkpoint]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        recorder: ConsumerRecorder = NO_RECORDER,
    ) -> None:
        self.store = store
        self.application = application
        self.stream = stream
        self.config = config
        self.coordinator = LeaseCoordinator(config, rng=rng)
        self._eligible = eligible
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._on_scan = on_scan
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

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    def _lock(self, shard_id: str) -> asyncio.Lock:
        return self._locks.setdefault(shard_id, asyncio.Lock())

    def held(self) -> dict[str, CheckpointValue]:
        """The leases this worker holds, with their stored checkpoints."""
        return {s: self._rows[s].value for s in self.coordinator.held}

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
        keeps them while it waits for its last acks)."""
        self._no_takes.set()
        self._poke.set()
        await _finish(self._taker)

    async def close(self) -> None:
        """Stop taking and renewing, then release every held lease: a graceful hand-off
        (checkpoint first, then call this) lets other workers take them at once."""
        await self.stop_taking()
        self._no_renewals.set()
        await _finish(self._renewer)
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(self.release(s) for s in self.coordinator.held))

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
        self._known.add(shard_id)
        logger.info("created the lease of %s at %s", shard_id, value)
        return True

    async def write(
        self,
        shard_id: str,
        value: CheckpointValue,
        parents: Sequence[str] = (),
        children: Sequence[str] = (),
    ) -> bool:
        """Checkpoint a held lease; False (nothing written) if this worker does not hold it.

        ``children`` (at SHARD_END) go to ``childShardIds``."""
        async with self._lock(shard_id):
            if not self.coordinator.holds(shard_id):
                return False
            current = self._rows[shard_id]
            created = self.stream_created_ms
            if same_incarnation(current, created) and (
                current.value == value or checkpoint_order(value) < checkpoint_order(current.value)
            ):
                return True
            sent_at = self._clock()

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
                    ),
                    keep,
                )
            except CheckpointConflictError as exc:
                self._lose(shard_id, f"checkpoint refused: {exc}")
                return False
            self.recorder.checkpoint(shard_id)
            return True

    async def release(self, shard_id: str) -> None:
        """Give a held lease up (owner removed, counter bumped): others may take it at once."""
        async with self._lock(shard_id):
            if not self.coordinator.holds(shard_id):
                return
            self.coordinator.dropped(shard_id)
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

    def release_soon(self, shard_id: str) -> None:
        """:meth:`release` in the background (for synchronous callers)."""
        task = asyncio.create_task(self.release(shard_id), name=f"kinesis-release-{shard_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _lose(self, shard_id: str, reason: str) -> None:
        self.coordinator.dropped(shard_id)
        logger.warning("lost the lease of %s: %s", shard_id, reason)
        self.recorder.lease(LeaseChange.LOST)
        self._on_lost(shard_id)

    # -- renewer ------------------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        """Every ``renew_interval``: drop the leases not renewed within the failover time,
        then start a renewal of each held lease that has none in flight. A slow renewal holds
        up neither the others nor the expiry check, and is never cut off: a write cancelled
        in flight may still land, leaving the lease's counter unknown to us."""
        every = self.config.renew_every
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._no_renewals.wait(), every)
            if self._no_renewals.is_set():
                break
            for shard_id in self.coordinator.expired_held(self._clock()):
                logger.warning(
                    "lost the lease of %s: not renewed within the failover time", shard_id
                )
                self.recorder.lease(LeaseChange.LOST)
                self._on_lost(shard_id)
            for shard_id in self.coordinator.held:
                if shard_id not in self._renewing:
                    self._renewing[shard_id] = asyncio.create_task(self._renew(shard_id))
        await asyncio.gather(*self._renewing.values(), return_exceptions=True)

    async def _renew(self, shard_id: str) -> None:
        try:
            await self._renew_once(shard_id)
        except Exception as exc:
            logger.warning("renewing the lease of %s failed (%r); trying again", shard_id, exc)
        finally:
            del self._renewing[shard_id]

    async def _renew_once(self, shard_id: str) -> None:
        async with self._lock(shard_id):
            if not self.coordinator.holds(shard_id):
                return
            sent_at = self._clock()
            try:
                row = await self.store.update_lease(
                    self.application,
                    self.stream,
                    shard_id,
                    expected=self._rows[shard_id],
                    owner=self.worker_id,
                )
            except CheckpointConflictError as exc:
                self._lose(shard_id, f"renewal refused: {exc}")
                return
            self._rows[shard_id] = row
            self.coordinator.renewed(shard_id, sent_at)

    # -- taker --------------------------------------------------------------------------------

    async def _take_loop(self) -> None:
        while not self._no_takes.is_set():
            try:
                await self.take_round()
            except Exception:
                logger.warning("scanning the lease table failed; retrying", exc_info=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.config.take_every)
            self._poke.clear()

    async def take_round(self) -> list[str]:
        """Scan the table, take what the coordinator says; return the shards taken."""
        rows = await self.store.list(self.application, self.stream)
        now = self._clock()
        self.coordinator.scan(now, rows)
        self._known = {row.shard_id for row in rows}
        if self._on_scan is not None:
            self._on_scan(rows)
        if self._no_takes.is_set():
            return []
        takes = self.coordinator.plan(now, self._eligible())
        taken = await asyncio.gather(*(self._take(take) for take in takes))
        return [take.row.shard_id for take, ok in zip(takes, taken, strict=True) if ok]

    async def _take(self, take: Take) -> bool:
        shard_id = take.row.shard_id
        async with self._lock(shard_id):
            if self.coordinator.holds(shard_id):
                return False
            sent_at = self._clock()
            try:
                row = await self.store.update_lease(
                    self.application,
                    self.stream,
                    shard_id,
                    expected=take.row,
                    owner=self.worker_id,
                )
            except CheckpointConflictError:
                logger.debug("another worker took %s first", shard_id)
                return False
            except Exception as exc:
                logger.warning("taking the lease of %s failed: %r", shard_id, exc)
                return False
            self._rows[shard_id] = row
            self.coordinator.acquired(shard_id, sent_at)
        self.recorder.lease(LeaseChange.STOLEN if take.steal else LeaseChange.TAKEN)
        logger.info(
            "%s the lease of %s%s",
            "stole" if take.steal else "took",
            shard_id,
            f" from {take.row.owner}" if take.row.owner else "",
        )
        self._on_acquired(shard_id)
        return True


async def _finish(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
