"""KinesisSink with a real Faust agent (Kafka disabled) on kinesis-mock: read, transform, write.

Every record reaches the output stream, and a source event is acked only after its output
record is confirmed: a sensor sees every write confirmation before the ack of its source.
Records up to 10 MiB go through a sink and come back through channels, polling and fan-out.
With ``record_ids=True`` the outputs carry ids derived from their source records, the same
when the input is processed again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from faust import Sensor
from faust_apps import FAST_CONSUMER, kafka_free_app, numbered, produce, stream_contents, wait_until
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from faust_kinesis import KinesisChannel, KinesisSink, kinesis_sensor
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import ConsumerConfig, EnhancedFanOut
from kinesis_core.producer import ProducerConfig
from kinesis_core.record_ids import derived_partition_key, derived_record_id
from kinesis_core.telemetry import Telemetry
from tests.helpers.large_records import large_records
from tests.helpers.otel import collected
from tests.helpers.streams import user_records

pytestmark = pytest.mark.integration

COUNT = 400
SLOW_ENDPOINT = ProducerConfig(request_timeout_per_mib=16.0, record_ttl=300.0)
"""kinesis-mock spends about 7 s of its one thread on a 9.5 MiB PutRecords: on a loaded machine
longer than the 30 s the defaults give that request (a 4 Mbit/s link), and a request the
producer gives up on still runs there, ahead of its retry. The sink waits as on a 0.5 Mbit/s
link (9.5 MiB: 193 s), and its records live 5 minutes."""


class Order(Sensor):
    """Records, per number, when its write was confirmed and when its source was acked."""

    def __post_init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_send_initiated(self, producer: Any, topic: str, message: Any, *sizes: int) -> Any:
        return json.loads(message.value)["n"]

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        self.events.append(("written", state))

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        self.events.append(("acked", int(message.value)))


def otel_totals(reader: InMemoryMetricReader) -> dict[tuple[str, str], float]:
    """Sums of the counters an in-memory reader collected, by (metric, stream)."""
    totals: dict[tuple[str, str], float] = {}
    for name, attributes, point in collected(reader):
        key = (name, str(attributes["messaging.destination.name"]))
        totals[key] = totals.get(key, 0) + getattr(point, "value", 0)
    return totals


def test_read_transform_write_moves_every_record(kinesis_stream: Any, tmp_path: Path) -> None:
    source, target = kinesis_stream(shards=2), kinesis_stream(shards=1)
    asyncio.run(produce(source, numbered(COUNT)))
    contents = stream_contents(source)

    reader = InMemoryMetricReader()
    telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]))

    async def main() -> None:
        app = kafka_free_app("sink", tmp_path / "data", value_serializer="raw")
        store = MemoryCheckpointStore()
        channel = KinesisChannel(
            app,
            source.name,
            client_config=source.client_config,
            checkpoint_store=store,
            consumer_config=dataclasses.replace(FAST_CONSUMER, telemetry=telemetry),
        )
        sink = KinesisSink(
            app,
            target.name,
            partition_key="n",
            value_serializer="json",
            client_config=target.client_config,
            # Writes linger: the agent is done long before the first write is confirmed.
            producer_config=ProducerConfig(record_max_buffered_time=1.5, telemetry=telemetry),
        )
        seen: list[int] = []
        order = Order()
        app.sensors.add(order)

        @app.agent(channel, sink=[sink], concurrency=2)
        async def double(values: Any) -> Any:
            async for value in values:
                n = int(value)
                seen.append(n)
                yield {"n": n, "double": 2 * n}

        await app.start()
        try:
            await wait_until(lambda: len(seen) == COUNT, 20, "the agent to see every record")
            await wait_until(
                lambda: channel.stats()["events_acked"] == COUNT, 20, "every source ack"
            )
            seen_by_faust = kinesis_sensor(app).asdict()
            assert seen_by_faust["writing"] == {
                target.name: {"records_put": COUNT, "records_failed": 0}
            }
            reading = seen_by_faust["reading"][source.name]
            assert set(reading["shards"]) == set(contents)
            assert all(s["millis_behind_latest"] is not None for s in reading["shards"].values())
            assert app.monitor.messages_sent == COUNT
            # The same figures as the OpenTelemetry metrics, from the sensor and from the
            # meter provider the channel's and the sink's telemetry report to.
            figures = kinesis_sensor(app).figures()
            by_name = {
                (name, dict(attrs).get("messaging.destination.name")): value
                for name, attrs, value in figures
                if name != "aws.kinesis.consumer.lag"
            }
            assert by_name[("messaging.client.consumed.messages", source.name)] == COUNT
            assert by_name[("messaging.client.sent.messages", target.name)] == COUNT
            lags = {
                dict(a)["messaging.destination.partition.id"]
                for n, a, _ in figures
                if n == "aws.kinesis.consumer.lag"
            }
            assert lags == set(contents)
            otel = otel_totals(reader)
            assert otel[("messaging.client.consumed.messages", source.name)] == COUNT
            assert otel[("messaging.client.sent.messages", target.name)] == COUNT
        finally:
            await app.stop()
        assert sink.failures == 0
        written_at = {n: i for i, (what, n) in enumerate(order.events) if what == "written"}
        acked_at = {n: i for i, (what, n) in enumerate(order.events) if what == "acked"}
        assert set(acked_at) == set(range(COUNT))
        assert all(written_at[n] < acked_at[n] for n in range(COUNT))
        stored = {row.shard_id: row.value for row in await store.list(app.conf.id, source.name)}
        assert stored == {s: records[-1][0] for s, records in contents.items()}

    asyncio.run(main())
    written = [
        json.loads(data) for records in stream_contents(target).values() for _, data in records
    ]
    assert {w["n"] for w in written} == set(range(COUNT))
    assert all(w["double"] == 2 * w["n"] for w in written)


def test_large_records_go_through_the_sink_and_back_through_channels_by_polling_and_fan_out(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    """A 3 MiB and a 9.5 MiB value among small ones, with default settings but a slow
    endpoint's timeouts: written by a KinesisSink, read back intact by a KinesisChannel polling
    and one by enhanced fan-out."""
    stream = kinesis_stream(shards=1, max_record_size_kib=10240)
    values = [key.encode() + b":" + data for data, key in large_records("faust")]

    async def main() -> tuple[list[bytes], list[bytes]]:
        app = kafka_free_app("large", tmp_path / "data", value_serializer="raw")
        feed = app.channel()
        sink = KinesisSink(
            app,
            stream.name,
            partition_key=lambda value: value.split(b":", 1)[0].decode(),
            client_config=stream.client_config,
            producer_config=SLOW_ENDPOINT,
        )
        readers = {
            "polling": ConsumerConfig(),
            "fan-out": ConsumerConfig(enhanced_fan_out=EnhancedFanOut(consumer_name="faust-large")),
        }
        got: dict[str, list[bytes]] = {name: [] for name in readers}

        @app.agent(feed, sink=[sink])
        async def write(items: Any) -> Any:
            async for item in items:
                yield item

        for name, config in readers.items():
            channel = KinesisChannel(
                app,
                stream.name,
                client_config=stream.client_config,
                checkpoint_store=MemoryCheckpointStore(),
                application_name=f"large-{name}",
                initial_position="TRIM_HORIZON",
                consumer_config=config,
            )

            async def read(events: Any, into: list[bytes] = got[name]) -> None:
                async for value in events:
                    into.append(value)

            app.agent(channel, name=f"read-{name}")(read)

        await app.start()
        try:
            for value in values:
                await feed.send(value=value)
            await wait_until(
                lambda: all(len(v) == len(values) for v in got.values()), 240, "both readers"
            )
        finally:
            await app.stop()
        assert sink.failures == 0
        return got["polling"], got["fan-out"]

    polled, fanned = asyncio.run(main())
    assert sorted(polled) == sorted(values)
    assert sorted(fanned) == sorted(values)


def test_outputs_carry_ids_derived_from_their_source_records(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    """Each event yields two outputs; processing the same input twice (a fresh checkpoint
    store, as after a crash before any checkpoint) writes every output twice with the same
    id: the source record's stream incarnation, shard, position and the output's index."""
    count = 60
    source, target = kinesis_stream(shards=1), kinesis_stream(shards=1)
    asyncio.run(produce(source, numbered(count)))
    ((shard_id, records),) = stream_contents(source).items()
    created_ms = int(
        source.boto_client()
        .describe_stream_summary(StreamName=source.name)["StreamDescriptionSummary"][
            "StreamCreationTimestamp"
        ]
        .timestamp()
        * 1000
    )

    async def process_once(run: int) -> None:
        app = kafka_free_app(f"ids-{run}", tmp_path / f"data-{run}", value_serializer="raw")
        channel = KinesisChannel(
            app,
            source.name,
            client_config=source.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            consumer_config=FAST_CONSUMER,
        )
        sink = KinesisSink(app, target.name, client_config=target.client_config, record_ids=True)
        seen: list[int] = []

        @app.agent(channel, sink=[sink])
        async def twice(values: Any) -> Any:
            async for value in values:
                seen.append(int(value))
                yield f"{int(value)}-a".encode()
                yield f"{int(value)}-b".encode()

        await app.start()
        try:
            await wait_until(lambda: len(seen) == count, 30, "the agent to see every record")
            await wait_until(
                lambda: channel.stats()["events_acked"] == count, 30, "every source ack"
            )
        finally:
            await app.stop()
        assert sink.failures == 0

    asyncio.run(process_once(1))
    asyncio.run(process_once(2))
    written = user_records(target)
    assert len(written) == 4 * count
    expected = {}
    for (sequence, sub_sequence), data in records:
        for index, suffix in enumerate(("a", "b")):
            expected[f"{data.decode()}-{suffix}".encode()] = derived_record_id(
                created_ms, shard_id, sequence, sub_sequence, index
            )
    assert all(r.record_id == expected[r.data] for r in written)
    # Without a key of its own, an output's key is its id: a copy goes to the first's shard.
    assert all(r.partition_key == derived_partition_key(r.record_id) for r in written)
    assert sorted(Counter(r.record_id for r in written).values()) == [2] * (2 * count)
