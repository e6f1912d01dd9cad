"""Kill a consumer with SIGKILL mid-stream and restart it on the same SQLite file
(kinesis-mock): nothing is lost, and the only duplicates are records after the last checkpoint
that had reached the file.

The consumer runs in a child process: this very file, run as a script. It logs every record it
processes (before acking it, as a real application processes before it acks) to a file.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.checkpoint import CheckpointValue, Sentinel, SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.records import Position
from kinesis_core.shards.hashing import hash_key

pytestmark = pytest.mark.integration

APPLICATION = "crash-test"
PER_AGGREGATE = 40
AGGREGATES_PER_SHARD = 12
PLAIN_PER_SHARD = 20

Line = tuple[str, Position, str]


async def child(endpoint: str, region: str, stream: str, db: str, out: str, idle: str) -> None:
    """The consumer under test: process (log) each record, then ack it."""
    config = ClientConfig(
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    async with (
        SQLiteCheckpointStore(db) as store,
        Consumer(
            stream,
            client_config=config,
            checkpoint_store=store,
            application_name=APPLICATION,
            initial_position=TRIM_HORIZON,
            checkpoint_interval=0.1,
            idle_interval=0.2,
            max_records_per_call=25,
        ) as consumer,
    ):
        # Blocking writes on purpose: a record is logged before it is acked, nothing between.
        with open(out, "a") as log:  # noqa: ASYNC230
            while True:
                try:
                    record = await asyncio.wait_for(consumer.__anext__(), float(idle))
                except (asyncio.TimeoutError, StopAsyncIteration):
                    return
                log.write(
                    f"{record.shard_id} {record.sequence_number} "
                    f"{record.sub_sequence_number} {record.data.decode()}\n"
                )
                log.flush()
                record.ack()
                await asyncio.sleep(0.003)


def produce(stream: Any) -> set[str]:
    """Aggregates (each inside one shard's hash range) and plain records on every shard."""
    client = stream.boto_client()

    async def shards() -> list[Any]:
        async with create_kinesis_client(stream.client_config) as aio:
            return await list_all_shards(aio, stream.name)

    ranges = [s.hash_range for s in asyncio.run(shards())]
    keys: dict[tuple[int, int], list[str]] = {r: [] for r in ranges}
    i = 0
    while any(len(v) < PER_AGGREGATE for v in keys.values()):
        key = f"pk-{i}"
        owner = next(r for r in ranges if r[0] <= hash_key(key) <= r[1])
        keys[owner].append(key)
        i += 1
    produced: set[str] = set()
    entries = []
    for s, shard_range in enumerate(ranges):
        for a in range(AGGREGATES_PER_SHARD):
            builder = AggregateBuilder()
            for j, key in enumerate(keys[shard_range][:PER_AGGREGATE]):
                data = f"s{s}-a{a}-{j}"
                builder.add(key, None, data.encode())
                produced.add(data)
            entries.append(
                {
                    "Data": builder.build(),
                    "PartitionKey": builder.container_partition_key,
                    "ExplicitHashKey": builder.container_explicit_hash_key,
                }
            )
        for p in range(PLAIN_PER_SHARD):
            data = f"s{s}-p{p}"
            entries.append({"Data": data.encode(), "PartitionKey": keys[shard_range][p]})
            produced.add(data)
    for start in range(0, len(entries), 100):
        response = client.put_records(StreamName=stream.name, Records=entries[start : start + 100])
        assert response.get("FailedRecordCount", 0) == 0
    return produced


def read_log(path: Path) -> list[Line]:
    lines = []
    for text in path.read_text().splitlines():
        shard_id, seq, sub, data = text.split(" ")
        lines.append((shard_id, (int(seq), int(sub)), data))
    return lines


def spawn(stream: Any, db: Path, out: Path, idle: float) -> subprocess.Popen[bytes]:
    config = stream.client_config
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            config.endpoint_url,
            config.region_name,
            stream.name,
            str(db),
            str(out),
            str(idle),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def checkpoints(db: Path, stream: str) -> dict[str, CheckpointValue]:
    async def read() -> dict[str, CheckpointValue]:
        async with SQLiteCheckpointStore(db) as store:
            return {row.shard_id: row.value for row in await store.list(APPLICATION, stream)}

    return asyncio.run(read())


def test_sigkill_mid_stream_then_restart_loses_nothing(kinesis_stream: Any, tmp_path: Path) -> None:
    stream = kinesis_stream(shards=2)
    produced = produce(stream)
    db, first_log, second_log = tmp_path / "c.sqlite3", tmp_path / "1.log", tmp_path / "2.log"

    first = spawn(stream, db, first_log, idle=30)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and first.poll() is None:
        if first_log.exists() and len(first_log.read_text().splitlines()) >= len(produced) // 2:
            break
        time.sleep(0.05)
    assert first.poll() is None, "the consumer ended before it could be killed"
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    at_kill = checkpoints(db, stream.name)

    second = spawn(stream, db, second_log, idle=3)
    assert second.wait(40) == 0

    before, after = read_log(first_log), read_log(second_log)
    # Nothing lost.
    assert {data for _, _, data in before + after} == produced
    # The first run had written real checkpoints before it died.
    assert any(isinstance(v, tuple) for v in at_kill.values())
    for shard_id, value in at_kill.items():
        if value is Sentinel.SHARD_END or not isinstance(value, tuple):
            continue
        again = [pos for sid, pos, _ in after if sid == shard_id]
        # Nothing that was checkpointed is delivered again ...
        assert all(pos > value for pos in again)
        # ... and everything at or before the checkpoint had been delivered before the kill.
        assert {pos for sid, pos, _ in before if sid == shard_id and pos <= value}
    # Duplicates: only records after the last checkpoint that reached the file.
    duplicates = {(sid, pos) for sid, pos, _ in before} & {(sid, pos) for sid, pos, _ in after}
    for shard_id, pos in duplicates:
        value = at_kill.get(shard_id)
        assert not isinstance(value, tuple) or pos > value


if __name__ == "__main__":
    asyncio.run(child(*sys.argv[1:]))
