"""The trace-context carrier: what goes into a record's JSON, what a consumer reads back, and the
BlockingProducer's callers' threads (their span is the one carried)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer, format_span_id, get_current_span

from kinesis_core.producer import BlockingProducer, ProducerConfig
from kinesis_core.records import KinesisRecord
from kinesis_core.tracing import CARRIER_KEY, TraceInjector, inject_json, trace_context
from tests.fakes.kinesis import FakeKinesis

CARRIER = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
MEMBER = '"_otel":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'


@pytest.fixture
def tracer() -> Iterator[Tracer]:
    provider = TracerProvider()
    yield provider.get_tracer("test")
    provider.shutdown()


def record(data: bytes) -> KinesisRecord:
    return KinesisRecord(data, "k", None, "1", 0, "shardId-000000000000", None, False)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"{}", "{" + MEMBER + "}"),
        (b'{"a": 1}', '{"a": 1,' + MEMBER + "}"),
        (b'  {"a": [1, {"b": 2}] }\n', '  {"a": [1, {"b": 2}],' + MEMBER + "}"),
        ('{"name": "Zoë"}'.encode(), '{"name": "Zoë",' + MEMBER + "}"),
        (b'{"a":1,"_otel":{"traceparent":"old"}}', '{"a":1,' + MEMBER + "}"),
    ],
)
def test_a_json_object_gets_the_carrier_and_keeps_its_text(data: bytes, expected: str) -> None:
    out = inject_json(data, CARRIER)
    assert out is not None
    assert out.decode() == expected
    assert json.loads(out)[CARRIER_KEY] == CARRIER


@pytest.mark.parametrize(
    "data", [b"", b"plain bytes", b"[1, 2]", b'"text"', b"42", b"{broken", b"\xff{}"]
)
def test_anything_but_a_json_object_carries_nothing(data: bytes) -> None:
    assert inject_json(data, CARRIER) is None


def test_an_object_is_recognised_by_its_braces_not_parsed() -> None:
    """Text that only looks like an object gets the member too: it was not JSON before and is
    not after (a consumer's ``trace_context`` finds nothing in it)."""
    out = inject_json(b"{not json}", CARRIER)
    assert out == b"{not json," + MEMBER.encode() + b"}"
    assert trace_context(record(out)) is None


def test_without_a_current_span_the_records_are_handed_over_as_they_are() -> None:
    records = [(b'{"a": 1}', "k")]
    assert TraceInjector("Producer('s')").records(records) is records


def test_the_current_span_goes_into_json_records_and_a_consumer_reads_it_back(
    tracer: Tracer, caplog: pytest.LogCaptureFixture
) -> None:
    injector = TraceInjector("Producer('s')")
    entries = [(b'{"a": 1}', "k"), [b'{"b": 2}', "k", "7"], (b"raw", "k"), (b"raw", "k"), "junk"]
    with caplog.at_level(logging.WARNING), tracer.start_as_current_span("put") as span:
        out = injector.records(entries)
    assert [m for m in caplog.messages if "not a JSON object" in m] == [
        "Producer('s'): trace_context is on, but a record's data is not a JSON object: such "
        "records are sent without their trace context (logged once)"
    ]
    assert out[1][1:] == ("k", "7")
    assert out[2:] == entries[2:]
    for entry in out[:2]:
        context = trace_context(record(entry[0]))
        assert context is not None
        carried = get_current_span(context).get_span_context()
        assert (carried.trace_id, carried.span_id) == (
            span.get_span_context().trace_id,
            span.get_span_context().span_id,
        )
    assert trace_context(record(b'{"a": 1}')) is None
    assert trace_context(record(b'["_otel"]')) is None


def test_a_blocking_producer_carries_the_span_of_the_calling_thread(tracer: Tracer) -> None:
    fake = FakeKinesis(shards=1)
    config = ProducerConfig(trace_context=True, aggregation_enabled=False)
    with BlockingProducer("stream", client=fake, producer_config=config) as producer:
        with tracer.start_as_current_span("put") as span:
            assert producer.put(b'{"order": 1}', "k").success
        assert producer.put(b'{"order": 2}', "k").success
    sent = [json.loads(entry["Data"]) for request in fake.requests for entry in request]
    assert sent[1] == {"order": 2}
    assert sent[0]["order"] == 1
    assert sent[0][CARRIER_KEY]["traceparent"].split("-")[2] == format_span_id(
        span.get_span_context().span_id
    )
