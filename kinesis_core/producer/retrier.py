"""Classifies every PutRecords outcome: finish, retry or fail each user record.

What a failure means comes from the one error table (:func:`kinesis_core.aws.classify.classify`):

- The request failed for credentials or permissions (``ErrorKind.AUTH``, HTTP 401/403): no
  retry can fix it. The producer stops, and every record it holds fails with that error at
  once (``fatal``).
- The request failed with an error the table calls fatal (``FATAL`` by its code: the stream's
  KMS key is disabled, gone or unusable): the stream's trouble, not a record's, so every
  record of the request fails with it, neither split nor retried; the producer goes on (a key
  fixed meanwhile lets the next records through).
- The request was refused as invalid (``INVALID``, or an unknown 4xx): the service may be
  pinning one bad record on the whole request. A request of several Kinesis records is split
  in two halves, sent again (``resend``), until the record it refuses is alone; that one fails
  with the service's message, never retried, and the others go through. An aggregate refused
  on its own is taken apart: its user records go again one by one (``alone``).
- The request was throttled: with ``fail_if_throttled`` every record fails, otherwise every
  record is retried and the limiter slows its shard down. Any other request failure (no
  answer, a 5xx, the stream busy or gone): every record is retried, and the pipeline backs the
  whole endpoint off (``request_failed``).
- A record was written where it was predicted, or nothing was predicted, or it is a plain
  record (Kinesis put it where its own hash key belongs): success.
- An aggregate was written to another shard: success when that shard's hash range (from the
  shard map, refreshed if need be) holds every user record of it; otherwise retry **every**
  user record of it (``Wrong Shard``). While the range is unknown the aggregate waits for the
  refreshed map (``landings``), neither finished nor retried. The map is invalidated once.
- A record failed alone: throttled (fail it with ``fail_if_throttled``, else retry and slow the
  shard), invalid (fail it, never retried; an aggregate is taken apart), auth (``fatal``), or
  anything else (retry, and back that shard off: ``failed_shards``).

A retry first appends the attempt to the record's bounded history. A record whose TTL has run
out fails with a last attempt coded ``Expired`` that says what it was waiting for and carries
its last error; the others go back to the aggregator, re-predicted, with a deadline of half
``record_max_buffered_time``. The wrong-shard rule retries the whole aggregate where the KPL
retries only the out-of-range records: a KCL reader drops an aggregate with any out-of-range
sub-record, so the in-range ones would be reported written and never read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import Any

import msgspec

from kinesis_core.aws.classify import ERROR_CODES, RECORD_COUNT_MISMATCH, ErrorKind, classify
from kinesis_core.producer.config import record_cost, records_cost
from kinesis_core.producer.items import KinesisRecordOut, PutBatch, UserRecord
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.result import (
    EXPIRED,
    WRONG_SHARD,
    Attempt,
    History,
    RecordSink,
    add_attempt,
    attempt_count,
    last_failure,
)

_ended_at = attrgetter("ended_at")

_BACK_OFF = frozenset(
    {
        ErrorKind.TRANSIENT,
        ErrorKind.IN_USE,
        ErrorKind.NOT_FOUND,
        ErrorKind.EXPIRED,
        ErrorKind.CONFLICT,
    }
)
"""Request-level failures that a later attempt may get past: retried after a backoff."""

_WAITING_FOR = {
    ErrorKind.IN_USE: "the stream to become ACTIVE (it is being created or updated)",
    ErrorKind.NOT_FOUND: "the stream to exist",
    ErrorKind.THROTTLED: "the shard's throughput to free up",
}
"""What a record retried after an error of this kind waits for (default: a retry backoff)."""


def latest_failure(records: Iterable[UserRecord]) -> Attempt | None:
    """The most recent failed attempt in the histories of ``records`` (None if none failed)."""
    failures = [f for f in (last_failure(ur.attempts) for ur in records) if f is not None]
    return max(failures, key=_ended_at, default=None)


def expiry_message(record_ttl: float, waiting_for: str, records: list[UserRecord]) -> str:
    """The message of an ``Expired`` result: the TTL, what the records were waiting for, and
    the latest error of their histories (or that none of them was ever sent)."""
    message = f"record TTL of {record_ttl:g} s ran out while waiting for {waiting_for}"
    last = latest_failure(records)
    if last is None:
        return f"{message}; it was never sent"
    return f"{message}; last error: {last.error_code}: {last.error_message}"


def waiting_for_retry(code: str | None, status: int | None = None) -> str:
    """What a record retried after failing with ``code`` waits for."""
    return _WAITING_FOR.get(classify(code, status), "its next attempt (a retry backoff)")


@dataclass(frozen=True)
class SendOutcome:
    """What the sender observed for one PutRecords request.

    Exactly one of ``error`` (a request-level ``(code, message)``, with the HTTP ``status``
    when there was an answer) and ``records`` (the response's per-record entries, aligned with
    the request) is set.
    """

    started_at: float
    ended_at: float
    records: list[dict[str, Any]] | None = None
    error: tuple[str, str] | None = None
    status: int | None = None


@dataclass(frozen=True)
class Landing:
    """An aggregate written to a shard whose hash range the shard map does not know yet."""

    kr: KinesisRecordOut
    shard_id: str
    sequence_number: str
    outcome: SendOutcome


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
    failed_shards: set[str] = field(default_factory=set)
    """Predicted shards with a record that failed and will be retried: back them off."""
    ok_shards: set[str] = field(default_factory=set)
    """Predicted shards that took a record: their backoff starts over."""
    request_failed: bool = False
    """The whole request failed in a way a later attempt may get past: back the endpoint off."""
    answered: bool = False
    """The service answered with per-record results: the endpoint works."""
    resend: list[PutBatch] = field(default_factory=list)
    """Halves of a request the service refused as invalid: send them again, first."""
    alone: list[UserRecord] = field(default_factory=list)
    """User records of an aggregate the service refused: send each again as a plain record."""
    landings: list[Landing] = field(default_factory=list)
    """Aggregates written to a shard the map does not know: decide once it does."""
    fatal: tuple[str, str] | None = None
    """``(code, message)`` of an error no retry fixes: stop the producer, fail everything
    (the records it was pinned on are among ``retries``)."""


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
        if metrics.on_request is not None:
            metrics.on_request(batch, outcome)
        entries = outcome.records
        error = outcome.error
        if error is None and (entries is None or len(entries) != len(batch.records)):
            got = "no" if entries is None else len(entries)
            error = (
                RECORD_COUNT_MISMATCH,
                f"sent {len(batch.records)} records, the response has {got}",
            )
        if error is not None:
            code, message = error
            self._request_failed(batch, code, message, outcome, now, decisions)
            return decisions
        assert entries is not None  # no entries is a RECORD_COUNT_MISMATCH error, above
        decisions.answered = True
        for kr, entry in zip(batch.records, entries, strict=True):
            sequence_number = entry.get("SequenceNumber")
            if sequence_number is None:
                code = entry.get("ErrorCode") or "Unknown"
                message = entry.get("ErrorMessage") or ""
                self._record_failed(kr, code, message, outcome, now, decisions)
                continue
            actual = entry["ShardId"]
            predicted = kr.shard_id
            decisions.ok_shards.add(predicted or actual)
            if predicted is not None and predicted != actual:
                decisions.invalidations.append((outcome.started_at, predicted))
                if len(kr.records) > 1:
                    landing = Landing(kr, actual, sequence_number, outcome)
                    if not self.resolve(landing, now, decisions):
                        decisions.landings.append(landing)
                    continue
            self._succeed(kr, actual, sequence_number, outcome)
        return decisions

    def resolve(self, landing: Landing, now: float, decisions: RetryDecisions) -> bool:
        """Decide an aggregate written to another shard than predicted, if the map knows that
        shard's range: finish it (every record in range) or retry all of it. False (nothing
        done) while the range is unknown."""
        hash_range = self.hash_range(landing.shard_id)
        if hash_range is None:
            return False
        kr = landing.kr
        start, end = hash_range
        if all(start <= ur.hash_key <= end for ur in kr.records):
            self._succeed(kr, landing.shard_id, landing.sequence_number, landing.outcome)
            return True
        self.metrics.error(WRONG_SHARD)
        message = (
            f"predicted {kr.shard_id} but written to {landing.shard_id}, whose hash key range "
            "does not hold every record of the aggregate (a KCL reader drops it whole)"
        )
        self._retry(kr, WRONG_SHARD, message, landing.shard_id, landing.outcome, now, decisions)
        return True

    def give_up(self, landing: Landing, now: float, decisions: RetryDecisions, why: str) -> None:
        """Retry an aggregate whose landing shard's range could not be learned (``why``): a
        duplicate at worst, where counting it written could lose it for KCL readers."""
        self.metrics.error(WRONG_SHARD)
        message = (
            f"predicted {landing.kr.shard_id} but written to {landing.shard_id}, whose hash key "
            f"range is unknown ({why}): sent again, as a KCL reader may drop it"
        )
        self._retry(
            landing.kr, WRONG_SHARD, message, landing.shard_id, landing.outcome, now, decisions
        )

    def expire(self, kr: KinesisRecordOut, now: float, waiting_for: str) -> None:
        """Fail every record of ``kr`` with ``Expired``: its TTL ran out while it waited for
        ``waiting_for`` (the message adds the last error of its history)."""
        message = expiry_message(self.record_ttl, waiting_for, kr.records)
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
            self._fail(ur, code, message, add_attempt(ur.attempts, attempt))

    def fail_as_they_are(self, records: list[UserRecord], code: str, message: str) -> None:
        """Finish ``records`` as failed with the history they have (its last attempt says
        why)."""
        self.metrics.error(code, 1)
        for ur in records:
            self._fail(ur, code, message, ur.attempts)

    def _fail(self, ur: UserRecord, code: str, message: str, attempts: History) -> None:
        sink = self.sinks.get(ur.sink)
        if sink is not None:
            sink.failed(ur.index, code, message, attempts)
        self._release(ur)
        metrics = self.metrics
        metrics.user_records_failed += 1
        metrics.failed_by_code[code] = metrics.failed_by_code.get(code, 0) + 1
        metrics.retries_per_record.add(attempt_count(attempts) - 1)

    def _request_failed(
        self,
        batch: PutBatch,
        code: str,
        message: str,
        outcome: SendOutcome,
        now: float,
        decisions: RetryDecisions,
    ) -> None:
        kind = classify(code, outcome.status)
        if kind in (ErrorKind.INVALID, ErrorKind.FATAL):
            self.metrics.error(code)
            attempt = Attempt(outcome.started_at, outcome.ended_at, False, code, message)
            if ERROR_CODES.get(code) is ErrorKind.FATAL:
                decisions.answered = True
                for kr in batch.records:
                    for ur in kr.records:
                        self._fail(ur, code, message, add_attempt(ur.attempts, attempt))
                return
            if len(batch.records) > 1:
                for kr in batch.records:
                    kr.records = [_with_attempt(ur, attempt) for ur in kr.records]
                decisions.resend.extend(batch.split())
                self.metrics.retried(code, batch.user_record_count)
            else:
                self._refused(batch.records[0], code, message, attempt, decisions)
            return
        decisions.request_failed = kind in _BACK_OFF
        for kr in batch.records:
            self._record_failed(kr, code, message, outcome, now, decisions, kind)

    def _record_failed(
        self,
        kr: KinesisRecordOut,
        code: str,
        message: str,
        outcome: SendOutcome,
        now: float,
        decisions: RetryDecisions,
        kind: ErrorKind | None = None,
    ) -> None:
        """A Kinesis record failed (alone, or with its whole request when ``kind`` is given)."""
        self.metrics.error(code)
        request_level = kind is not None
        if kind is None:
            kind = classify(code)
        attempt = Attempt(outcome.started_at, outcome.ended_at, False, code, message)
        if kind is ErrorKind.THROTTLED:
            if kr.shard_id is not None:
                decisions.throttled.add(kr.shard_id)
            if self.fail_if_throttled:
                for ur in kr.records:
                    self._fail(ur, code, message, add_attempt(ur.attempts, attempt))
                return
        elif kind is ErrorKind.AUTH:
            decisions.fatal = (code, message)  # its records fail with the rest, as retries
        elif kind in (ErrorKind.INVALID, ErrorKind.FATAL) and not request_level:
            self._refused(kr, code, message, attempt, decisions)
            return
        elif not request_level and kr.shard_id is not None:
            decisions.failed_shards.add(kr.shard_id)
        self._retry(kr, code, message, None, outcome, now, decisions)

    def _refused(
        self,
        kr: KinesisRecordOut,
        code: str,
        message: str,
        attempt: Attempt,
        decisions: RetryDecisions,
    ) -> None:
        """The service refused ``kr`` itself for good: fail a plain record with its message;
        take an aggregate apart, so that its records go again one by one."""
        if len(kr.records) > 1:
            decisions.alone.extend(_with_attempt(ur, attempt) for ur in kr.records)
            self.metrics.retried(code, len(kr.records))
            return
        for ur in kr.records:
            self._fail(ur, code, message, add_attempt(ur.attempts, attempt))

    def _succeed(
        self, kr: KinesisRecordOut, shard_id: str, sequence_number: str, outcome: SendOutcome
    ) -> None:
        success = Attempt(outcome.started_at, outcome.ended_at, True, shard_id=shard_id)
        records = kr.records
        retried = 0
        n = len(records)
        # The usual case, every record on its first trip, found in one pass: then one sink
        # call per caller's run of records (an aggregate holds the end of one batch and the
        # start of the next) instead of one per record.
        indexes = [ur.index for ur in records if not ur.attempts]
        if len(indexes) == n:
            first: History = (success,)
            sinks = self.sinks
            sub = 0
            for sink_key, run in groupby([ur.sink for ur in records]):
                end = sub + len(list(run))
                sinks[sink_key].succeeded_run(
                    indexes if end - sub == n else indexes[sub:end],
                    sub,
                    shard_id,
                    sequence_number,
                    first,
                )
                sub = end
        else:
            retried = self._succeed_each(records, shard_id, sequence_number, success)
        self.released_records += n
        self.released_bytes += records_cost(kr.payload, n)
        metrics = self.metrics
        if n > retried:
            metrics.retries_per_record.add(0, n - retried)
        metrics.user_records_put += n
        metrics.user_records_data_put += kr.data_bytes
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
        sequence_number: str,
        success: Attempt,
    ) -> int:
        """``_succeed`` record by record, for an aggregate holding retried records (each keeps
        its own attempt history); returns how many were retried."""
        sinks = self.sinks
        retried = 0
        first: History = (success,)
        sink_key = records[0].sink
        succeeded = sinks[sink_key].succeeded
        for sub, ur in enumerate(records):
            if ur.sink != sink_key:  # records of one batch share a sink: look it up once
                sink_key = ur.sink
                succeeded = sinks[sink_key].succeeded
            prior = ur.attempts
            if prior:
                retried += 1
                self.metrics.retries_per_record.add(attempt_count(prior))
                succeeded(ur.index, shard_id, sequence_number, sub, add_attempt(prior, success))
            else:
                succeeded(ur.index, shard_id, sequence_number, sub, first)
        return retried

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
            retried = _with_attempt(ur, attempt)
            if now - ur.arrival >= ttl:
                expired.append(retried)
            else:
                retries.append(retried)
        if len(expired) < len(kr.records):
            self.metrics.retried(code, len(kr.records) - len(expired))
        if expired:
            waiting_for = waiting_for_retry(code, outcome.status)
            self.fail_records(expired, EXPIRED, expiry_message(ttl, waiting_for, expired), now)

    def _release(self, ur: UserRecord) -> None:
        self.released_records += 1
        self.released_bytes += record_cost(ur.data, ur.partition_key)


def _with_attempt(ur: UserRecord, attempt: Attempt) -> UserRecord:
    """``ur`` with ``attempt`` added to its history."""
    return msgspec.structs.replace(ur, attempts=add_attempt(ur.attempts, attempt))
