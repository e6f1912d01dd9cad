"""Whether and where the connectors report OpenTelemetry metrics: :class:`Telemetry`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kinesis_core.errors import ConfigurationError
from kinesis_core.tracing import require_opentelemetry


@dataclass(frozen=True)
class Telemetry:
    """OpenTelemetry metrics of a producer or consumer (``ProducerConfig(telemetry=...)``,
    ``ConsumerConfig(telemetry=...)``); docs/operations.md lists them.

    Off by default (``telemetry=None``): then nothing of OpenTelemetry is imported and nothing
    is counted beyond the producer's own ``metrics()``. Needs the ``opentelemetry-api`` package
    (``pip install 'kinesis-connectors[otel]'``) and, to export anything, an SDK
    ``MeterProvider`` with a reader (Prometheus, OTLP, ...) that the application sets up.
    """

    meter_provider: Any = None
    """The ``MeterProvider`` to report to; None: OpenTelemetry's global one
    (``opentelemetry.metrics.set_meter_provider``), looked up when the producer or consumer
    starts (so a configuration that Beam pickles to its workers keeps working there)."""
    shard_attribute: bool = False
    """Add ``messaging.destination.partition.id`` (the shard id) to the metrics that have it:
    one series per shard, which costs a backend as much as the stream has shards (off by
    default, as OpenTelemetry's conventions advise for high-cardinality attributes)."""

    def __post_init__(self) -> None:
        if not isinstance(self.shard_attribute, bool):
            raise ConfigurationError(
                "telemetry.shard_attribute", f"must be a bool, got {self.shard_attribute!r}"
            )
        require_opentelemetry("telemetry")
