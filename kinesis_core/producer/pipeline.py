"""The producer's whole decision logic, sans-I/O: records and time in, decisions out.

submission (validate) -> offer (:mod:`~kinesis_core.producer.admission`: the budget, callers
waiting for room, flush epochs) -> ``admit``: predict shard -> Aggregator -> Limiter ->
Collector -> ``ready`` requests; a response comes back through ``on_outcome`` -> Retrier ->
finished records (their sinks) or retries (back to the Aggregator). The Limiter sits before the
Collector, as in the KPL: a PutRecords request spans shards, so tokens are taken per shard, per
Kinesis record, before records are packed into requests.

Every record comes in one way: ``submission`` validates the records of a call (one record for
``put``, a batch for ``put_many`` or a Beam chunk) from any thread, with the one check
(:func:`~kinesis_core.shards.hashing.validate_record` against ``record_bytes``) and the one cost
formula, and ``offer`` hands it to the admission. A record over the stream's maximum record
size (:class:`~kinesis_core.shards.record_size.RecordSizeLimit`, learned by the driver) or the
``max_record_bytes`` cap that a raised limit could take is set aside in the submission's
``too_large``: the driver asks the stream again, then ``admit_too_large`` admits or refuses it.

The drivers only execute. After an event they take ``outputs()``: the sinks whose records are
all finished (resolve their callers' futures), the submissions decided (wake their callers)
and the flushes done; they send what ``next_batch`` gives, pass ``on_outcome``'s shard-map
invalidations on, and call ``poll`` when ``next_deadline`` comes. Nothing here calls back
into a driver.

Retries back off (:class:`~kinesis_core.aws.backoff.BackoffTracker`, full jitter): a shard whose
records failed has its limiter queue held, and after a failed request (no answer, a 5xx)
requests wait, then go one at a time until one gets through. Aggregates written to a shard the
shard map does not know wait in ``landings`` until the driver has refreshed the map
(``resolve_landings``).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

import msgspec

from kinesis_core.aggregation import AggregateBuilder, validate_record_id
from kinesis_core.aws.backoff import Backoff, BackoffTracker
from kinesis_core.errors import RecordTooLargeError, ValidationError, shape_problem
from kinesis_core.producer.admission import Admission, Flush, Slice, Standing, Submission
from kinesis_core.producer.aggregator import Aggregator
from kinesis_core.producer.collector import Collector
from kinesis_core.producer.config import ProducerConfig, records_cost
from kinesis_core.producer.items import KinesisRecordOut, PutBatch, UserRecord
from kinesis_core.producer.limiter import Limiter
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.result import (
    PRODUCER_CLOSED,
    VALIDATION_ERROR,
    BatchSink,
    RecordSink,
)
from kinesis_core.producer.retrier import (
    HashRangeFn,
    Landing,
    Retrier,
    RetryDecisions,
    SendOutcome,
    latest_failure,
    waiting_for_retry,
)
from kinesis_core.record_ids import automatic_origin, split_counter
from kinesis_core.shards.hashing import (
    LARGEST_RECORD_BYTES,
    MAX_PARTITION_KEY_CHARS,
    hash_keys,
    validate_record,
)
from kinesis_core.shards.record_size import RecordSizeLimit

PredictFn = Callable[[int], "str | None"]
PredictManyFn = Callable[[Sequence[int]], "list[str | None]"]

_first = itemgetter(0)
_second = itemgetter(1)
_third = itemgetter(2)
_fourth = itemgetter(3)


def _caller_id(record_id: object, enabled: bool) -> str:
    """A caller's record id, checked (``validate_record_id``); ValidationError when
    ``record_ids`` is off."""
    if not enabled:
        raise ValidationError(
            "record_id", "a record id needs ProducerConfig(record_ids=True); it is off"
        )
    return validate_record_id(record_id)


_REQUESTS = "requests"
"""The request backoff's key: a failed request is the endpoint's failure, not a shard's."""


class Outputs(NamedTuple):
    """What the driver does after pipeline events (``Pipeline.outputs``)."""

    results: list[BatchSink]
    """Sinks whose records are all finished: resolve ``sink.future`` with ``sink.result()``."""
    decided: list[Submission]
    """Submissions that waited and are now admitted, refused or withdrawn: wake their
    callers (``sub.waker``)."""
    flushed: list[Flush]
    """Flushes whose records are all finished: wake their callers (``flush.waker``)."""


NOTHING = Outputs([], [], [])


class Pipeline:
    """Admission, Aggregator, Limiter, Collector and Retrier wired together.

    ``lock`` guards what callers on other threads share with the event loop (the admission:
    ``offer`` may be called from any thread); the rest is the loop's alone.
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        predict: PredictFn,
        hash_range: HashRangeFn,
        predict_many: PredictManyFn | None = None,
        metrics: ProducerMetrics,
        builder_factory: Callable[[int], AggregateBuilder] = AggregateBuilder,
        record_limit: RecordSizeLimit | None = None,
        stream: str = "",
        lock: AbstractContextManager[Any] | None = None,
        session: str = "",
    ) -> None:
        self.config = config
        self.session = session
        """The producer's session id: the first part of its automatic record ids."""
        self._id_counters: dict[str | None, int] = {}
        """The next automatic id's counter, per predicted shard (``record_ids``)."""
        self._id_origins: dict[str | None, str] = {}
        """The origin of the automatic ids, per predicted shard (``automatic_origin``)."""
        self.predict = predict
        self.predict_many: PredictManyFn = (
            predict_many if predict_many is not None else lambda keys: list(map(predict, keys))
        )
        """``predict`` of many keys at once (the shard map's ``predict_many``)."""
        self.metrics = metrics
        self.stream = stream
        """The stream's name or ARN, for messages."""
        self.record_limit = record_limit if record_limit is not None else RecordSizeLimit()
        """The stream's maximum record size (the driver keeps it up to date)."""
        self.buffered_time = config.record_max_buffered_time
        self.aggregator = Aggregator(
            enabled=config.aggregation_enabled,
            max_size=min(config.aggregation_max_size, self.record_limit.bytes),
            max_count=config.aggregation_max_count,
            record_ttl=config.record_ttl,
            builder_factory=builder_factory,
            record_ids=config.record_ids,
        )
        self.limiter = Limiter(
            config.rate_limit,
            adaptive=config.adaptive_rate_limit,
            one_at_a_time=config.preserve_order,
        )
        self.collector = Collector(
            config.collection_max_count,
            config.collection_max_size,
            min(0.05, 0.2 * config.record_max_buffered_time),
        )
        self.admission = Admission(
            config.max_outstanding_records, config.max_outstanding_bytes, lock
        )
        self.sinks: dict[int, RecordSink] = {}
        """Registry of the sinks of admitted, unfinished records, by the key records carry."""
        self._sink_keys = itertools.count()
        self._done: list[BatchSink] = []
        """Sinks whose last record finished since the driver last took ``outputs``."""
        self._decided: list[Submission] = []
        self._flushed: list[Flush] = []
        self.retrier = Retrier(
            sinks=self.sinks,
            hash_range=hash_range,
            metrics=metrics,
            record_ttl=config.record_ttl,
            retry_delay=config.record_max_buffered_time / 2,
            fail_if_throttled=config.fail_if_throttled,
        )
        self.ready: deque[PutBatch] = deque()
        """Requests ready to send, oldest first."""
        self.in_flight: set[PutBatch] = set()
        self.landings: list[Landing] = []
        """Aggregates written to a shard the shard map does not know yet: undecided."""
        self.backoff = BackoffTracker(Backoff(config.retry_backoff_base, config.retry_backoff_max))
        """Per shard (its failed records) and for ``_REQUESTS`` (failed requests)."""
        self._last_failure: dict[str, float] = {}
        """When each backoff key last failed: a request sent before that adds no failure."""
        self.failure: tuple[str, str] | None = None
        """``(code, message)`` of the error that stopped the producer (no retry fixes it)."""

    # -- admission (any thread) --------------------------------------------------------------

    @property
    def outstanding_records(self) -> int:
        """Records accepted and not finished (the budget's count)."""
        return self.admission.records

    @property
    def outstanding_bytes(self) -> int:
        return self.admission.bytes

    @property
    def flushing(self) -> bool:
        """While anyone waits (for a flush, or for room in the budget), every open aggregate
        and request is sent at once instead of lingering: nothing new comes until some finish."""
        return self.admission.urgent

    @property
    def record_bytes(self) -> int:
        """The largest data plus partition key a record may have now: the stream's maximum
        record size or the ``max_record_bytes`` cap, the smaller."""
        return min(self.config.max_record_bytes, self.record_limit.bytes)

    def may_fit_later(self, size: int) -> bool:
        """Whether a record of ``size`` bytes, over ``record_bytes``, would fit a raised stream
        limit (neither the cap nor the 10 MiB any stream takes refuses it)."""
        return size <= min(self.config.max_record_bytes, LARGEST_RECORD_BYTES)

    def refusal(self, size: int) -> str:
        """Why a record of ``size`` bytes is refused: the cap, or the stream's limit."""
        cap = self.config.max_record_bytes
        if size > cap and cap < LARGEST_RECORD_BYTES:
            return (
                f"data plus partition key is {size} bytes, over max_record_bytes={cap} of the "
                f"ProducerConfig (the stream takes up to {self.record_limit.bytes} bytes)"
            )
        return self.record_limit.explain(size, self.stream)

    def submission(
        self, records: Sequence[Any], now: float, future: Any = None, *, single: bool = False
    ) -> Submission:
        """The records of one call, validated as far as the budget has room now (any
        thread): the one way in.

        ``records`` are ``(data, partition_key[, explicit_hash_key])`` entries; ``future`` is
        the caller's, resolved by the driver when every record is finished. A record that
        fails validation fails in the sink at once (code ``ValidationError``, the message
        naming the field and the limit) and the others go on; with ``single`` (one record, for
        ``put``) the error is raised instead. A record over ``record_bytes`` that a raised
        stream limit would take is set aside in ``too_large`` (``admit_too_large``). The
        records past the room are validated when room comes (``admit``).
        """
        sink = BatchSink(len(records), key=next(self._sink_keys), future=future, single=single)
        sub = Submission(records, sink)
        self._validate(sub, now, force=single)
        return sub

    def offer(self, sub: Submission) -> tuple[Standing, bool]:
        """Hand ``sub`` to the admission (any thread); returns its standing and whether the
        loop must be woken to ``admit`` it (``Admission.offer``)."""
        sub.sink.done = self._done
        return self.admission.offer(sub)

    def wait_for(self, sub: Submission, waker: Any) -> bool:
        """``sub`` waits: ``waker`` is resolved when it is decided; False if it is already."""
        return self.admission.wait_for(sub, waker)

    # -- admission (the loop) ----------------------------------------------------------------

    def admit(self, now: float) -> None:
        """Take the records the admission let in (from any thread) into the aggregator, after
        validating more of the first submission in line if the budget has room for it."""
        self._let_in(now, [])

    def admit_too_large(self, sub: Submission, now: float) -> Submission:
        """The stream's limit was asked again: refuse ``sub``'s records set aside that still do
        not fit (for a ``single`` record, ``error`` is what its caller raises) and offer the
        others; returns their submission (it may wait for room, or be refused)."""
        entries, sub.too_large = sub.too_large, []
        rest = Submission(
            [record for _, record in entries],
            sub.sink,
            [index for index, _ in entries],
            final=True,
        )
        self._validate(rest, now, force=sub.sink.single)
        standing, _ = self.offer(rest)
        if standing is Standing.REFUSED:
            self._fail_rest(rest, PRODUCER_CLOSED, f"not accepted: {self.admission.stopped}")
        self.admit(now)
        return rest

    def withdraw(self, sub: Submission, code: str, message: str, now: float) -> None:
        """``sub``'s caller stopped waiting (cancelled): what was not admitted yet fails with
        ``code``; the submissions behind it may go in."""
        admitted = self.admission.withdraw(sub)
        self._fail_rest(sub, code, message)
        self._let_in(now, admitted)

    def stop(self, reason: str, *, crashed: bool = False) -> None:
        """Accept nothing more (``reason`` says why): the waiting submissions are refused,
        their records not admitted fail ``ProducerClosed``. ``crashed``: every flush is
        released too (nothing more will finish)."""
        refused = self.admission.stop(reason)
        for sub in refused:
            self._fail_rest(sub, PRODUCER_CLOSED, f"not accepted: {reason}")
        self._decided.extend(refused)
        if crashed:
            self._flushed.extend(self.admission.take_flushes())

    def flush(self) -> Flush | None:
        """Wait for every record accepted so far (None: all finished already); meanwhile
        nothing lingers (``flushing``). The driver sets the flush's ``waker``."""
        return self.admission.flush()

    def forget(self, flush: Flush) -> None:
        """The caller of ``flush`` stopped waiting."""
        self.admission.forget(flush)

    def outputs(self) -> Outputs:
        """What was decided since the last call, for the driver to execute (class
        :class:`Outputs`); settles the flush epochs of the sinks finished meanwhile."""
        done = self._done
        if not (done or self._decided or self._flushed):
            return NOTHING
        finished = done[:]
        done.clear()  # the sinks keep this list: empty it, do not replace it
        sinks = self.sinks
        for sink in finished:
            sinks.pop(sink.key, None)
        flushed = self._flushed
        if finished:
            flushed.extend(self.admission.finished(finished))
        decided = self._decided
        self._decided = []
        self._flushed = []
        return Outputs(finished, decided, flushed)

    def _let_in(self, now: float, admitted: list[Submission]) -> None:
        """Note the submissions ``admitted`` in full, let in what waits (validating the next
        records of the first in line as the budget has room for them), and take the inbox
        into the aggregator. Records finishing only let in what is validated already
        (``_release``): the next ones are validated in a later event (``next_deadline`` says
        when), once the finished records are let go."""
        self._decided.extend(admitted)
        admission = self.admission
        while (head := admission.hungry()) is not None:
            validated = head.next
            self._validate(head, now)
            if head.next == validated:
                head.held = True  # its next record does not fit: wait for records to finish
                break
            self._decided.extend(admission.let_in())
        self._take_inbox(now)

    def _take_inbox(self, now: float) -> None:
        inbox = self.admission.take_inbox()
        if inbox:
            self._take(inbox, now)

    def _take(self, inbox: list[Slice], now: float) -> None:
        """Predict the shards of the admitted records and buffer them in the aggregator."""
        self._sync_aggregate_size()
        predict_many = self.predict_many
        sinks = self.sinks
        groups: dict[str | None, list[UserRecord]] = {}
        group_of = groups.get
        taken = 0
        for sub, records in inbox:
            sink = sub.sink
            sinks[sink.key] = sink
            if sub.waited and records and records[0].arrival != now:
                # Accepted only now: its TTL starts now. (Records are validated in order, so
                # when the first was validated now, every one was.)
                records = [msgspec.structs.replace(ur, arrival=now) for ur in records]
            owners = predict_many([ur.hash_key for ur in records])
            for shard_id, ur in zip(owners, records, strict=True):
                group = group_of(shard_id)
                if group is None:
                    groups[shard_id] = [ur]
                else:
                    group.append(ur)
            taken += len(records)
        extend = self.aggregator.extend
        deadline = now + self.buffered_time
        ids = self.config.record_ids
        for shard_id, group in groups.items():
            if ids:
                extend(shard_id, group, now, deadline, self._give_ids(shard_id, group))
            else:
                extend(shard_id, group, now, deadline)
        self.metrics.user_records_received += taken
        self._pump(now)

    def _give_ids(self, shard_id: str | None, urs: list[UserRecord]) -> bool:
        """Give each of ``urs`` (just admitted, predicted for ``shard_id``) an automatic id
        where the caller gave none: the session's origin for that shard and the shard's next
        counters. A caller's id shaped ``ORIGIN:COUNTER`` (a derived id) is kept as its origin
        and counter, so that consecutive ones travel, and are deduplicated, as runs. True if
        they are one run (no caller's id: their counters follow one another).

        The records were made when they were validated and nothing has read them since but
        this admission, so the ids are set in place (``force_setattr``) rather than on a copy
        of each, which costs twice as much.
        """
        counter = self._id_counters.get(shard_id, 0)
        origin = self._id_origins.get(shard_id)
        if origin is None:
            origin = self._id_origins[shard_id] = automatic_origin(self.session, shard_id)
        force_setattr = msgspec.structs.force_setattr
        n = len(urs)
        if [ur.record_id for ur in urs].count(None) == n:
            # The loops in C: force_setattr returns None, so any() runs each map to its end.
            any(map(force_setattr, urs, repeat("id_origin"), repeat(origin)))
            any(map(force_setattr, urs, repeat("id_counter"), range(counter, counter + n)))
            self._id_counters[shard_id] = counter + n
            return True
        for ur in urs:
            record_id = ur.record_id
            if record_id is None:
                force_setattr(ur, "id_origin", origin)
                force_setattr(ur, "id_counter", counter)
                counter += 1
            elif ":" in record_id and (split := split_counter(record_id)) is not None:
                force_setattr(ur, "record_id", None)
                force_setattr(ur, "id_origin", split[0])
                force_setattr(ur, "id_counter", split[1])
        self._id_counters[shard_id] = counter
        return False

    def _validate(self, sub: Submission, now: float, *, force: bool = False) -> None:
        """Validate the next records of ``sub`` into its ``records``, as far as the budget has
        room now: the first always when ``force`` or the budget is empty. The one check of a
        record (:func:`~kinesis_core.shards.hashing.validate_record`) and the one cost formula."""
        sink = sub.sink
        single = sink.single
        key = sink.key
        source = sub.source
        indexes = sub.indexes
        set_aside = not sub.final
        admission = self.admission
        room_records, room_bytes = admission.room
        force = force or not admission.records
        max_record_bytes = self.record_bytes
        validate = validate_record
        ids = self.config.record_ids
        cost = records_cost
        failed = sink.failed
        urs: list[UserRecord] = []
        append = urs.append
        payload = 0
        end = len(source)
        stop = end
        if (
            indexes is None
            and not single
            and self._validate_plain(sub, now, room_records, room_bytes, max_record_bytes)
        ):
            return
        for pos in range(sub.next, end):
            rec = source[pos]
            index = pos if indexes is None else indexes[pos]
            record_id = None
            try:
                shape = len(rec)
                if shape == 2:
                    data, pk = rec
                    ehk = None
                elif shape == 3:
                    data, pk, ehk = rec
                else:
                    data, pk, ehk, record_id = rec
                    if record_id is not None:
                        record_id = _caller_id(record_id, ids)
                hash_key = validate(data, pk, ehk, max_record_bytes)
            except RecordTooLargeError as exc:
                if set_aside and self.may_fit_later(exc.size):
                    sub.too_large.append((index, rec))
                    continue
                error = RecordTooLargeError(exc.size, exc.limit, self.refusal(exc.size))
                if single and set_aside:
                    raise error from None
                failed(index, VALIDATION_ERROR, str(error), ())
                if single:
                    sub.error = error
                continue
            except ValidationError as exc:
                if single:
                    raise
                failed(index, VALIDATION_ERROR, str(exc), ())
                continue
            except (TypeError, ValueError) as exc:
                if single:
                    raise
                failed(index, VALIDATION_ERROR, malformed_record(rec, exc), ())
                continue
            if type(data) is not bytes:
                data = bytes(data)
            size = payload + len(data) + len(pk)
            taken = len(urs)
            if (taken >= room_records or cost(size, taken + 1) > room_bytes) and not (
                force and not taken
            ):
                stop = pos  # it does not fit now: validated again when room comes
                break
            payload = size
            append(
                UserRecord(
                    hash_key,
                    data,
                    pk,
                    None if ehk is None else str(hash_key),
                    key,
                    index,
                    (),
                    now,
                    record_id,
                )
            )
        sub.next = stop
        sub.records = urs
        sub.cost = cost(payload, len(urs))

    def _validate_plain(
        self,
        sub: Submission,
        now: float,
        room_records: int,
        room_bytes: int,
        max_record_bytes: int,
    ) -> bool:
        """Validate the rest of ``sub`` column by column, the loops in C, when it is the common
        batch: every record a ``(data, partition_key)`` pair (or a ``Record`` without an
        explicit hash key) of bytes and a str of 1 to 128 code points with a UTF-8 form, each
        within ``max_record_bytes`` (``validate_record``'s checks for such a record). It takes
        as many as the budget has room for, as the loop does. False, with nothing done,
        otherwise: the loop of ``_validate`` then takes them one by one and says what is wrong
        with a record."""
        source = sub.source
        if type(source) is not list and type(source) is not tuple:
            return False  # a lazy sequence is read only as far as the budget has room
        start = sub.next
        n = min(len(source) - start, room_records)
        records = source[start : start + n]
        if not n or not all(issubclass(kind, (tuple, list)) for kind in set(map(type, records))):
            return False
        shapes = set(map(len, records))
        if shapes == {3}:
            if set(map(_third, records)) != {None}:
                return False
        elif shapes == {4}:
            if set(map(_third, records)) != {None} or set(map(_fourth, records)) != {None}:
                return False
        elif shapes != {2}:
            return False
        datas = list(map(_first, records))
        keys = list(map(_second, records))
        if set(map(type, datas)) != {bytes} or set(map(type, keys)) != {str}:
            return False
        key_chars = list(map(len, keys))
        longest_key = max(key_chars)
        if min(key_chars) < 1 or longest_key > MAX_PARTITION_KEY_CHARS // 2:
            return False
        try:
            encoded = list(map(str.encode, keys))
        except UnicodeEncodeError:
            return False
        data_bytes = list(map(len, datas))
        largest = max(data_bytes)
        # A code point takes at most 4 bytes in UTF-8: look at the encoded keys only when
        # that bound does not settle it.
        if largest + 4 * longest_key > max_record_bytes and (
            largest + max(map(len, encoded)) > max_record_bytes
        ):
            return False  # one record may be too large: the loop says which
        cost = records_cost(sum(data_bytes) + sum(key_chars), n)
        if cost > room_bytes:
            return False
        sub.records = list(
            map(
                UserRecord,
                hash_keys(encoded),
                datas,
                keys,
                repeat(None),
                repeat(sub.sink.key),
                range(start, start + n),
                repeat(()),
                repeat(now),
            )
        )
        sub.next = start + n
        sub.cost = cost
        return True

    def _fail_rest(self, sub: Submission, code: str, message: str) -> None:
        """Fail ``sub``'s records not admitted (validated or not), and those set aside."""
        failed = sub.sink.failed
        for ur in sub.records:
            failed(ur.index, code, message, ())
        indexes = sub.indexes
        for pos in range(sub.next, len(sub.source)):
            failed(pos if indexes is None else indexes[pos], code, message, ())
        for index, _ in sub.too_large:
            failed(index, code, message, ())
        sub.records = []
        sub.cost = 0
        sub.next = len(sub.source)
        sub.too_large = []

    # -- time and flushing -----------------------------------------------------------------

    def poll(self, now: float) -> None:
        """Move everything whose time has come one stage on."""
        admission = self.admission
        if admission.inbox or admission.waiting:
            self.admit(now)
        if self.flushing:
            self.aggregator.flush()
        else:
            self.aggregator.poll(now)
        self._pump(now)
        if self._drain_limiter(now):
            self._release(now)
        batch = self.collector.flush() if self.flushing else self.collector.poll(now)
        if batch is not None:
            self.ready.append(batch)
        self._expire_ready(now)
        self._expire_landings(now)

    def next_deadline(self, now: float) -> float | None:
        """When ``poll`` has work next; None when nothing is buffered or waiting."""
        deadlines = [
            d
            for d in (
                self.aggregator.next_deadline(),
                self.limiter.next_wakeup(),
                self.collector.next_deadline(),
            )
            if d is not None
        ]
        if self.ready:
            deadlines.append(min(b.expiration for b in self.ready))
            gate = self.backoff.until(_REQUESTS)
            if gate > now:  # the requests may go then
                deadlines.append(gate)
        if self.landings:
            deadlines.append(min(landing.kr.expiration for landing in self.landings))
        if self.admission.hungry() is not None:
            return float("-inf")  # room for records still to be validated: poll takes them
        if not deadlines:
            return None
        if self.flushing and (self.aggregator.next_deadline() or len(self.collector)):
            return float("-inf")
        return min(deadlines)

    def next_batch(self, now: float, sending: int = 0) -> PutBatch | None:
        """The oldest ready request, now counted as in flight; None if none may go now.

        ``sending`` is how many requests are in flight. After a failed request, requests wait
        for the backoff to pass and then go one at a time until one gets an answer. A request
        can wait in ``ready``; Kinesis records whose TTL ran out meanwhile fail as Expired
        rather than being written late.
        """
        self._expire_ready(now)
        if not self.ready or self.backoff.waiting(_REQUESTS, now):
            return None
        if sending and self.backoff.failures(_REQUESTS):
            return None
        batch = self.ready.popleft()
        self.in_flight.add(batch)
        return batch

    # -- responses -------------------------------------------------------------------------

    def on_outcome(
        self, batch: PutBatch, outcome: SendOutcome, now: float
    ) -> list[tuple[float, str | None]]:
        """Classify a response; return the shard-map invalidations ``(seen_at, predicted)``.

        The batch stays in flight until it is fully handled, so if handling raises, a
        ``fail_all`` after the crash still reaches its records.
        """
        if batch.abandoned:
            self.in_flight.discard(batch)
            return []
        decisions = self.retrier.handle(batch, outcome, now)
        if decisions.fatal is not None:
            self.in_flight.discard(batch)
            self.landings.extend(decisions.landings)
            self._apply(decisions, now)
            return decisions.invalidations
        if decisions.request_failed:
            self._failed(_REQUESTS, outcome.started_at, now)
        elif decisions.answered:
            self.backoff.succeeded(_REQUESTS)
        for shard_id in decisions.ok_shards - decisions.failed_shards:
            self.backoff.succeeded(shard_id)
        for shard_id in decisions.failed_shards:
            until = self._failed(shard_id, outcome.started_at, now)
            self.limiter.hold(shard_id, until, now)
        self.landings.extend(decisions.landings)
        self.ready.extendleft(reversed(decisions.resend))
        self._apply(decisions, now)
        self.in_flight.discard(batch)
        if self.config.preserve_order:
            waiting = {landing.kr.shard_id for landing in self.landings}
            waiting.update(kr.shard_id for b in decisions.resend for kr in b.records)
            self._unblock((kr for kr in batch.records if kr.shard_id not in waiting), now)
        self._release(now)
        self._pump(now)
        return decisions.invalidations

    def resolve_landings(
        self, now: float, *, final: str | None = None, sent_before: float = float("inf")
    ) -> set[str]:
        """Decide the landings whose shard the map now knows; return the shards still unknown.

        With ``final`` (why the range cannot be learned), retry those still unknown that were
        sent before ``sent_before`` (when every shard was listed) instead of leaving them.
        """
        landings, self.landings = self.landings, []
        decisions = RetryDecisions(retry_deadline=now + self.retrier.retry_delay)
        unknown: set[str] = set()
        decided: list[KinesisRecordOut] = []
        for landing in landings:
            if self.retrier.resolve(landing, now, decisions):
                decided.append(landing.kr)
            elif final is not None and landing.outcome.started_at < sent_before:
                self.retrier.give_up(landing, now, decisions, final)
                decided.append(landing.kr)
            else:
                self.landings.append(landing)
                unknown.add(landing.shard_id)
        self._apply(decisions, now)
        if self.config.preserve_order:
            self._unblock(decided, now)
        self._release(now)
        self._pump(now)
        return unknown

    def fail_batch(self, batch: PutBatch, code: str, message: str, now: float) -> None:
        """Fail the records of one request whose outcome will never come (a cancelled send)."""
        self.in_flight.discard(batch)
        if batch.abandoned:
            return
        batch.abandoned = True
        records = [ur for kr in batch.records for ur in kr.records]
        self.retrier.fail_records(records, code, message, now)
        if self.config.preserve_order:
            self._unblock(batch.records, now)
        self._release(now)

    def fail_all(self, code: str, message: str, now: float) -> int:
        """Fail every unfinished record (shutdown timeout, crash); return how many. Call
        ``stop`` first, or records waiting for room come in as soon as the budget empties."""
        self.admit(now)
        records = self.aggregator.take_all()
        krs: list[KinesisRecordOut] = list(self.aggregator.sealed)
        self.aggregator.sealed = []
        krs.extend(self.limiter.take_all())
        krs.extend(landing.kr for landing in self.landings)
        self.landings = []
        batch = self.collector.flush()
        batches = list(self.ready)
        if batch is not None:
            batches.append(batch)
        self.ready.clear()
        for in_flight in self.in_flight:
            in_flight.abandoned = True
            batches.append(in_flight)
        self.in_flight.clear()
        for b in batches:
            krs.extend(b.records)
        for kr in krs:
            records.extend(kr.records)
        if records:
            self.retrier.fail_records(records, code, message, now)
        self._release(now)
        return len(records)

    # -- internals ---------------------------------------------------------------------------

    def _sync_aggregate_size(self) -> None:
        """An aggregate may weigh ``aggregation_max_size``, and never more than the stream
        takes (its limit may have changed since the last record)."""
        self.aggregator.max_size = min(self.config.aggregation_max_size, self.record_limit.bytes)
        self.aggregator.record_limit = self.record_limit.bytes

    def _apply(self, decisions: RetryDecisions, now: float) -> None:
        """Do what the retrier decided: stop on a fatal error, slow throttled shards down, put
        retries back (in front of later records with ``preserve_order``)."""
        if decisions.fatal is not None:
            code, message = decisions.fatal
            self.failure = decisions.fatal
            self.retrier.fail_as_they_are(decisions.retries + decisions.alone, code, message)
            self.stop(f"the producer stopped after {code}: {message}")
            self.fail_all(
                code,
                f"{message} (no retry fixes this: the producer stopped, failing every record "
                "it held)",
                now,
            )
            return
        for shard_id in decisions.throttled:
            self.limiter.throttled(shard_id, now)
        deadline = decisions.retry_deadline
        predict = self.predict
        if self.config.preserve_order:
            self._retry_first(decisions.retries, now, deadline)
            self._retry_first(decisions.alone, now, deadline, alone=True)
            return
        add = self.aggregator.add
        for ur in decisions.retries:
            add(ur, predict(ur.hash_key), now, deadline)
        for ur in decisions.alone:
            self.aggregator.alone((ur,), predict(ur.hash_key), now, deadline)

    def _retry_first(
        self, records: list[UserRecord], now: float, deadline: float, *, alone: bool = False
    ) -> None:
        """Queue retried records ahead of everything their shard has waiting, in their order
        (``preserve_order``): a later record of the same key must not overtake them."""
        by_shard: dict[str | None, list[UserRecord]] = {}
        for ur in records:
            by_shard.setdefault(self.predict(ur.hash_key), []).append(ur)
        for shard_id, group in by_shard.items():
            if shard_id is None:
                self.aggregator.alone(group, None, now, deadline)
                continue
            krs = self.aggregator.seal_now(shard_id, group, now, deadline, plain=alone)
            for kr in reversed(krs):
                self.limiter.push_front(kr, now)

    def _unblock(self, krs: Iterable[KinesisRecordOut], now: float) -> None:
        """Their outcome is known: let their shards send the next record (``preserve_order``)."""
        for shard_id in {kr.shard_id for kr in krs}:
            if shard_id is not None:
                self.limiter.unblock(shard_id, now)
        self._drain_limiter(now)

    def _drain_limiter(self, now: float) -> bool:
        """Collect what the limiter lets go now and expire what waited too long there; False
        when nothing was due."""
        wake = self.limiter.next_wakeup()
        if wake is None or wake > now:
            return False
        released, expired = self.limiter.drain(now)
        for kr in released:
            self._collect(kr, now)
        for kr in expired:
            self.retrier.expire(kr, now, self._waiting_in_limiter(kr, now))
        return True

    def _failed(self, key: str, started_at: float, now: float) -> float:
        """A request sent at ``started_at`` failed for ``key``; returns until when it waits.

        Requests already in flight when the last failure was seen add no failure: a burst of
        them fails together, and counts once.
        """
        if started_at >= self._last_failure.get(key, float("-inf")):
            self.backoff.failed(key, now)
            self._last_failure[key] = now
        return self.backoff.until(key)

    def _waiting_in_limiter(self, kr: KinesisRecordOut, now: float) -> str:
        shard_id = kr.shard_id
        assert shard_id is not None
        limiter = self.limiter
        if limiter.held(shard_id, now):
            return f"a retry backoff of shard {shard_id}"
        if limiter.blocked(shard_id):
            return f"the previous record of shard {shard_id} to finish (preserve_order)"
        multiplier = limiter.multiplier(shard_id)
        if multiplier < 1.0:
            return (
                f"the rate limiter of shard {shard_id} (slowed to {multiplier:.0%} of "
                f"rate_limit after throttling)"
            )
        return f"the rate limiter of shard {shard_id} (rate_limit {self.config.rate_limit} %)"

    def _waiting_to_be_sent(self, kr: KinesisRecordOut, gated: bool) -> str:
        """What a record in a ready request waits for: the requests' backoff (and, after it,
        the stream when the service said it was busy or gone), or a free connection."""
        if not gated:
            return (
                f"a free connection (max_connections={self.config.max_connections} requests "
                "in flight)"
            )
        last = latest_failure(kr.records)
        waiting_for = waiting_for_retry(last.error_code if last is not None else None)
        if waiting_for.startswith("its next attempt"):
            return "a retry backoff after failed requests"
        return waiting_for

    def _expire_ready(self, now: float) -> None:
        """Fail the Kinesis records of ready requests whose TTL ran out; drop emptied requests."""
        if not self.ready or min(b.expiration for b in self.ready) > now:
            return
        gated = self.backoff.waiting(_REQUESTS, now)
        kept: deque[PutBatch] = deque()
        expired: list[KinesisRecordOut] = []
        for batch in self.ready:
            if batch.expiration > now:
                kept.append(batch)
                continue
            live = [kr for kr in batch.records if kr.expiration > now]
            expired.extend(kr for kr in batch.records if kr.expiration <= now)
            if live:
                kept.append(PutBatch(live, sum(kr.size for kr in live)))
        self.ready = kept
        for kr in expired:
            self.retrier.expire(kr, now, self._waiting_to_be_sent(kr, gated))
        if self.config.preserve_order:
            self._unblock(expired, now)
        self._release(now)

    def _expire_landings(self, now: float) -> None:
        """Fail the landings whose TTL ran out before the shard map learned their shard."""
        if not self.landings:
            return
        kept = []
        expired = []
        for landing in self.landings:
            if landing.kr.expiration > now:
                kept.append(landing)
                continue
            expired.append(landing.kr)
            self.retrier.expire(
                landing.kr,
                now,
                f"the shard map to learn the hash key range of {landing.shard_id} (the "
                f"aggregate was written there at sequence number {landing.sequence_number}, "
                "but a KCL reader drops it if a record is outside that range)",
            )
        if expired:
            self.landings = kept
            if self.config.preserve_order:
                self._unblock(expired, now)
            self._release(now)

    def _pump(self, now: float) -> None:
        sealed = self.aggregator.sealed
        if not sealed:
            return
        self.aggregator.sealed = []
        put = self.limiter.put
        for kr in sealed:
            if put(kr, now):
                self._collect(kr, now)

    def _collect(self, kr: KinesisRecordOut, now: float) -> None:
        batch = self.collector.add(kr, now)
        if batch is not None:
            self.ready.append(batch)

    def _release(self, now: float) -> None:
        """Give the budget back for the records the retrier finished; admit what waited."""
        retrier = self.retrier
        if retrier.released_records:
            admitted = self.admission.release(retrier.released_records, retrier.released_bytes)
            retrier.released_records = 0
            retrier.released_bytes = 0
            self._decided.extend(admitted)
            self._take_inbox(now)


def malformed_record(record: object, exc: Exception) -> str:
    """Why a ``put_many`` entry is not a record: not a tuple, or which element is missing or
    how many are too many (``exc``, what unpacking it raised, when its shape is right)."""
    problem = shape_problem(record, ("data", "partition_key", "explicit_hash_key", "record_id"), 2)
    return (
        "record: must be a (data, partition_key[, explicit_hash_key[, record_id]]) tuple; "
        f"{problem or f'{type(exc).__name__}: {exc}'}"
    )
