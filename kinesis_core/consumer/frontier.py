"""The ack frontier of one shard: how far its checkpoint may move.

Records are registered a whole GetRecords batch at a time, in shard order; acks arrive in any
order. The checkpoint is the position of the last record of the contiguous acked prefix, so
it is never ahead of an unacked record. Per record, an in-order ack costs one identity check
and an increment; only an out-of-order ack pays for a bisect and a lazily made bitmap.
Sans-I/O: no clock, no awaits.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator

from kinesis_core.checkpoint.base import SHARD_END, CheckpointValue
from kinesis_core.records import KinesisRecord, Position


def _position(record: KinesisRecord) -> Position:
    return record.position


class RecordBatch:
    """One GetRecords response after deaggregation: what ``Consumer.batches()`` yields.

    ``ack()`` acks every record of the batch at once; ``record.ack()`` acks one.
    """

    __slots__ = (
        "__weakref__",
        "_acked",
        "_frontier",
        "_n",
        "_prefix",
        "millis_behind_latest",
        "record_ack",
        "records",
        "shard_id",
    )

    def __init__(self, shard_id: str, frontier: ShardFrontier | None = None) -> None:
        self.shard_id = shard_id
        self._frontier = frontier
        self.record_ack = RecordAck(self)
        """The ``ack`` callback to give the batch's records (:class:`RecordAck`)."""
        self.records: list[KinesisRecord] = []
        self.millis_behind_latest: int | None = None
        self._n = 0
        self._prefix = 0
        self._acked: bytearray | None = None

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[KinesisRecord]:
        return iter(self.records[: self._n])

    def __repr__(self) -> str:
        return f"RecordBatch(shard_id={self.shard_id!r}, records={self._n}, acked={self.acked})"

    @property
    def acked(self) -> bool:
        """True once every record of the batch is acked."""
        return self._prefix >= self._n

    @property
    def unacked(self) -> int:
        extra = 0 if self._acked is None else sum(self._acked[self._prefix : self._n])
        return max(self._n - self._prefix - extra, 0)

    def ack(self) -> None:
        """Ack every record of the batch."""
        self._prefix = self._n
        self._completed()

    def ack_record(self, record: KinesisRecord) -> None:
        """Ack one record of this batch (what its records' ``ack`` does).

        Acking twice, or a record of another batch, changes nothing.
        """
        p = self._prefix
        n = self._n
        if p < n and self.records[p] is record:
            p += 1
            acked = self._acked
            if acked is not None:
                while p < n and acked[p]:
                    p += 1
            self._prefix = p
            if p == n:
                self._completed()
            return
        i = bisect_left(self.records, _position(record), 0, n, key=_position)
        if i >= n or i < p or self.records[i] is not record:
            return
        if self._acked is None:
            self._acked = bytearray(len(self.records))
        self._acked[i] = 1

    def _completed(self) -> None:
        """Let the frontier drop fully acked batches now, not at the next checkpoint write:
        between two writes a busy shard reads hundreds of thousands of records."""
        if self._frontier is not None:
            self._frontier._release()

    def _fill(self, records: list[KinesisRecord], millis_behind_latest: int | None) -> None:
        self.records = records
        self.millis_behind_latest = millis_behind_latest
        self._n = len(records)


class RecordAck:
    """A batch's ack callback for its records, holding the batch weakly.

    A record that held its batch strongly would close a reference cycle (the batch holds its
    records): every batch read would then be freed only by the cyclic garbage collector, whose
    collections would keep walking tens of thousands of dead records. Held weakly, a consumed
    batch is freed as soon as nothing refers to it. A record whose batch is gone acks nothing:
    its batch left the frontier fully acked, or was never delivered.
    """

    __slots__ = ("_batch",)

    def __init__(self, batch: RecordBatch) -> None:
        self._batch = weakref.ref(batch)

    def __call__(self, record: KinesisRecord) -> None:
        batch = self._batch()
        if batch is not None:
            batch.ack_record(record)


class ShardFrontier:
    """The registered-but-not-checkpointed batches of one shard, oldest first.

    ``start`` is the value the shard was started from (a stored checkpoint or an initial
    sentinel); :attr:`checkpoint` never moves below it. Once records were taken out undelivered
    (:meth:`truncate`, :meth:`discard`), it never becomes SHARD_END: they are still to be read.
    """

    def __init__(self, shard_id: str, start: CheckpointValue | None = None) -> None:
        self.shard_id = shard_id
        self._base = start
        self._batches: deque[RecordBatch] = deque()
        self._last: Position | None = None
        self._ended = False
        self._cut = False
        self._on_drained: Callable[[], None] | None = None

    def when_drained(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) as soon as every registered record is acked: now, if it
        is already. Acks are events: nothing polls for this."""
        self._on_drained = callback
        self._release()

    def new_batch(self) -> RecordBatch:
        """An empty batch; its ``record_ack`` is the ack callback for the records to come."""
        return RecordBatch(self.shard_id, self)

    def add(
        self, batch: RecordBatch, records: list[KinesisRecord], millis_behind_latest: int | None
    ) -> None:
        """Register the records of ``batch`` (delivery order, ascending positions)."""
        if self._ended:
            raise RuntimeError(f"shard {self.shard_id} has ended; no more records")
        if not records:
            return
        first = _position(records[0])
        if self._last is not None and first <= self._last:
            raise ValueError(
                f"shard {self.shard_id}: batch starts at {first}, not after {self._last}"
            )
        batch._fill(records, millis_behind_latest)
        self._batches.append(batch)
        self._last = _position(records[-1])

    def end(self) -> None:
        """The shard was read to its end: once everything is acked, the checkpoint is SHARD_END."""
        self._ended = True

    def discard(self, batch: RecordBatch) -> None:
        """Forget a batch that was never delivered (it cannot be acked)."""
        self.truncate(batch, 0)

    def truncate(self, batch: RecordBatch, delivered: int) -> None:
        """Keep only the first ``delivered`` records of a batch: the rest never reached the user."""
        if delivered < batch._n:
            self._cut = True
        batch._n = min(batch._n, delivered)
        if batch._prefix > batch._n:
            batch._prefix = batch._n
        self._release()

    def _release(self) -> None:
        """Drop the fully acked batches at the head; the checkpoint moves to their end."""
        batches = self._batches
        while batches and batches[0]._prefix >= batches[0]._n:
            done = batches.popleft()
            if done._n:
                self._base = _position(done.records[done._n - 1])
        if self._on_drained is not None and self.drained:
            callback, self._on_drained = self._on_drained, None
            callback()

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def cut(self) -> bool:
        """Records were taken out undelivered: the shard is not finished here."""
        return self._cut

    @property
    def last_position(self) -> Position | None:
        """The position of the newest registered record."""
        return self._last

    @property
    def checkpoint(self) -> CheckpointValue | None:
        """The last position of the contiguous acked prefix (SHARD_END once all of an ended
        shard is delivered and acked; the start value while nothing new is acked)."""
        self._release()
        batches = self._batches
        if batches:
            head = batches[0]
            p = head._prefix
            return _position(head.records[p - 1]) if p else self._base
        return SHARD_END if self._ended and not self._cut else self._base

    @property
    def pending(self) -> int:
        """How many registered records are not acked yet."""
        return sum(batch.unacked for batch in self._batches)

    @property
    def drained(self) -> bool:
        """True when every registered record is acked."""
        return all(batch.acked for batch in self._batches)
