"""The Beam metrics of both transforms: the figures of :mod:`kinesis_core.telemetry.names`
(the same as the OpenTelemetry ones) under one namespace, so that they show in the runner's UI.

Beam metrics have no attributes: the ones that matter go into the name, Prometheus style
(``aws.kinesis.consumer.lag{messaging.destination.partition.id=shardId-000000000000}``), and
the stream is the step's. Beam distributions hold integers: times are in milliseconds there.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from apache_beam.metrics.execution import MetricsEnvironment
from apache_beam.metrics.metric import Metrics

from kinesis_core.telemetry.figures import Attrs, producer_figures
from kinesis_core.telemetry.names import (
    CHECKPOINTS,
    CONSUMED,
    CONSUMER_DATA,
    DESTINATION,
    ERROR_TYPE,
    LAG,
    MESSAGING_SYSTEM,
    OPERATION,
    OPERATION_DURATION,
    PARTITION,
    PER_KINESIS_RECORD,
    PRODUCER_DATA,
    PRODUCER_PENDING,
    PRODUCER_RECEIVED,
    RECORD_AGE,
    SENT,
    SUBSCRIPTION_OUTCOME,
    SUBSCRIPTIONS,
    SubscriptionOutcome,
    beam_name,
)
from kinesis_core.telemetry.recorder import ConsumerRecorder

if TYPE_CHECKING:
    from kinesis_core.producer.metrics import MetricsSnapshot

NAMESPACE = "kinesis_connectors"
"""The namespace of every metric of ReadFromKinesis and WriteToKinesis (the OpenTelemetry
instrumentation scope's name too)."""
WATERMARK = "aws.kinesis.beam.watermark"
"""Beam only: a shard's watermark (milliseconds since the epoch), per shard."""
BACKLOG = "aws.kinesis.beam.backlog"
"""Beam only: a shard's estimated unread bytes (beam_kinesis.backlog), per shard."""
DISCOVERED = "aws.kinesis.beam.discovered_shards"
"""Beam only: shards a shard discovery output, each to be read by its own restriction."""
RESTRICTION_SHARDS = "aws.kinesis.beam.restriction.shards"
"""Beam only: the shards a restriction holds when a ``process`` call starts (distribution)."""
EARLY_CALLS_WASTED = "aws.kinesis.beam.read.early_calls_wasted"
"""Beam only: answers to a restriction's first calls sent ahead by the process that split it
and dropped untaken (beam_kinesis._first_calls)."""
WRITE_DURATION = "aws.kinesis.beam.write.duration"
"""Beam only: milliseconds from a chunk's hand-off to the producer until all of it is
acknowledged."""
_SHARED = {MESSAGING_SYSTEM, DESTINATION}
"""Attributes every figure has: the step says them."""
_PER_BUNDLE = {SENT, PRODUCER_DATA, PRODUCER_RECEIVED, PRODUCER_PENDING}
"""Producer figures the sink counts per bundle itself (exactly, committed with the bundle)."""


class BeamMetrics(ConsumerRecorder):
    """Beam counters, gauges and distributions by figure; made on first use."""

    enabled = True

    def __init__(self) -> None:
        self._made: dict[tuple[str, str], Any] = {}
        self._late: collections.deque[tuple[str, float, str | None]] = collections.deque()

    def _metric(self, kind: str, name: str, attributes: dict[str, str] | None = None) -> Any:
        full = beam_name(name, attributes)
        metric = self._made.get((kind, full))
        if metric is None:
            make: Any = getattr(Metrics, kind)
            metric = self._made[(kind, full)] = make(NAMESPACE, full)
        return metric

    def counter(self, name: str, attributes: dict[str, str] | None = None) -> Any:
        return self._metric("counter", name, attributes)

    def distribution(self, name: str, attributes: dict[str, str] | None = None) -> Any:
        return self._metric("distribution", name, attributes)

    def gauge(self, name: str, attributes: dict[str, str] | None = None) -> Any:
        return self._metric("gauge", name, attributes)

    # -- the source ----------------------------------------------------------------------------

    def consumed(self, shard_id: str, records: int, nbytes: int, age_ms: int | None) -> None:
        """Records output by the source from ``shard_id`` (``age_ms``: how old the newest one
        is): counted in total and per shard."""
        shard = {PARTITION: shard_id}
        self.counter(CONSUMED).inc(records)
        self.counter(CONSUMER_DATA).inc(nbytes)
        self.counter(CONSUMED, shard).inc(records)
        self.counter(CONSUMER_DATA, shard).inc(nbytes)
        if age_ms is not None:
            self.distribution(RECORD_AGE).update(max(age_ms, 0))

    def lag(self, shard_id: str, millis_behind_latest: int) -> None:
        self.gauge(LAG, {PARTITION: shard_id}).set(millis_behind_latest)

    def backlog(self, shard_id: str, nbytes: int) -> None:
        self.gauge(BACKLOG, {PARTITION: shard_id}).set(nbytes)

    def discovered(self, shards: int) -> None:
        if shards:
            self.counter(DISCOVERED).inc(shards)

    def restriction_shards(self, shards: int) -> None:
        self.distribution(RESTRICTION_SHARDS).update(shards)

    def early_calls_wasted(self, answers: int) -> None:
        if answers:
            self.counter(EARLY_CALLS_WASTED).inc(answers)

    def watermark(self, shard_id: str, millis: int) -> None:
        self.gauge(WATERMARK, {PARTITION: shard_id}).set(millis)

    def operation(self, shard_id: str, operation: str, seconds: float, error: str | None) -> None:
        if MetricsEnvironment.current_container() is None:  # type: ignore[no-untyped-call]
            # Timed on the read-ahead thread, where Beam would drop the figure: the bundle's
            # thread records it when it takes the answer (settle).
            self._late.append((operation, seconds, error))
            return
        self._operation(operation, seconds, error)

    def settle(self) -> None:
        """Record the figures timed off the bundle's thread (calls read ahead)."""
        late = self._late
        while late:
            self._operation(*late.popleft())

    def _operation(self, operation: str, seconds: float, error: str | None) -> None:
        attributes = {OPERATION: operation}
        if error is not None:
            attributes[ERROR_TYPE] = error
        self.distribution(OPERATION_DURATION, attributes).update(int(seconds * 1000))

    def subscription(
        self, shard_id: str, outcome: SubscriptionOutcome, error: str | None = None
    ) -> None:
        attributes = {SUBSCRIPTION_OUTCOME: outcome.value}
        if error is not None:
            attributes[ERROR_TYPE] = error
        self.counter(SUBSCRIPTIONS, attributes).inc()

    def checkpoint(self, shard_id: str) -> None:
        self.counter(CHECKPOINTS).inc()

    # -- the sink ------------------------------------------------------------------------------

    def written(self, records: int, nbytes: int, failed_by_code: dict[str, int]) -> None:
        """What one bundle wrote, and what of it failed for good, by code."""
        if records:
            self.counter(SENT).inc(records)
            self.counter(PRODUCER_DATA).inc(nbytes)
        for code, n in failed_by_code.items():
            self.counter(SENT, {ERROR_TYPE: code}).inc(n)

    def aggregates(self, sizes: Sequence[int], chunk_ms: Sequence[float]) -> None:
        per_aggregate = self.distribution(PER_KINESIS_RECORD)
        for size in sizes:
            per_aggregate.update(size)
        duration = self.distribution(WRITE_DURATION)
        for ms in chunk_ms:
            duration.update(int(ms))

    def producer(self, delta: MetricsSnapshot) -> None:
        """The shared producer's counters since the last report of this process."""
        for name, attrs, value in producer_figures(delta):
            if name not in _PER_BUNDLE and value:
                self.counter(name, _own(attrs)).inc(int(value))


def _own(attrs: Attrs) -> dict[str, str]:
    """The attributes a name carries: not those of the stream (the step's), nor the operation
    of a producer figure (always PutRecords)."""
    return {k: v for k, v in attrs if k not in _SHARED and k != OPERATION}
