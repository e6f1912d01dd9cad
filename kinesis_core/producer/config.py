"""The producer's knobs, with the KPL's names and defaults where the KPL has one.

Times are seconds (floats), not the KPL's milliseconds: that is what asyncio and the rest of
this project speak. Every value is checked once, here, so a bad setting fails at construction
with the field name and the allowed range instead of misbehaving under load.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kinesis_core.errors import ConfigurationError
from kinesis_core.shards.hashing import (
    LARGEST_RECORD_BYTES,
    MAX_PUT_RECORDS_BYTES,
    MAX_PUT_RECORDS_COUNT,
)
from kinesis_core.telemetry.config import Telemetry
from kinesis_core.tracing import require_opentelemetry

RECORD_OVERHEAD_BYTES = 400
PAYLOAD_COPIES = 5
"""A buffered user record costs about ``PAYLOAD_COPIES`` times its data and partition key in
memory, plus ``RECORD_OVERHEAD_BYTES``: the caller's bytes, their copy inside an aggregate, and
the base64 text, JSON text and encoded body botocore makes of a PutRecords request while it is
in flight; plus the record's tuple, hash key and slots in its aggregate and its result.
``max_outstanding_bytes`` charges each record this, so the budget is the memory the
buffered records really take, not just the bytes the caller handed over.
"""


def records_cost(payload: int, count: int) -> int:
    """What ``count`` records of ``payload`` bytes of data and partition keys in all count
    against ``max_outstanding_bytes``: the one cost formula (admission charges it, the
    retrier gives it back)."""
    return PAYLOAD_COPIES * payload + count * RECORD_OVERHEAD_BYTES


def record_cost(data: bytes, partition_key: str) -> int:
    """What one record counts against ``max_outstanding_bytes``."""
    return records_cost(len(data) + len(partition_key), 1)


@dataclass(frozen=True)
class ProducerConfig:
    """Settings of one :class:`~kinesis_core.producer.Producer`.

    The defaults are the KPL's (``default_config.properties``) except the two budgets, which the
    KPL does not have: it leaves backpressure to the caller and can exhaust memory.
    """

    aggregation_enabled: bool = True
    """Pack user records bound for one shard into KPL aggregated Kinesis records."""
    aggregation_max_count: int = 4_294_967_295
    """Most user records in one aggregated Kinesis record."""
    aggregation_max_size: int = 51_200
    """Most bytes of one aggregated Kinesis record (data plus container partition key), at
    most 10 MiB; an aggregate never exceeds the stream's maximum record size either.

    A user record bigger than this on its own is never aggregated: it goes as a plain Kinesis
    record.
    """
    collection_max_count: int = MAX_PUT_RECORDS_COUNT
    """Most Kinesis records in one PutRecords request (1 to 500)."""
    collection_max_size: int = 5 * 1024 * 1024
    """Most bytes (data plus partition keys) in one PutRecords request, up to the 10 MiB that
    PutRecords takes. A Kinesis record bigger than this goes in a request of its own. The
    default is the KPL's 5 MiB, which moto (which refuses larger requests) takes too."""
    record_max_buffered_time: float = 0.1
    """Seconds a record may wait to be aggregated and collected before it is sent."""
    record_ttl: float = 30.0
    """Seconds after which a record that is still not written fails with ``Expired``."""
    rate_limit: int = 150
    """Per-shard rate limit, in percent of the shard's 1000 records/s and 1 MiB/s."""
    adaptive_rate_limit: bool = True
    """Slow a shard down when it throttles, and recover slowly (the KPL only retries)."""
    fail_if_throttled: bool = False
    """Fail records at once on ProvisionedThroughputExceededException instead of retrying."""
    max_outstanding_records: int = 100_000
    """Records accepted and not yet finished; put waits above this (backpressure)."""
    max_outstanding_bytes: int = 256 * 1024 * 1024
    """Memory the records accepted and not yet finished may take (see :func:`record_cost`)."""
    max_record_bytes: int = LARGEST_RECORD_BYTES
    """A cap on data plus partition key of one user record, below the stream's own maximum
    record size (which the producer learns with DescribeStreamSummary, 1 MiB unless the stream
    was made or updated with ``MaxRecordSizeInKiB``, at most 10 MiB). Records over the smaller
    of the two are refused at ``put``."""
    max_connections: int = 24
    """Concurrent PutRecords requests, and the HTTP connection pool's size."""
    request_timeout: float = 6.0
    """Seconds to wait for one PutRecords response to a body of up to 1 MiB. A timed-out
    request may still have succeeded, so retrying it may write duplicates: too low a value
    means more duplicates."""
    request_timeout_per_mib: float = 2.0
    """Seconds added to ``request_timeout`` for each MiB of the request's body beyond its
    first. The body carries the data in base64, 4/3 of its bytes (a 10 MiB request: a 13.3 MiB
    body, 30.7 s). A large body takes longer to upload and the endpoint longer to read: 2 s a
    MiB is a 4 Mbit/s link."""
    connect_timeout: float = 6.0
    """Seconds to wait for a connection to the endpoint."""
    metrics_interval: float = 60.0
    """Seconds between two calls of the metrics hook, when one is given."""
    retry_backoff_base: float = 0.05
    """Seconds: the first retry after a failed request (or a shard's failed records) waits a
    random time up to this, and each failure in a row doubles the bound (full jitter). The
    KPL's only retry delay is half ``record_max_buffered_time``, 50 ms by default."""
    retry_backoff_max: float = 5.0
    """Seconds: the longest bound of that random wait (a dead endpoint is tried again about
    every ``retry_backoff_max / 2`` seconds, one request at a time)."""
    preserve_order: bool = False
    """Keep the records of each partition key in the order they were put, also across retries,
    at the price of one Kinesis record in flight per shard (one aggregate, or one plain record
    when ``aggregation_enabled`` is off): a shard's next record is sent only when the previous
    one's outcome is known, and a retried record goes before any later one."""
    telemetry: Telemetry | None = None
    """OpenTelemetry metrics (:class:`~kinesis_core.telemetry.Telemetry`; docs/operations.md);
    None (the default): off, and nothing of OpenTelemetry is imported."""
    trace_context: bool = False
    """Carry the current OpenTelemetry span's context in each record put while one is current,
    inside the record's data when that is a JSON object (:mod:`kinesis_core.tracing`;
    docs/operations.md). Off by default; needs the ``otel`` extra."""
    record_ids: bool = False
    """Give every record an id, carried in its KPL aggregate's tags for readers that remove
    duplicates (docs/effectively-once.md): the caller's (``put(..., record_id=...)``) or else
    an automatic one (the producer's session id, its predicted shard and a counter). A record
    that goes alone then goes as a one-record aggregate. Needs ``aggregation_enabled``."""
    lean_put_records: bool = True
    """Send a stream's PutRecords after its first on the client's signer and HTTP session,
    with the JSON body written by the producer, without botocore's per-call machinery
    (:mod:`kinesis_core.aws.lean_requests`; docs/performance.md). False sends every request
    through botocore, for a client whose events the application hooks itself."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise ConfigurationError(f.name, f"{f.name}: must be a bool, got {value!r}")
        if self.trace_context:
            require_opentelemetry("trace_context")
        if self.record_ids and not self.aggregation_enabled:
            raise ConfigurationError(
                "record_ids",
                "record_ids=True needs aggregation_enabled=True: ids travel in the KPL "
                "aggregate's record tags",
            )
        if self.telemetry is not None and not isinstance(self.telemetry, Telemetry):
            raise ConfigurationError(
                "telemetry", f"must be a Telemetry or None, got {type(self.telemetry).__name__}"
            )
        _int_range("aggregation_max_count", self.aggregation_max_count, 1, 2**63 - 1)
        _int_range("aggregation_max_size", self.aggregation_max_size, 64, LARGEST_RECORD_BYTES)
        _int_range("collection_max_count", self.collection_max_count, 1, MAX_PUT_RECORDS_COUNT)
        _int_range("collection_max_size", self.collection_max_size, 52_224, MAX_PUT_RECORDS_BYTES)
        _int_range("rate_limit", self.rate_limit, 1, 1_000_000)
        _int_range("max_outstanding_records", self.max_outstanding_records, 1, 2**63 - 1)
        _int_range("max_outstanding_bytes", self.max_outstanding_bytes, 1024 * 1024, 2**63 - 1)
        _int_range("max_record_bytes", self.max_record_bytes, 64, 2**63 - 1)
        if self.max_record_bytes > LARGEST_RECORD_BYTES:
            raise ConfigurationError(
                "max_record_bytes",
                f"{self.max_record_bytes} is over the Kinesis limit of "
                f"{LARGEST_RECORD_BYTES} bytes (10 MiB, a stream's largest maximum record size) "
                "for one record's data plus partition key",
            )
        _int_range("max_connections", self.max_connections, 1, 256)
        _float_range("record_max_buffered_time", self.record_max_buffered_time, 0.0, 3600.0)
        _float_range("record_ttl", self.record_ttl, 0.1, 86_400.0)
        _float_range("request_timeout", self.request_timeout, 0.1, 600.0)
        _float_range("request_timeout_per_mib", self.request_timeout_per_mib, 0.0, 600.0)
        _float_range("connect_timeout", self.connect_timeout, 0.1, 300.0)
        _float_range("metrics_interval", self.metrics_interval, 0.1, 86_400.0)
        _float_range("retry_backoff_base", self.retry_backoff_base, 0.001, 60.0)
        _float_range("retry_backoff_max", self.retry_backoff_max, 0.001, 3600.0)
        if self.retry_backoff_max < self.retry_backoff_base:
            raise ConfigurationError(
                "retry_backoff_max",
                f"retry_backoff_max ({self.retry_backoff_max} s) must be at least "
                f"retry_backoff_base ({self.retry_backoff_base} s)",
            )
        if self.collection_max_size < self.aggregation_max_size:
            raise ConfigurationError(
                "collection_max_size",
                f"collection_max_size ({self.collection_max_size}) must be at least "
                f"aggregation_max_size ({self.aggregation_max_size}): an aggregate must fit "
                "in one PutRecords request",
            )
        if self.record_ttl <= self.record_max_buffered_time:
            raise ConfigurationError(
                "record_ttl",
                f"record_ttl ({self.record_ttl} s) must be longer than "
                f"record_max_buffered_time ({self.record_max_buffered_time} s), or every "
                "record would expire before it is sent",
            )

    def request_timeout_for(self, request_bytes: int) -> float:
        """Seconds to wait for a PutRecords request of ``request_bytes`` (data plus partition
        keys, what Kinesis counts): ``request_timeout``, plus ``request_timeout_per_mib`` for
        each MiB of its body beyond the first (:func:`request_body_bytes`)."""
        beyond = max(0, request_body_bytes(request_bytes) - _MIB) / _MIB
        return self.request_timeout + beyond * self.request_timeout_per_mib


def request_body_bytes(request_bytes: int) -> int:
    """About how many bytes a PutRecords body of ``request_bytes`` (data plus partition keys)
    sends: the base64 of that many bytes (4 for every 3), a little more than the data's
    base64 and the keys' text; the JSON around them is a few dozen bytes a record."""
    return 4 * -(-request_bytes // 3)


_MIB = 1024 * 1024


def _int_range(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(name, f"must be an int, got {value!r}")
    if not low <= value <= high:
        raise ConfigurationError(name, f"must lie in [{low}, {high}], got {value}")


def _float_range(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(name, f"must be a number of seconds, got {value!r}")
    if not low <= value <= high or value != value:
        raise ConfigurationError(name, f"must lie in [{low}, {high}] seconds, got {value}")
