"""Packs Kinesis records into PutRecords requests (``max_count`` records, ``max_size`` bytes).

A request is closed when the next record would not fit, when it is full, or when its earliest
deadline passes. ``max_size`` is at most the 10 MiB PutRecords takes; a record bigger than it
goes in a request of its own (the KPL's rule), which closes at once: no record can join it.
So no request ever carries more than PutRecords takes, whatever the records' sizes.
A record that arrives with its deadline already due still waits ``linger`` seconds for company
(the KPL's ``min(50 ms, 0.2 x RecordMaxBufferedTime)``, PR #280): sealed aggregates of several
shards then share one request instead of each paying a round trip.
"""

from __future__ import annotations

from kinesis_core.producer.items import KinesisRecordOut, PutBatch


class Collector:
    """Sans-I/O batcher: ``add`` and ``poll`` return the requests that are ready."""

    def __init__(self, max_count: int, max_size: int, linger: float) -> None:
        self.max_count = max_count
        self.max_size = max_size
        self.linger = linger
        self._records: list[KinesisRecordOut] = []
        self._size = 0
        self._deadline: float | None = None

    def add(self, kr: KinesisRecordOut, now: float) -> PutBatch | None:
        """Take ``kr``; return the request it closed, if it closed one."""
        out = None
        if self._records and self._size + kr.size > self.max_size:
            out = self._take()
        self._records.append(kr)
        self._size += kr.size
        deadline = max(kr.deadline, now + self.linger)
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline
        if len(self._records) >= self.max_count or self._size >= self.max_size:
            if out is None:
                out = self._take()
            else:  # full too, but one request per call: due now, ``poll`` returns it
                self._deadline = now
        return out

    def poll(self, now: float) -> PutBatch | None:
        """The open request, if its deadline has come."""
        if self._deadline is not None and self._deadline <= now:
            return self._take()
        return None

    def flush(self) -> PutBatch | None:
        """The open request, now, whatever its deadline."""
        return self._take() if self._records else None

    def next_deadline(self) -> float | None:
        return self._deadline

    def __len__(self) -> int:
        return len(self._records)

    def _take(self) -> PutBatch:
        batch = PutBatch(self._records, self._size)
        self._records = []
        self._size = 0
        self._deadline = None
        return batch
