"""Consumers whose checkpoint store is not what they started on, on moto (issue 37):

- the SQLite lease file is deleted under a worker, and a second worker starts on a new file at
  the same path: the first stops delivering with an error naming the file before the second
  delivers anything, so no shard is read by both;
- the DynamoDB lease table is deleted under a worker: it stops with an error naming the table
  (not the stream), and does not create the table again;
- a second application on an application's lease table is refused at start, naming both;
- a path given as ``checkpoint_store`` is a SQLite file.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.aws.client import create_botocore_client
from kinesis_core.checkpoint import (
    CheckpointTableGoneError,
    DynamoDBCheckpointStore,
    SQLiteCheckpointStore,
)
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseConfig
from kinesis_core.local import LocalStream

pytestmark = pytest.mark.integration

WAIT = 30.0
"""The most any step below waits for what it expects (a failure, not a timing assert)."""
Log = list[tuple[str, str, str]]


def leases(worker_id: str, renew_interval: float) -> LeaseConfig:
    return LeaseConfig(
        worker_id=worker_id,
        failover_time=3.0,
        renew_interval=renew_interval,
        take_interval=1.0,
        parent_poll_interval=0.5,
    )


def consumer(stream: LocalStream, store: Any, application: str, lease: LeaseConfig) -> Consumer:
    return Consumer(
        stream.name,
        client_config=stream.client_config,
        checkpoint_store=store,
        application_name=application,
        initial_position=TRIM_HORIZON,
        checkpoint_interval=0.2,
        idle_interval=0.2,
        leases=lease,
    )


async def put(stream: LocalStream, tag: str, count: int) -> None:
    for i in range(count):
        await asyncio.to_thread(stream.put, f"{tag}{i}".encode(), f"key-{tag}-{i}")


async def deliver(reader: Consumer, name: str, log: Log) -> BaseException | None:
    """Log and ack every record until the consumer raises; return what it raised."""
    try:
        async for record in reader:
            log.append((name, record.shard_id, record.data.decode()))
            record.ack()
    except Exception as exc:
        return exc
    return None


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        await asyncio.sleep(0.05)


def delete_sqlite_file(path: Path) -> None:
    """``rm leases.sqlite3*``: the database file and its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def data_of(log: Log, name: str) -> list[str]:
    return [data for who, _, data in log if who == name]


def test_a_deleted_sqlite_lease_file_stops_its_worker_before_another_reads_a_new_one(
    moto_stream: Any, tmp_path: Path
) -> None:
    """Part 3 of issue 37: worker A read from its unlinked file and B, on a new file at the
    same path, took every shard: both delivered every record. Now A stops at its next
    renewal (0.2 s here), with an error naming the file; B waits one renewal interval (1 s)
    before it takes a lease, so A has stopped before B delivers anything."""
    stream: LocalStream = moto_stream(shards=2)
    path = tmp_path / "leases.sqlite3"

    async def main() -> None:
        log: Log = []
        await put(stream, "first-", 20)
        async with (
            SQLiteCheckpointStore(path) as store_a,
            consumer(stream, store_a, "app", leases("a", 0.2)) as worker_a,
        ):
            task_a = asyncio.create_task(deliver(worker_a, "a", log))
            await until(lambda: len(data_of(log, "a")) == 20, "A reads the first records")
            delete_sqlite_file(path)
            await put(stream, "second-", 10)
            async with (
                SQLiteCheckpointStore(path) as store_b,
                consumer(stream, store_b, "app", leases("b", 1.0)) as worker_b,
            ):
                task_b = asyncio.create_task(deliver(worker_b, "b", log))
                failure = await asyncio.wait_for(task_a, WAIT)
                assert isinstance(failure, CheckpointTableGoneError), failure
                assert str(path) in str(failure)
                assert "deleted" in str(failure)
                await until(lambda: bool(data_of(log, "b")), "B delivers")
                await put(stream, "third-", 10)
                # B, on a new file, starts over: every record, the ones after it started too.
                await until(lambda: len(data_of(log, "b")) == 40, "B reads every record")
                task_b.cancel()
        first_b = next(i for i, (who, _, _) in enumerate(log) if who == "b")
        assert data_of(log[first_b:], "a") == []  # A stopped before B delivered anything
        assert not any(data.startswith("third-") for data in data_of(log, "a"))

    asyncio.run(main())


def test_a_deleted_dynamodb_lease_table_stops_the_worker_naming_the_table(
    moto_stream: Any,
) -> None:
    """Part 3's DynamoDB side and part 8: the deleted table ended in "listing the shards of
    STREAM failed: ResourceNotFoundException ... (check the stream name)", a discovery
    interval later. Now the worker's next renewal meets the missing table: its leases end,
    it stops delivering, and the error names the table."""
    stream: LocalStream = moto_stream(shards=2)
    application = f"app-{uuid.uuid4().hex[:10]}"
    config = stream.client_config

    async def main() -> None:
        log: Log = []
        await put(stream, "first-", 10)
        async with (
            DynamoDBCheckpointStore(client_config=config) as store,
            consumer(stream, store, application, leases("a", 0.2)) as worker,
        ):
            task = asyncio.create_task(deliver(worker, "a", log))
            await until(lambda: len(log) == 10, "the worker reads the records")
            dynamodb = create_botocore_client(config, "dynamodb")
            try:
                await asyncio.to_thread(dynamodb.delete_table, TableName=application)
                failure = await asyncio.wait_for(task, WAIT)
                assert isinstance(failure, CheckpointTableGoneError), failure
                assert f"lease table {application!r}" in str(failure)
                assert "check the stream name" not in str(failure)
                assert worker.leased_shards() == []
                # The worker did not make a new, empty table (whose new leases anyone takes).
                tables = await asyncio.to_thread(dynamodb.list_tables)
                assert application not in tables["TableNames"]
            finally:
                dynamodb.close()

    asyncio.run(main())


def test_a_second_application_on_a_lease_table_is_refused(moto_stream: Any) -> None:
    """Part 4 of issue 37: appOne and appTwo on one table each took the other's leases and
    read part of the stream (26 and 14 records of 40). Now appTwo is refused at start, naming
    the table and appOne, and appOne goes on reading every record."""
    stream: LocalStream = moto_stream(shards=2)
    table = f"shared-{uuid.uuid4().hex[:10]}"
    config = stream.client_config

    async def main() -> None:
        log: Log = []
        await put(stream, "first-", 10)
        async with (
            DynamoDBCheckpointStore(table, client_config=config) as store_one,
            consumer(stream, store_one, "appOne", leases("one", 0.2)) as one,
        ):
            task = asyncio.create_task(deliver(one, "one", log))
            await until(lambda: len(log) == 10, "appOne reads the records")
            # Another process: its own store object, so nothing is shared in memory.
            async with DynamoDBCheckpointStore(table, client_config=config) as store_two:
                two = consumer(stream, store_two, "appTwo", leases("two", 0.2))
                with pytest.raises(ConfigurationError) as refused:
                    await two.start()
            assert refused.value.field == "application_name"
            assert f"lease table {table!r}" in str(refused.value)
            assert "'appOne'" in str(refused.value)
            await put(stream, "second-", 10)
            await until(lambda: len(log) == 20, "appOne reads every record")
            task.cancel()
        assert {who for who, _, _ in log} == {"one"}

    asyncio.run(main())


def test_a_path_as_checkpoint_store_is_a_sqlite_file(moto_stream: Any, tmp_path: Path) -> None:
    """Part 8 of issue 37: ``Consumer(checkpoint_store="x.sqlite")`` raised AttributeError.
    A path (str or os.PathLike) is a SQLite file: a consumer given it again resumes."""
    stream: LocalStream = moto_stream(shards=1)
    path = tmp_path / "x.sqlite"

    async def read(given: str | Path, expected: int) -> list[str]:
        log: Log = []
        reader = Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=given,
            application_name="app",
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
        )
        async with reader:
            task = asyncio.create_task(deliver(reader, "c", log))
            await until(lambda: len(log) == expected, f"{expected} records")
            await reader.checkpoint()
            task.cancel()
        return data_of(log, "c")

    async def main() -> None:
        await put(stream, "first-", 3)
        assert await read(str(path), 3) == ["first-0", "first-1", "first-2"]
        await put(stream, "second-", 2)
        assert await read(path, 2) == ["second-0", "second-1"]
        with pytest.raises(ConfigurationError, match="checkpoint_store") as refused:
            Consumer(stream.name, client_config=stream.client_config, checkpoint_store=42)
        assert "got int" in str(refused.value)

    asyncio.run(main())
