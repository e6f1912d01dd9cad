"""Classifies every PutRecords outcome: finish, retry or fail each user record (seed 003).

- The request failed with ProvisionedThroughputExceededException and ``fail_if_throttled``:
  fail every user record. Any other request failure: retry every user record.
- A record was written where it was predicted, or nothing was predicted: success.
- A record was written to another shard whose range holds every user record's hash key (a
  child after a split): success, and invalidate the shard map.
- A record was written to another shard and some hash key is outside its range (or the range
  is unknown): retry **every** user record of the aggregate ("Wrong Shard"), invalidate once.
- A record failed with ProvisionedThroughputExceededException and ``fail_if_throttled``:
  fail it. Any other per-record error: retry.

A retry first appends the attempt to the record's history. A record whose TTL has run out fails
with a second attempt coded ``Expired``; the others go back to the aggregator, re-predicted, with
a deadline of half ``record_max_buffered_time``. The wrong-shard rule retries the whole aggregate
where the KPL retries only the out-of-range records: a KCL reader drops an aggregate with any
out-of-range sub-record, so the in-range ones would be reported written and never read.
Throttling (per record or for the whole request) is also reported to the limiter, which slows
the shard down.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any

from kinesis_core.producer.config import PAYLOAD_COPIES, RECORD_OVERHEAD_BYTES, record_cost
from kinesis_core.producer.items import (
    ARRIVAL,
    ATTEMPTS,
    DATA,
    EXPLICIT_HASH_KEY,
    HASH,
    INDEX,
    PARTITION_KEY,
    SINK,
    KinesisRecordOut,
    PutBatch,
    UserRecord,
)
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.result import (
    EXPIRED,
    RECORD_COUNT_MISMATCH,
    THROTTLED,
    WRONG_SHARD,
    Attempt,
    RecordSink,
)

_attempts_of = itemgetter(ATTEMPTS)
_sink_of = itemgetter(SINK)
_index_of = itemgetter(INDEX)
_data_of = itemgetter(DATA)
_partition_key_of = itemgetter(PARTITION_KEY)


@dataclass(frozen=True)
class SendOutcome:
    """What the sender observed for one PutRecords request.

    Exactly one of ``error`` (a request-level ``(code, message)``) and ``records`` (the
    response's per-record entries, aligned with the request) is set.
    """

    started_at: float
    ended_at: float
    records: list[dict[str, Any]] | None = None
    error: tuple[str, str] | None = None


@dataclass
class RetryDecisions:
    """What the caller must do after a batch was classified."""

    retries: list[UserRecord] = field(default_factory=list)
    """Records to put back into the aggregator (re-predicted), due by ``retry_deadline``."""
    retry_deadline: float = 0.0
    invalidations: list[tuple[float, str | None]] = field(default_factory=list)
    """``(seen_at, predicted_shard)`` pairs for ``ShardMap.invalidate``."""
    throttled: set[str] = field(default_factory=set)
    """Predicted shards Kinesis throttled, for the limiter."""


HashRangeFn = Callable[[str], "tuple[int, int] | None"]


class Retrier:
    """Sans-I/O classifier; finishes records through their sinks and counts what it released."""

    def __init__(
        self,
        *,
        sinks: Mapping[int, RecordSink],
        hash_range: HashRangeFn,
        metrics: ProducerMetrics,
        record_ttl: float,
        retry_delay: float,
        fail_if_throttled: bool,
    ) -> None:
        self.sinks = sinks
        """The caller's registry: sink key (a record's ``SINK`` field) -> sink."""
        self.hash_range = hash_range
        self.metrics = metrics
        self.record_ttl = record_ttl
        self.retry_delay = retry_delay
        self.fail_if_throttled = fail_if_throttled
        self.released_records = 0
        """User records finished since the caller last reset this (for the budget)."""
        self.released_bytes = 0

    def handle(self, batch: PutBatch, outcome: SendOutcome, now: float) -> RetryDecisions:
        """Classify the outcome of ``batch`` at time ``now``."""
        decisions = RetryDecisions(retry_deadline=now + self.retry_delay)
        metrics = self.metrics
        metrics.put_records_requests += 1
        metrics.request_time.add((outcome.ended_at - outcome.started_at) * 1000.0)
        metrics.kinesis_records_per_put_records_request.add(len(batch.records))
        metrics.user_records_per_put_records_request.add(batch.user_record_count)
        entries = outcome.records
        error = outcome.error
        if error is None and (entries is None or len(entries) != len(batch.records)):
            got = "no" if entries is None else len(entries)
            error = (
                RECORD_COUNT_MISMATCH,
                f"sent {len(batch.records)} records, the response has {got}",
            )
        if error is not None or entries is None:
            code, message = error or (RECORD_COUNT_MISMATCH, "")
            for kr in batch.records:
                self._failed_attempt(kr, code, message, None, outcome, now, decisions)
            return decisions
        for kr, entry in zip(batch.records, entries, strict=True):
            sequence_number = entry.get("SequenceNumber")
            if sequence_number is None:
                code = entry.get("ErrorCode") or "Unknown"
                message = entry.get("ErrorMessage") or ""
                self._failed_attempt(kr, code, message, None, outcome, now, decisions)
                continue
            actual = entry["ShardId"]
            predicted = kr.shard_id
            if predicted is not None and predicted != actual:
                decisions.invalidations.append((outcome.started_at, predicted))
                if not self._all_in_range(kr, actual):
                    message = (
                        f"predicted {predicted} but written to {actual}, whose hash key range "
                        "does not hold every record of the aggregate"
                    )
                    metrics.error(WRONG_SHARD)
                    self._retry(kr, WRONG_SHARD, message, actual, outcome, now, decisions)
                    continue
            self._succeed(kr, actual, int(sequence_number), outcome)
        return decisions

    def expire(self, kr: KinesisRecordOut, now: float, message: str) -> None:
        """Fail every record of ``kr`` with ``Expired`` (it timed out before being sent)."""
        self.fail_records(kr.records, EXPIRED, message, now)

    def fail_records(self, records: list[UserRecord], code: str, message: str, now: float) -> None:
        """Finish ``records`` as failed with one last attempt coded ``code``.

        A record whose sink is no longer registered already has its result (this is the
        clean-up after a crash) and is skipped.
        """
        attempt = Attempt(now, now, False, code, message)
        metrics = self.metrics
        metrics.error(code, 1)
        if code == EXPIRED:
            metrics.user_record_expired += len(records)
        for ur in records:
            self._fail(ur, code, message, ur[ATTEMPTS] + (attempt,))

    def _fail(self, ur: UserRecord, code: str, message: str, attempts: tuple[Attempt, ...]) -> None:
        sink = self.sinks.get(ur[SINK])
        if sink is not None:
            sink.failed(ur[INDEX], code, message, attempts)
        self._release(ur)
        self.metrics.user_records_failed += 1
        self.metrics.retries_per_record.add(len(attempts) - 1)

    def _all_in_range(self, kr: KinesisRecordOut, shard_id: str) -> bool:
        hash_range = self.hash_range(shard_id)
        if hash_range is None:
            return False
        start, end = hash_range
        return all(start <= ur[HASH] <= end for ur in kr.records)

    def _succeed(
        self, kr: KinesisRecordOut, shard_id: str, sequence_number: int, outcome: SendOutcome
    ) -> None:
        first: tuple[Attempt, ...] = (
            Attempt(outcome.started_at, outcome.ended_at, True, shard_id=shard_id),
        )
        records = kr.records
        sinks = self.sinks
        retried = 0
        if not any(map(_attempts_of, records)):
            # The usual case (every record on its first trip): one sink call per run of one
            # caller's records instead of one per record, and the sums in C.
            data_bytes = sum(map(len, map(_data_of, records)))
            budget_bytes = data_bytes + sum(map(len, map(_partition_key_of, records)))
            sub = 0
            for sink_key, run in groupby(records, _sink_of):
                indexes = list(map(_index_of, run))
                sinks[sink_key].succeeded_run(indexes, sub, shard_id, sequence_number, first)
                sub += len(indexes)
        else:
            data_bytes, budget_bytes, retried = self._succeed_each(
                records, shard_id, sequence_number, first
            )
        n = len(records)
        self.released_records += n
        self.released_bytes += PAYLOAD_COPIES * budget_bytes + n * RECORD_OVERHEAD_BYTES
        metrics = self.metrics
        if n > retried:
            metrics.retries_per_record.add(0, n - retried)
        metrics.user_records_put += n
        metrics.user_records_data_put += data_bytes
        metrics.kinesis_records_put += 1
        metrics.kinesis_records_data_put += kr.size
        metrics.user_records_per_kinesis_record.add(n)
        metrics.buffering_time.add((outcome.started_at - kr.buffered_since) * 1000.0, n)
        by_shard = metrics.user_records_put_by_shard
        by_shard[shard_id] = by_shard.get(shard_id, 0) + n

    def _succeed_each(
        self,
        records: list[UserRecord],
        shard_id: str,
        sequence_number: int,
        first: tuple[Attempt, ...],
    ) -> tuple[int, int, int]:
        """``_succeed`` record by record, for an aggregate holding retried records (each keeps
        its own attempt history); returns the data bytes, the budget bytes and the retries."""
        sinks = self.sinks
        data_bytes = 0
        budget_bytes = 0
        retried = 0
        sink_key = records[0][SINK]
        succeeded = sinks[sink_key].succeeded
        for sub, ur in enumerate(records):
            if ur[SINK] != sink_key:  # records of one batch share a sink: look it up once
                sink_key = ur[SINK]
                succeeded = sinks[sink_key].succeeded
            prior = ur[ATTEMPTS]
            data = ur[DATA]
            data_bytes += len(data)
            budget_bytes += len(data) + len(ur[PARTITION_KEY])
            if prior:
                retried += 1
                self.metrics.retries_per_record.add(len(prior))
                succeeded(ur[INDEX], shard_id, sequence_number, sub, prior + first)
            else:
                succeeded(ur[INDEX], shard_id, sequence_number, sub, first)
        return data_bytes, budget_bytes, retried

    def _failed_attempt(
        self,
        kr: KinesisRecordOut,
        code: str,
        message: str,
        shard_id: str | None,
        outcome: SendOutcome,
        now: float,
        decisions: RetryDecisions,
    ) -> None:
        self.metrics.error(code)
        if code == THROTTLED and kr.shard_id is not None:
            decisions.throttled.add(kr.shard_id)
        if code == THROTTLED and self.fail_if_throttled:
            attempt = Attempt(outcome.started_at, outcome.ended_at, False, code, message, shard_id)
            for ur in kr.records:
                self._fail(ur, code, message, ur[ATTEMPTS] + (attempt,))
            return
        self._retry(kr, code, message, shard_id, outcome, now, decisions)

    def _retry(
        self,
        kr: KinesisRecordOut,
        code: str,
        message: str,
        shard_id: str | None,
        outcome: SendOutcome,
        now: float,
        decisions: RetryDecisions,
    ) -> None:
        attempt = Attempt(outcome.started_at, outcome.ended_at, False, code, message, shard_id)
        ttl = self.record_ttl
        retries = decisions.retries
        expired: list[UserRecord] = []
        for ur in kr.records:
            attempts = ur[ATTEMPTS] + (attempt,)
            retried: UserRecord = (
                ur[HASH],
                ur[DATA],
                ur[PARTITION_KEY],
                ur[EXPLICIT_HASH_KEY],
                ur[SINK],
                ur[INDEX],
                attempts,
                ur[ARRIVAL],
            )
            if now - ur[ARRIVAL] >= ttl:
                expired.append(retried)
            else:
                retries.append(retried)
        if expired:
            self.fail_records(
                expired,
                EXPIRED,
                f"record TTL of {ttl} s ran out; last error: {code}: {message}",
                now,
            )

    def _release(self, ur: UserRecord) -> None:
        self.released_records += 1
        self.released_bytes += record_cost(ur[DATA], ur[PARTITION_KEY])
