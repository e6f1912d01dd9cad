"""Reading a shard by polling: GetShardIterator, then GetRecords (sans-I/O).

:class:`PollingRead` keeps GetRecords within 5 calls/s per shard (GetShardIterator has its own
5 calls/s) and within the shard's 2 MiB/s of reads: after a response of n bytes, the next
GetRecords waits until n / 2 MiB seconds after the call (a 10 MiB response, which large records
make, would otherwise have the next calls throttled for 5 s), backs off on throttling and
transient errors, re-gets an expired iterator AFTER
the last record it read (never skipping, never re-reading), resumes AT_SEQUENCE_NUMBER of a
checkpoint and lets :class:`~.transport.ShardRead` drop the sub-records at or below it, waits
``idle_interval`` after an empty response at the tip, and ends at a null NextShardIterator
with the response's ChildShards (without them, only when a listing shows the shard closed;
an answer with no ``Records``, or one that ends an open shard, is a bad answer, counted and
read again with the same iterator after a backoff: :class:`~.transport.ShardRead`). A
GetShardIterator at a sequence number that the service
refuses (ResourceNotFound, InvalidArgument), or a GetRecords whose shard is not found, goes to
the common check of :class:`~.transport.ShardRead` (a listing decides what it means).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from kinesis_core.aws.backoff import Backoff, Jitter
from kinesis_core.aws.calls import Call, Wait
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.consumer.lineage import ShardNode, StartPoint
from kinesis_core.consumer.positions import InitialPosition, resume_params
from kinesis_core.consumer.transport import (
    NOTHING,
    Ack,
    Action,
    CheckStream,
    Outcome,
    ReadEvent,
    ReadState,
    ShardRead,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import wire_records

MAX_GET_RECORDS_LIMIT = 10_000
MIN_CALL_INTERVAL = 0.2
"""Kinesis allows 5 GetRecords calls per second per shard."""
READ_BYTES_PER_SECOND = 2 * 1024 * 1024
"""Kinesis serves 2 MiB/s of GetRecords per shard (every polling reader of it together)."""


POLLING_BACKOFF = Backoff(0.2, 10.0, Jitter.EQUAL)
_data = attrgetter("data")


@dataclass(frozen=True, slots=True)
class PollingOptions:
    """Tuning of a polling reader; the defaults follow the service limits."""

    limit: int = MAX_GET_RECORDS_LIMIT
    """Records per GetRecords call (Kinesis caps it at 10,000)."""
    min_interval: float = MIN_CALL_INTERVAL
    """Seconds between two GetRecords (and between two GetShardIterator) calls on one shard."""
    idle_interval: float = 1.0
    """Seconds to wait after an empty response from a shard that is caught up."""
    max_idle_interval: float | None = None
    """With a value, the wait after each further empty response doubles, from
    ``idle_interval`` up to this many seconds, and falls back at the first record: an idle
    shard costs fewer calls, and a shard that wakes up is read up to this much later. None (the
    default): every wait is ``idle_interval``."""
    backoff: Backoff = POLLING_BACKOFF
    """After failed calls: the base doubling up to the maximum, with jitter."""
    max_bytes_per_second: float = READ_BYTES_PER_SECOND
    """Bytes of record data per second to read from the shard at most (paced after each
    response); ``math.inf`` for none."""

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_GET_RECORDS_LIMIT:
            raise ConfigurationError("limit", f"must be in [1, 10000], got {self.limit}")
        if not self.max_bytes_per_second > 0:
            raise ConfigurationError(
                "max_bytes_per_second",
                f"must be > 0, got {self.max_bytes_per_second}",
            )
        if self.min_interval < MIN_CALL_INTERVAL:
            raise ConfigurationError(
                "min_interval",
                f"must be >= {MIN_CALL_INTERVAL} s (5 calls/s per shard), got {self.min_interval}",
            )
        if self.idle_interval < self.min_interval:
            raise ConfigurationError(
                "idle_interval",
                f"({self.idle_interval}) must be >= min_interval ({self.min_interval})",
            )
        longest = self.max_idle_interval
        if longest is not None and not self.idle_interval <= longest < math.inf:
            raise ConfigurationError(
                "max_idle_interval",
                f"must be >= idle_interval ({self.idle_interval}) and finite, got {longest!r}",
            )

    def idle_wait(self, streak: int) -> float:
        """The wait after the ``streak``-th empty response in a row (1 for the first)."""
        if self.max_idle_interval is None:
            return self.idle_interval
        return min(self.idle_interval * 2.0 ** min(streak - 1, 32), self.max_idle_interval)


@dataclass(frozen=True, slots=True)
class GetIterator(Call):
    """GetShardIterator with these arguments (besides the stream and the shard id)."""

    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class GetRecords(Call):
    iterator: str
    limit: int


class PollingRead(ShardRead):
    """The decisions of one shard's polling reader."""

    transport = "polling"

    def __init__(
        self,
        node: ShardNode,
        start: StartPoint,
        options: PollingOptions | None = None,
        *,
        rng: Callable[[], float] = random.random,
        incarnation: int | None = None,
        stream: str = "",
        deaggregate: bool = True,
    ) -> None:
        self.options = options or PollingOptions()
        super().__init__(
            node,
            start,
            self.options.backoff,
            rng,
            incarnation=incarnation,
            stream=stream,
            deaggregate=deaggregate,
        )
        self._iterator: str | None = None
        # GetShardIterator and GetRecords each have their own 5 calls/s per shard; backoff and
        # idle waits hold both.
        self._next_iterator_at = 0.0
        self._next_records_at = 0.0
        self._idle_streak = 0

    def next_action(self, now: float) -> Action:
        finished = self._finished() or self._check_action(now)
        if finished is not None:
            return finished
        needs_iterator = self._state is ReadState.CONNECTING
        due = max(
            self._not_before, self._next_iterator_at if needs_iterator else self._next_records_at
        )
        if now < due:
            return Wait(due)
        if needs_iterator:
            self._next_iterator_at = now + self.options.min_interval
            self._connects += 1
            return GetIterator(self._iterator_params())
        assert self._iterator is not None
        self._next_records_at = now + self.options.min_interval
        return GetRecords(self._iterator, self.options.limit)

    def _iterator_params(self) -> dict[str, Any]:
        if self._last_sequence is not None:
            return resume_params(self._last_sequence, after=True)
        if isinstance(self._start, InitialPosition):
            return self._start.iterator_params()
        return resume_params(self._start[0], after=False)

    def on_response(self, now: float, call: Call, response: Any, ack: Ack | None = None) -> Outcome:
        if isinstance(call, GetRecords):
            return self.on_records(now, response, ack)
        if isinstance(call, CheckStream):
            return self.on_stream_view(now, response)
        return self.on_iterator(response.get("ShardIterator"))

    def on_iterator(self, iterator: str | None) -> Outcome:
        """A GetShardIterator response (None: the shard has nothing more to give, if a
        listing shows it closed)."""
        self._progress()
        if iterator is None:
            self._claim_end(None)
            return NOTHING
        self._iterator = iterator
        self._handle(ReadEvent.CONNECTED)
        return NOTHING

    def on_records(self, now: float, response: Any, ack: Ack | None = None) -> Outcome:
        """A GetRecords response: the user records to deliver, in shard order."""
        self._expect(ReadEvent.DATA)
        listed = response.get("Records") if isinstance(response, Mapping) else None
        if not isinstance(listed, (list, tuple)):
            self._handle(ReadEvent.RETRY)
            return self._bad_answer(now, f"a GetRecords answer without Records: {response!r:.200}")
        self._progress()
        raw = wire_records(listed)
        millis = response.get("MillisBehindLatest")
        self._millis_behind_latest = millis
        rate = self.options.max_bytes_per_second
        if raw and rate != math.inf:
            # The call went at _next_records_at - min_interval: the next waits until its data
            # is paid for at the shard's read rate.
            pause = sum(map(len, map(_data, raw))) / rate - self.options.min_interval
            if pause > 0:
                self._next_records_at += pause
        records = self._deliver(raw, ack)
        if not raw and millis == 0:
            self._idle_streak += 1
            wait = self.options.idle_wait(self._idle_streak)
            self._not_before = max(self._not_before, now + wait)
        else:
            self._idle_streak = 0
        next_iterator = response.get("NextShardIterator")
        if next_iterator is None:
            if raw:  # read on after them, with a new iterator, if the shard is open
                self._iterator = None
            self._claim_end(response.get("ChildShards"))
            return Outcome(records, data=True, millis_behind_latest=millis)
        self._iterator = next_iterator
        self._handle(ReadEvent.DATA)
        caught_up = millis == 0 and len(raw) < self.options.limit
        return Outcome(
            records,
            data=True,
            caught_up=caught_up,
            idle=caught_up and not raw,
            millis_behind_latest=millis,
        )

    def _resumable(self) -> bool:
        return self._iterator is not None

    def handles(self, call: Call, kind: ErrorKind | None) -> bool:
        """Also InvalidArgument for a GetShardIterator at a sequence number: AWS refuses a
        position of another incarnation of the stream that way."""
        if kind is ErrorKind.INVALID:
            return self.refused_position(call) is not None
        return super().handles(call, kind)

    def refused_position(self, call: Call) -> int | None:
        if isinstance(call, GetIterator) and "StartingSequenceNumber" in call.params:
            return int(call.params["StartingSequenceNumber"])
        return None

    def on_error(self, now: float, call: Call, kind: ErrorKind) -> Outcome:
        if kind is ErrorKind.EXPIRED:
            # A new iterator after the last record read: nothing skipped, nothing read twice.
            self._failed_call(call, kind)
            self._iterator = None
            self._handle(ReadEvent.DISCONNECTED)
            return Outcome([], error=kind)
        return super().on_error(now, call, kind)
