"""Errors an adversarial run of bad inputs and faults found (issue 26, point 4): each one now
comes as a clear error, quickly, and loses nothing.

- a stream deleted while a consumer reads it raised botocore's raw ResourceNotFoundException;
- ``Consumer.start`` gave up on a dead endpoint after 3 attempts (0.3 to 0.65 s) where the
  docs said 5; ``Producer.start`` logged "retrying in 4.0 s" and then raised;
- ``ReadFromKinesis`` on a missing stream raised raw botocore inside Beam's error, without the
  hint the core consumer gives;
- closing a consumer while its checkpoint flush was in flight warned of another consumer
  (close cancelled an SQLite write that still committed; the next write lost its
  compare-and-set to it).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from botocore.exceptions import ClientError

from beam_kinesis.read import ReadFromKinesis
from kinesis_core.checkpoint import MemoryCheckpointStore, SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, SharedCheckpointsWarning
from kinesis_core.errors import KinesisServiceError
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from kinesis_core.local._server import free_port
from kinesis_core.producer import Producer
from reliability._common import via

pytestmark = pytest.mark.integration

HANG = 30.0
"""A guard: each error here comes within seconds."""


@pytest.fixture(params=["kinesis_stream", "moto_stream"])
def make_stream(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def test_a_stream_deleted_mid_read_raises_a_consumer_error(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    stream.put(b"first", "k")

    async def main() -> BaseException:
        async with Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=SQLiteCheckpointStore(":memory:"),
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
            shard_refresh_interval=1.0,
        ) as consumer:
            first = await asyncio.wait_for(consumer.__anext__(), HANG)
            first.ack()
            await asyncio.to_thread(stream.delete)
            with pytest.raises(Exception) as raised:
                await asyncio.wait_for(consumer.__anext__(), HANG)
            return raised.value

    error = asyncio.run(main())
    assert not isinstance(error, ClientError)
    assert isinstance(error, KinesisServiceError)
    assert "ResourceNotFoundException" in str(error)
    assert stream.name in str(error)


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]


def test_start_on_a_dead_endpoint_tries_as_documented_and_announces_only_real_retries(
    moto_stream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Consumer.start: 5 tries, so 4 announced retries; Producer.start: 3 attempts, so 2."""
    stream: LocalStream = moto_stream(1)
    down = via(stream.client_config, f"http://127.0.0.1:{free_port()}", connect_timeout=1.0)

    async def consumer() -> None:
        store = MemoryCheckpointStore()
        async with Consumer(stream.name, client_config=down, checkpoint_store=store):
            pass

    async def producer() -> None:
        async with Producer(stream.name, client_config=down):
            pass

    for start, retries in ((consumer, 4), (producer, 2)):
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="kinesis_core"),
            pytest.raises(Exception, match="Could not connect") as raised,
        ):
            asyncio.run(asyncio.wait_for(start(), HANG))
        assert str(down.endpoint_url) in str(raised.value)
        assert len(retry_lines(caplog)) == retries, retry_lines(caplog)


def test_read_from_kinesis_on_a_missing_stream_names_it_with_a_hint(
    moto_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    stream: LocalStream = moto_stream(1)
    missing = f"{stream.name}-missing"
    flags = [
        f"--kinesis_endpoint_url={stream.endpoint_url}",
        f"--kinesis_region_name={stream.client_config.region_name}",
    ]
    with (
        pytest.raises(Exception) as raised,
        beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags)) as p,
    ):
        _ = p | ReadFromKinesis(missing, initial_position=TRIM_HORIZON, max_records=1)
    text = str(raised.value)
    assert f"KinesisServiceError: starting to read {missing} failed: ResourceNotFoundException" in (
        text
    )
    assert "check the stream name or ARN, and the region" in text


class WatchedStore(SQLiteCheckpointStore):
    """The SQLite store, telling when a write starts."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, busy_timeout=HANG)
        self.writing: asyncio.Event | None = None

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        if self.writing is not None:
            self.writing.set()
        return await super().put(*args, **kwargs)


def test_closing_while_a_checkpoint_flush_is_in_flight_is_no_shared_store(
    moto_stream: Any, tmp_path: Path
) -> None:
    stream: LocalStream = moto_stream(1)
    for i in range(5):
        stream.put(b"r%d" % i, "k")
    path = tmp_path / "checkpoints.sqlite3"

    async def main() -> Any:
        store = WatchedStore(path)
        consumer = Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=store,
            initial_position=TRIM_HORIZON,
            checkpoint_interval=0.05,
            idle_interval=0.2,
        )
        await consumer.start()
        records = [await asyncio.wait_for(consumer.__anext__(), HANG) for _ in range(5)]
        # Another connection holds the write lock: the next flush waits in SQLite's thread.
        other = sqlite3.connect(path, timeout=HANG)
        other.execute("BEGIN IMMEDIATE")
        store.writing = asyncio.Event()
        for record in records:
            record.ack()
        await asyncio.wait_for(store.writing.wait(), HANG)
        await asyncio.sleep(0.1)  # the write is in SQLite's thread now
        closing = asyncio.create_task(consumer.close())  # cancels the flush in flight
        await asyncio.sleep(0.2)
        other.rollback()  # the cancelled write goes through now
        other.close()
        await asyncio.wait_for(closing, HANG)
        async with SQLiteCheckpointStore(path) as reader:
            (row,) = await reader.list("default", stream.name)
        await store.close()
        return row.value, records[-1].position

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value, last = asyncio.run(main())
    assert [w for w in caught if issubclass(w.category, SharedCheckpointsWarning)] == []
    assert value == last
