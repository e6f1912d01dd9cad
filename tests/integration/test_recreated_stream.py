"""A stream deleted and created again under the same name, read with a store that holds the
positions of the earlier stream (same shard ids, other sequence numbers), on kinesis-mock and
on moto: the core Consumer, the README's core snippet run twice, ReadFromKinesis and a Faust
channel.

By default every reader stops at start with a StreamRecreatedError naming the store, the
stream and both creation times, and uses and writes nothing; with
``on_stream_recreated="reset"`` it reads every record of the new stream. No open shard is ever
skipped or stored as ended.

A position the service refuses in a shard that ListShards lists (kinesis-mock answers
ResourceNotFound for a sequence number past every record; rows written before streams'
creation times were kept carry nothing to tell them by) is read from TRIM_HORIZON with a
warning, by the core consumer and by Beam, which stored SHARD_END for such a shard before.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from faust_apps import FAST_CONSUMER, kafka_free_app, wait_until

from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.record import KinesisRecord as BeamRecord
from faust_kinesis import KinesisChannel
from kinesis_core.checkpoint import (
    SHARD_END,
    Checkpoint,
    CheckpointStore,
    MemoryCheckpointStore,
    SQLiteCheckpointStore,
)
from kinesis_core.consumer import TRIM_HORIZON, Consumer, ConsumerConfig, ShardState
from kinesis_core.consumer.incarnation import StreamFacts, StreamRecreatedError, timestamp_text
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from kinesis_core.producer import Producer

pytestmark = pytest.mark.integration

APP = "recreated"
COUNT = 24
HANG = 60.0
"""Seconds after which a test calls its reader hung (a guard: the readers answer in seconds)."""
READER = ConsumerConfig(
    application_name=APP,
    initial_position=TRIM_HORIZON,
    checkpoint_interval=0.1,
    idle_interval=0.2,
)


@pytest.fixture(params=["kinesis_stream", "moto_stream"])
def make_stream(request: pytest.FixtureRequest) -> Any:
    """Streams on kinesis-mock, then on moto."""
    return request.getfixturevalue(request.param)


def put(stream: LocalStream, prefix: str, count: int = COUNT) -> set[bytes]:
    """``count`` records spread over the shards, in one PutRecords; returns their data."""
    data = [f"{prefix}-{i}".encode() for i in range(count)]
    entries = [{"Data": d, "PartitionKey": f"k{i}"} for i, d in enumerate(data)]
    response = stream.boto_client().put_records(StreamName=stream.name, Records=entries)
    assert response.get("FailedRecordCount", 0) == 0
    return set(data)


def created_ms(stream: LocalStream) -> int:
    summary = stream.boto_client().describe_stream_summary(StreamName=stream.name)
    return StreamFacts.from_response(summary).created_ms


async def read(
    stream: LocalStream, store: CheckpointStore, count: int, **options: Any
) -> tuple[list[bytes], dict[str, ShardState]]:
    """Read and ack ``count`` records; returns their data and the shard states."""
    out: list[bytes] = []
    async with Consumer(
        stream.name,
        consumer_config=READER,
        client_config=stream.client_config,
        checkpoint_store=store,
        **options,
    ) as consumer:

        async def loop() -> None:
            async for record in consumer:
                out.append(record.data)
                record.ack()
                if len(out) == count:
                    return

        await asyncio.wait_for(loop(), HANG)
        return out, consumer.shard_states()


async def rows(store: CheckpointStore, stream: LocalStream) -> dict[str, Checkpoint]:
    return {row.shard_id: row for row in await store.list(APP, stream.name)}


def earlier_stream_read(stream: LocalStream, store: CheckpointStore) -> dict[str, Checkpoint]:
    """Read the stream to its end into ``store``, then delete it and create it again; returns
    the rows of the earlier stream."""
    old = put(stream, "old")
    read_back, _ = asyncio.run(read(stream, store, COUNT))
    assert set(read_back) == old
    before = asyncio.run(rows(store, stream))
    assert {row.stream_created_ms for row in before.values()} == {created_ms(stream)}
    stream.recreate(2)
    return before


def test_a_consumer_refuses_positions_of_the_earlier_stream_or_resets_them(
    make_stream: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stream: LocalStream = make_stream(2)
    path = tmp_path / "checkpoints.sqlite3"
    store = SQLiteCheckpointStore(path)
    before = earlier_stream_read(stream, store)
    new = put(stream, "new")
    old_created = next(iter(before.values())).stream_created_ms
    assert old_created is not None
    now_created = created_ms(stream)

    with pytest.raises(StreamRecreatedError) as refused:
        asyncio.run(read(stream, store, 1))
    message = str(refused.value)
    times = (timestamp_text(old_created), timestamp_text(now_created))
    for needle in (str(path), stream.name, *times):
        assert needle in message
    assert "on_stream_recreated='reset'" in message
    assert asyncio.run(rows(store, stream)) == before  # nothing used, nothing written

    with caplog.at_level(logging.WARNING, logger="kinesis_core"):
        read_back, states = asyncio.run(read(stream, store, COUNT, on_stream_recreated="reset"))
    assert sorted(read_back) == sorted(new)
    assert set(states.values()) == {ShardState.READING}
    assert any("on_stream_recreated='reset'" in r.getMessage() for r in caplog.records)
    after = asyncio.run(rows(store, stream))
    assert set(after) == set(before)
    assert {row.stream_created_ms for row in after.values()} == {now_created}
    assert all(isinstance(row.value, tuple) for row in after.values())
    # The next start finds rows of this stream: no error, nothing read twice.
    put(stream, "later", 4)
    read_back, _ = asyncio.run(read(stream, store, 4))
    assert sorted(read_back) == sorted(f"later-{i}".encode() for i in range(4))
    asyncio.run(store.close())


def test_a_stream_recreated_while_read_raises(make_stream: Any) -> None:
    """moto answers the earlier stream's iterators from the new stream (skipping its first
    records); kinesis-mock refuses them. Either way the reader raises, by the next discovery
    at the latest."""
    stream: LocalStream = make_stream(1)
    stream.put(b"old", "k")

    async def main() -> BaseException:
        async with Consumer(
            stream.name,
            consumer_config=READER,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            shard_refresh_interval=1.0,
        ) as consumer:
            first = await asyncio.wait_for(consumer.__anext__(), HANG)
            first.ack()
            await asyncio.to_thread(stream.recreate, 1)
            await asyncio.to_thread(stream.put, b"new", "k")
            with pytest.raises(StreamRecreatedError) as raised:
                await asyncio.wait_for(consumer.__anext__(), HANG)
            return raised.value

    error = asyncio.run(main())
    assert "deleted and created again while it was read" in str(error)


async def readme_run(stream: LocalStream, path: Path, **options: Any) -> None:
    """The README's core snippet, against ``stream``: write one record, read from TRIM_HORIZON
    with a SQLite checkpoint file until that record comes."""
    config = stream.client_config
    async with Producer(stream.name, client_config=config) as producer:
        written = await producer.put(b"hello", partition_key="user-1")
    async with (
        SQLiteCheckpointStore(path) as store,
        Consumer(
            stream.name,
            client_config=config,
            checkpoint_store=store,
            initial_position=TRIM_HORIZON,
            **options,
        ) as consumer,
    ):
        async for record in consumer:
            record.ack()
            if record.position == written.position:
                break


def test_the_readme_snippet_run_twice_around_a_recreation_does_not_hang(
    make_stream: Any, tmp_path: Path
) -> None:
    stream: LocalStream = make_stream(1)
    path = tmp_path / "checkpoints.sqlite"
    asyncio.run(asyncio.wait_for(readme_run(stream, path), HANG))
    stream.recreate(1)
    with pytest.raises(StreamRecreatedError):
        asyncio.run(asyncio.wait_for(readme_run(stream, path), HANG))
    asyncio.run(asyncio.wait_for(readme_run(stream, path, on_stream_recreated="reset"), HANG))


def legacy_rows_past_every_record(stream: LocalStream, store: CheckpointStore) -> None:
    """Rows as a version that kept no creation times leaves them, at a position in each shard's
    range that no record has: kinesis-mock refuses it (ResourceNotFound)."""

    async def write() -> None:
        for shard in stream.shards():
            start = int(shard["SequenceNumberRange"]["StartingSequenceNumber"])
            await store.put(APP, stream.name, shard["ShardId"], (start + 10**20, 0), expected=None)

    asyncio.run(write())


def test_a_refused_position_of_a_listed_shard_is_read_from_trim_horizon(
    kinesis_stream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    stream: LocalStream = kinesis_stream(2)
    written = put(stream, "r")
    store = MemoryCheckpointStore()
    legacy_rows_past_every_record(stream, store)
    with caplog.at_level(logging.WARNING, logger="kinesis_core"):
        read_back, states = asyncio.run(read(stream, store, COUNT))
    assert sorted(read_back) == sorted(written)
    assert set(states.values()) == {ShardState.READING}  # none skipped as "gone"
    warnings = [r.getMessage() for r in caplog.records if "trim horizon" in r.getMessage()]
    for shard in stream.shards():
        assert any(f"shard {shard['ShardId']} of {stream.name}" in w for w in warnings)


# -- Beam ------------------------------------------------------------------------------------


@pytest.fixture
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


def beam_read(stream: LocalStream, store_path: Path, out: Path, **kwargs: Any) -> list[bytes]:
    """A bounded ReadFromKinesis (until caught up) on the in-process FnApiRunner; returns
    the data read."""
    flags = [
        f"--kinesis_endpoint_url={stream.endpoint_url}",
        f"--kinesis_region_name={stream.client_config.region_name}",
    ]
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags)) as p:
        _ = (
            p
            | ReadFromKinesis(
                stream.name,
                initial_position=TRIM_HORIZON,
                checkpoint_store=str(store_path),
                application_name=APP,
                idle_interval=0.2,
                stop_when_caught_up=True,
                **kwargs,
            )
            | beam.Map(append_data(str(out)))  # type: ignore[no-untyped-call]
        )
    return out.read_bytes().splitlines() if out.exists() else []


def append_data(path: str) -> Any:
    def write(record: BeamRecord) -> None:
        with open(path, "ab") as f:
            f.write(record.data + b"\n")

    return write


def stored(stream: LocalStream, store_path: Path) -> dict[str, Checkpoint]:
    async def main() -> dict[str, Checkpoint]:
        async with SQLiteCheckpointStore(store_path) as store:
            return await rows(store, stream)

    return asyncio.run(main())


def open_shards_ended(stream: LocalStream, store_path: Path) -> set[str]:
    open_ids = {s["ShardId"] for s in stream.shards(open_only=True)}
    return {k for k, row in stored(stream, store_path).items() if row.value is SHARD_END} & open_ids


@pytest.mark.usefixtures("worker_environment")
def test_beam_refuses_positions_of_the_earlier_stream_or_resets_them(
    make_stream: Any, tmp_path: Path
) -> None:
    stream: LocalStream = make_stream(2)
    store_path = tmp_path / "checkpoints.sqlite3"
    store = SQLiteCheckpointStore(store_path)
    before = earlier_stream_read(stream, store)
    asyncio.run(store.close())
    new = put(stream, "new")

    with pytest.raises(Exception, match="StreamRecreatedError") as refused:
        beam_read(stream, store_path, tmp_path / "refused.txt")
    assert str(store_path) in str(refused.value)
    assert not (tmp_path / "refused.txt").exists()
    assert stored(stream, store_path) == before
    assert open_shards_ended(stream, store_path) == set()

    read_back = beam_read(stream, store_path, tmp_path / "reset.txt", on_stream_recreated="reset")
    assert sorted(read_back) == sorted(new)
    assert open_shards_ended(stream, store_path) == set()
    after = stored(stream, store_path)
    assert {row.stream_created_ms for row in after.values()} == {created_ms(stream)}
    assert all(isinstance(row.value, tuple) for row in after.values())


@pytest.mark.usefixtures("worker_environment")
def test_beam_never_stores_shard_end_for_a_listed_shard_whose_position_is_refused(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    """The loss this issue found: the shard "vanished", Beam claimed its end and stored
    SHARD_END, and every later run skipped it."""
    stream: LocalStream = kinesis_stream(2)
    written = put(stream, "r")
    store_path = tmp_path / "checkpoints.sqlite3"
    store = SQLiteCheckpointStore(store_path)
    legacy_rows_past_every_record(stream, store)
    asyncio.run(store.close())
    read_back = beam_read(stream, store_path, tmp_path / "out.txt")
    assert open_shards_ended(stream, store_path) == set()
    assert sorted(read_back) == sorted(written)


# -- Faust -----------------------------------------------------------------------------------


async def faust_read(
    stream: LocalStream, store: CheckpointStore, datadir: Path, count: int, **options: Any
) -> tuple[list[bytes], BaseException | None]:
    """A Kafka-free app whose agent reads the stream through a KinesisChannel (application
    APP): the data it got (up to ``count``), or the app's crash."""
    app = kafka_free_app(APP, datadir, value_serializer="raw")
    config = ConsumerConfig(
        checkpoint_interval=FAST_CONSUMER.checkpoint_interval,
        idle_interval=FAST_CONSUMER.idle_interval,
        **options,
    )
    channel = KinesisChannel(
        app,
        stream.name,
        client_config=stream.client_config,
        checkpoint_store=store,
        consumer_config=config,
        initial_position=TRIM_HORIZON,
    )
    got: list[bytes] = []

    @app.agent(channel)
    async def agent(values: Any) -> None:
        async for value in values:
            got.append(value)

    await app.start()
    try:
        await wait_until(lambda: app.crashed or len(got) >= count, HANG, "records or a crash")
        await asyncio.sleep(0.3)  # time for a checkpoint write
    finally:
        await app.stop()
    return got, channel.reader.crash_reason if app.crashed else None


def test_a_faust_channel_refuses_positions_of_the_earlier_stream_or_resets_them(
    make_stream: Any, tmp_path: Path
) -> None:
    stream: LocalStream = make_stream(2)
    store = MemoryCheckpointStore()
    before = earlier_stream_read(stream, store)
    new = put(stream, "new")
    got, crash = asyncio.run(faust_read(stream, store, tmp_path / "a", COUNT))
    assert got == []
    assert isinstance(crash, StreamRecreatedError)
    assert "MemoryCheckpointStore()" in str(crash)
    assert asyncio.run(rows(store, stream)) == before

    got, crash = asyncio.run(
        faust_read(stream, store, tmp_path / "b", COUNT, on_stream_recreated="reset")
    )
    assert crash is None
    assert sorted(got) == sorted(new)
    after = asyncio.run(rows(store, stream))
    assert {row.stream_created_ms for row in after.values()} == {created_ms(stream)}
