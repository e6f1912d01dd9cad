"""The options of the source and the sink, as Spark passes them (strings, names in any case),
parsed into plain picklable specs (sans-I/O). A bad value raises
:class:`~kinesis_core.errors.ConfigurationError` naming the option as the user spelt it in the
docs, the limit and what was given."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer.config import EnhancedFanOut
from kinesis_core.consumer.polling import MAX_GET_RECORDS_LIMIT, MIN_CALL_INTERVAL
from kinesis_core.consumer.positions import (
    TRIM_HORIZON,
    AtTimestamp,
    InitialPosition,
    parse_initial_position,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.stream import StreamRef

CONNECTION_OPTIONS = (
    "streamName",
    "streamARN",
    "region",
    "endpointUrl",
    "awsAccessKeyId",
    "awsSecretKey",
    "awsSessionToken",
)
"""The stream and how to reach it: options of the source and of the sink alike."""
SOURCE_OPTIONS = (
    *CONNECTION_OPTIONS,
    "initialPosition",
    "initialTimestamp",
    "maxRecordsPerTrigger",
    "maxFetchSeconds",
    "maxRecordsPerCall",
    "idleIntervalSeconds",
    "probeEnds",
    "deaggregate",
    "consumerName",
    "consumerARN",
)
SINK_OPTIONS = (
    *CONNECTION_OPTIONS,
    "dataColumn",
    "partitionKeyColumn",
    "explicitHashKeyColumn",
    "aggregation",
    "preserveOrder",
    "recordTtlSeconds",
)


SPARK_OWN = frozenset({"path", "checkpointlocation", "queryname"})
"""Options Spark itself may pass to a data source along with the user's: ignored."""


def _lookup(options: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    """The options by their documented spelling; an unknown one is refused (a typo must not
    pass for a default)."""
    by_lower = {name.lower(): name for name in known}
    found: dict[str, str] = {}
    for key, value in options.items():
        name = by_lower.get(key.lower())
        if name is None and key.lower() in SPARK_OWN:
            continue
        if name is None:
            raise ConfigurationError(
                key, f"is not an option of the Kinesis data source; known: {', '.join(known)}"
            )
        found[name] = value
    return found


def _stream(found: Mapping[str, str]) -> StreamRef:
    name, arn = found.get("streamName"), found.get("streamARN")
    if (name is None) == (arn is None):
        raise ConfigurationError("streamName", "give exactly one of streamName and streamARN")
    return StreamRef.of(name, "streamName") if name is not None else StreamRef.of(arn, "streamARN")  # type: ignore[arg-type]


def _client(found: Mapping[str, str], stream: StreamRef) -> ClientConfig:
    key, secret = found.get("awsAccessKeyId"), found.get("awsSecretKey")
    if (key is None) != (secret is None):
        raise ConfigurationError("awsSecretKey", "awsAccessKeyId and awsSecretKey go together")
    return ClientConfig(
        region_name=found.get("region") or stream.region,
        endpoint_url=found.get("endpointUrl"),
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=found.get("awsSessionToken"),
    )


def _int(found: Mapping[str, str], name: str, lo: int, hi: int | None = None) -> int | None:
    text = found.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigurationError(name, f"must be an integer, got {text!r:.60}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ConfigurationError(name, f"must be {bound}, got {value}")
    return value


def _float(found: Mapping[str, str], name: str, default: float, lo: float) -> float:
    text = found.get(name)
    if text is None:
        return default
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigurationError(name, f"must be a number of seconds, got {text!r:.60}") from None
    if not (math.isfinite(value) and value >= lo):
        raise ConfigurationError(name, f"must be a finite number >= {lo}, got {text!r:.60}")
    return value


def _bool(found: Mapping[str, str], name: str, default: bool) -> bool:
    text = found.get(name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigurationError(name, f"must be true or false, got {text!r:.60}")
    return lowered == "true"


def _timestamp(text: str) -> datetime:
    """ISO 8601 (naive: UTC) or epoch milliseconds."""
    stripped = text.strip()
    if stripped.isdigit():
        return datetime.fromtimestamp(int(stripped) / 1000, timezone.utc)
    try:
        parsed = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            "initialTimestamp",
            f"must be ISO 8601 (2026-01-31T12:00:00Z) or epoch milliseconds, got {text!r:.60}",
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _initial(found: Mapping[str, str]) -> InitialPosition:
    text = found.get("initialPosition")
    stamp = found.get("initialTimestamp")
    if text is not None and text.strip().upper() == "AT_TIMESTAMP":
        if stamp is None:
            raise ConfigurationError(
                "initialTimestamp", "initialPosition AT_TIMESTAMP needs initialTimestamp"
            )
        return AtTimestamp(_timestamp(stamp))
    if stamp is not None:
        raise ConfigurationError(
            "initialTimestamp", f"goes with initialPosition AT_TIMESTAMP, not {text!r}"
        )
    if text is None:
        return TRIM_HORIZON
    try:
        return parse_initial_position(text, "initialPosition")
    except ConfigurationError:
        raise ConfigurationError(
            "initialPosition", f"must be TRIM_HORIZON, LATEST or AT_TIMESTAMP, got {text!r:.60}"
        ) from None


def _fan_out(found: Mapping[str, str]) -> EnhancedFanOut | None:
    name, arn = found.get("consumerName"), found.get("consumerARN")
    if name is not None and arn is not None:
        raise ConfigurationError("consumerName", "give consumerName or consumerARN, not both")
    for option, value in (("consumerName", name), ("consumerARN", arn)):
        if value is not None and not value.strip():
            raise ConfigurationError(option, "must not be empty")
    if name is None and arn is None:
        return None
    return EnhancedFanOut(
        consumer_name=None if name is None else name.strip(),
        consumer_arn=None if arn is None else arn.strip(),
    )


@dataclass(frozen=True)
class SourceSpec:
    """What the source's driver and tasks need, picklable."""

    stream: StreamRef
    client_config: ClientConfig
    initial_position: InitialPosition
    max_records_per_trigger: int | None
    max_fetch_seconds: float
    max_records_per_call: int
    idle_interval: float
    probe_ends: bool = True
    deaggregate: bool = True
    fan_out: EnhancedFanOut | None = None
    """The stream consumer the tasks read through (SubscribeToShard); None: GetRecords."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceSpec:
        found = _lookup(options, SOURCE_OPTIONS)
        stream = _stream(found)
        return cls(
            stream=stream,
            client_config=_client(found, stream),
            initial_position=_initial(found),
            max_records_per_trigger=_int(found, "maxRecordsPerTrigger", 1),
            max_fetch_seconds=_float(found, "maxFetchSeconds", 1.0, 0.0),
            max_records_per_call=_int(found, "maxRecordsPerCall", 1, MAX_GET_RECORDS_LIMIT)
            or MAX_GET_RECORDS_LIMIT,
            idle_interval=_float(found, "idleIntervalSeconds", 1.0, MIN_CALL_INTERVAL),
            probe_ends=_bool(found, "probeEnds", True),
            deaggregate=_bool(found, "deaggregate", True),
            fan_out=_fan_out(found),
        )


@dataclass(frozen=True)
class SinkSpec:
    """What the sink's tasks need, picklable."""

    stream: StreamRef
    client_config: ClientConfig
    data_column: str
    partition_key_column: str
    explicit_hash_key_column: str | None
    aggregation: bool
    preserve_order: bool
    record_ttl: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkSpec:
        found = _lookup(options, SINK_OPTIONS)
        stream = _stream(found)
        return cls(
            stream=stream,
            client_config=_client(found, stream),
            data_column=found.get("dataColumn", "data"),
            partition_key_column=found.get("partitionKeyColumn", "partition_key"),
            explicit_hash_key_column=found.get("explicitHashKeyColumn"),
            aggregation=_bool(found, "aggregation", True),
            preserve_order=_bool(found, "preserveOrder", False),
            record_ttl=_float(found, "recordTtlSeconds", 30.0, 0.001),
        )
