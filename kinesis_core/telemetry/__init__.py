"""OpenTelemetry metrics of the producer, the consumer, fan-out and the checkpoint stores.

``ProducerConfig(telemetry=Telemetry())`` or ``ConsumerConfig(telemetry=Telemetry())`` turns
them on (the ``otel`` extra); :data:`METRICS` is the list of every metric with its unit,
attributes and KPL/KCL equivalent (docs/operations.md shows it, and how to export them).
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "Telemetry": "kinesis_core.telemetry.config",
    "METRICS": "kinesis_core.telemetry.names",
    "Instrument": "kinesis_core.telemetry.names",
    "LeaseChange": "kinesis_core.telemetry.names",
    "Metric": "kinesis_core.telemetry.names",
    "SubscriptionOutcome": "kinesis_core.telemetry.names",
    "ConsumerRecorder": "kinesis_core.telemetry.recorder",
}

if TYPE_CHECKING:
    from kinesis_core.telemetry.config import Telemetry as Telemetry
    from kinesis_core.telemetry.names import (
        METRICS as METRICS,
        Instrument as Instrument,
        LeaseChange as LeaseChange,
        Metric as Metric,
        SubscriptionOutcome as SubscriptionOutcome,
    )
    from kinesis_core.telemetry.recorder import ConsumerRecorder as ConsumerRecorder

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
