"""What a ``ReadFromKinesis`` worker needs to know, and the time conversions it uses.

:class:`ReadSpec` is plain and picklable (no client, thread or store in it): it travels to the
workers inside the DoFn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from apache_beam.transforms.display import DisplayDataItem
from apache_beam.utils.timestamp import Timestamp

from beam_kinesis.record import KinesisRecord
from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import CheckpointStore
from kinesis_core.consumer.config import EnhancedFanOut
from kinesis_core.consumer.incarnation import OnStreamRecreated
from kinesis_core.consumer.polling import READ_BYTES_PER_SECOND
from kinesis_core.consumer.positions import InitialPosition
from kinesis_core.errors import ValidationError

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)

CheckpointStoreFactory = Callable[[], CheckpointStore]
TimestampFn = Callable[[KinesisRecord], Any]


def micros(value: datetime) -> int:
    """Epoch microseconds of an aware (or UTC naive) datetime."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // _MICROSECOND


def now_micros() -> int:
    return micros(datetime.now(timezone.utc))


def to_timestamp(value: Any) -> Timestamp:
    """A Beam Timestamp from a Timestamp, an aware (or UTC naive) datetime, or epoch seconds."""
    if isinstance(value, Timestamp):
        return value
    if isinstance(value, datetime):
        return Timestamp(micros=micros(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Timestamp.of(value)
    raise ValidationError(
        "timestamp_fn", f"must return a Timestamp, datetime or epoch seconds, got {value!r:.60}"
    )


@dataclasses.dataclass(frozen=True)
class ReadSpec:
    """Everything the workers need, picklable: no client, thread or store in it."""

    stream: str
    client_config: ClientConfig
    initial_position: InitialPosition
    with_metadata: bool
    timestamp_fn: TimestampFn | None
    max_records: int | None
    max_read_time: float | None
    stop_when_caught_up: bool
    idle_threshold: float
    checkpoint_store: CheckpointStoreFactory | None
    application_name: str
    self_checkpoint_interval: float | None
    """None: never self-checkpoint (bounded reads on a runner that drops residuals)."""
    idle_interval: float
    max_records_per_call: int
    fan_out: EnhancedFanOut | None = None
    """Read by enhanced fan-out (SubscribeToShard) with these settings; None: polling."""
    max_read_bytes_per_second: float = READ_BYTES_PER_SECOND
    """A polling reader's pace in bytes per second of one shard (ConsumerConfig's)."""
    on_stream_recreated: OnStreamRecreated = "fail"
    """What the start does with stored positions of an earlier stream of the same name."""
    shard_discovery_interval: float | None = None
    """Seconds between the listings of a discovery that gives every shard its own
    restriction (:mod:`beam_kinesis.discovery`); None: children are adopted by the
    restriction that read their parent."""
    first_calls_ahead: bool = True
    """``split`` sends the first calls of the restrictions it makes ahead
    (:mod:`beam_kinesis._first_calls`)."""

    @property
    def bounded(self) -> bool:
        return (
            self.max_records is not None
            or self.max_read_time is not None
            or self.stop_when_caught_up
        )

    @property
    def discovers(self) -> bool:
        """Every shard is read by its own restriction, from a shard discovery."""
        return self.shard_discovery_interval is not None

    def display_data(self) -> dict[str, Any]:
        """The transform's display data (what a runner's UI shows of the read)."""
        items: dict[str, Any] = {
            "stream": _item(self.stream, "Stream"),
            "initial_position": _item(repr(self.initial_position), "Start position"),
            "with_metadata": _item(self.with_metadata, "Outputs KinesisRecord"),
            "idle_threshold": _item(self.idle_threshold, "Idle threshold (s)"),
            "application_name": _item(self.application_name, "Application"),
        }
        if self.client_config.region_name is not None:
            items["region"] = _item(self.client_config.region_name, "Region")
        if self.client_config.endpoint_url is not None:
            items["endpoint_url"] = _item(self.client_config.endpoint_url, "Endpoint")
        if self.max_records is not None:
            items["max_records"] = _item(self.max_records, "Max records")
        if self.max_read_time is not None:
            items["max_read_time"] = _item(self.max_read_time, "Max read time (s)")
        if self.stop_when_caught_up:
            items["stop_when_caught_up"] = _item(True, "Stop when caught up")
        if self.checkpoint_store is not None:
            items["checkpoint_store"] = _item(repr(self.checkpoint_store), "Checkpoint store")
        if self.shard_discovery_interval is not None:
            items["shard_discovery_interval"] = _item(
                self.shard_discovery_interval, "Shard discovery interval (s)"
            )
        if self.fan_out is not None:
            consumer = self.fan_out.consumer_arn or self.fan_out.consumer_name
            items["enhanced_fan_out"] = _item(consumer, "Enhanced fan-out consumer")
        return items


def _item(value: Any, label: str) -> Any:
    return DisplayDataItem(value, label=label)  # type: ignore[no-untyped-call]
