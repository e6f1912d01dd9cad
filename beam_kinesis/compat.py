"""A drop-in for Beam's cross-language ``apache_beam.io.kinesis``, on this package's transforms.

Moving a pipeline off Java is one import line::

    # from apache_beam.io.kinesis import ReadDataFromKinesis, WriteToKinesis
    from beam_kinesis.compat import ReadDataFromKinesis, WriteToKinesis

The class names, argument names, argument order, units (milliseconds, minutes), defaults and
the ``InitialPositionInStream`` / ``WatermarkPolicy`` constants (with their ``validate_param``)
are Beam's (2.77, its Python wrapper and the Java transforms behind it). The read outputs the
data ``bytes`` of each record, as the Java read does; the write sends plain records unless
``aggregation_enabled=True``, and a record that still fails after the retries fails the bundle,
as the Java write does. What maps where, each difference, what is ignored (with a warning) and
what is refused: docs/beam-compat.md. Unlike the Java transforms, the keys are optional: leave
them out and the workers use their default credential chain; given, they travel in the pickled
pipeline, and a ``CredentialsInPipelineWarning`` says so.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timezone
from typing import Any

import apache_beam as beam

from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.write import WriteToKinesis as _WriteToKinesis
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer.polling import MIN_CALL_INTERVAL
from kinesis_core.consumer.positions import LATEST, TRIM_HORIZON, AtTimestamp, InitialPosition
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.producer import ProducerConfig
from kinesis_core.shards.hashing import validate_partition_key

__all__ = [
    "IgnoredArgumentWarning",
    "InitialPositionInStream",
    "ReadDataFromKinesis",
    "WatermarkPolicy",
    "WriteToKinesis",
]


class IgnoredArgumentWarning(UserWarning):
    """An argument of the cross-language transform that has no meaning here was given."""


def _check_constant(cls: type, what: str, param: object) -> None:
    """Beam's ``validate_param``: a given (truthy) value must be one of ``cls``'s constants, or
    ``RuntimeError`` with Beam's message. Beam looks the value up as any attribute name
    (``"validate_param"`` passes there); only the constants pass here."""
    constants = [value for name, value in vars(cls).items() if name.isupper()]
    if param and param not in constants:
        raise RuntimeError(f"Invalid {what}: {param}")


class InitialPositionInStream:
    LATEST = "LATEST"
    TRIM_HORIZON = "TRIM_HORIZON"
    AT_TIMESTAMP = "AT_TIMESTAMP"

    @staticmethod
    def validate_param(param: object) -> None:
        _check_constant(InitialPositionInStream, "initial position in stream", param)


class WatermarkPolicy:
    PROCESSING_TYPE = "PROCESSING_TYPE"
    ARRIVAL_TIME = "ARRIVAL_TIME"

    @staticmethod
    def validate_param(param: object) -> None:
        _check_constant(WatermarkPolicy, "watermark policy", param)


_IDLE_THRESHOLD_MILLIS = 120_000
"""The Java read's watermark idle threshold when none is given (WatermarkParameters: 2 min)."""


def _ignored(transform: str, name: str, why: str) -> None:
    warnings.warn(f"{transform}: {name} is ignored: {why}", IgnoredArgumentWarning, stacklevel=3)


def _client_config(
    aws_access_key: str | None,
    aws_secret_key: str | None,
    region: str | None,
    service_endpoint: str | None,
    verify_certificate: bool | None,
) -> ClientConfig | None:
    if (aws_access_key is None) != (aws_secret_key is None):
        raise ConfigurationError(
            "aws_access_key",
            "aws_access_key, aws_secret_key: give both or neither (neither: the workers' "
            "default credential chain)",
        )
    fields: dict[str, Any] = {
        "aws_access_key_id": aws_access_key,
        "aws_secret_access_key": aws_secret_key,
        "region_name": region,
        "endpoint_url": service_endpoint,
    }
    if verify_certificate is not None:
        fields["verify"] = verify_certificate
    given = {k: v for k, v in fields.items() if v is not None}
    try:
        return ClientConfig(**given) if given else None
    except ConfigurationError as exc:
        if exc.field == "endpoint_url":
            raise ConfigurationError("service_endpoint", exc.reason) from None
        raise


def _millis(name: str, value: int | float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigurationError(name, f"must be a number of milliseconds, got {value!r}")
    return value / 1000.0


def _initial_position(
    position: str | None, timestamp_millis: int | float | None
) -> InitialPosition:
    """As the Java registrar, which sets the position and then the timestamp: a timestamp wins
    (0 counts as none, as in Beam's wrapper). Neither given: LATEST here, where the Java read
    fails when the job starts."""
    if timestamp_millis:
        return AtTimestamp(datetime.fromtimestamp(int(timestamp_millis) / 1000.0, timezone.utc))
    if position in (None, InitialPositionInStream.LATEST):
        return LATEST
    if position == InitialPositionInStream.TRIM_HORIZON:
        return TRIM_HORIZON
    if position == InitialPositionInStream.AT_TIMESTAMP:
        raise ConfigurationError(
            "initial_timestamp_in_stream", "AT_TIMESTAMP needs the timestamp (epoch millis)"
        )
    raise ConfigurationError(
        "initial_position_in_stream",
        f"must be LATEST, TRIM_HORIZON or AT_TIMESTAMP, got {position!r}",
    )


class ReadDataFromKinesis(beam.PTransform):  # type: ignore[type-arg]
    """``apache_beam.io.kinesis.ReadDataFromKinesis`` on :class:`~beam_kinesis.ReadFromKinesis`:
    the data ``bytes`` of every record (times in milliseconds, as in Beam's)."""

    def __init__(
        self,
        stream_name: str,
        aws_access_key: str | None = None,
        aws_secret_key: str | None = None,
        region: str | None = None,
        service_endpoint: str | None = None,
        verify_certificate: bool | None = None,
        max_num_records: int | None = None,
        max_read_time: int | None = None,
        initial_position_in_stream: str | None = None,
        initial_timestamp_in_stream: int | float | None = None,
        request_records_limit: int | None = None,
        up_to_date_threshold: int | None = None,
        max_capacity_per_shard: int | None = None,
        watermark_policy: str | None = None,
        watermark_idle_duration_threshold: int | None = None,
        rate_limit: int | None = None,
        expansion_service: Any = None,
    ) -> None:
        super().__init__()
        name = "ReadDataFromKinesis"
        WatermarkPolicy.validate_param(watermark_policy)
        InitialPositionInStream.validate_param(initial_position_in_stream)
        if expansion_service is not None:
            _ignored(name, "expansion_service", "the read is pure Python, no Java expansion")
        if up_to_date_threshold is not None:
            _ignored(
                name,
                "up_to_date_threshold",
                "it tunes the Java reader's backlog estimate, which this read does not make",
            )
        if max_capacity_per_shard is not None:
            _ignored(
                name,
                "max_capacity_per_shard",
                "this read has no per-shard buffer: a bundle emits what each GetRecords returns",
            )
        if watermark_policy not in (None, WatermarkPolicy.ARRIVAL_TIME):
            raise ConfigurationError(
                "watermark_policy",
                f"only ARRIVAL_TIME (the default) is supported, got "
                f"{watermark_policy!r}; for event times use beam_kinesis.ReadFromKinesis("
                "timestamp_fn=...), for idle shards watermark_idle_duration_threshold",
            )
        options: dict[str, Any] = {
            "client_config": _client_config(
                aws_access_key, aws_secret_key, region, service_endpoint, verify_certificate
            ),
            "initial_position": _initial_position(
                initial_position_in_stream, initial_timestamp_in_stream
            ),
            "with_metadata": False,
            "max_records": max_num_records,
            "max_read_time": _millis("max_read_time", max_read_time),
        }
        if request_records_limit is not None:
            options["max_records_per_call"] = request_records_limit
        idle = watermark_idle_duration_threshold
        options["idle_threshold"] = _millis(
            "watermark_idle_duration_threshold", _IDLE_THRESHOLD_MILLIS if idle is None else idle
        )
        delay = _millis("rate_limit", rate_limit)
        if delay is not None:
            # The reader never calls GetRecords more than 5 times a second per shard (the
            # service's limit, where a shorter Java delay gets throttled).
            options["idle_interval"] = max(delay, MIN_CALL_INTERVAL)
        self._read = ReadFromKinesis(stream_name, **options)

    def expand(self, pbegin: Any) -> Any:
        return pbegin | self._read


class _Constant:
    """Every element's partition key is the same one (Beam's xlang write takes one key)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, _element: object) -> str:
        return self.key


class WriteToKinesis(beam.PTransform):  # type: ignore[type-arg]
    """``apache_beam.io.kinesis.WriteToKinesis`` on :class:`beam_kinesis.WriteToKinesis`: bytes
    elements, one partition key for all of them (times in milliseconds and minutes, as in
    Beam's). Plain records unless ``aggregation_enabled=True`` (KPL aggregates then), as the
    Java write. A record that fails for good fails the bundle, which the runner retries, as
    the Java write does (``on_failure="raise"``: the result's ``failed_records`` stays
    empty)."""

    def __init__(
        self,
        stream_name: str,
        aws_access_key: str | None = None,
        aws_secret_key: str | None = None,
        region: str | None = None,
        partition_key: str | None = None,
        service_endpoint: str | None = None,
        verify_certificate: bool | None = None,
        producer_properties: Any = None,
        expansion_service: Any = None,
        aggregation_enabled: bool | None = None,
        aggregation_max_bytes: int = 51200,
        aggregation_max_buffered_time: int = 100,
        aggregation_shard_refresh_interval: int = 2,
    ) -> None:
        super().__init__()
        name = "WriteToKinesis"
        if producer_properties is not None:
            raise ValueError(
                "producer_properties is no longer supported (as in Beam since the AWS SDK v2 "
                "IOs); pass producer options to beam_kinesis.WriteToKinesis instead"
            )
        if expansion_service is not None:
            _ignored(name, "expansion_service", "the write is pure Python, no Java expansion")
        if aggregation_shard_refresh_interval != 2:
            _ignored(
                name,
                "aggregation_shard_refresh_interval",
                "the producer refreshes its shard map when Kinesis reports a record on the "
                "wrong shard, and in the background",
            )
        try:
            key = validate_partition_key(partition_key)
        except ValidationError as error:
            # Refused here, where the Java write refuses each record (1 to 256 characters).
            raise ConfigurationError(
                "partition_key", f"the one partition key of every record {error.reason}"
            ) from error
        config = ProducerConfig(
            # The Java registrar: aggregationEnabled != null && aggregationEnabled.
            aggregation_enabled=False if aggregation_enabled is None else aggregation_enabled,
            aggregation_max_size=aggregation_max_bytes,
            record_max_buffered_time=_millis(
                "aggregation_max_buffered_time", aggregation_max_buffered_time
            )
            or 0.0,
        )
        self._write = _WriteToKinesis(
            stream_name,
            partition_key=_Constant(key),
            client_config=_client_config(
                aws_access_key, aws_secret_key, region, service_endpoint, verify_certificate
            ),
            producer_config=config,
            on_failure="raise",
        )

    def expand(self, pcoll: Any) -> Any:
        return pcoll | self._write
