"""Trace context through kinesis-mock: a span around a put is the parent of the span the
consumer starts for the record (``ProducerConfig(trace_context=True)``, ``trace_context``),
for aggregated and plain records; spans read through the OTel SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, ConsumerConfig
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.records import KinesisRecord
from kinesis_core.tracing import CARRIER_KEY, trace_context

pytestmark = pytest.mark.integration


@pytest.fixture
def tracing() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


async def read(stream: Any, count: int) -> list[KinesisRecord]:
    config = ConsumerConfig(initial_position=TRIM_HORIZON, idle_interval=0.2)
    got: list[KinesisRecord] = []
    async with Consumer(
        stream.name,
        consumer_config=config,
        client_config=stream.client_config,
        checkpoint_store=MemoryCheckpointStore(),
    ) as consumer:
        async for record in consumer:
            got.append(record)
            record.ack()
            if len(got) == count:
                break
    return got


@pytest.mark.parametrize("aggregation", [True, False], ids=["aggregated", "plain"])
def test_the_consumers_span_continues_the_span_around_the_put(
    kinesis_stream: Any, tracing: Any, aggregation: bool
) -> None:
    tracer, exporter = tracing
    stream = kinesis_stream(shards=1)
    config = ProducerConfig(trace_context=True, aggregation_enabled=aggregation)
    orders = [(json.dumps({"order": i}).encode(), f"key-{i}") for i in range(5)]

    async def main() -> list[KinesisRecord]:
        async with Producer(
            stream.name, client_config=stream.client_config, producer_config=config
        ) as p:
            with tracer.start_as_current_span("put orders"):
                assert (await p.put_many(orders)).ok
            with tracer.start_as_current_span("put one"):
                assert (await p.put(b'{"order": 5}', "key-5")).success
                assert (await p.put(b"not json", "key-6")).success
            assert (await p.put(b'{"order": 7}', "key-7")).success  # no span: nothing carried
        return await read(stream, 8)

    records = asyncio.run(asyncio.wait_for(main(), 120))
    assert [r.aggregated for r in records[:5]] == [aggregation] * 5
    for record in records:
        with tracer.start_as_current_span("process", context=trace_context(record)):
            pass
    spans = {s.name: s for s in exporter.get_finished_spans() if s.name != "process"}
    processed = [s for s in exporter.get_finished_spans() if s.name == "process"]
    parents = [p.parent.span_id if p.parent else None for p in processed]
    put_orders = spans["put orders"].context
    put_one = spans["put one"].context
    assert parents == [put_orders.span_id] * 5 + [put_one.span_id, None, None]
    assert {p.context.trace_id for p in processed[:5]} == {put_orders.trace_id}
    assert processed[5].context.trace_id == put_one.trace_id
    # The data is the caller's JSON with the carrier appended; other data is as it was.
    first = json.loads(records[0].data)
    assert first["order"] == 0
    assert first[CARRIER_KEY]["traceparent"].split("-")[2] == f"{put_orders.span_id:016x}"
    assert [r.data for r in records[6:]] == [b"not json", b'{"order": 7}']


def test_off_by_default_the_data_is_sent_as_given(kinesis_stream: Any, tracing: Any) -> None:
    tracer, _ = tracing
    stream = kinesis_stream(shards=1)

    async def main() -> list[KinesisRecord]:
        async with Producer(stream.name, client_config=stream.client_config) as p:
            with tracer.start_as_current_span("put"):
                assert (await p.put(b'{"order": 1}', "key")).success
        return await read(stream, 1)

    [record] = asyncio.run(asyncio.wait_for(main(), 60))
    assert record.data == b'{"order": 1}'
    assert trace_context(record) is None
