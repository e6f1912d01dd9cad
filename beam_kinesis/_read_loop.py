"""The read loop of one ``ReadFromKinesis`` ``process`` call, whatever the transport.

:class:`ReadLoop` round-robins over the restriction's readable shards, executes the call each
reader asks for (a step of its :class:`kinesis_core.consumer.reading.SyncShardReader`), claims
each response's records (one claim of the last position they consume) before it outputs them,
filters the records of a shard that straddles the restriction's range, adopts a shard's
children at its end, moves the watermark, and stops at the self-checkpoint time, a bounded
stop or a refused claim. :mod:`beam_kinesis._shard_readers`
makes the readers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterable
from operator import attrgetter
from typing import Any

from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_kinesis._metrics import BeamMetrics
from beam_kinesis._read_spec import ReadSpec, now_micros, to_timestamp
from beam_kinesis._shard_readers import Reader, ShardReaders
from beam_kinesis.backlog import backlog_bytes
from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
    ShardRef,
    restriction_watermark,
)
from beam_kinesis.record import KinesisRecord
from beam_kinesis.restriction import (
    BacklogClaim,
    EndClaim,
    IdleClaim,
    RecordClaim,
    SkipClaim,
    StopClaim,
)
from kinesis_core.aws.calls import Call, Wait
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.transport import Ended, Failed
from kinesis_core.records import KinesisRecord as CoreRecord
from kinesis_core.shards.hashing import hash_key

logger = logging.getLogger(__name__)

Outputs = Iterable[WindowedValue]
"""The outputs of one response: :meth:`ReadLoop.poll` yields one per response, and the caller
outputs all of it before it resumes the loop (one generator level per element, not five)."""

GLOBAL = (GlobalWindow(),)
"""The windows of every output. The read's input is always in the global window (its own
Impulse, or the discovery's outputs), where a ``TimestampedValue`` would be assigned too; an
output made as a ``WindowedValue`` skips that assignment (a ``GlobalWindow`` and its timestamp
made per element, Beam's ``AssignContext``) and ``TimestampedValue``'s own conversion."""

_ARRIVAL = attrgetter("approximate_arrival_seconds")
_DATA = attrgetter("data")


class _Stamp(Timestamp):
    """A Timestamp whose microseconds are an attribute, computed once: a ``WindowedValue``
    reads ``micros`` of its timestamp when it is made, which Beam's ``Timestamp`` computes
    on each read (a property and a call). The sub-records of an aggregate share one."""

    micros = 0  # a plain class attribute: the instance's own value shadows it

    def __init__(self, micros: int) -> None:
        super().__init__(micros=micros)
        self.micros = micros


class ReadLoop:
    """One ``process`` call: read the readable shards until the self-checkpoint time, a
    bounded stop, or a refused claim."""

    def __init__(
        self,
        spec: ReadSpec,
        shard_readers: ShardReaders,
        metrics: BeamMetrics,
        restriction: KinesisRestriction,
        tracker: Any,
        watermark: Any,
    ) -> None:
        self.spec = spec
        self.shard_readers = shard_readers
        self.metrics = metrics
        self.tracker = tracker
        self.watermark = watermark
        self.lo = restriction.lo
        self.hi = restriction.hi
        self.records_left = restriction.records_left
        self.deadline = None if restriction.deadline is None else restriction.deadline / 1e6
        self.before = {c.shard_id: c.position for c in restriction.cursors}
        self.cursors = {c.shard_id: c for c in restriction.cursors}
        self.readers: dict[str, Reader] = {}
        self.clean: set[str] = set()
        """Shards whose reader consumed exactly what was claimed (reusable next call)."""
        self.caught_up: set[str] = set()
        self.ended: list[ShardCursor] = []
        self.defer: float | None = None
        self._start_readers(restriction)

    def _start_readers(self, restriction: KinesisRestriction) -> None:
        for cursor in restriction.cursors:
            if cursor.readable and cursor.shard_id not in self.readers:
                self.readers[cursor.shard_id] = self.shard_readers.open(restriction, cursor)
                self.clean.add(cursor.shard_id)

    def _bounded_stop_due(self) -> bool:
        if self.deadline is not None and time.time() >= self.deadline:
            return True
        return (
            self.spec.stop_when_caught_up
            and bool(self.readers)
            and self.caught_up >= self.readers.keys()
            and all(c.readable for c in self.cursors.values())
        )

    def poll(self) -> Generator[Outputs, None, None]:
        """Round-robin over the shards whose next call is due; sleep only while nothing is.
        Yields the outputs of each response (:data:`Outputs`).

        Returns (setting ``defer``) at the self-checkpoint time, or early once this call did
        some work and nothing is due before that time. A call that finds nothing due at all
        sleeps until something is: runners that ignore the defer delay re-invoke at once, and
        this keeps them from spinning through empty bundles.
        """
        interval = self.spec.self_checkpoint_interval
        checkpoint_at = float("inf") if interval is None else time.monotonic() + interval
        worked = False
        while self.cursors:
            if self._bounded_stop_due():
                self.tracker.try_claim(StopClaim())
                return
            if not self.readers:
                waiting = {c.shard_id: c.waiting_for for c in self.cursors.values()}
                raise RuntimeError(f"no shard to read: every shard waits for a parent {waiting}")
            now = time.monotonic()
            next_due = float("inf")
            called = False
            for shard_id in list(self.readers):
                reader = self.readers[shard_id]
                action = reader.next_action(now)
                if isinstance(action, Wait):
                    next_due = min(next_due, action.until)
                    continue
                called = True
                if isinstance(action, Ended):
                    if not self._end(shard_id, action):
                        return
                elif isinstance(action, Failed):
                    raise reader.failure(action)
                elif (yield from self._call(shard_id, reader, action)) is not None:
                    return
                now = time.monotonic()
            worked = worked or called
            now = time.monotonic()
            if now >= checkpoint_at:
                self.defer = 0.0
                return
            if called:
                continue
            if worked and next_due >= checkpoint_at:
                self.defer = next_due - now
                return
            wake = min(next_due, checkpoint_at)
            if self.deadline is not None:
                wake = min(wake, now + max(self.deadline - time.time(), 0.0))
            self.shard_readers.wait(wake - now)

    def _call(
        self, shard_id: str, reader: Reader, action: Call
    ) -> Generator[Outputs, None, str | None]:
        """One call of the shard's reader and what follows from it. Returns (as the
        generator's value) None to go on, or "stop" after a refused claim or a bounded stop."""
        self._read_ahead(shard_id, own=False)
        outcome = reader.step(action)
        sent = reader.sent
        self.metrics.settle()
        if outcome.error is not None:
            self.caught_up.discard(shard_id)
            return None
        if not outcome.data:
            return None
        millis = outcome.millis_behind_latest
        if millis is not None:
            self.metrics.lag(shard_id, millis)
        records = outcome.records
        nbytes = self._measure(shard_id, records)
        rate = self.shard_readers.rate(shard_id)
        backlog = backlog_bytes(millis, rate)
        self.metrics.backlog(shard_id, backlog)
        self.tracker.try_claim(BacklogClaim(shard_id, backlog, nbytes))
        if records:
            stopped = yield from self._emit(shard_id, records, nbytes)
            if stopped:
                return "stop"
        if outcome.caught_up:
            self.caught_up.add(shard_id)
            if outcome.idle:
                # From when the call was sent, not when its answer came: a record that arrived
                # while a slow answer was on its way is not behind the watermark.
                idle = int((sent - self.spec.idle_threshold) * 1e6)
                if not self.tracker.try_claim(IdleClaim(shard_id, idle)):
                    self.clean.discard(shard_id)
                    return "stop"
        else:
            self.caught_up.discard(shard_id)
        self._advance_watermark()
        return None

    def _read_ahead(self, shard_id: str, *, own: bool) -> None:
        """Send the next call of the round ahead, unless one is in flight already: the first
        due one of the readers after ``shard_id`` (and then, with ``own``, ``shard_id``'s), so
        that its answer comes while this one is processed. Nothing is claimed until the loop
        takes the answer in its turn; until then the reader stays where it was."""
        readers = self.readers
        order = list(readers)
        at = order.index(shard_id)
        others = order[at + 1 :] + order[:at]
        if any(readers[s].reading_ahead for s in others):
            return
        now = time.monotonic()
        for other in [*others, shard_id] if own else others:
            if readers[other].read_ahead(now):
                return

    def _measure(self, shard_id: str, records: list[CoreRecord]) -> int:
        """The data bytes of a response, learnt into the shard's write rate."""
        if not records:
            return 0
        nbytes = sum(map(len, map(_DATA, records)))
        first = records[0].approximate_arrival_seconds
        last = records[-1].approximate_arrival_seconds
        if first is not None and last is not None:
            rate = self.shard_readers.rate(shard_id)
            rate.observe(nbytes, round(first * 1000), round(last * 1000))
        return nbytes

    def _emit(
        self, shard_id: str, records: list[CoreRecord], nbytes: int
    ) -> Generator[Outputs, None, bool]:
        """Output the records of one response (of ``nbytes`` of data) that lie in this
        restriction's range, at most what is left of ``max_records``, after one claim of the
        last position they consume.
        Returns True when the claim was refused (checkpointed by the runner) or
        ``max_records`` ran out."""
        chosen, consumed = self._chosen(shard_id, records)
        position = consumed.position
        if not chosen:
            if not self.tracker.try_claim(SkipClaim(shard_id, *position)):
                self.clean.discard(shard_id)
                return True
            return False
        arrivals = set(map(_ARRIVAL, chosen))
        arrived = (
            round(max(a for a in arrivals if a is not None) * 1e6)
            if None not in arrivals
            else now_micros()
        )
        outputs: Outputs = self._outputs(shard_id, chosen)
        newest = arrived
        if self.spec.timestamp_fn is not None:
            # The timestamps are known only once the elements are made: the claim needs them.
            outputs = list(outputs)
            newest = max(o.timestamp.micros for o in outputs)
        claim = tuple.__new__(RecordClaim, (shard_id, *position, newest, len(chosen)))
        if not self.tracker.try_claim(claim):
            self.clean.discard(shard_id)
            return True
        self._read_ahead(shard_id, own=True)
        yield outputs  # output whole before this generator goes on
        if chosen is not records:
            nbytes = sum(map(len, map(_DATA, chosen)))
        self._count(shard_id, len(chosen), nbytes, arrived)
        left = self.records_left
        if left is None:
            return False
        self.records_left = left - len(chosen)
        if self.records_left == 0:
            self.clean.discard(shard_id)
            return True
        return False

    def _chosen(
        self, shard_id: str, records: list[CoreRecord]
    ) -> tuple[list[CoreRecord], CoreRecord]:
        """The records of a response to output (those in this restriction's range, at most
        what is left of ``max_records``) and the last record their output consumes."""
        cursor = self.cursors[shard_id]
        lo, hi = self.lo, self.hi
        chosen = records
        if not (lo <= cursor.lo and cursor.hi <= hi):
            in_range: dict[str, bool] = {}
            chosen = []
            for record in records:
                ehk = record.explicit_hash_key
                if ehk is not None:
                    ok = lo <= int(ehk) <= hi
                else:
                    pk = record.partition_key
                    cached = in_range.get(pk)
                    ok = cached if cached is not None else lo <= hash_key(pk) <= hi
                    in_range[pk] = ok
                if ok:
                    chosen.append(record)
        left = self.records_left
        if left is not None and len(chosen) >= left:
            chosen = chosen[:left]  # a restriction with no records left reads nothing
            return chosen, chosen[-1]
        return chosen, records[-1]

    def _outputs(
        self, shard_id: str, records: list[CoreRecord]
    ) -> Generator[WindowedValue, None, None]:
        """The elements of ``records``, timestamped, made one by one as Beam takes them."""
        with_metadata = self.spec.with_metadata
        timestamp_fn = self.spec.timestamp_fn
        last_seq = ""
        arrival: Any = ...  # none seen yet (None: a record without one)
        ts = Timestamp(0)
        # tuple.__new__ builds the NamedTuples in C, without their Python-level __new__.
        new_tuple = tuple.__new__
        for record in records:
            seq = record.sequence_number
            if seq != last_seq:
                last_seq = seq
                if record.approximate_arrival_seconds is not arrival:
                    arrival = record.approximate_arrival_seconds
                    ts = _Stamp(round(arrival * 1e6) if arrival is not None else now_micros())
            if not with_metadata and timestamp_fn is None:
                yield WindowedValue(record.data, ts, GLOBAL)
                continue
            element = new_tuple(
                KinesisRecord,
                (
                    record.data,
                    record.partition_key,
                    record.explicit_hash_key,
                    shard_id,
                    seq,
                    record.sub_sequence_number,
                    ts,
                ),
            )
            value = element if with_metadata else record.data
            if timestamp_fn is not None:
                yield WindowedValue(value, to_timestamp(timestamp_fn(element)), GLOBAL)
            else:
                yield WindowedValue(value, ts, GLOBAL)

    def _count(self, shard_id: str, emitted: int, nbytes: int, arrival_micros: int) -> None:
        """Records output; ``arrival_micros``: when the newest of them arrived in the stream."""
        if emitted:
            age_ms = (now_micros() - arrival_micros) // 1000
            self.metrics.consumed(shard_id, emitted, nbytes, age_ms)

    def _end(self, shard_id: str, ended: Ended) -> bool:
        """The shard ended (or is gone: no longer listed): adopt its children. Only a shard
        read to its end gets SHARD_END stored. False if the claim was refused."""
        cursor = self.cursors[shard_id]
        children = ended.children
        known: tuple[ShardRef, ...] = ()
        if self.spec.discovers:
            # The discovery outputs the children, each to its own restriction.
            children = ()
        elif not children:
            # No ChildShards (a vanished shard, or a service that does not send them): ask
            # ListShards who the children are.
            listing = self.shard_readers.list_shards()
            children = ShardNode.children_of(shard_id, listing)
            known = tuple(ShardRef(s.shard_id, s.start_hash_key, s.end_hash_key) for s in listing)
        if not self.tracker.try_claim(EndClaim(shard_id, children, known)):
            return False
        self.readers.pop(shard_id).close()
        self.clean.discard(shard_id)
        self.caught_up.discard(shard_id)
        if ended.gone:
            logger.warning(
                "shard %s of %s is no longer listed (past the retention period); not reading it",
                shard_id,
                self.spec.stream,
            )
        else:
            self.ended.append(cursor)
        restriction: KinesisRestriction = self.tracker.current_restriction()
        self.cursors = {c.shard_id: c for c in restriction.cursors}
        self._start_readers(restriction)
        self._advance_watermark(restriction)
        return True

    def _advance_watermark(self, restriction: KinesisRestriction | None = None) -> None:
        current = restriction or self.tracker.current_restriction()
        mark = restriction_watermark(current)
        for cursor in current.cursors:
            if cursor.watermark is not None and cursor.readable:
                self.metrics.watermark(cursor.shard_id, cursor.watermark // 1000)
        if mark is None:
            return
        new = Timestamp(micros=mark)
        now = self.watermark.current_watermark()
        if now is None or new > now:
            self.watermark.set_watermark(new)
