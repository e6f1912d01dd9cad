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
from faust_kinesis.message import KinesisMessage
from faust_kinesis.reader import (
    KinesisQueue,
    _initial_position,
    _loads,
    _position_text,
    _same,
    kafka_consumer_enabled,
    shard_number,
)
from kinesis_core.consumer import LATEST, TRIM_HORIZON
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.producer import PutFailedError
from kinesis_core.records import KinesisRecord


def make_app(tmp_path: Path, **conf: Any) -> faust.App:
    app = faust.App("unit", web_enabled=False, datadir=str(tmp_path / "data"), **conf)
    app.boot_strategy.enable_kafka = False
    return app


def test_shard_number() -> None:
    assert shard_number("shardId-000000000007") == 7
    assert shard_number("shardId-000000001234") == 1234
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


def test_initial_position_follows_faust(tmp_path: Path) -> None:
    assert _initial_position(make_app(tmp_path)) == TRIM_HORIZON
    latest = make_app(tmp_path, consumer_auto_offset_reset="latest")
    assert _initial_position(latest) == LATEST


def test_bad_arguments(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    with pytest.raises(ValidationError, match="stream_name"):
        KinesisChannel(app, "")
    with pytest.raises(ValidationError, match="drain_timeout"):
        KinesisChannel(app, "s", drain_timeout=-1)
    with pytest.raises(ConfigurationError, match="close_timeout"):
        KinesisChannel(app, "s", consumer_options={"close_timeout": 1.0})
    with pytest.raises(ConfigurationError, match="no_such_option"):
        KinesisChannel(app, "s", consumer_options={"no_such_option": 1})
    with pytest.raises(ConfigurationError, match="checkpoint_interval"):
        KinesisChannel(app, "s", consumer_options={"checkpoint_interval": 0})


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
    assert isinstance(iterator.queue, KinesisQueue)
    assert iterator.queue.maxsize == 10
    assert iterator._kinesis_root is channel
    assert channel._kinesis_root is channel
    # One service per root channel, registered with the app.
    assert app._extra_services == [channel._reader]


class Recorder:
    def __init__(self) -> None:
        self.settled: list[Outcome] = []

    def finish(self, message: KinesisMessage, exception_in_flight: bool) -> None:
        raise AssertionError("not expected")

    def settle(self, message: KinesisMessage, outcome: Outcome) -> None:
        self.settled.append(outcome)


def kinesis_message(run: Any) -> KinesisMessage:
    record = KinesisRecord(b"v", "k", None, 1, 0, "shardId-000000000000", None, False)
    return KinesisMessage(record, TP("orders", 0), b"k", 0.0, run)


def test_queue_clear_drops_kinesis_events_and_room_comes_at_half(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders")
    run = Recorder()

    async def main() -> None:
        queue = channel.clone(is_iterator=True).queue
        assert isinstance(queue, KinesisQueue)
        queue = KinesisQueue(channel._reader, 4, flow_control=app.flow_control)
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
            await channel._writer.publish(channel.as_future_message(None, 12))

    asyncio.run(main())
    assert channel.producer is None  # nothing was started


def test_decoders() -> None:
    assert _loads(lambda *a, **k: None, None, None, "raw") is _same
    assert _loads(lambda *a, **k: None, bytes, "raw", "json") is _same
    calls: list[Any] = []
    decode = _loads(lambda *a, **k: calls.append((a, k)) or "x", str, None, "json")
    assert decode(b"d") == "x"
    assert calls == [((str, b"d"), {"serializer": "json"})]
    assert _position_text(None) is None
    assert _position_text((12, 3)) == "12.3"
    assert _position_text(TRIM_HORIZON.sentinel) == "TRIM_HORIZON"


def test_sensor_is_one_per_app(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    channel = KinesisChannel(app, "orders")
    sensor = kinesis_sensor(app)
    assert isinstance(sensor, KinesisSensor)
    assert kinesis_sensor(app) is sensor
    sensor.add_channel(channel)
    sensor.add_channel(channel)
    assert sensor.asdict() == {"reading": {}, "writing": {}}
    channel.clone(is_iterator=True)
    stats = sensor.asdict()["reading"]["orders"]
    assert stats["events_delivered"] == 0
    assert stats["shards"] == {}
    assert sensor.millis_behind_latest("orders") == {}
    assert sensor.millis_behind_latest("other") == {}


class FakeEvent:
    def __init__(self, message: Any) -> None:
        self.message = message
        self.acks = 0

    def ack(self) -> bool:
        self.acks += 1
        return True


def test_sink_releases_on_success_and_holds_on_failure(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    sink = KinesisSink(app, "out", key="user")
    assert repr(sink) == "KinesisSink('out')"
    run = Recorder()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ok: asyncio.Future[Any] = loop.create_future()
        ok.set_result(None)
        event = FakeEvent(kinesis_message(run))
        sink._release(event, ok)  # type: ignore[arg-type]
        assert event.acks == 1

        bad: asyncio.Future[Any] = loop.create_future()
        error = PutFailedError([])
        bad.set_exception(error)
        failed = FakeEvent(kinesis_message(run))
        sink._release(failed, bad)  # type: ignore[arg-type]
        assert failed.acks == 0
        assert run.settled == [Outcome.FAILED]
        assert sink.failures == 1
        with pytest.raises(PutFailedError):
            await sink(b"next")

    asyncio.run(main())
    assert sink.channel.default_key is not None
    assert sink.channel.default_key({"user": "ann"}) == "ann"
