"""The producer's whole decision logic, sans-I/O: records and time in, requests to send out.

admit -> predict shard -> Aggregator -> Limiter -> Collector -> ``ready`` requests; a response
comes back through ``on_outcome`` -> Retrier -> finished records (their sinks) or retries (back
to the Aggregator). The asyncio driver only sends the ready requests, feeds the responses back
and calls ``poll`` when ``next_deadline`` comes. The Limiter sits before the Collector, as in
the KPL: a PutRecords request spans shards, so tokens are taken per shard, per Kinesis record,
before records are packed into requests.

The pipeline also keeps the memory budget: it counts accepted, unfinished records and bytes, and
``admit_many`` stops at the first record that does not fit so the driver can wait for room.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.errors import ValidationError
from kinesis_core.hashing import validate_record
from kinesis_core.producer.aggregator import Aggregator
from kinesis_core.producer.collector import Collector
from kinesis_core.producer.config import (
    PAYLOAD_COPIES,
    RECORD_OVERHEAD_BYTES,
    ProducerConfig,
    record_cost,
)
from kinesis_core.producer.items import ATTEMPTS, HASH, KinesisRecordOut, PutBatch, UserRecord
from kinesis_core.producer.limiter import Limiter
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.result import VALIDATION_ERROR, RecordSink
from kinesis_core.producer.retrier import HashRangeFn, Retrier, SendOutcome

PredictFn = Callable[[int], "str | None"]

LIMITER_EXPIRED = "Expiration reached while waiting in limiter"
CONNECTION_WAIT_EXPIRED = "Expiration reached while waiting for a free connection"


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
    ) -> None:
        self.config = config
        self.predict = predict
        self.metrics = metrics
        self.buffered_time = config.record_max_buffered_time
        self.aggregator = Aggregator(
            enabled=config.aggregation_enabled,
            max_size=config.aggregation_max_size,
            max_count=config.aggregation_max_count,
            record_ttl=config.record_ttl,
            builder_factory=builder_factory,
        )
        self.limiter = Limiter(config.rate_limit, adaptive=config.adaptive_rate_limit)
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

    def admit_one(
        self,
        data: bytes,
        partition_key: str,
        explicit_hash_key: str | None,
        hash_key: int,
        sink_key: int,
        now: float,
    ) -> None:
        """Accept one validated record (the caller checked ``has_room``) for a registered sink."""
        ur: UserRecord = (hash_key, data, partition_key, explicit_hash_key, sink_key, 0, (), now)
        self.aggregator.add(ur, self.predict(hash_key), now, now + self.buffered_time)
        self.outstanding_records += 1
        self.outstanding_bytes += record_cost(data, partition_key)
        self.metrics.user_records_received += 1
        self._pump(now)

    def admit_many(self, records: Sequence[Any], start: int, sink_key: int, now: float) -> int:
        """Accept ``records[start:]`` until the budget is full; return the next index to admit.

        A record that fails validation is reported to the registered sink at once (code
        ``ValidationError``) and the others go on.
        """
        sink = self.sinks[sink_key]
        config = self.config
        room_records = config.max_outstanding_records - self.outstanding_records
        room_bytes = config.max_outstanding_bytes - self.outstanding_bytes
        force_first = not self.outstanding_records
        max_record_bytes = config.max_record_bytes
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
            except ValidationError as exc:
                sink.failed(index, VALIDATION_ERROR, str(exc), ())
                continue
            except (TypeError, ValueError):
                sink.failed(
                    index,
                    VALIDATION_ERROR,
                    "record: must be a (data, partition_key[, explicit_hash_key]) tuple, "
                    f"got {type(rec).__name__}",
                    (),
                )
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
        wake = self.limiter.next_wakeup()
        if wake is not None and wake <= now:
            released, expired = self.limiter.drain(now)
            for kr in released:
                self._collect(kr, now)
            for kr in expired:
                self.retrier.expire(kr, now, LIMITER_EXPIRED)
            self._release()
        batch = self.collector.flush() if self.flushing else self.collector.poll(now)
        if batch is not None:
            self.ready.append(batch)

    def next_deadline(self) -> float | None:
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
        if not deadlines:
            return None
        if self.flushing and (self.aggregator.next_deadline() or len(self.collector)):
            return float("-inf")
        return min(deadlines)

    def next_batch(self, now: float) -> PutBatch | None:
        """The oldest ready request, now counted as in flight.

        A request can wait in ``ready`` for a free connection; Kinesis records whose TTL ran
        out meanwhile fail as Expired here rather than being written late, and a request
        left with none is skipped.
        """
        while self.ready:
            batch = self.ready.popleft()
            if any(kr.expiration <= now for kr in batch.records):
                live = []
                for kr in batch.records:
                    if kr.expiration <= now:
                        self.retrier.expire(kr, now, _with_last_error(kr))
                        batch.size -= kr.size
                    else:
                        live.append(kr)
                batch.records = live
                self._release()
                if not live:
                    continue
            self.in_flight.add(batch)
            return batch
        return None

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
        for shard_id in decisions.throttled:
            self.limiter.throttled(shard_id, now)
        add = self.aggregator.add
        predict = self.predict
        for ur in decisions.retries:
            add(ur, predict(ur[HASH]), now, decisions.retry_deadline)
        self.in_flight.discard(batch)
        self._release()
        self._pump(now)
        return decisions.invalidations

    def fail_batch(self, batch: PutBatch, code: str, message: str, now: float) -> None:
        """Fail the records of one request whose outcome will never come (a cancelled send)."""
        self.in_flight.discard(batch)
        if batch.abandoned:
            return
        batch.abandoned = True
        records = [ur for kr in batch.records for ur in kr.records]
        self.retrier.fail_records(records, code, message, now)
        self._release()

    def fail_all(self, code: str, message: str, now: float) -> int:
        """Fail every unfinished record (shutdown timeout, crash); return how many."""
        records = self.aggregator.take_all()
        krs: list[KinesisRecordOut] = list(self.aggregator.sealed)
        self.aggregator.sealed = []
        krs.extend(self.limiter.take_all())
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


def _with_last_error(kr: KinesisRecordOut) -> str:
    """The expiry message, naming the last failed attempt when there was one."""
    attempts = kr.records[0][ATTEMPTS]
    if not attempts:
        return CONNECTION_WAIT_EXPIRED
    last = attempts[-1]
    return f"{CONNECTION_WAIT_EXPIRED}; last error: {last.error_code}: {last.error_message}"


def record_cost_of(record: Any) -> int:
    """``record_cost`` of a ``put_many`` entry, as ``admit_many`` will count it; 0 for an entry
    too malformed to count (``admit_many`` refuses it without taking room)."""
    try:
        return record_cost(record[0], record[1])
    except Exception:
        return 0
