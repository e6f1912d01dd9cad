"""What an OpenTelemetry SDK ``InMemoryMetricReader`` collected, flattened for assertions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader


def collected(reader: InMemoryMetricReader) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(metric name, attributes, data point) of every point the reader collects now."""
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    yield metric.name, dict(point.attributes or {}), point
