"""The Consumer's delivery: one bounded queue of batches between the readers and the user.

The readers put each batch here once its frontier registered it (a full queue blocks them:
the backpressure); the user's iteration takes them one record or one batch at a time. What
never reaches the user is taken out of its shard's frontier (:meth:`Delivery.drop_shard`,
:meth:`Delivery.forget_undelivered`), so a checkpoint never passes a record nobody saw. The
end of the queue is a ``None``; behind it, the error that stopped the consumer, if any.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.lifecycle import Lifecycle, State
from kinesis_core.records import KinesisRecord
from kinesis_core.serde import RecordDeserializer
from kinesis_core.telemetry.recorder import ConsumerRecorder


class Delivery:
    """The queue of batches and the position of the user's iteration in the current one."""

    def __init__(
        self,
        max_batches: int,
        *,
        auto_ack: bool,
        deserializer: RecordDeserializer | None,
        recorder: ConsumerRecorder,
        life: Lifecycle,
    ) -> None:
        self.queue: asyncio.Queue[RecordBatch | None] = asyncio.Queue(max_batches)
        self.failure: BaseException | None = None
        """The error that stopped the consumer; raised once the queue is consumed."""
        self._auto_ack = auto_ack
        self._deserializer = deserializer
        self._recorder = recorder
        self._life = life
        self._current: RecordBatch | None = None
        self._delivered = 0
        self._handed_at: float | None = None

    async def put(self, batch: RecordBatch) -> None:
        """A reader's batch (its frontier knows it): waits while the queue is full."""
        await self.queue.put(batch)

    def measured(self, count: Callable[[int], None]) -> Callable[[RecordBatch], Awaitable[None]]:
        """:meth:`put`, telling ``count`` the bytes of each batch (throughput assignment)."""

        async def put(batch: RecordBatch) -> None:
            count(sum(len(record.data) for record in batch))
            await self.queue.put(batch)

        return put

    def next_in_batch(self) -> KinesisRecord | None:
        """The next record of the batch being iterated, None once it has none left (no await:
        the per-record path). With ``auto_ack`` the one before is acked now."""
        batch = self._current
        if batch is None:
            return None
        i = self._delivered
        if self._auto_ack and i:
            batch.records[i - 1].ack()
        if i < len(batch):
            self._delivered = i + 1
            return batch.records[i]
        self._current = None
        return None

    async def next_record(self) -> KinesisRecord | None:
        """The next record (None: the consumer stopped). With ``auto_ack`` the one before is
        acked now."""
        record = self.next_in_batch()
        if record is not None:
            return record
        batch = await self.next_batch()
        if batch is None:
            return None
        self._current = batch
        self._delivered = 1
        return batch.records[0]

    async def next_batch(self) -> RecordBatch | None:
        """The next batch, decoded by the deserializer (None: the consumer stopped; its error
        raises here)."""
        if self._life.state in (State.NEW, State.STARTING):
            self._life.require("read records")
        if self._recorder.enabled and self._handed_at is not None:
            self._recorder.processed(time.perf_counter() - self._handed_at)
        batch = await self.queue.get()
        if batch is None:
            self.queue.put_nowait(None)
            if self.failure is not None:
                raise self.failure
            return None
        if self._deserializer is not None:
            await self._deserializer.deserialize(batch)
        if self._recorder.enabled:
            self._recorder.delivered(batch.shard_id, batch.records[: len(batch)], time.time())
            self._handed_at = time.perf_counter()
        return batch

    def drop_shard(self, shard_id: str, frontier: ShardFrontier) -> None:
        """None of the shard's records reaches the user any more: its queued batches and the
        rest of the batch being iterated leave its frontier."""
        kept = []
        while not self.queue.empty():
            batch = self.queue.get_nowait()
            if batch is not None and batch.shard_id == shard_id:
                frontier.discard(batch)
            else:
                kept.append(batch)
        for batch in kept:
            self.queue.put_nowait(batch)
        current = self._current
        if current is not None and current.shard_id == shard_id:
            frontier.truncate(current, self._delivered)

    def forget_undelivered(self, frontiers: Mapping[str, ShardFrontier]) -> None:
        """The end: batches still queued never reached the user, so their frontiers stop
        before them, and so for the unread tail of the batch being iterated (a shard no longer
        in ``frontiers`` was cut when it was revoked)."""
        while not self.queue.empty():
            batch = self.queue.get_nowait()
            if batch is not None:
                frontiers[batch.shard_id].discard(batch)
        current = self._current
        if current is not None and current.shard_id in frontiers:
            frontiers[current.shard_id].truncate(current, self._delivered)
        self.queue.put_nowait(None)
