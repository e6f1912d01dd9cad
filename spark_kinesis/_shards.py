"""Reading shards for the source, on the core's polling reader: the driver's probes and look
ahead that fix each batch's end (:class:`Fetcher`) and a task's read of one shard between two
marks (:func:`read_slice`).

All step one of the core's sans-I/O readers through a
:class:`~kinesis_core.consumer.reading.SyncShardReader` on the core's synchronous executor: the
driver :class:`~kinesis_core.consumer.polling.PollingRead`, a task the same or, when the spec
names a stream consumer, :class:`~kinesis_core.consumer.subscription.SubscriptionRead`. So
deaggregation with the shard's hash-range filter, resumes inside an aggregate, expired
iterators, throttling, the per-shard pacing (5 GetRecords calls/s, 2 MiB/s) and the renewal of
subscriptions are the core's.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from kinesis_core.aws import fastparse
from kinesis_core.aws.calls import Call, DescribeStreamSummary, ListShards, Wait
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.executor import LISTING_MAX_AGE, LISTING_RETRY, SyncExecutor
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.consumer.lineage import ShardNode, StartPoint
from kinesis_core.consumer.links import LoopFanOut, sync_link
from kinesis_core.consumer.polling import PollingOptions, PollingRead
from kinesis_core.consumer.positions import AtTimestamp
from kinesis_core.consumer.reading import SyncShardReader
from kinesis_core.consumer.subscription import SubscriptionRead
from kinesis_core.consumer.transport import Ended, Failed
from kinesis_core.errors import KinesisConnectorError
from kinesis_core.fanout.consumers import open_fan_out_on_loop
from kinesis_core.records import KinesisRecord, Position
from kinesis_core.runtime.loop_thread import LoopThread
from spark_kinesis.offsets import BEFORE, WHOLE, parse_mark, position_mark
from spark_kinesis.options import SourceSpec

KEEP_SECONDS = 60.0
"""Seconds a task's reader waits, past its slice's end, for the shard's next slice in the
same Python worker."""


class _Kept(NamedTuple):
    """A task's reader left for the shard's next slice."""

    mark: str
    """Where it stopped: the end mark of its slice."""
    reader: SyncShardReader
    rest: list[KinesisRecord]
    """The records it read past ``mark``."""
    at: float
    """When it was left (monotonic seconds)."""


class Shards:
    """A client, the core's synchronous executor on it, and readers of the spec's stream."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        # The readers retry on their own terms (rate, backoff, expired iterators).
        self.client: Any = create_botocore_client(spec.client_config, "kinesis", max_attempts=1)
        fastparse.install(self.client, wire=True)
        efo = spec.fan_out
        self.executor = SyncExecutor(
            self.client,
            listing_max_age=LISTING_MAX_AGE if efo is None else efo.closed_check_interval / 2,
        )
        self.options = PollingOptions(
            limit=spec.max_records_per_call, idle_interval=spec.idle_interval
        )
        self._fan_out: LoopFanOut | None = None
        self._close_fan_out: Callable[[], None] = lambda: None
        self._wake = threading.Event()
        self._kept: dict[str, _Kept] = {}

    def created_ms(self) -> int:
        """The stream's creation time (its incarnation)."""
        response = self.executor.execute(DescribeStreamSummary(self.spec.stream), LISTING_RETRY)
        return StreamFacts.from_response(response).created_ms

    def nodes(self) -> list[ShardNode]:
        """ListShards, every page."""
        shards = self.executor.execute(ListShards(self.spec.stream, None), LISTING_RETRY)
        return [ShardNode.from_shard_info(info) for info in shards]

    def reader(
        self,
        node: ShardNode,
        start: StartPoint,
        created_ms: int | None,
        *,
        deaggregate: bool = True,
        options: PollingOptions | None = None,
        ahead: Executor | None = None,
    ) -> SyncShardReader:
        machine = PollingRead(
            node,
            start,
            options or self.options,
            incarnation=created_ms,
            stream=self.spec.stream.name,
            deaggregate=deaggregate,
        )
        link = sync_link(self.executor, self.spec.stream, node.shard_id)
        return SyncShardReader(machine, link, where=self.spec.stream.name, ahead=ahead)

    def task_reader(
        self, node: ShardNode, start: StartPoint, created_ms: int | None
    ) -> SyncShardReader:
        """A task's reader of ``node`` from ``start``: through the spec's stream consumer
        (registered, or found, when the first task of this process needs it), else GetRecords;
        deaggregating as the spec says."""
        spec = self.spec
        efo = spec.fan_out
        if efo is None:
            return self.reader(node, start, created_ms, deaggregate=spec.deaggregate)
        if self._fan_out is None:
            self._fan_out, self._close_fan_out = open_fan_out_on_loop(
                LoopThread.get(), spec.client_config, spec.stream, efo
            )
        options = efo.subscription
        machine = SubscriptionRead(
            node,
            start,
            options,
            incarnation=created_ms,
            stream=spec.stream.name,
            deaggregate=spec.deaggregate,
        )
        link = sync_link(self.executor, spec.stream, node.shard_id, self._fan_out, wake=self._wake)
        return SyncShardReader(
            machine, link, pending_interval=options.pending_interval, where=spec.stream.name
        )

    def keep(
        self, shard_id: str, mark: str, reader: SyncShardReader, rest: list[KinesisRecord]
    ) -> None:
        """Keep ``reader``, which stopped at ``mark`` having read ``rest`` past it, for the
        shard's next slice from ``mark``; readers not taken within :data:`KEEP_SECONDS` close."""
        now = time.monotonic()
        for stale in [s for s, kept in self._kept.items() if now - kept.at > KEEP_SECONDS]:
            self._kept.pop(stale).reader.close()
        previous = self._kept.pop(shard_id, None)
        if previous is not None:
            previous.reader.close()
        self._kept[shard_id] = _Kept(mark, reader, rest, now)

    def take_kept(
        self, shard_id: str, mark: str
    ) -> tuple[SyncShardReader, list[KinesisRecord]] | None:
        """The kept reader of ``shard_id`` and what it read past ``mark``, if it stopped
        there; a reader kept at another mark (a batch read again) closes."""
        kept = self._kept.pop(shard_id, None)
        if kept is None:
            return None
        if kept.mark != mark:
            kept.reader.close()
            return None
        return kept.reader, kept.rest

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a subscription receives an event."""
        self._wake.wait(max(seconds, 0.0))
        self._wake.clear()

    def close(self) -> None:
        for kept in self._kept.values():
            kept.reader.close()
        self._kept.clear()
        try:
            self._close_fan_out()
        finally:
            self.client.close()


@dataclass
class _Peek:
    """The driver's reader of one shard: the sequence numbers of the Kinesis records it read
    past the last offered end."""

    reader: SyncShardReader
    after: str
    """The mark the buffered positions follow (the end last offered for this shard)."""
    positions: deque[int] = field(default_factory=deque)
    ended: Ended | None = None
    caught_up: bool = False
    """The last answer reached the shard's tip."""
    done: bool = False
    """Nothing more to read in this look: caught up, ended or full."""
    past: bool = False
    """Read up to :attr:`Fetcher.until` (a Trigger.AvailableNow query): nothing more to read
    in this query."""


def _sequence(record: KinesisRecord) -> int:
    return record.position[0]


def _before(until: float, record: KinesisRecord) -> bool:
    arrival = record.approximate_arrival_seconds
    return arrival is None or arrival <= until


def _driver_start(mark: str) -> StartPoint:
    """Where the driver reads a shard from after ``mark`` (:func:`_driver_start_point`)."""
    start = parse_mark(mark)
    assert start is not None  # the caller leaves out the shards at SHARD_END
    return _driver_start_point(start)


def _driver_start_point(start: StartPoint) -> StartPoint:
    """A mark inside a Kinesis record (a user record's) from that record on, so that the rest
    of an aggregate gets an end; others as they are."""
    if isinstance(start, tuple) and start[1] != WHOLE:
        return (start[0], BEFORE)
    return start


LOOK_THREADS = 8
"""Threads that send the driver's GetRecords calls of a look, a shard's each."""


PROBE_WINDOW = 0.1
"""Seconds back from now in which a probe looks for a shard's first record: the records that
arrived in them wait for the next batch."""
BACKLOG_SECONDS = 60.0
"""Seconds of a shard's arrivals a batch that a backlog probe ends holds at most (a shard
takes at most 1 MiB/s of writes: 60 MiB)."""
PROBE_INTERVAL = 0.25
"""Seconds between two probes of a shard (a GetShardIterator each: 5 per second per shard);
after a probe that found nothing, the spec's idle interval."""


def _past(sequence: int, start: StartPoint) -> bool:
    """Whether an end before the Kinesis record ``sequence`` is past ``start``."""
    return not isinstance(start, tuple) or (sequence, BEFORE) > start


class Fetcher:
    """The driver's ends of batches, which :func:`read_slice` reaches exactly: before a record
    a probe found near a shard's tip (:meth:`probe`), or after the Kinesis records of a look
    ahead (:meth:`look`, :meth:`take`), which reads each shard from where the last batch ends
    without deaggregating and keeps only their sequence numbers."""

    def __init__(self, shards: Shards, created_ms: int) -> None:
        self.shards = shards
        self.created_ms = created_ms
        self._peeks: dict[str, _Peek] = {}
        self._next_probe: dict[str, float] = {}
        # Two: a start through a whole Kinesis record reads that record again first.
        self._probing = PollingOptions(limit=2, idle_interval=shards.options.idle_interval)
        self._ahead = ThreadPoolExecutor(LOOK_THREADS, thread_name_prefix="kinesis-look")
        self.until: float | None = None
        """Set (epoch seconds) for a Trigger.AvailableNow query: the looks take the records
        that arrived until then, with no time limit, and nothing after."""

    def look(
        self, marks: dict[str, str], nodes: dict[str, ShardNode], cap: int | None
    ) -> dict[str, _Peek]:
        """Read the shards of ``marks`` (not at SHARD_END) for at most the spec's
        ``max_fetch_seconds``, until each is caught up, ended, or has ``cap`` records (with
        :attr:`until`: no time limit, and a shard is finished at its first record that arrived
        later, or once it is caught up)."""
        for shard_id in [s for s in self._peeks if s not in marks]:
            self._peeks.pop(shard_id).reader.close()
        for shard_id, mark in marks.items():
            peek = self._peeks.get(shard_id)
            if peek is not None and peek.after == mark:
                peek.done = peek.ended is not None or peek.past
                continue
            if peek is not None:
                peek.reader.close()
            start = _driver_start(mark)
            reader = self.shards.reader(
                nodes[shard_id], start, self.created_ms, deaggregate=False, ahead=self._ahead
            )
            self._peeks[shard_id] = _Peek(reader, mark)
        until = self.until
        limit = self.shards.spec.max_fetch_seconds if until is None else math.inf
        deadline = time.monotonic() + limit
        called = False
        while True:
            now = time.monotonic()
            next_due = float("inf")
            round_called = False
            for peek in self._peeks.values():
                if not peek.done and (cap is None or len(peek.positions) < cap):
                    peek.reader.read_ahead(now)  # the shards' calls go out together
            for peek in self._peeks.values():
                if peek.done:
                    continue
                if cap is not None and len(peek.positions) >= cap:
                    peek.done = True
                    continue
                action = peek.reader.next_action(now)
                if isinstance(action, Wait) and peek.caught_up:
                    peek.done = True  # at the tip, and not due: nothing to wait for now
                elif isinstance(action, Wait):
                    next_due = min(next_due, action.until)
                elif isinstance(action, Ended):
                    peek.ended, peek.done = action, True
                elif isinstance(action, Failed):
                    raise peek.reader.failure(action)
                else:
                    round_called = True
                    outcome = peek.reader.step(action)
                    records = outcome.records
                    if until is not None:
                        records = list(itertools.takewhile(partial(_before, until), records))
                        peek.past = len(records) < len(outcome.records)
                    peek.positions.extend(map(_sequence, records))
                    if outcome.data:
                        peek.caught_up = outcome.caught_up
                    if outcome.data and outcome.caught_up:
                        peek.done = True
                        peek.past = peek.past or until is not None
                    peek.done = peek.done or peek.past
                    now = time.monotonic()
            called = called or round_called
            if all(p.done for p in self._peeks.values()) or now >= deadline:
                break
            if round_called:
                continue
            if next_due >= deadline:
                break  # nothing more is due in this look
            time.sleep(next_due - now)
        if not called:
            # Spark asks again within milliseconds when nothing is new: not a busy loop.
            time.sleep(0.05)
        return self._peeks

    def take(self, shard_id: str, count: int) -> str:
        """The end mark after the next ``count`` Kinesis records of ``shard_id`` (SHARD_END
        once an ended shard has none left), now the mark its next look follows."""
        peek = self._peeks[shard_id]
        positions = peek.positions
        if count:
            for _ in range(count - 1):
                positions.popleft()
            peek.after = position_mark((positions.popleft(), WHOLE))
        if not positions and peek.ended is not None:
            peek.after = "SHARD_END"
        return peek.after

    def probe(self, marks: dict[str, str], nodes: dict[str, ShardNode]) -> dict[str, str]:
        """Ends that cost no look, ``before:R`` for a Kinesis record R past the mark: for each
        shard of ``marks`` not probed in the last :data:`PROBE_INTERVAL` seconds, the first
        record that arrived in the last :data:`PROBE_WINDOW` seconds; failing that, for a
        shard with a backlog (no look of it caught up at this mark), the first record that
        arrived :data:`PROBE_WINDOW` seconds before the tip (:meth:`_backlog_time`), at most
        :data:`BACKLOG_SECONDS` after the mark's first record. Each is a shard iterator and
        one GetRecords of Limit 2. Every record before R is in the shard already
        (a shard's sequence numbers grow with time), so the end names the same records on
        every read."""
        ends: dict[str, str] = {}
        now = time.monotonic()
        recent = AtTimestamp(time.time() - PROBE_WINDOW)
        for shard_id, mark in marks.items():
            if now < self._next_probe.get(shard_id, 0.0):
                continue
            start = parse_mark(mark)
            assert start is not None  # the caller leaves out the shards at SHARD_END
            first = self._first(nodes[shard_id], recent)
            if first is None or not _past(first[0], start):
                peek = self._peeks.get(shard_id)
                caught_up = peek is not None and peek.after == mark and peek.caught_up
                at = None if caught_up else self._backlog_time(nodes[shard_id], start)
                first = None if at is None else self._first(nodes[shard_id], AtTimestamp(at))
            if first is not None and _past(first[0], start):
                ends[shard_id] = position_mark((first[0], BEFORE))
            wait = PROBE_INTERVAL if shard_id in ends else self.shards.options.idle_interval
            self._next_probe[shard_id] = now + wait
        return ends

    def _first(self, node: ShardNode, start: StartPoint) -> tuple[int, float | None, int] | None:
        """The first Kinesis record from ``start`` (one GetRecords of Limit 2): its sequence
        number, arrival (epoch seconds) and the answer's MillisBehindLatest; None when the
        answer has none or a call failed."""
        reader = self.shards.reader(
            node, start, self.created_ms, deaggregate=False, options=self._probing
        )
        try:
            for _ in range(2):
                action = reader.next_action(time.monotonic())
                if not isinstance(action, Call):
                    return None
                outcome = reader.step(action)
                if outcome.error is not None:
                    return None
                if outcome.records:
                    record = outcome.records[0]
                    behind = outcome.millis_behind_latest or 0
                    return record.position[0], record.approximate_arrival_seconds, behind
            return None
        finally:
            reader.close()

    def _backlog_time(self, node: ShardNode, start: StartPoint) -> float | None:
        """When the shard's records that arrived :data:`PROBE_WINDOW` seconds before its tip
        begin, as its first record after ``start`` tells (its arrival plus the answer's
        MillisBehindLatest), at most :data:`BACKLOG_SECONDS` after that record; None when
        the shard has no record after ``start``, or less than a second of them."""
        after = _driver_start_point(start)
        first = self._first(node, after)
        if first is None:
            return None
        _, arrival, behind = first
        if arrival is None or behind < 1000:
            return None
        return arrival + min(behind / 1000 - PROBE_WINDOW, BACKLOG_SECONDS)

    def close(self) -> None:
        for peek in self._peeks.values():
            peek.reader.close()
        self._peeks.clear()
        self._ahead.shutdown(wait=False, cancel_futures=True)


IDLE_READS_BEFORE_FAILING = 3
"""Empty reads at a shard's tip before a task gives up on reaching its batch's end (the driver
saw records there, so they were trimmed or the stream is not the one they were read from)."""


class SliceError(KinesisConnectorError):
    """A task could not read its shard through the end the driver fixed."""


def _reached(stop: Position, last: int | None, records: list[KinesisRecord]) -> bool:
    """Whether a reader whose last Kinesis record read is ``last``, having just delivered
    ``records``, has delivered every record through ``stop``."""
    if last is None or last < stop[0]:
        return False
    if last > stop[0] or stop[1] in (WHOLE, BEFORE):
        return True
    return bool(records) and records[-1].position >= stop


def read_slice(
    shards: Shards,
    node: ShardNode,
    start: str,
    end: str | None,
    created_ms: int | None,
) -> Iterator[list[KinesisRecord]]:
    """The records of ``node``'s shard after the ``start`` mark through the ``end`` mark
    (SHARD_END: to the shard's end; None: until caught up, for a batch read), response by
    response. A streaming slice read by GetRecords that ends at a mark leaves its reader with
    ``shards`` (:meth:`Shards.keep`), so the shard's next slice from that mark in this process
    reads on from it with no new shard iterator. A subscription is closed at the slice's end: a
    shard has one subscription per consumer at a time, and the next slice may run in another
    Python worker."""
    start_point = parse_mark(start)
    if start_point is None:
        return
    stop: Position | None = None
    if end is not None and end != "SHARD_END":
        parsed = parse_mark(end)
        assert isinstance(parsed, tuple)
        stop = parsed
    kept = shards.take_kept(node.shard_id, start)
    reader, pending = (
        kept if kept is not None else (shards.task_reader(node, start_point, created_ms), [])
    )
    idle = 0
    keeping = False
    try:
        while True:
            if pending:
                records, pending = pending, []
            else:
                action = reader.next_action(time.monotonic())
                if isinstance(action, Wait):
                    shards.wait(action.until - time.monotonic())
                    continue
                if isinstance(action, Ended):
                    if stop is not None:
                        raise SliceError(
                            f"shard {node.shard_id} of {shards.spec.stream.name!r} ended before "
                            f"{end}, the end of this batch"
                        )
                    return
                if isinstance(action, Failed):
                    raise reader.failure(action)
                assert isinstance(action, Call)
                outcome = reader.step(action)
                records = outcome.records
                if outcome.data and outcome.caught_up and end is None:
                    if records:
                        yield records
                    return
                if outcome.idle and stop is not None:
                    idle += 1
                    if idle == IDLE_READS_BEFORE_FAILING:
                        raise SliceError(
                            f"shard {node.shard_id} of {shards.spec.stream.name!r} has no "
                            f"record through {end}, the end of this batch, after {idle} empty "
                            "reads at its tip (trimmed past the retention period?)"
                        )
            if stop is not None and _reached(stop, reader.machine.last_sequence, records):
                through = [r for r in records if r.position <= stop]
                if through:
                    yield through
                assert end is not None
                if shards.spec.fan_out is None:
                    rest = [r for r in records if r.position > stop]
                    shards.keep(node.shard_id, end, reader, rest)
                    keeping = True
                return
            if records:
                yield records
    finally:
        if not keeping:
            reader.close()
