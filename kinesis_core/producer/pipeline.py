"""The producer's whole decision logic, sans-I/O: records and time in, requests to send out.

admit -> predict shard -> Aggregator -> Limiter -> Collector -> ``ready`` requests; a response
comes back through ``on_outcome`` -> Retrier -> finished records (their sinks) or retries (back
to the Aggregator). The asyncio driver only sends the ready requests, feeds the responses back
and calls ``poll`` when ``next_deadline`` comes. The Limiter sits before the Collector, as in
the KPL: a PutRecords request spans shards, so tokens are taken per shard, per Kinesis record,
before records are packed into requests.

Retries back off (:class:`~kinesis_core.backoff.Backoff`, full jitter): a shard whose records
failed has its limiter queue held, and after a failed request (no answer, a 5xx) requests wait,
then go one at a time until one gets through. Aggregates written to a shard the shard map does
not know wait in ``landings`` until the driver has refreshed the map (``resolve_landings``).

The pipeline also keeps the memory budget: it counts accepted, unfinished records and bytes, and
``admit_many`` stops at the first record that does not fit so the driver can wait for room.

Records are checked against ``record_bytes``: the stream's maximum record size
(:class:`~kinesis_core.record_size.RecordSizeLimit`, learned by the driver) or the
``max_record_bytes`` cap, the smaller. A record over the stream's limit that a larger one could
take is set aside in ``too_large`` instead of refused: the driver asks the stream again and then
admits it (``admit_one``) or refuses it (``refusal`` says why).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.backoff import Backoff
from kinesis_core.errors import RecordTooLargeError, ValidationError, shape_problem
from kinesis_core.hashing import LARGEST_RECORD_BYTES, validate_record
from kinesis_core.producer.aggregator import Aggregator
from kinesis_core.producer.collector import Collector
from kinesis_core.producer.config import (
    PAYLOAD_COPIES,
    RECORD_OVERHEAD_BYTES,
    ProducerConfig,
    record_cost,
)
from kinesis_core.producer.items import HASH, KinesisRecordOut, PutBatch, UserRecord
from kinesis_core.producer.limiter import Limiter
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.result import VALIDATION_ERROR, RecordSink
from kinesis_core.producer.retrier import (
    HashRangeFn,
    Landing,
    Retrier,
    RetryDecisions,
    SendOutcome,
    latest_failure,
    waiting_for_retry,
)
from kinesis_core.record_size import RecordSizeLimit

PredictFn = Callable[[int], "str | None"]

_REQUESTS = "requests"
"""The request backoff's key: a failed request is the endpoint's failure, not a shard's."""


class Pipeline:
    """Aggregator, Limiter, Collector and Retrier wired together, with the memory budget."""

    def __init__(
        self,
        config: ProducerConfig,
        *,
        predict: PredictFn,
        hash_range: HashRangeFn,
        metrics: ProducerMetrics,
        builder_factory: Callable[[int], AggregateBuilder] = AggregateBuilder,
        record_limit: RecordSizeLimit | None = None,
        stream: str = "",
    ) -> None:
        self.config = config
        self.predict = predict
        self.metrics = metrics
        self.stream = stream
        """The stream's name or ARN, for messages."""
        self.record_limit = record_limit if record_limit is not None else RecordSizeLimit()
        """The stream's maximum record size (the driver keeps it up to date)."""
        self.too_large: list[int] = []
        """Indexes of ``admit_many`` records set aside for a fresh look at the stream's limit."""
        self.buffered_time = config.record_max_buffered_time
        self.aggregator = Aggregator(
            enabled=config.aggregation_enabled,
            max_size=min(config.aggregation_max_size, self.record_limit.bytes),
            max_count=config.aggregation_max_count,
            record_ttl=config.record_ttl,
            builder_factory=builder_factory,
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
        self.sinks: dict[int, RecordSink] = {}
        """Registry of the sinks of unfinished records, by the key records carry."""
        self._sink_keys = itertools.count()
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
        self.backoff = Backoff(config.retry_backoff_base, config.retry_backoff_max)
        """Per shard (its failed records) and for ``_REQUESTS`` (failed requests)."""
        self._last_failure: dict[str, float] = {}
        """When each backoff key last failed: a request sent before that adds no failure."""
        self.failure: tuple[str, str] | None = None
        """``(code, message)`` of the error that stopped the producer (no retry fixes it)."""
        self.outstanding_records = 0
        self.outstanding_bytes = 0
        self.flushing = False
        """While set, every open aggregate and request is sent at once instead of lingering
        (the driver sets it while a flush, or a caller blocked on the budget, waits)."""

    # -- admission -------------------------------------------------------------------------

    def register(self, sink: RecordSink) -> int:
        """Register a sink for records about to be admitted; returns the key they will carry."""
        key = next(self._sink_keys)
        self.sinks[key] = sink
        return key

    def unregister(self, key: int) -> None:
        """Forget a sink whose records are all finished."""
        self.sinks.pop(key, None)

    def has_room(self, cost: int) -> bool:
        """Whether one more record of ``cost`` bytes (``config.record_cost``) fits the budget.

        An empty pipeline takes anything, so a record bigger than the budget still goes.
        """
        if not self.outstanding_records:
            return True
        return (
            self.outstanding_records < self.config.max_outstanding_records
            and self.outstanding_bytes + cost <= self.config.max_outstanding_bytes
        )

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

    def admit_one(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        hash_key: int,
        sink_key: int,
        now: float,
        index: int = 0,
    ) -> None:
        """Accept one validated record (the caller checked ``has_room``) for a registered sink,
        as its record ``index``."""
        self._sync_aggregate_size()
        ur: UserRecord = (
            hash_key,
            data,
            partition_key,
            explicit_hash_key,
            sink_key,
            index,
            (),
            now,
        )
        self.aggregator.add(ur, self.predict(hash_key), now, now + self.buffered_time)
        self.outstanding_records += 1
        self.outstanding_bytes += record_cost(data, partition_key)
        self.metrics.user_records_received += 1
        self._pump(now)

    def admit_many(self, records: Sequence[Any], start: int, sink_key: int, now: float) -> int:
        """Accept ``records[start:]`` until the budget is full; return the next index to admit.

        A record that fails validation is reported to the registered sink at once (code
        ``ValidationError``) and the others go on; one over the stream's limit that a raised
        limit would take goes to ``too_large`` instead.
        """
        sink = self.sinks[sink_key]
        config = self.config
        room_records = config.max_outstanding_records - self.outstanding_records
        room_bytes = config.max_outstanding_bytes - self.outstanding_bytes
        force_first = not self.outstanding_records
        max_record_bytes = self.record_bytes
        self._sync_aggregate_size()
        predict = self.predict
        validate = validate_record
        deadline = now + self.buffered_time
        groups: dict[str | None, list[UserRecord]] = {}
        group_of = groups.get
        taken = 0
        taken_bytes = 0
        next_index = len(records)
        for index in range(start, next_index):
            rec = records[index]
            try:
                if len(rec) == 2:
                    data, pk = rec
                    ehk = None
                else:
                    data, pk, ehk = rec
                hash_key = validate(data, pk, ehk, max_record_bytes)
            except RecordTooLargeError as exc:
                if self.may_fit_later(exc.size):
                    self.too_large.append(index)
                else:
                    sink.failed(index, VALIDATION_ERROR, f"data: {self.refusal(exc.size)}", ())
                continue
            except ValidationError as exc:
                sink.failed(index, VALIDATION_ERROR, str(exc), ())
                continue
            except (TypeError, ValueError) as exc:
                sink.failed(index, VALIDATION_ERROR, malformed_record(rec, exc), ())
                continue
            cost = PAYLOAD_COPIES * (len(data) + len(pk)) + RECORD_OVERHEAD_BYTES
            if (taken >= room_records or taken_bytes + cost > room_bytes) and not (
                force_first and not taken
            ):
                next_index = index
                break
            if type(data) is not bytes:
                data = bytes(data)
            ur = (
                hash_key,
                data,
                pk,
                None if ehk is None else str(hash_key),
                sink_key,
                index,
                (),
                now,
            )
            shard_id = predict(hash_key)
            group = group_of(shard_id)
            if group is None:
                groups[shard_id] = [ur]
            else:
                group.append(ur)
            taken += 1
            taken_bytes += cost
        extend = self.aggregator.extend
        for shard_id, group in groups.items():
            extend(shard_id, group, now, deadline)
        self.outstanding_records += taken
        self.outstanding_bytes += taken_bytes
        self.metrics.user_records_received += taken
        self._pump(now)
        return next_index

    # -- time and flushing -----------------------------------------------------------------

    def poll(self, now: float) -> None:
        """Move everything whose time has come one stage on."""
        if self.flushing:
            self.aggregator.flush()
        else:
            self.aggregator.poll(now)
        self._pump(now)
        if self._drain_limiter(now):
            self._release()
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
        self._release()
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
        self._release()
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
        self._release()

    def fail_all(self, code: str, message: str, now: float) -> int:
        """Fail every unfinished record (shutdown timeout, crash); return how many."""
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
        self._release()
        return len(records)

    # -- internals ---------------------------------------------------------------------------

    def _sync_aggregate_size(self) -> None:
        """An aggregate may weigh ``aggregation_max_size``, and never more than the stream
        takes (its limit may have changed since the last record)."""
        self.aggregator.max_size = min(self.config.aggregation_max_size, self.record_limit.bytes)

    def _apply(self, decisions: RetryDecisions, now: float) -> None:
        """Do what the retrier decided: stop on a fatal error, slow throttled shards down, put
        retries back (in front of later records with ``preserve_order``)."""
        if decisions.fatal is not None:
            code, message = decisions.fatal
            self.failure = decisions.fatal
            self.retrier.fail_as_they_are(decisions.retries + decisions.alone, code, message)
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
            add(ur, predict(ur[HASH]), now, deadline)
        for ur in decisions.alone:
            self.aggregator.alone((ur,), predict(ur[HASH]), now, deadline)

    def _retry_first(
        self, records: list[UserRecord], now: float, deadline: float, *, alone: bool = False
    ) -> None:
        """Queue retried records ahead of everything their shard has waiting, in their order
        (``preserve_order``): a later record of the same key must not overtake them."""
        by_shard: dict[str | None, list[UserRecord]] = {}
        for ur in records:
            by_shard.setdefault(self.predict(ur[HASH]), []).append(ur)
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
        self._release()

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
            self._release()

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

    def _release(self) -> None:
        retrier = self.retrier
        if retrier.released_records:
            self.outstanding_records -= retrier.released_records
            self.outstanding_bytes -= retrier.released_bytes
            retrier.released_records = 0
            retrier.released_bytes = 0


def malformed_record(record: object, exc: Exception) -> str:
    """Why a ``put_many`` entry is not a record: not a tuple, or which element is missing or
    how many are too many (``exc``, what unpacking it raised, when its shape is right)."""
    problem = shape_problem(record, ("data", "partition_key", "explicit_hash_key"), 2)
    return (
        "record: must be a (data, partition_key[, explicit_hash_key]) tuple; "
        f"{problem or f'{type(exc).__name__}: {exc}'}"
    )


def record_cost_of(record: Any) -> int:
    """``record_cost`` of a ``put_many`` entry, as ``admit_many`` will count it; 0 for an entry
    too malformed to count (``admit_many`` refuses it without taking room)."""
    try:
        return record_cost(record[0], record[1])
    except Exception:
        return 0
