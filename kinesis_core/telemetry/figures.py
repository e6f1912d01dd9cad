"""The producer's counters as metric values: what OpenTelemetry's observable counters, the Beam
sink's counters and the Faust sensor report, made in one place. Sans-I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinesis_core.telemetry.names import (
    DESTINATION,
    ERROR_TYPE,
    ERRORS,
    KINESIS_RECORDS,
    KINESIS_RECORDS_DATA,
    MESSAGING_SYSTEM,
    OPERATION,
    PARTITION,
    PRODUCER_DATA,
    PRODUCER_EXPIRED,
    PRODUCER_PENDING,
    PRODUCER_RECEIVED,
    RETRIES,
    SENT,
    SYSTEM,
)

if TYPE_CHECKING:
    from kinesis_core.producer.metrics import MetricsSnapshot

Attrs = tuple[tuple[str, str], ...]
"""An attribute set as a hashable tuple of (key, value) pairs."""
Figure = tuple[str, Attrs, float]
"""(metric name, attributes, value)."""


def stream_attributes(stream_name: str) -> Attrs:
    """The attributes every metric has."""
    return ((MESSAGING_SYSTEM, SYSTEM), (DESTINATION, stream_name))


def producer_figures(snapshot: MetricsSnapshot, *, shard_attribute: bool = False) -> list[Figure]:
    """The counters and gauges of a producer's snapshot (cumulative, or an interval's with
    :meth:`~kinesis_core.producer.metrics.MetricsSnapshot.since`)."""
    base = stream_attributes(snapshot.stream_name)
    op = (*base, (OPERATION, "PutRecords"))
    out: list[Figure] = []
    if shard_attribute:
        out += [
            (SENT, (*op, (PARTITION, shard)), n)
            for shard, n in snapshot.user_records_put_by_shard.items()
        ]
    else:
        out.append((SENT, op, snapshot.user_records_put))
    out += [(SENT, (*op, (ERROR_TYPE, code)), n) for code, n in snapshot.failed_by_code.items()]
    out += [
        (PRODUCER_RECEIVED, base, snapshot.user_records_received),
        (PRODUCER_PENDING, base, snapshot.user_records_pending),
        (PRODUCER_DATA, base, snapshot.user_records_data_put),
        (PRODUCER_EXPIRED, base, snapshot.user_record_expired),
        (KINESIS_RECORDS, base, snapshot.kinesis_records_put),
        (KINESIS_RECORDS_DATA, base, snapshot.kinesis_records_data_put),
    ]
    out += [(RETRIES, (*base, (ERROR_TYPE, c)), n) for c, n in snapshot.retries_by_code.items()]
    out += [(ERRORS, (*base, (ERROR_TYPE, c)), n) for c, n in snapshot.errors_by_code.items()]
    return out
