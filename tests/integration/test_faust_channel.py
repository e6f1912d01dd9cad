"""KinesisChannel with real Faust agents in-process (Kafka disabled) on kinesis-mock (and moto).

- concurrency=4 over 2,000 records: everything processed once, and while one event is held
  the shard's checkpoint stops exactly before it (acks arrive out of order);
- safe acks: an agent that raises does not get its events checkpointed past;
- Faust clearing its queues (what a Kafka rebalance does) makes the channel deliver again
  from the checkpoints;
- an app that also declares Kafka topics, and the flow-control wait of an app whose Kafka
  consumer would run;
- send(): Faust serializers both ways, RecordMetadata from the write;
- records that do not decode, in the middle of a batch: skipped in their place and acked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from typing import Any

import faust
import pytest
from faust_apps import FAST_CONSUMER, kafka_free_app, numbered, produce, stream_contents, wait_until

from faust_kinesis import KinesisChannel, KinesisMessage
from kinesis_core.checkpoint import CheckpointValue, MemoryCheckpointStore
from kinesis_core.local import LocalStream
from kinesis_core.records import Position

pytestmark = pytest.mark.integration

Processed = list[tuple[str, Position, Any]]


async def checkpoints(
    store: MemoryCheckpointStore, app: faust.App, stream: LocalStream
) -> dict[str, CheckpointValue]:
    return {row.shard_id: row.value for row in await store.list(app.conf.id, stream.name)}


def channel_for(app: faust.App, stream: LocalStream, **kwargs: Any) -> KinesisChannel:
    kwargs.setdefault("consumer_config", FAST_CONSUMER)
    return KinesisChannel(app, stream.name, client_config=stream.client_config, **kwargs)


def test_concurrency_4_every_record_once_checkpoints_contiguous(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=2)
    asyncio.run(produce(stream, numbered(2000)))
    contents = stream_contents(stream)
    order = {shard: [pos for pos, _ in records] for shard, records in contents.items()}
    held_shard = min(order)
    held = order[held_shard][150]
    before_held = order[held_shard][149]
    rng = random.Random(7)

    async def main() -> None:
        app = kafka_free_app("contiguous", tmp_path / "data", value_serializer="raw")
        store = MemoryCheckpointStore()
        channel = channel_for(app, stream, checkpoint_store=store)
        processed: Processed = []
        release = asyncio.Event()

        @app.agent(channel, concurrency=4)
        async def agent(events: Any) -> None:
            async for event in events.events():
                message = event.message
                assert isinstance(message, KinesisMessage)
                if (message.shard_id, message.position) == (held_shard, held):
                    await release.wait()
                else:
                    await asyncio.sleep(rng.random() * 0.003)  # acks out of order
                processed.append((message.shard_id, message.position, event.value))

        await app.start()
        try:
            # The held event's shard goes on being processed by the other three actors ...
            await wait_until(
                lambda: sum(1 for s, p, _ in processed if s == held_shard and p > held) >= 100,
                30,
                "events after the held one",
            )

            # ... but its checkpoint stops right before the held event, and stays there.
            async def held_back() -> bool:
                return (await checkpoints(store, app, stream)).get(held_shard) == before_held

            await wait_until(held_back, 10, "the checkpoint before the held event")
            await asyncio.sleep(0.3)
            assert (await checkpoints(store, app, stream))[held_shard] == before_held
            release.set()
            await wait_until(lambda: len(processed) >= 2000, 30, "all 2,000 records")
        finally:
            release.set()
            await app.stop()

        assert sorted(value for _, _, value in processed) == sorted(d for d, _ in numbered(2000))
        assert len({(s, p) for s, p, _ in processed}) == 2000
        # All acked: each shard's checkpoint is its last record.
        assert await checkpoints(store, app, stream) == {s: p[-1] for s, p in order.items()}
        stats = channel.stats()
        assert stats["events_acked"] == 2000
        assert stats["events_failed"] == stats["events_dropped"] == 0
        assert app.monitor.messages_received_total == 2000
        committed = app.monitor.tp_committed_offsets
        assert {tp.topic for tp in committed} == {stream.name}

    asyncio.run(main())


@pytest.mark.parametrize("safe_acks", [True, False])
def test_agent_that_raises(kinesis_stream: Any, tmp_path: Path, safe_acks: bool) -> None:
    """Faust acks the event an agent raised on; with safe acks that ack does not count."""
    stream = kinesis_stream(shards=2)
    asyncio.run(produce(stream, numbered(300)))
    contents = stream_contents(stream)
    # One failure per shard: after its first restart, Faust's supervisor notices a crashed
    # actor only on its 5-second tick.
    failing = {records[60][1] for records in contents.values()}

    async def main() -> None:
        app = kafka_free_app("raises", tmp_path / "data", value_serializer="raw")
        store = MemoryCheckpointStore()
        channel = channel_for(app, stream, checkpoint_store=store, safe_acks=safe_acks)
        processed: list[bytes] = []

        @app.agent(channel)
        async def agent(values: Any) -> None:
            async for value in values:
                await asyncio.sleep(0.001)
                if value in failing:
                    raise RuntimeError(f"cannot handle {value!r}")
                processed.append(value)

        await app.start()
        try:
            await wait_until(lambda: len(processed) >= 298, 30, "the records that do not fail")
            await asyncio.sleep(0.2)
        finally:
            await app.stop()
        assert set(processed) == {d for d, _ in numbered(300)} - failing
        stored = await checkpoints(store, app, stream)
        stats = channel.stats()
        if safe_acks:
            # Each shard stops right before its first failing record.
            assert stored == {s: records[59][0] for s, records in contents.items()}
            assert stats["events_failed"] == 2
        else:
            assert stored == {s: records[-1][0] for s, records in contents.items()}
            assert stats["events_failed"] == 0

    asyncio.run(main())


def test_faust_clearing_its_queues_delivers_again_from_the_checkpoints(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=2)
    asyncio.run(produce(stream, numbered(600)))
    contents = stream_contents(stream)

    async def main() -> None:
        app = kafka_free_app("rebalance", tmp_path / "data", value_serializer="raw")
        store = MemoryCheckpointStore()
        channel = channel_for(app, stream, checkpoint_store=store, drain_timeout=5.0)
        processed: list[tuple[bytes, int | None]] = []

        @app.agent(channel, concurrency=2)
        async def agent(events: Any) -> None:
            async for event in events.events():
                await asyncio.sleep(0.002)
                processed.append((event.value, event.message.generation_id))

        await app.start()
        try:
            await wait_until(lambda: len(processed) >= 100, 30, "the first 100 records")
            assert channel.stats()["events_in_flight"] > 50  # queued in Faust
            # What App._on_partitions_revoked/assigned and table recovery do in a rebalance:
            app.flow_control.suspend()
            app.flow_control.clear()
            app.consumer_generation_id += 1
            await asyncio.sleep(0.1)
            app.flow_control.resume()
            await wait_until(
                lambda: {v for v, _ in processed} >= {d for d, _ in numbered(600)},
                30,
                "every record",
            )
            await asyncio.sleep(0.2)
        finally:
            await app.stop()
        stats = channel.stats()
        assert stats["redeliveries"] >= 1
        assert stats["events_dropped"] > 0
        # Nothing processed twice unless it came after the checkpoint of the clear.
        assert await checkpoints(store, app, stream) == {
            s: records[-1][0] for s, records in contents.items()
        }
        late = [g for _, g in processed[-100:]]
        assert set(late) == {app.consumer_generation_id}

    asyncio.run(main())


class Order(faust.Record, serializer="json"):
    order_id: int
    customer: str


def test_send_and_read_faust_records(kinesis_stream: Any, tmp_path: Path) -> None:
    stream = kinesis_stream(shards=2)

    async def main() -> None:
        app = kafka_free_app("records", tmp_path / "data")
        channel = channel_for(
            app, stream, checkpoint_store=MemoryCheckpointStore(), value_type=Order
        )
        received: list[tuple[Any, Order, KinesisMessage]] = []

        @app.agent(channel)
        async def agent(events: Any) -> None:
            async for event in events.events():
                received.append((event.key, event.value, event.message))

        await app.start()
        try:
            futures = [
                await channel.send(key=f"c-{i % 3}", value=Order(order_id=i, customer=f"c-{i % 3}"))
                for i in range(20)
            ]
            metadata = [await f for f in futures]
            await wait_until(lambda: len(received) == 20, 20, "the 20 orders")
        finally:
            await app.stop()
        by_id = {value.order_id: (key, value, message) for key, value, message in received}
        assert sorted(by_id) == list(range(20))
        for i, meta in enumerate(metadata):
            key, value, message = by_id[i]
            assert key == f"c-{i % 3}".encode()
            assert value == Order(order_id=i, customer=f"c-{i % 3}")
            assert meta.topic == stream.name
            assert (meta.partition, meta.offset) == (message.partition, message.offset)
            assert message.shard_id.endswith(f"{meta.partition:012d}")
        assert app.monitor.messages_sent == 20
        producer = channel.producer
        assert producer is not None
        assert producer.closed

    asyncio.run(main())


def test_records_that_do_not_decode_are_skipped_in_their_place(
    moto_stream: Any, tmp_path: Path
) -> None:
    """Three records the value serializer cannot read, in the middle of one GetRecords batch
    delivered through a queue of four: each goes to the decode-error hook and is acked, the
    others arrive in shard order, and the checkpoint reaches the last record."""
    stream = moto_stream(shards=1)
    good = [i for i in range(30) if i % 10 != 5]
    items = [
        (Order(order_id=i, customer="c").dumps() if i in good else b"not json", f"key-{i}")
        for i in range(30)
    ]

    async def main() -> None:
        await produce(stream, items)
        app = kafka_free_app("decode-errors", tmp_path / "data")
        store = MemoryCheckpointStore()
        one_batch = dataclasses.replace(FAST_CONSUMER, max_records_per_call=10_000)
        channel = channel_for(
            app,
            stream,
            checkpoint_store=store,
            value_type=Order,
            consumer_config=one_batch,
            maxsize=4,
        )
        failed: list[Position] = []

        async def on_decode_error(exc: Exception, message: Any) -> None:
            assert isinstance(exc, faust.exceptions.DecodeError)
            failed.append(message.position)

        channel.reader.on_decode_error = on_decode_error
        received: list[int] = []

        @app.agent(channel)
        async def agent(orders: Any) -> None:
            async for order in orders:
                received.append(order.order_id)

        (shard,) = stream_contents(stream).items()
        shard_id, records = shard
        await app.start()
        try:
            await wait_until(lambda: len(received) == len(good), 20, "the decodable records")
            last = records[-1][0]

            async def at_the_end() -> bool:
                return (await checkpoints(store, app, stream)).get(shard_id) == last

            await wait_until(at_the_end, 20, "the checkpoint at the last record")
        finally:
            await app.stop()
        assert received == good
        assert failed == [records[i][0] for i in (5, 15, 25)]
        assert channel.reader.decode_errors == 3

    asyncio.run(main())


def test_in_an_app_that_also_uses_kafka_topics(kinesis_stream: Any, tmp_path: Path) -> None:
    """Kafka cannot run here: the app declares Kafka topics and agents, and the channel must
    not depend on the Kafka transport. With the Kafka consumer enabled, flow control is
    Faust's (table recovery resumes it); the channel waits for it instead of resuming it."""
    stream = kinesis_stream(shards=1)
    asyncio.run(produce(stream, numbered(20)))

    async def kafka_disabled() -> None:
        app = kafka_free_app("mixed", tmp_path / "mixed", value_serializer="raw")
        topic = app.topic("orders-kafka")
        kafka_seen: list[Any] = []

        @app.agent(topic)
        async def kafka_agent(values: Any) -> None:
            async for value in values:
                kafka_seen.append(value)

        channel = channel_for(app, stream, checkpoint_store=MemoryCheckpointStore())
        seen: list[bytes] = []

        @app.agent(channel)
        async def kinesis_agent(values: Any) -> None:
            async for value in values:
                seen.append(value)

        await app.start()
        try:
            await wait_until(lambda: len(seen) == 20, 20, "the Kinesis records")
        finally:
            await app.stop()
        assert kafka_seen == []
        # Faust made its Kafka consumer and producer objects, but never started them.
        assert not app.consumer.started
        assert app._producer is None or not app._producer.started

    async def kafka_consumer_enabled() -> None:
        app = faust.App("with-kafka", web_enabled=False, datadir=str(tmp_path / "k"))
        app.topic("orders-kafka")
        channel = channel_for(
            app, stream, checkpoint_store=MemoryCheckpointStore(), value_serializer="raw"
        )
        subscriber = channel.clone(is_iterator=True)  # what an agent's stream does
        await channel.reader.start()
        try:
            await asyncio.sleep(1.0)
            assert not app.flow_control.is_active()
            assert subscriber.queue.empty()
            app.flow_control.resume()  # Faust's table recovery, after an assignment
            event = await asyncio.wait_for(subscriber.get(), 10)
            assert isinstance(event.message, KinesisMessage)
            assert event.value == b"0"
            event.ack()
        finally:
            await channel.reader.stop()

    asyncio.run(kafka_disabled())
    asyncio.run(kafka_consumer_enabled())


def test_a_stream_that_does_not_exist_crashes_the_app(kinesis_mock: Any, tmp_path: Path) -> None:
    async def main() -> None:
        app = kafka_free_app("missing", tmp_path / "data")
        channel = KinesisChannel(
            app,
            "no-such-stream",
            client_config=kinesis_mock.client_config(),
            checkpoint_store=MemoryCheckpointStore(),
        )

        @app.agent(channel)
        async def agent(values: Any) -> None:
            async for _ in values:
                pass

        await app.start()
        try:
            await wait_until(lambda: app.crashed, 20, "the app to crash")
        finally:
            await app.stop()
        assert "ResourceNotFoundException" in repr(channel.reader.crash_reason)

    asyncio.run(main())


def test_an_agent_reads_by_enhanced_fan_out(kinesis_stream: Any, tmp_path: Path) -> None:
    """The channel's consumer_config carries fan-out: the agent gets every record once, and
    the checkpoints are the same rows polling writes."""
    stream = kinesis_stream(shards=2)
    asyncio.run(produce(stream, numbered(60)))

    async def main() -> tuple[list[Any], dict[str, CheckpointValue], set[str | None]]:
        app = kafka_free_app("fan-out-reader", tmp_path / "data", value_serializer="raw")
        store = MemoryCheckpointStore()
        config = dataclasses.replace(FAST_CONSUMER, enhanced_fan_out=True)
        channel = channel_for(app, stream, checkpoint_store=store, consumer_config=config)
        received: list[Any] = []

        @app.agent(channel)
        async def agent(events: Any) -> None:
            async for event in events.events():
                received.append(event.value)

        await app.start()
        try:
            await wait_until(lambda: len(received) >= 60, 30, "the 60 records")
            transports = {s.transport for s in channel.status()}
        finally:
            await app.stop()
        return received, await checkpoints(store, app, stream), transports

    received, stored, transports = asyncio.run(main())
    assert sorted(received) == sorted(data for data, _ in numbered(60))
    assert transports == {"subscription"}
    assert len(stored) == 2
