"""Kinesis lag and counts through Faust's sensor interface.

The channels feed Faust's standard hooks themselves: ``on_message_in`` when an event is
delivered and ``on_message_out`` when it is acked (the monitor's ``messages_received_total``,
``messages_s`` and read offsets), ``on_send_*`` for writes (``messages_sent``,
``send_latency``, ``send_errors``), and ``app.monitor.on_tp_commit`` when a checkpoint moved
(committed offsets). What Kafka has no word for, Kinesis lag (``MillisBehindLatest``), pending
acks and the safe-ack counts, is in the :class:`KinesisSensor` of the app:
``kinesis_sensor(app).asdict()``; ``figures()`` gives the channels' and sinks' figures under the
names and attributes of the connectors' OpenTelemetry metrics (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from faust.sensors import Sensor
from faust.types import AppT

from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.figures import Attrs, Figure, producer_figures, stream_attributes
from kinesis_core.telemetry.names import (
    CONSUMED,
    CONSUMER_GROUP,
    LAG,
    MESSAGING_SYSTEM,
    PARTITION,
    beam_name,
)

if TYPE_CHECKING:
    from faust_kinesis.reader import Reader
    from faust_kinesis.writer import Writer

__all__ = ["KinesisSensor", "kinesis_sensor"]


class KinesisSensor(Sensor):
    """The Kinesis channels and sinks of an app, read live: ``asdict()`` gives, under
    ``reading``, per stream read by agents, the event counts and per shard the position, the
    checkpoint, ``millis_behind_latest`` and the pending acks; under ``writing``, per stream
    written, the records put and failed; under ``metrics``, :meth:`figures` keyed by name and
    attributes. Channels and sinks add themselves when made."""

    def __post_init__(self) -> None:
        self._readers: list[Reader] = []
        self._writers: list[Writer] = []

    def add_reader(self, reader: Reader) -> None:
        if reader not in self._readers:
            self._readers.append(reader)

    def add_writer(self, writer: Writer) -> None:
        if writer not in self._writers:
            self._writers.append(writer)

    def figures(self) -> list[Figure]:
        """``(metric, attributes, value)`` of every channel and sink, as the OpenTelemetry
        metrics name them: records delivered to agents and the lag per shard of each stream
        read, and the producer's figures of each stream written (two writers of one stream
        added up)."""
        totals: dict[tuple[str, Attrs], float] = {}
        for reader in self._readers:
            if not reader.subscriber_count:
                continue
            stats = reader.stats()
            base = (
                *stream_attributes(StreamRef.of(reader.topic).name),
                (CONSUMER_GROUP, reader.application_name),
            )
            totals[(CONSUMED, base)] = stats["events_delivered"]
            for shard_id, shard in stats["shards"].items():
                if shard["millis_behind_latest"] is not None:
                    totals[(LAG, (*base, (PARTITION, shard_id)))] = shard["millis_behind_latest"]
        for writer in self._writers:
            producer = writer.producer
            if producer is not None:
                for name, attrs, value in producer_figures(producer.metrics()):
                    totals[(name, attrs)] = totals.get((name, attrs), 0) + value
        return [(name, attrs, value) for (name, attrs), value in totals.items()]

    def asdict(self) -> Mapping[str, Any]:
        reading: dict[str, Any] = {}
        writing: dict[str, dict[str, int]] = {}
        for reader in self._readers:
            if reader.subscriber_count:
                reading[reader.topic] = reader.stats()
        for writer in self._writers:
            producer = writer.producer
            if producer is not None:
                metrics = producer.metrics()
                counts = writing.setdefault(writer.topic, {"records_put": 0, "records_failed": 0})
                counts["records_put"] += metrics.user_records_put
                counts["records_failed"] += metrics.user_records_failed
        named = {
            beam_name(name, {k: v for k, v in attrs if k != MESSAGING_SYSTEM}): value
            for name, attrs, value in self.figures()
        }
        return {"reading": reading, "writing": writing, "metrics": named}

    def millis_behind_latest(self, stream_name: str) -> dict[str, int | None]:
        """Shard id -> how far its last read was behind the tip of the shard."""
        for reader in self._readers:
            status = reader.status() if reader.topic == stream_name else []
            if status:
                return {s.shard_id: s.millis_behind_latest for s in status}
        return {}


def kinesis_sensor(app: AppT) -> KinesisSensor:
    """The app's KinesisSensor, added to ``app.sensors`` on first use."""
    for sensor in app.sensors:
        if isinstance(sensor, KinesisSensor):
            return sensor
    sensor = KinesisSensor()
    app.sensors.add(sensor)
    return sensor
