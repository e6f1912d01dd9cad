"""Trace context carried with each user record (optional, off by default; the ``otel`` extra).

``ProducerConfig(trace_context=True)``: a record put while an OpenTelemetry span is current
carries that span's context (what the global propagator injects: W3C ``traceparent``, and
``tracestate`` and ``baggage`` when set) inside its data, under the key ``"_otel"`` of a JSON
object, the way ddtrace's botocore instrumentation carries ``"_datadog"`` in Kinesis JSON
payloads. The consumer continues it: ``trace_context(record)`` gives the OpenTelemetry
``Context`` to start a span in (None when the record carries none).

Only a JSON object can carry it (data whose text starts with ``{`` and ends with ``}``): other
data (bytes, text, a JSON array) is sent unchanged, and the producer logs that once. The
object's text is kept as it was, the carrier appended before its closing brace; nothing is
parsed unless the object already has the key. Kinesis records have no headers; the KPL
aggregate's per-record tags would carry it for aggregated records only (a record that goes out
alone is a plain record, with no tags), and the KCL and Lambda drop them, so the payload is the
one carrier every reader sees.

Off, nothing here runs: the producer checks one attribute per ``put``/``put_many`` call, and
OpenTelemetry is not imported.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kinesis_core.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from kinesis_core.records import KinesisRecord

__all__ = ["CARRIER_KEY", "TraceInjector", "carrier_member", "inject_json", "trace_context"]

logger = logging.getLogger(__name__)

CARRIER_KEY = "_otel"
"""The key of a JSON object's member that carries the trace context."""

_MARK = b'"' + CARRIER_KEY.encode() + b'"'


_API_MODULES = ("opentelemetry.context", "opentelemetry.metrics", "opentelemetry.propagate")
"""The modules of opentelemetry-api that the connectors import."""


def _api_installed() -> bool:
    """Whether opentelemetry-api's modules can be imported: not just a namespace package named
    ``opentelemetry``, which another distribution (opentelemetry-proto, the semantic
    conventions) can leave without the API."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in _API_MODULES)
    except (ImportError, ValueError):
        return False


def require_opentelemetry(field: str) -> None:
    """ConfigurationError naming ``field`` when the ``otel`` extra is not installed."""
    if not _api_installed():
        raise ConfigurationError(
            field, "needs the opentelemetry-api package (pip install 'kinesis-connectors[otel]')"
        )


def carrier_member(carrier: Mapping[str, str]) -> bytes:
    """The JSON member ``"_otel":{...}`` that carries ``carrier`` (made once per call)."""
    return json.dumps({CARRIER_KEY: dict(carrier)}, separators=(",", ":"))[1:-1].encode()


def inject_json(
    data: bytes, carrier: Mapping[str, str], member: bytes | None = None
) -> bytes | None:
    """``data`` with ``carrier`` under :data:`CARRIER_KEY` when its text is a JSON object's
    (starts with ``{``, ends with ``}``); None otherwise. The text is kept, the member
    (``member``: :func:`carrier_member` of ``carrier``, when the caller made it already)
    appended before the closing brace. An object that already has the key is parsed and
    written again with the new carrier."""
    end = data.rstrip()
    if not end.endswith(b"}") or not data.lstrip().startswith(b"{"):
        return None
    if _MARK in data:
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(value, dict):
            return None
        value[CARRIER_KEY] = dict(carrier)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    body = end[:-1].rstrip()
    if member is None:
        member = carrier_member(carrier)
    return b"".join((body, b"" if body.endswith(b"{") else b",", member, b"}"))


class TraceInjector:
    """The producer's half: puts the current span's context into the records handed over."""

    def __init__(self, owner: str) -> None:
        require_opentelemetry("trace_context")
        from opentelemetry import propagate

        self._inject = propagate.inject
        self._owner = owner
        self._warned = False

    def records(self, records: Sequence[Any]) -> Sequence[Any]:
        """``records`` (``(data, partition_key[, explicit_hash_key])`` entries) with the
        current context in each JSON object's data; as they are without a current span.
        Entries of another shape pass unchanged: validation refuses them after this."""
        carrier: dict[str, str] = {}
        self._inject(carrier)
        if not carrier:
            return records
        member = carrier_member(carrier)
        out = []
        for entry in records:
            if isinstance(entry, (tuple, list)) and entry and isinstance(entry[0], bytes):
                data = inject_json(entry[0], carrier, member)
                if data is not None:
                    entry = (data, *entry[1:])
                elif not self._warned:
                    self._warned = True
                    logger.warning(
                        "%s: trace_context is on, but a record's data is not a JSON object: "
                        "such records are sent without their trace context (logged once)",
                        self._owner,
                    )
            out.append(entry)
        return out


def trace_context(record: KinesisRecord) -> Context | None:
    """The OpenTelemetry context a producer with ``trace_context=True`` put into ``record``'s
    data, to start the consumer's span in
    (``tracer.start_as_current_span("process", context=trace_context(record))``); None when
    the record carries none. Needs the ``otel`` extra."""
    data = record.data
    if _MARK not in data:
        return None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return None
    carrier = value.get(CARRIER_KEY) if isinstance(value, dict) else None
    if not isinstance(carrier, dict):
        return None
    from opentelemetry import propagate

    return propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})
