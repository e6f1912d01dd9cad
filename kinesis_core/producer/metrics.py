"""Producer metrics under the KPL's names (``aws/metrics/metrics_constants.cc``).

Counters are bumped once per Kinesis record or per PutRecords call, never per user record on
the hot path, so keeping them costs nothing measurable. ``snapshot()`` returns an immutable copy;
an exporter (CloudWatch, logs) gets one every ``metrics_interval`` through the hook given to the
producer, and can diff two snapshots with :meth:`MetricsSnapshot.since`. With telemetry on
(``ProducerConfig(telemetry=...)``), OpenTelemetry reads the same counters when it collects
(:mod:`kinesis_core.telemetry.otel`) and ``on_request`` records each call's histograms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinesis_core.producer.items import PutBatch


@dataclass(frozen=True)
class Distribution:
    """Count, sum, min and max of the values a metric took."""

    count: int = 0
    sum: float = 0.0
    min: float | None = None
    max: float | None = None

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "count": self.count,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
        }


class _Accumulator:
    """Mutable twin of :class:`Distribution`; ``add(value, weight)`` counts a value weight times."""

    __slots__ = ("count", "max", "min", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.min: float | None = None
        self.max: float | None = None

    def add(self, value: float, weight: int = 1) -> None:
        self.count += weight
        self.sum += value * weight
        if self.min is None or value < self.min:
            self.min = value
        if self.max is None or value > self.max:
            self.max = value

    def freeze(self) -> Distribution:
        return Distribution(self.count, self.sum, self.min, self.max)


@dataclass(frozen=True)
class MetricsSnapshot:
    """Cumulative producer metrics at one instant (``taken_at``, ``time.monotonic()``)."""

    stream_name: str
    taken_at: float
    user_records_received: int = 0
    user_records_pending: int = 0
    user_records_put: int = 0
    user_records_failed: int = 0
    user_records_data_put: int = 0
    user_record_expired: int = 0
    kinesis_records_put: int = 0
    kinesis_records_data_put: int = 0
    put_records_requests: int = 0
    all_errors: int = 0
    errors_by_code: Mapping[str, int] = field(default_factory=dict)
    user_records_put_by_shard: Mapping[str, int] = field(default_factory=dict)
    failed_by_code: Mapping[str, int] = field(default_factory=dict)
    """User records failed for good, by the code of their result."""
    retries_by_code: Mapping[str, int] = field(default_factory=dict)
    """User records sent again, by the code of the attempt that failed."""
    user_records_per_kinesis_record: Distribution = field(default_factory=Distribution)
    kinesis_records_per_put_records_request: Distribution = field(default_factory=Distribution)
    user_records_per_put_records_request: Distribution = field(default_factory=Distribution)
    buffering_time: Distribution = field(default_factory=Distribution)
    """Milliseconds from put (or a retry's return) to the start of the PutRecords attempt."""
    request_time: Distribution = field(default_factory=Distribution)
    """Milliseconds one PutRecords call took."""
    retries_per_record: Distribution = field(default_factory=Distribution)

    def since(self, earlier: MetricsSnapshot) -> MetricsSnapshot:
        """Counters of the interval since ``earlier`` (distributions and gauges stay cumulative)."""
        return MetricsSnapshot(
            stream_name=self.stream_name,
            taken_at=self.taken_at,
            user_records_received=self.user_records_received - earlier.user_records_received,
            user_records_pending=self.user_records_pending,
            user_records_put=self.user_records_put - earlier.user_records_put,
            user_records_failed=self.user_records_failed - earlier.user_records_failed,
            user_records_data_put=self.user_records_data_put - earlier.user_records_data_put,
            user_record_expired=self.user_record_expired - earlier.user_record_expired,
            kinesis_records_put=self.kinesis_records_put - earlier.kinesis_records_put,
            kinesis_records_data_put=(
                self.kinesis_records_data_put - earlier.kinesis_records_data_put
            ),
            put_records_requests=self.put_records_requests - earlier.put_records_requests,
            all_errors=self.all_errors - earlier.all_errors,
            errors_by_code=_diff(self.errors_by_code, earlier.errors_by_code),
            user_records_put_by_shard=_diff(
                self.user_records_put_by_shard, earlier.user_records_put_by_shard
            ),
            failed_by_code=_diff(self.failed_by_code, earlier.failed_by_code),
            retries_by_code=_diff(self.retries_by_code, earlier.retries_by_code),
            user_records_per_kinesis_record=self.user_records_per_kinesis_record,
            kinesis_records_per_put_records_request=self.kinesis_records_per_put_records_request,
            user_records_per_put_records_request=self.user_records_per_put_records_request,
            buffering_time=self.buffering_time,
            request_time=self.request_time,
            retries_per_record=self.retries_per_record,
        )

    def as_kpl_metrics(self) -> dict[str, Any]:
        """The snapshot keyed by the KPL's metric names, distributions as dicts."""
        return {
            "UserRecordsReceived": self.user_records_received,
            "UserRecordsPending": self.user_records_pending,
            "UserRecordsPut": self.user_records_put,
            "UserRecordsFailed": self.user_records_failed,
            "UserRecordsDataPut": self.user_records_data_put,
            "UserRecordExpired": self.user_record_expired,
            "KinesisRecordsPut": self.kinesis_records_put,
            "KinesisRecordsDataPut": self.kinesis_records_data_put,
            "PutRecordsRequests": self.put_records_requests,
            "AllErrors": self.all_errors,
            "ErrorsByCode": dict(self.errors_by_code),
            "UserRecordsPutByShard": dict(self.user_records_put_by_shard),
            "UserRecordsPerKinesisRecord": self.user_records_per_kinesis_record.as_dict(),
            "KinesisRecordsPerPutRecordsRequest": (
                self.kinesis_records_per_put_records_request.as_dict()
            ),
            "UserRecordsPerPutRecordsRequest": self.user_records_per_put_records_request.as_dict(),
            "BufferingTime": self.buffering_time.as_dict(),
            "RequestTime": self.request_time.as_dict(),
            "RetriesPerRecord": self.retries_per_record.as_dict(),
        }


MetricsHook = Callable[[MetricsSnapshot], None]
"""Called with a fresh snapshot every ``metrics_interval`` seconds and once at close."""


def _diff(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    out = {k: v - before.get(k, 0) for k, v in now.items()}
    return {k: v for k, v in out.items() if v}


class ProducerMetrics:
    """The mutable counters the pipeline bumps; read them through :meth:`snapshot`."""

    def __init__(self, stream_name: str) -> None:
        self.stream_name = stream_name
        self.user_records_received = 0
        self.user_records_put = 0
        self.user_records_failed = 0
        self.user_records_data_put = 0
        self.user_record_expired = 0
        self.kinesis_records_put = 0
        self.kinesis_records_data_put = 0
        self.put_records_requests = 0
        self.all_errors = 0
        self.errors_by_code: dict[str, int] = {}
        self.user_records_put_by_shard: dict[str, int] = {}
        self.failed_by_code: dict[str, int] = {}
        self.retries_by_code: dict[str, int] = {}
        self.user_records_per_kinesis_record = _Accumulator()
        self.kinesis_records_per_put_records_request = _Accumulator()
        self.user_records_per_put_records_request = _Accumulator()
        self.buffering_time = _Accumulator()
        self.request_time = _Accumulator()
        self.retries_per_record = _Accumulator()
        self.on_request: Callable[[PutBatch, Any], None] | None = None
        """Called with every PutRecords call and its ``SendOutcome`` as it returns
        (telemetry's histograms)."""

    def error(self, code: str, count: int = 1) -> None:
        self.all_errors += count
        self.errors_by_code[code] = self.errors_by_code.get(code, 0) + count

    def retried(self, code: str, count: int) -> None:
        self.retries_by_code[code] = self.retries_by_code.get(code, 0) + count

    def snapshot(self, taken_at: float, pending: int) -> MetricsSnapshot:
        return MetricsSnapshot(
            stream_name=self.stream_name,
            taken_at=taken_at,
            user_records_received=self.user_records_received,
            user_records_pending=pending,
            user_records_put=self.user_records_put,
            user_records_failed=self.user_records_failed,
            user_records_data_put=self.user_records_data_put,
            user_record_expired=self.user_record_expired,
            kinesis_records_put=self.kinesis_records_put,
            kinesis_records_data_put=self.kinesis_records_data_put,
            put_records_requests=self.put_records_requests,
            all_errors=self.all_errors,
            errors_by_code=dict(self.errors_by_code),
            user_records_put_by_shard=dict(self.user_records_put_by_shard),
            failed_by_code=dict(self.failed_by_code),
            retries_by_code=dict(self.retries_by_code),
            user_records_per_kinesis_record=self.user_records_per_kinesis_record.freeze(),
            kinesis_records_per_put_records_request=(
                self.kinesis_records_per_put_records_request.freeze()
            ),
            user_records_per_put_records_request=self.user_records_per_put_records_request.freeze(),
            buffering_time=self.buffering_time.freeze(),
            request_time=self.request_time.freeze(),
            retries_per_record=self.retries_per_record.freeze(),
        )
