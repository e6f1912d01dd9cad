"""KinesisChannel and KinesisSink pieces that need Faust but no Kinesis server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.app.base import BootStrategy
from faust.types import TP

from faust_kinesis import KinesisChannel, KinesisSensor, KinesisSink, kinesis_sensor
from faust_kinesis.acks import Outcome
from faust_kinesis.faust_internals import kafka_consumer_enabled
from faust_kinesis.message import KinesisMessage
from faust_kinesis.partitions import shard_number, shard_tp
from faust_kinesis.queues import AHEAD, KinesisQueue
from faust_kinesis.reader import Reader, decoder, position_text
from faust_kinesis.settings import start_position
from faust_kinesis.writer import Writer
from kinesis_core.consumer import LATEST, TRIM_HORIZON, ConsumerConfig
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.lifecycle import LifecycleError
from kinesis_core.producer import PutFailedError
from kinesis_core.record_ids import derived_record_id
from kinesis_core.records import KinesisRecord
from kinesis_core.stream import StreamRef


def make_app(tmp_path: Path, **conf: Any) -> faust.App:
    app = faust.App("unit", web_enabled=False, datadir=str(tmp_path / "data"), **conf)
    app.boot_strategy.enable_kafka = False
    return app


def test_shard_number() -> None:
    assert shard_number("shardId-000000000007") == 7
    assert shard_number("shardId-000000001234") == 1234
    assert shard_tp("orders", "shardId-000000000003") == TP("orders", 3)
    with pytest.raises(ValidationError, match="shard_id"):
        shard_number("not-a-shard")


def test_kafka_consumer_enabled() -> None:
    app = faust.App("k")
    assert kafka_consumer_enabled(app)
    app.boot_strategy = BootStrategy(app, enable_kafka=False)
    assert not kafka_consumer_enabled(app)
    app.boot_strategy = BootStrategy(app, enable_kafka=False, enable_kafka_consumer=True)
    assert kafka_consumer_enabled(app)
    app.boot_strategy = BootStrategy(app, enable_kafka_consumer=False)
    assert not kafka_consumer_enabled(app)


def test_initial_position_follows_faust() -> None:
    assert start_position("earliest") == TRIM_HORIZON
    assert start_position("latest") == LATEST


def test_an_unknown_keyword_is_refused_by_the_channel_naming_it(tmp_path: Path) -> None:
    """A keyword neither KinesisChannel nor Faust's Channel takes: a ConfigurationError naming
    it and the close match (before: a TypeError from inside Faust's ``Channel.__init__``).
    Faust's own keywords still pass through, as clones need."""
    app = make_app(tmp_path)
    with pytest.raises(ConfigurationError) as raised:
        KinesisChannel(app, "s", consumer_options={})
    assert raised.value.field == "consumer_options"
    assert str(raised.value).startswith(
        "consumer_options: KinesisChannel takes no such keyword (did you mean consumer_config?)"
    )
    assert KinesisChannel(app, "s", is_iterator=True).is_iterator


def test_bad_arguments(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    with pytest.raises(ConfigurationError, match="stream"):
        KinesisChannel(app, "")
    with pytest.raises(ConfigurationError, match="stream"):
        KinesisSink(app, "not a stream name")
    with pytest.raises(ConfigurationError, match="drain_timeout"):
        KinesisChannel(app, "s", drain_timeout=-1)
    with pytest.raises(ConfigurationError, match="initial_position"):
        KinesisChannel(app, "s", initial_position="EARLIEST")
    with pytest.raises(ConfigurationError, match="application_name"):
        KinesisChannel(app, "s", application_name="")
    with pytest.raises(ConfigurationError, match="consumer_config: must be a ConsumerConfig"):
        KinesisChannel(app, "s", consumer_config={"checkpoint_interval": 1})  # type: ignore[arg-type]
    for field, value, instead in [
        ("close_timeout", 1.0, "drain_timeout"),
        ("application_name", "other", "application_name="),
        ("initial_position", "TRIM_HORIZON", "initial_position="),
        ("auto_ack", True, "Faust"),
    ]:
        config = ConsumerConfig(**{field: value})
        refused = f"{field} is set by KinesisChannel.*{instead}"
        with pytest.raises(ConfigurationError, match=refused):
            KinesisChannel(app, "s", consumer_config=config)
    # Refused when made, not when the first agent subscribes.
    with pytest.raises(ConfigurationError, match="checkpoint_interval"):
        KinesisChannel(app, "s", consumer_config=ConsumerConfig(checkpoint_interval=0))


def test_settings_follow_the_app_unless_given(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    config = ConsumerConfig(checkpoint_interval=0.5, max_records_per_call=10)
    channel = KinesisChannel(app, "orders", consumer_config=config, drain_timeout=2)
    settings = channel.settings
    assert settings.stream == StreamRef("orders")
    assert (settings.safe_acks, settings.drain_timeout) == (True, 2)
    resolved = settings.consumer_config_for("app-id", "earliest")
    assert resolved == ConsumerConfig(
        application_name="app-id",
        initial_position=TRIM_HORIZON,
        checkpoint_interval=0.5,
        max_records_per_call=10,
        auto_ack=False,
        close_timeout=0.0,
    )
    assert settings.consumer_config_for("app-id", "latest").initial_position == LATEST

    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
    given = KinesisChannel(
        app, arn, application_name="billing", initial_position="trim_horizon"
    ).settings
    assert given.stream == StreamRef("orders", arn)
    resolved = given.consumer_config_for("app-id", "latest")
    assert (resolved.application_name, resolved.initial_position) == ("billing", TRIM_HORIZON)


def kinesis_services(app: faust.App) -> list[Any]:
    """The readers and writers made for ``app`` (each service's beacon is a child of the
    app's)."""
    return [n.data for n in app.beacon.children if isinstance(n.data, (Reader, Writer))]


def test_clones_are_subscribers_of_the_root(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders", value_serializer="raw", maxsize=10)
    assert channel.get_topic_name() == "orders"
    assert str(channel) == "kinesis:orders"
    iterator = channel.clone(is_iterator=True)
    assert isinstance(iterator, KinesisChannel)
    assert iterator.stream_name == "orders"
    assert iterator.value_serializer == "raw"
    assert channel.subscriber_count == 1
    assert channel.reader.subscriber_count == 1
    assert isinstance(iterator.queue, KinesisQueue)
    assert iterator.queue.maxsize == 10
    assert (iterator.reader, iterator.writer) == (channel.reader, channel.writer)
    # One reader and one writer per root channel; clones make none.
    assert kinesis_services(app) == [channel.writer, channel.reader]


def test_the_writer_stops_after_the_reader(tmp_path: Path) -> None:
    """Shutdown drains the reader first (agents may still send), then closes the writer."""
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders")
    stopped: list[str] = []
    for name, service in [("reader", channel.reader), ("writer", channel.writer)]:
        on_stop = service.on_stop

        async def record(name: str = name, on_stop: Any = on_stop) -> None:
            stopped.append(name)
            await on_stop()

        service.on_stop = record  # type: ignore[method-assign]

    async def main() -> None:
        await app.start()
        assert channel.reader.started
        assert channel.writer.started
        await app.stop()

    asyncio.run(main())
    assert stopped == ["reader", "writer"]


class Recorder:
    stream_created_ms: int | None = 1_700_000_000_000

    def __init__(self) -> None:
        self.finished: list[bool] = []
        self.settled: list[Outcome] = []

    def finish(self, message: KinesisMessage, exception_in_flight: bool) -> None:
        self.finished.append(exception_in_flight)

    def settle(self, message: KinesisMessage, outcome: Outcome) -> None:
        self.settled.append(outcome)


def kinesis_message(
    run: Any, refcount: int = 0, generation_id: int | None = None
) -> KinesisMessage:
    record = KinesisRecord(b"v", "k", None, 1, 0, "shardId-000000000000", None, False)
    return KinesisMessage(
        record, TP("orders", 0), b"k", 0.0, run, refcount=refcount, generation_id=generation_id
    )


def test_an_events_outputs_get_ids_derived_from_its_record() -> None:
    run = Recorder()
    message = kinesis_message(run)
    first, second = message.next_record_id(), message.next_record_id()
    assert first == derived_record_id(1_700_000_000_000, "shardId-000000000000", 1, 0, 0)
    assert second == derived_record_id(1_700_000_000_000, "shardId-000000000000", 1, 0, 1)
    assert kinesis_message(run).next_record_id() == first  # the same record processed again


def test_queue_clear_drops_kinesis_events_and_room_comes_at_half(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders")
    run = Recorder()

    async def main() -> None:
        queue = channel.clone(is_iterator=True).queue
        assert isinstance(queue, KinesisQueue)
        queue = KinesisQueue(channel.reader.on_cleared, 4, flow_control=app.flow_control)
        for _ in range(4):
            queue.put_nowait(app.create_event(None, None, None, kinesis_message(run)))
        waiter = asyncio.ensure_future(queue.wait_for_room())
        await asyncio.sleep(0)
        queue.get_nowait()
        await asyncio.sleep(0)
        assert not waiter.done()  # 3 of 4: not half empty yet
        queue.get_nowait()
        await asyncio.sleep(0)
        assert waiter.done()
        queue.put_nowait("not an event")
        queue.clear()
        assert queue.empty()
        assert run.settled == [Outcome.DROPPED, Outcome.DROPPED]

    asyncio.run(main())


def test_send_refuses_what_kinesis_cannot_carry(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders", key_serializer="raw", value_serializer="raw")

    async def main() -> None:
        with pytest.raises(ValidationError, match="headers"):
            await channel.send(value=b"v", headers={"h": b"1"})
        with pytest.raises(ValidationError, match="partition"):
            await channel.send(value=b"v", partition=2)
        with pytest.raises(ValidationError, match="UTF-8"):
            await channel.send(key=b"\xff\xfe", value=b"v")
        with pytest.raises(ValidationError, match="bytes"):
            await channel.writer.publish(channel.as_future_message(None, 12))

    asyncio.run(main())
    assert channel.producer is None  # nothing was started


def test_decoders() -> None:
    assert decoder(lambda *a, **k: None, None, None, "raw") is None  # raw bytes pass as they are
    assert decoder(lambda *a, **k: None, bytes, "raw", "json") is None
    calls: list[Any] = []
    decode = decoder(lambda *a, **k: calls.append((a, k)) or "x", str, None, "json")
    assert decode is not None
    assert decode(b"d") == "x"
    assert calls == [((str, b"d"), {"serializer": "json"})]
    assert position_text(None) is None
    assert position_text((12, 3)) == "12.3"
    assert position_text(TRIM_HORIZON.sentinel) == "TRIM_HORIZON"


def test_sensor_is_one_per_app(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders")
    KinesisSink(app, "out")
    sensor = kinesis_sensor(app)
    assert isinstance(sensor, KinesisSensor)
    assert kinesis_sensor(app) is sensor
    assert [s for s in app.sensors if isinstance(s, KinesisSensor)] == [sensor]
    sensor.add_reader(channel.reader)  # channels add themselves, once
    assert sensor.asdict() == {"reading": {}, "writing": {}, "metrics": {}}
    channel.clone(is_iterator=True)
    stats = sensor.asdict()["reading"]["orders"]
    assert stats["events_delivered"] == 0
    attributes = f"messaging.destination.name=orders,messaging.consumer.group.name={app.conf.id}"
    assert sensor.asdict()["metrics"] == {f"messaging.client.consumed.messages{{{attributes}}}": 0}
    assert stats["shards"] == {}
    assert sensor.millis_behind_latest("orders") == {}
    assert sensor.millis_behind_latest("other") == {}


def test_a_sink_is_a_writer_only_with_the_app(tmp_path: Path) -> None:
    """A sink makes one service, a Writer (no reader, no channel), which starts and stops
    with the app; after the app stopped, writes raise instead of starting a producer."""
    app = make_app(tmp_path)
    sink = KinesisSink(app, "out", partition_key="user")
    assert repr(sink) == "KinesisSink('out')"
    assert kinesis_services(app) == [sink.writer]
    assert sink.partition_key is not None
    assert sink.partition_key({"user": "ann"}) == "ann"

    async def main() -> None:
        await app.start()
        assert sink.writer.started
        await app.stop()
        assert sink.writer.should_stop
        with pytest.raises(LifecycleError, match=r"KinesisSink\('out'\) writer is closed"):
            await sink({"user": "ann"})
        assert sink.producer is None

    asyncio.run(main())


class FakeWriter:
    """Takes messages, and lets the test say when Kinesis confirmed or refused them."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def publish(self, fut: Any, record_id: str | None = None) -> Any:
        self.messages.append(fut)
        return fut


def test_sink_releases_the_source_on_success_and_holds_it_on_failure(tmp_path: Path) -> None:
    """Through a real agent: the source event's final ack comes with the write's confirmation,
    never before, and a write that fails for good leaves it unacked and raises next time."""
    run = Recorder()
    writer = FakeWriter()

    async def main() -> None:
        app = make_app(tmp_path)
        sink = KinesisSink(app, "out", partition_key="user", value_serializer="json")
        sink.writer = writer  # type: ignore[assignment]
        source = app.channel()

        @app.agent(source, sink=[sink])
        async def agent(stream: Any) -> Any:
            async for value in stream:
                yield value

        await app.start()
        app.flow_control.resume()
        generation = app.consumer_generation_id
        messages = [kinesis_message(run, 1, generation) for _ in range(3)]
        for i, message in enumerate(messages):
            await source.put(app.create_event(None, {"user": f"u{i}"}, None, message))
        for _ in range(100):
            if len(writer.messages) == 3:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        written = writer.messages
        assert [(f.message.key, f.message.value) for f in written] == [
            (b"u0", b'{"user":"u0"}'),
            (b"u1", b'{"user":"u1"}'),
            (b"u2", b'{"user":"u2"}'),
        ]
        assert run.finished == []  # the agent went on, the sources are held
        written[1].set_result(None)
        await asyncio.sleep(0)
        assert run.finished == [False]
        written[0].set_exception(PutFailedError([]))
        await asyncio.sleep(0)
        assert run.settled == [Outcome.FAILED]
        assert sink.failures == 1
        with pytest.raises(PutFailedError):  # raised at the next value, in the agent
            await sink({"user": "u3"})
        assert len(writer.messages) == 3
        written[2].set_result(None)
        await asyncio.sleep(0)
        assert run.finished == [False, False]
        await app.stop()

    asyncio.run(main())


def test_a_queue_is_filled_only_ahead_of_its_agent(tmp_path: Path) -> None:
    """However large Faust's buffer, the reader keeps at most AHEAD events queued (waiting
    events would age into the collector's older generations) and refills at half."""
    app = make_app(tmp_path)
    run = Recorder()

    async def main() -> None:
        queue = KinesisQueue(lambda items: None, 4096, flow_control=app.flow_control)
        assert queue.room == AHEAD
        for _ in range(AHEAD):
            queue.put_nowait(app.create_event(None, None, None, kinesis_message(run)))
        assert queue.room == 0
        waiter = asyncio.ensure_future(queue.wait_for_room())
        await asyncio.sleep(0)
        for _ in range(AHEAD // 2 - 1):
            queue.get_nowait()
        await asyncio.sleep(0)
        assert not waiter.done()
        queue.get_nowait()
        await asyncio.sleep(0)
        assert waiter.done()
        assert queue.room == AHEAD // 2
        small = KinesisQueue(lambda items: None, 8, flow_control=app.flow_control)
        assert small.room == 8

    asyncio.run(main())
