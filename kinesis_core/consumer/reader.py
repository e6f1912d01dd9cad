"""Reading one shard: a sans-I/O state machine and the thin asyncio loop that drives it.

:class:`ShardReaderMachine` decides what to send next (GetShardIterator, GetRecords, or wait
until a time), and takes the responses and errors in. It keeps GetRecords within 5 calls/s
per shard, backs off on throttling and transient errors, re-gets an expired iterator after
the last record it read (never skipping, never re-reading), resumes AT_SEQUENCE_NUMBER of a
checkpoint and drops the sub-records at or below it (so a resume inside a KPL aggregate
works), deaggregates with the shard's hash-range filter, and notes MillisBehindLatest.
:func:`run_shard_reader` only moves the calls and the time.
"""

from __future__ import annotations

import asyncio
import enum
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kinesis_core.aggregation import deaggregate
from kinesis_core.classify import ErrorKind
from kinesis_core.client import error_kind
from kinesis_core.consumer._gc import gc_paused
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.lineage import ShardNode, StartPoint
from kinesis_core.consumer.positions import InitialPosition, resume_params
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import KinesisRecord, Position
from kinesis_core.stream import StreamRef

MAX_GET_RECORDS_LIMIT = 10_000
MIN_CALL_INTERVAL = 0.2
"""Kinesis allows 5 GetRecords calls per second per shard."""


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """Tuning of a shard reader; the defaults follow the service limits."""

    limit: int = MAX_GET_RECORDS_LIMIT
    """Records per GetRecords call (Kinesis caps it at 10,000)."""
    min_interval: float = MIN_CALL_INTERVAL
    """Seconds between two GetRecords (and between two GetShardIterator) calls on one shard."""
    idle_interval: float = 1.0
    """Seconds to wait after an empty response from a shard that is caught up."""
    backoff_base: float = 0.2
    backoff_max: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_GET_RECORDS_LIMIT:
            raise ConfigurationError(f"limit must be in [1, 10000], got {self.limit}")
        if self.min_interval < MIN_CALL_INTERVAL:
            raise ConfigurationError(
                f"min_interval must be >= {MIN_CALL_INTERVAL} s (5 calls/s per shard), "
                f"got {self.min_interval}"
            )
        if self.idle_interval < self.min_interval:
            raise ConfigurationError(
                f"idle_interval ({self.idle_interval}) must be >= min_interval "
                f"({self.min_interval})"
            )
        if not 0 < self.backoff_base <= self.backoff_max:
            raise ConfigurationError("need 0 < backoff_base <= backoff_max")


class ReaderState(enum.Enum):
    NEEDS_ITERATOR = "needs_iterator"
    READING = "reading"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class GetIterator:
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class GetRecords:
    iterator: str
    limit: int


@dataclass(frozen=True, slots=True)
class Wait:
    until: float


@dataclass(frozen=True, slots=True)
class Ended:
    children: tuple[ShardNode, ...]
    gone: bool
    """True when the shard vanished (ResourceNotFound) rather than reaching SHARD_END."""


Action = GetIterator | GetRecords | Wait | Ended


class ShardReaderMachine:
    """The decisions of one shard's polling reader (sans-I/O: ``now`` comes in)."""

    def __init__(
        self,
        node: ShardNode,
        start: StartPoint,
        options: ReaderOptions | None = None,
        *,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.node = node
        self.shard_id = node.shard_id
        self.options = options or ReaderOptions()
        self._rng = rng
        self._start = start
        self._skip_through: Position | None = None if isinstance(start, InitialPosition) else start
        self._last_sequence: int | None = None
        self._iterator: str | None = None
        self._state = ReaderState.NEEDS_ITERATOR
        # GetShardIterator and GetRecords each have their own 5 calls/s per shard; backoff and
        # idle waits hold both.
        self._next_iterator_at = 0.0
        self._next_records_at = 0.0
        self._not_before = 0.0
        self._failures = 0
        self._children: tuple[ShardNode, ...] = ()
        self._gone = False
        self.millis_behind_latest: int | None = None
        self.last_error: ErrorKind | None = None

    @property
    def state(self) -> ReaderState:
        return self._state

    def next_action(self, now: float) -> Action:
        """What to do now. Returning a call means "send it now" (it counts against the rate)."""
        if self._state is ReaderState.ENDED:
            return Ended(self._children, self._gone)
        needs_iterator = self._state is ReaderState.NEEDS_ITERATOR
        due = max(
            self._not_before, self._next_iterator_at if needs_iterator else self._next_records_at
        )
        if now < due:
            return Wait(due)
        if needs_iterator:
            self._next_iterator_at = now + self.options.min_interval
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

    def on_iterator(self, iterator: str | None) -> None:
        """A GetShardIterator response (None: the shard has nothing more to give)."""
        self._failures = 0
        self.last_error = None
        if iterator is None:
            self._state = ReaderState.ENDED
            return
        self._iterator = iterator
        self._state = ReaderState.READING

    def on_records(
        self,
        now: float,
        response: Mapping[str, Any],
        ack: Callable[[KinesisRecord], None] | None = None,
    ) -> list[KinesisRecord]:
        """A GetRecords response: the user records to deliver, in shard order."""
        self._failures = 0
        self.last_error = None
        raw = response.get("Records") or ()
        millis = response.get("MillisBehindLatest")
        self.millis_behind_latest = millis
        records: list[KinesisRecord] = []
        if raw:
            self._last_sequence = int(raw[-1]["SequenceNumber"])
            records = deaggregate(raw, self.shard_id, self.node.hash_range, ack)
            skip = self._skip_through
            if skip is not None:
                records = [r for r in records if (r.sequence_number, r.sub_sequence_number) > skip]
                if self._last_sequence > skip[0]:
                    self._skip_through = None
        elif millis == 0:
            self._not_before = max(self._not_before, now + self.options.idle_interval)
        next_iterator = response.get("NextShardIterator")
        if next_iterator is None:
            self._state = ReaderState.ENDED
            self._iterator = None
            self._children = tuple(
                ShardNode.from_child_shard(child) for child in response.get("ChildShards") or ()
            )
        else:
            self._iterator = next_iterator
        return records

    def on_error(self, now: float, kind: ErrorKind) -> None:
        """A call failed with a non-fatal error (the driver raises the fatal ones)."""
        self.last_error = kind
        if kind is ErrorKind.EXPIRED:
            self._iterator = None
            self._state = ReaderState.NEEDS_ITERATOR
            return
        if kind is ErrorKind.NOT_FOUND:
            self._state = ReaderState.ENDED
            self._gone = True
            return
        if not handled_by_reader(kind):
            raise ValueError(f"{kind} errors are raised by the driver, not fed to the machine")
        self._failures += 1
        delay = min(self.options.backoff_max, self.options.backoff_base * 2 ** (self._failures - 1))
        self._not_before = max(self._not_before, now + delay * (0.5 + 0.5 * self._rng()))


def handled_by_reader(kind: ErrorKind | None) -> bool:
    """Whether a reader recovers from an error of this kind on its own (the rest raise)."""
    return kind is not None and (kind.retryable or kind in (ErrorKind.EXPIRED, ErrorKind.NOT_FOUND))


async def run_shard_reader(
    machine: ShardReaderMachine,
    client: Any,
    stream: str,
    frontier: ShardFrontier,
    emit: Callable[[RecordBatch], Awaitable[None]],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Ended:
    """Drive ``machine`` until its shard ends; every non-empty batch is registered in
    ``frontier`` and then handed to ``emit`` (which may block: that is the backpressure)."""
    stream_kwargs = StreamRef.of(stream).params()
    shard_id = machine.shard_id
    while True:
        action = machine.next_action(clock())
        if isinstance(action, Ended):
            return action
        if isinstance(action, Wait):
            await asyncio.sleep(max(action.until - clock(), 0.0))
            continue
        try:
            if isinstance(action, GetIterator):
                response = await client.get_shard_iterator(
                    **stream_kwargs, ShardId=shard_id, **action.params
                )
            else:
                response = await client.get_records(
                    ShardIterator=action.iterator, Limit=action.limit
                )
        except Exception as exc:
            kind = error_kind(exc)
            if kind is None or not handled_by_reader(kind):
                raise
            machine.on_error(clock(), kind)
            continue
        if isinstance(action, GetIterator):
            machine.on_iterator(response.get("ShardIterator"))
            continue
        batch = frontier.new_batch()
        with gc_paused():
            records = machine.on_records(clock(), response, batch.ack_record)
        # The raw response (one dict per record) must not stay alive while emit blocks: a
        # large live heap makes every full garbage collection slow.
        del response
        if records:
            frontier.add(batch, records, machine.millis_behind_latest)
            try:
                await emit(batch)
            except BaseException:
                # Not handed over (cancelled while the queue was full): nobody can ack it.
                frontier.discard(batch)
                raise
