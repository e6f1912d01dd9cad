"""Every metric the connectors report: its name, instrument, unit, attributes, and the KPL/KCL
metric it stands for. Sans-I/O: the one table that the OpenTelemetry instruments, the Beam
metrics, the Faust sensor and docs/operations.md are made from.

Names follow OpenTelemetry's messaging semantic conventions where they have one
(``messaging.client.sent.messages``, ``messaging.client.consumed.messages``,
``messaging.client.operation.duration``, ``messaging.process.duration``); the figures only
Kinesis has live under ``aws.kinesis.`` in the style of the KCL 3.x OpenTelemetry backend
(``aws.kinesis.client.*``: lower case, dots between parts, ``_`` inside a part, ``.duration``
for times, ``aws.kinesis.shard.id``-like attribute keys).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

SYSTEM = "aws.kinesis"
"""``messaging.system`` of every metric."""

# -- attribute keys ----------------------------------------------------------------------------

MESSAGING_SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
"""The stream name."""
PARTITION = "messaging.destination.partition.id"
"""The shard id: opt-in (``Telemetry(shard_attribute=True)``), one series per shard."""
OPERATION = "messaging.operation.name"
"""The Kinesis API operation (``PutRecords``, ``GetRecords``, ``SubscribeToShard``, ...), or
``process`` for the application's own handling."""
CONSUMER_GROUP = "messaging.consumer.group.name"
"""The consumer's ``application_name`` (the KCL's application, its lease table)."""
ERROR_TYPE = "error.type"
"""The AWS error code (``ProvisionedThroughputExceededException``), the producer's own codes
(``Expired``, ``Wrong Shard``, ...) or the exception's class name; absent on success."""
LEASE_CHANGE = "aws.kinesis.lease.change"
SUBSCRIPTION_OUTCOME = "aws.kinesis.subscription.outcome"
STORE_OPERATION = "aws.kinesis.checkpoint_store.operation"
STORE_KIND = "aws.kinesis.checkpoint_store.kind"


class Instrument(str, enum.Enum):
    COUNTER = "counter"
    """Only grows (an OpenTelemetry Counter or ObservableCounter; a Beam counter)."""
    GAUGE = "gauge"
    """A value now (an OpenTelemetry ObservableGauge; a Beam gauge)."""
    HISTOGRAM = "histogram"
    """A distribution of values (an OpenTelemetry Histogram; a Beam distribution, of
    integers: times in milliseconds there)."""


class LeaseChange(str, enum.Enum):
    """Values of ``aws.kinesis.lease.change``."""

    TAKEN = "taken"
    """An unowned or expired lease taken."""
    STOLEN = "stolen"
    """A lease taken from a live worker that held more than its share."""
    LOST = "lost"
    """A held lease another worker took, or one not renewed within the failover time."""
    RELEASED = "released"
    """A held lease given up (owner removed): at close, at a shard's end."""
    HANDED_OVER = "handed_over"
    """A held lease passed to the worker that asked for it after a final checkpoint (graceful
    hand-off); reported by the lease manager once it hands leases over."""


class SubscriptionOutcome(str, enum.Enum):
    """Values of ``aws.kinesis.subscription.outcome`` (enhanced fan-out)."""

    OPENED = "opened"
    """The first SubscribeToShard of a shard that succeeded."""
    RENEWED = "renewed"
    """A later one: a subscription lasts at most 5 minutes and is opened again from where the
    last one stopped."""
    REFUSED = "refused"
    """SubscribeToShard refused (``error.type`` says why: ResourceInUseException,
    LimitExceededException, ...)."""


@dataclass(frozen=True)
class Metric:
    """One metric: what every backend calls it and what it means."""

    name: str
    instrument: Instrument
    unit: str
    """UCUM, as OpenTelemetry writes it (``{message}``, ``By``, ``s``, ``ms``)."""
    description: str
    attributes: tuple[str, ...]
    """Besides ``messaging.system`` and ``messaging.destination.name``, which every metric has."""
    kpl_kcl: str
    """The KPL or KCL CloudWatch metric it stands for (``-`` for none)."""
    kcl_otel: str = "-"
    """The KCL 3.x OpenTelemetry backend's name for it (``-`` for none)."""
    side: str = "producer"


C, G, H = Instrument.COUNTER, Instrument.GAUGE, Instrument.HISTOGRAM

SENT = "messaging.client.sent.messages"
CONSUMED = "messaging.client.consumed.messages"
OPERATION_DURATION = "messaging.client.operation.duration"
PROCESS_DURATION = "messaging.process.duration"
PRODUCER_RECEIVED = "aws.kinesis.producer.user_records.received"
PRODUCER_PENDING = "aws.kinesis.producer.user_records.pending"
PRODUCER_DATA = "aws.kinesis.producer.user_records.data"
PRODUCER_EXPIRED = "aws.kinesis.producer.user_records.expired"
KINESIS_RECORDS = "aws.kinesis.producer.kinesis_records"
KINESIS_RECORDS_DATA = "aws.kinesis.producer.kinesis_records.data"
RETRIES = "aws.kinesis.producer.retries"
ERRORS = "aws.kinesis.producer.errors"
BUFFERING = "aws.kinesis.producer.buffering.duration"
PER_KINESIS_RECORD = "aws.kinesis.producer.user_records.per_kinesis_record"
PER_REQUEST = "aws.kinesis.producer.kinesis_records.per_request"
CONSUMER_DATA = "aws.kinesis.consumer.user_records.data"
LAG = "aws.kinesis.consumer.lag"
RECORD_AGE = "aws.kinesis.consumer.record.age"
CHECKPOINTS = "aws.kinesis.consumer.checkpoints"
DUPLICATES = "aws.kinesis.consumer.duplicates"
LEASE_CHANGES = "aws.kinesis.consumer.lease.changes"
LEASES_HELD = "aws.kinesis.consumer.leases.held"
SUBSCRIPTIONS = "aws.kinesis.fanout.subscriptions"
STORE_DURATION = "aws.kinesis.checkpoint_store.operation.duration"

METRICS: tuple[Metric, ...] = (
    # -- the producer --------------------------------------------------------------------------
    Metric(
        SENT,
        C,
        "{message}",
        "User records that reached their result: written (no error.type), or failed for good "
        "(error.type: the code of the result, Expired included)",
        (OPERATION, ERROR_TYPE, PARTITION),
        "UserRecordsPut (written); UserRecordsFailed (the failed ones)",
    ),
    Metric(
        PRODUCER_RECEIVED,
        C,
        "{message}",
        "User records accepted by put",
        (),
        "UserRecordsReceived",
    ),
    Metric(
        PRODUCER_PENDING,
        G,
        "{message}",
        "User records accepted and not finished yet",
        (),
        "UserRecordsPending",
    ),
    Metric(
        PRODUCER_DATA,
        C,
        "By",
        "Data bytes of the user records written",
        (PARTITION,),
        "UserRecordsDataPut",
    ),
    Metric(
        PRODUCER_EXPIRED,
        C,
        "{message}",
        "User records that failed with Expired (their record_ttl ran out)",
        (),
        "UserRecordExpired",
    ),
    Metric(
        KINESIS_RECORDS,
        C,
        "{record}",
        "Kinesis records written (an aggregate counts once)",
        (),
        "KinesisRecordsPut",
    ),
    Metric(
        KINESIS_RECORDS_DATA,
        C,
        "By",
        "Bytes of the Kinesis records written (aggregates with their framing)",
        (),
        "KinesisRecordsDataPut",
    ),
    Metric(
        RETRIES,
        C,
        "{retry}",
        "User records sent again, by the error.type of the attempt that failed",
        (ERROR_TYPE,),
        "RetriesPerRecord (its sum), per code as ErrorsByCode",
    ),
    Metric(
        ERRORS,
        C,
        "{error}",
        "Errors: failed requests, and failed Kinesis records in answered requests",
        (ERROR_TYPE,),
        "AllErrors, ErrorsByCode",
    ),
    Metric(
        OPERATION_DURATION,
        H,
        "s",
        "Producer: each PutRecords call (error.type when the call itself failed). "
        "Consumer: each call of a shard's reader (GetRecords, GetShardIterator, "
        "SubscribeToShard, ListShards, DescribeStreamConsumer)",
        (OPERATION, ERROR_TYPE, PARTITION),
        "RequestTime, PutRecordsRequests (its count); KCL: KinesisDataFetcher.getRecords.Time",
        "aws.kinesis.client.kinesis_data_fetcher.get_records.duration",
        side="both",
    ),
    Metric(
        BUFFERING,
        H,
        "s",
        "Per PutRecords call: how long its user records waited, on average, between put (or "
        "their last retry) and the call",
        (),
        "BufferingTime (the KPL's is per user record)",
    ),
    Metric(
        PER_KINESIS_RECORD,
        H,
        "{message}",
        "Per PutRecords call: user records per Kinesis record in it (the mean aggregate size)",
        (),
        "UserRecordsPerKinesisRecord",
    ),
    Metric(
        PER_REQUEST,
        H,
        "{record}",
        "Per PutRecords call: the Kinesis records in it",
        (),
        "KinesisRecordsPerPutRecordsRequest",
    ),
    # -- the consumer --------------------------------------------------------------------------
    Metric(
        CONSUMED,
        C,
        "{message}",
        "User records delivered to the application (after deaggregation)",
        (OPERATION, CONSUMER_GROUP, PARTITION),
        "RecordsProcessed",
        "aws.kinesis.client.records_processed",
        side="consumer",
    ),
    Metric(
        CONSUMER_DATA,
        C,
        "By",
        "Data bytes of the user records delivered",
        (CONSUMER_GROUP, PARTITION),
        "DataBytesProcessed",
        "aws.kinesis.client.records.size",
        side="consumer",
    ),
    Metric(
        LAG,
        G,
        "ms",
        "MillisBehindLatest of the last read of a shard: 0 when caught up. Per shard with the "
        "partition attribute; without it, the largest of the shards read",
        (CONSUMER_GROUP, PARTITION),
        "MillisBehindLatest",
        "aws.kinesis.client.consumer.lag.duration",
        side="consumer",
    ),
    Metric(
        RECORD_AGE,
        H,
        "s",
        "Per delivered batch: now minus the ApproximateArrivalTimestamp of its newest record "
        "(time from arrival in the stream to delivery)",
        (CONSUMER_GROUP, PARTITION),
        "GetRecords.IteratorAgeMilliseconds (the service's, per stream)",
        side="consumer",
    ),
    Metric(
        PROCESS_DURATION,
        H,
        "s",
        "Per delivered batch: the time from its delivery until the application asked for the "
        "next one (its processing)",
        (OPERATION, CONSUMER_GROUP),
        "RecordProcessor.processRecords.Time",
        "aws.kinesis.client.record_processor.process_records.duration",
        side="consumer",
    ),
    Metric(
        CHECKPOINTS,
        C,
        "{checkpoint}",
        "Checkpoints written to the store (SHARD_END included)",
        (CONSUMER_GROUP, PARTITION),
        "- (a KCL checkpoint is an UpdateLease write)",
        side="consumer",
    ),
    Metric(
        DUPLICATES,
        C,
        "{record}",
        "Records dropped as duplicates: their id was delivered before "
        "(``ConsumerConfig(deduplicate=...)``)",
        (CONSUMER_GROUP, PARTITION),
        "- (the KCL does not deduplicate)",
        side="consumer",
    ),
    Metric(
        LEASE_CHANGES,
        C,
        "{lease}",
        "Leases taken, stolen, lost, released or handed over by this worker",
        (LEASE_CHANGE,),
        "TakenLeases (taken + stolen), LostLeases (lost)",
        "aws.kinesis.client.taken_leases, aws.kinesis.client.lost_leases",
        side="consumer",
    ),
    Metric(
        LEASES_HELD,
        G,
        "{lease}",
        "Leases this worker holds",
        (CONSUMER_GROUP,),
        "CurrentLeases",
        "aws.kinesis.client.current_leases",
        side="consumer",
    ),
    Metric(
        SUBSCRIPTIONS,
        C,
        "{subscription}",
        "Enhanced fan-out: SubscribeToShard calls, opened, renewed or refused",
        (SUBSCRIPTION_OUTCOME, ERROR_TYPE, PARTITION),
        "-",
        side="consumer",
    ),
    Metric(
        STORE_DURATION,
        H,
        "s",
        "Each call of the checkpoint store (get, list, put, update_lease, heartbeat, workers); "
        "error.type CheckpointConflictError when a compare-and-set lost",
        (STORE_OPERATION, STORE_KIND, ERROR_TYPE),
        "ListLeases.Time, UpdateLease.Time, RenewLease.Time, TakeLease.Time",
        "aws.kinesis.client.list_leases.duration, aws.kinesis.client.update_lease.duration",
        side="consumer",
    ),
)

BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}


def beam_name(name: str, attributes: Mapping[str, str] | None = None) -> str:
    """A metric's name in Beam, which has no attributes: the attributes that matter go into
    the name, Prometheus style (``aws.kinesis.consumer.lag{messaging.destination.partition.id=
    shardId-000000000000}``)."""
    if not attributes:
        return name
    inner = ",".join(f"{key}={value}" for key, value in attributes.items())
    return f"{name}{{{inner}}}"


def operation_name(call: object) -> str | None:
    """The Kinesis operation a shard reader's call (a ``Call`` of
    :mod:`kinesis_core.consumer.transport`) makes, by the call's class name; None for a call
    that is no operation of its own (the next event of an open subscription)."""
    return _OPERATIONS.get(type(call).__name__, type(call).__name__)


_OPERATIONS: dict[str, str | None] = {
    "GetRecords": "GetRecords",
    "GetIterator": "GetShardIterator",
    "Subscribe": "SubscribeToShard",
    "NextEvent": None,
    "CheckShard": "ListShards",
    "CheckStream": "ListShards",
    "CheckConsumer": "DescribeStreamConsumer",
}
