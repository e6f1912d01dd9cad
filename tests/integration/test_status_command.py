"""``kinesis-connectors status`` on kinesis-mock: a split, a merge and two workers with leases.

The stream starts with two shards; shard 0 is split and its upper child merged with shard 1,
so the lineage has a split parent, a merged child with two parents and two open shards. Two
consumer workers share the stream through leases (a SQLite file, or a DynamoDB table on moto)
and read every record. The status command, run as a user runs it, must show that tree, the
rows the workers wrote (SHARD_END on the parents, the last position on the open shards), the
lease owners, and a lag that grows once records are written after the workers stopped; it
must write nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import (
    Checkpoint,
    CheckpointStore,
    DynamoDBCheckpointStore,
    Sentinel,
    SQLiteCheckpointStore,
)
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.lease import LeaseConfig
from kinesis_core.local import KinesisMock, LocalStream, MotoServer
from kinesis_core.shards.hashing import MAX_HASH_KEY

pytestmark = pytest.mark.integration

QUARTER = (MAX_HASH_KEY + 1) // 4
KEYS = {"low": 10, "mid-low": QUARTER + 10, "high": 3 * QUARTER + 10}
"""Explicit hash keys: in shard 0's lower and upper half, and in shard 1."""


def put(stream: LocalStream, key: str, data: str) -> tuple[str, int]:
    answer = stream.put(data.encode(), key, explicit_hash_key=KEYS[key])
    return answer["ShardId"], int(answer["SequenceNumber"])


def reshard(stream: LocalStream) -> tuple[dict[str, str], dict[str, int], set[str]]:
    """Split shard 0, merge its upper child with shard 1; records before, between and after.

    Returns the shards by role, the last sequence number written to each shard and the data.
    """
    first, second = (shard["ShardId"] for shard in stream.shards())
    last: dict[str, int] = {}
    written: set[str] = set()

    def write(key: str, data: str) -> None:
        shard, sequence = put(stream, key, data)
        last[shard] = sequence
        written.add(data)

    for key in KEYS:
        write(key, f"before-{key}")
    low, upper = stream.split(first)
    for key in KEYS:
        write(key, f"split-{key}")
    merged = stream.merge(upper, second)
    for key in KEYS:
        write(key, f"merged-{key}")
    roles = {"split": first, "low": low, "upper": upper, "other": second, "merged": merged}
    return roles, last, written


def status(
    server_env: dict[str, str], stream: str, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinesis_core", "status", stream, *args],
        env={**os.environ, **server_env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def run_workers(
    stream: LocalStream,
    config: ClientConfig,
    make_store: Callable[[], CheckpointStore],
    application: str,
    expected: set[str],
    while_running: Callable[[], Any],
) -> tuple[Any, dict[str, list[str]]]:
    """Two lease workers read every record; once both hold a lease and every record was
    delivered and checkpointed, ``while_running`` runs in a thread (the loop keeps going).
    Returns its result and the shards each worker held then."""
    seen: set[str] = set()
    async with contextlib.AsyncExitStack() as stack:
        workers = []
        for name in ("worker-a", "worker-b"):
            store = await stack.enter_async_context(make_store())  # type: ignore[arg-type]
            consumer = await stack.enter_async_context(
                Consumer(
                    stream.name,
                    client_config=config,
                    checkpoint_store=store,
                    application_name=application,
                    initial_position=TRIM_HORIZON,
                    checkpoint_interval=0.2,
                    idle_interval=0.2,
                    leases=LeaseConfig(
                        worker_id=name,
                        failover_time=3.0,
                        renew_interval=0.5,
                        take_interval=1.0,
                        parent_poll_interval=0.5,
                    ),
                )
            )
            workers.append(consumer)

        async def pump(consumer: Consumer) -> None:
            async for record in consumer:
                seen.add(record.data.decode())
                record.ack()

        def holdings() -> dict[str, list[str]]:
            return {c.worker_id or "": sorted(c.leased_shards()) for c in workers}

        tasks = [asyncio.create_task(pump(consumer)) for consumer in workers]
        try:
            # Every record read, and the leases settled: each worker holds one lease, and has
            # held it for longer than a renewal interval (no steal under way).
            deadline = time.monotonic() + 60
            settled: tuple[dict[str, list[str]], float] = ({}, 0.0)
            while True:
                for task in tasks:
                    if task.done():
                        task.result()  # a worker that failed raises here
                now, held = time.monotonic(), holdings()
                if held != settled[0]:
                    settled = (held, now)
                balanced = all(len(shards) == 1 for shards in held.values())
                if seen >= expected and balanced and now - settled[1] >= 1.5:
                    break
                assert now < deadline, (sorted(seen), expected, held)
                await asyncio.sleep(0.2)
            for consumer in workers:
                await consumer.checkpoint()
            result = await asyncio.to_thread(while_running)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return result, held


async def rows_of(
    make_store: Callable[[], CheckpointStore], application: str, stream: str
) -> list[Checkpoint]:
    async with make_store() as store:  # type: ignore[attr-defined]
        rows: list[Checkpoint] = await store.list(application, stream)
    return sorted(rows, key=lambda row: row.shard_id)


@pytest.mark.parametrize("store_kind", ["sqlite", "dynamodb"])
def test_status_shows_lineage_checkpoints_leases_and_lag(
    store_kind: str,
    kinesis_mock: KinesisMock,
    moto_server: MotoServer,
    kinesis_stream: Any,
    tmp_path: Path,
) -> None:
    stream = kinesis_stream(shards=2)
    roles, last, written = reshard(stream)
    application = f"status-{uuid.uuid4().hex[:8]}"
    config = dataclasses.replace(
        stream.client_config, dynamodb_endpoint_url=moto_server.endpoint_url
    )
    env = {
        **kinesis_mock.client_environment(),
        "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint_url,
    }
    db = tmp_path / "checkpoints.sqlite3"
    if store_kind == "sqlite":
        store_args = ["--store", str(db), "--application", application]

        def make_store() -> CheckpointStore:
            return SQLiteCheckpointStore(db)
    else:
        store_args = ["--dynamodb-table", application]

        def make_store() -> CheckpointStore:
            return DynamoDBCheckpointStore(client_config=config)

    def look() -> tuple[dict[str, Any], str]:
        as_json = status(env, stream.name, *store_args, "--json")
        assert as_json.returncode == 0, as_json.stderr
        as_text = status(env, stream.name, *store_args)
        assert as_text.returncode == 0, as_text.stderr
        return json.loads(as_json.stdout), as_text.stdout

    (running, text), held = asyncio.run(
        run_workers(stream, config, make_store, application, written, look)
    )

    shards = {shard["shard_id"]: shard for shard in running["shards"]}
    assert running["schema_version"] == 1
    assert running["stream"] == stream.name
    assert running["application"] == application
    assert set(shards) == set(roles.values())
    # the lineage: a split (one parent, two children) and a merge (two parents, one child)
    split, low, upper = (shards[roles[r]] for r in ("split", "low", "upper"))
    other, merged = shards[roles["other"]], shards[roles["merged"]]
    assert split["children"] == sorted([roles["low"], roles["upper"]])
    assert low["parents"] == upper["parents"] == [roles["split"]]
    assert sorted(merged["parents"]) == sorted([roles["upper"], roles["other"]])
    assert upper["children"] == other["children"] == [roles["merged"]]
    assert [s["open"] for s in (split, low, upper, other, merged)] == [
        False,
        True,
        False,
        False,
        True,
    ]
    listed = {
        shard["ShardId"]: [shard["HashKeyRange"][k] for k in ("StartingHashKey", "EndingHashKey")]
        for shard in stream.shards()
    }
    assert {shard_id: shard["hash_range"] for shard_id, shard in shards.items()} == listed
    assert merged["hash_range"] == [upper["hash_range"][0], other["hash_range"][1]]
    assert low["hash_range"][0] == split["hash_range"][0] == "0"
    # parents before children in the document
    order = [shard["shard_id"] for shard in running["shards"]]
    assert order.index(roles["split"]) < order.index(roles["upper"]) < order.index(roles["merged"])
    # checkpoints: SHARD_END on the closed shards, the last record on the open ones
    for role in ("split", "upper", "other"):
        assert shards[roles[role]]["checkpoint"] == {"sentinel": "SHARD_END"}, role
        assert shards[roles[role]]["progress"] == "finished"
    for role in ("low", "merged"):
        shard = shards[roles[role]]
        assert shard["checkpoint"] == {
            "sequence_number": str(last[roles[role]]),
            "sub_sequence_number": 0,
        }
        assert shard["progress"] == "reading"
        assert shard["lag"] == {"millis_behind_latest": 0, "caught_up": True, "error": None}
    # leases: each worker holds one of the two open shards, as the workers themselves say
    owners = {shards[roles[r]]["lease_owner"] for r in ("low", "merged")}
    assert owners == {"worker-a", "worker-b"}
    assert running["workers"] == {
        owner: sorted(s["shard_id"] for s in shards.values() if s["lease_owner"] == owner)
        for owner in owners
    }
    assert {worker: leased for worker, leased in held.items()} == {
        worker: [s for s in leased if shards[s]["open"]]
        for worker, leased in running["workers"].items()
    }
    assert all(shards[roles[r]]["lease_counter"] > 1 for r in ("low", "merged"))
    # the text view draws the same tree
    lines = text.splitlines()
    row_of: dict[str, str] = {}
    for line in lines:
        row_of.setdefault(_shard_in(line), line)  # a merged shard's full row comes first
    assert f"+-- {roles['low']}" in text or f"`-- {roles['low']}" in text
    assert f"`-- {roles['merged']}" in text
    assert "(merge child: see above)" in text
    assert "worker-a holds 1" in text
    assert "worker-b holds 1" in text
    assert "SHARD_END" in row_of[roles["split"]]
    assert "finished" in row_of[roles["split"]]
    assert "caught up" in row_of[roles["merged"]]

    # The workers stopped (leases released). Two records more on the low shard: it lags.
    before = asyncio.run(rows_of(make_store, application, stream.name))
    put(stream, "low", "late-1")
    time.sleep(0.3)
    put(stream, "low", "late-2")
    stopped, _ = look()
    after = asyncio.run(rows_of(make_store, application, stream.name))
    assert after == before, "the status command wrote to the store"
    low_now = next(s for s in stopped["shards"] if s["shard_id"] == roles["low"])
    assert low_now["lease_owner"] is None
    assert low_now["checkpoint"] == shards[roles["low"]]["checkpoint"]
    assert low_now["lag"]["caught_up"] is False
    assert low_now["lag"]["millis_behind_latest"] > 0
    # Named by its ARN, the stream shows the same rows (they are stored under its name).
    arn = stream.boto_client().describe_stream_summary(StreamName=stream.name)[
        "StreamDescriptionSummary"
    ]["StreamARN"]
    by_arn = status(env, arn, *store_args, "--json")
    assert by_arn.returncode == 0, by_arn.stderr
    assert [(s["shard_id"], s["checkpoint"]) for s in json.loads(by_arn.stdout)["shards"]] == [
        (s["shard_id"], s["checkpoint"]) for s in stopped["shards"]
    ]


def _shard_in(line: str) -> str:
    """The shard id of a text row (after the tree's prefix), or '' for other lines."""
    for word in line.split():
        if word.startswith("shardId-"):
            return word
    return ""


def test_status_watch_refreshes_until_interrupted(
    kinesis_mock: KinesisMock, kinesis_stream: Any
) -> None:
    stream = kinesis_stream(shards=1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kinesis_core", "status", stream.name, "--json", "--watch", "0.2"],
        env={**os.environ, **kinesis_mock.client_environment()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        second = json.loads(proc.stdout.readline())
        assert first["taken_at"] < second["taken_at"]
        assert [s["shard_id"] for s in second["shards"]] == [stream.shards()[0]["ShardId"]]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_status_watch_shows_how_a_shards_lag_moves(
    kinesis_mock: KinesisMock, kinesis_stream: Any, tmp_path: Path
) -> None:
    """Text mode: the first refresh finds the checkpoint caught up; records written after it
    show on a later refresh as a lag with its change since the one before."""
    stream = kinesis_stream(shards=1)
    shard_id, sequence = put(stream, "low", "first")
    store_path = tmp_path / "checkpoints.sqlite3"

    async def checkpoint() -> None:
        async with SQLiteCheckpointStore(store_path) as store:
            await store.put("app", stream.name, shard_id, (sequence, 0), expected=None)

    asyncio.run(checkpoint())
    command = [sys.executable, "-m", "kinesis_core", "status", stream.name]
    command += ["--store", str(store_path), "--application", "app", "--watch", "0.3"]
    proc = subprocess.Popen(
        command,
        env={**os.environ, **kinesis_mock.client_environment()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        rows = (line for line in proc.stdout if _shard_in(line) == shard_id)
        assert next(rows).rstrip().endswith("caught up")
        for n in range(3):
            put(stream, "low", f"later-{n}")
        moved = next(row for row in rows if "caught up" not in row)
        assert moved.rstrip().endswith(" ms)"), moved
        assert "(+" in moved, moved
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_status_names_what_is_wrong(
    kinesis_mock: KinesisMock, kinesis_stream: Any, tmp_path: Path
) -> None:
    env = kinesis_mock.client_environment()
    missing_stream = status(env, "no-such-stream")
    assert missing_stream.returncode == 1
    assert "no-such-stream" in missing_stream.stderr
    assert "ResourceNotFoundException" in missing_stream.stderr
    stream = kinesis_stream(shards=1)
    missing_file = status(env, stream.name, "--store", str(tmp_path / "nope.sqlite3"))
    assert missing_file.returncode == 1  # the store cannot be read (docs/operations.md)
    assert "does not exist" in missing_file.stderr
    assert not (tmp_path / "nope.sqlite3").exists()
    bad_watch = status(env, stream.name, "--watch", "0")
    assert bad_watch.returncode == 2
    assert "--watch" in bad_watch.stderr


def test_status_exit_codes_follow_the_documented_scheme(
    moto_server: MotoServer, moto_stream: Any, tmp_path: Path
) -> None:
    """1 when what the command line names cannot be read (the stream, a store file or table),
    2 when the command line itself is wrong; the message says which and why (on moto)."""
    env = moto_server.client_environment()
    stream = moto_stream(shards=1)

    folder = status(env, stream.name, "--store", str(tmp_path))
    assert folder.returncode == 1, folder.stderr
    assert f"{str(tmp_path)!r} is a directory, not a checkpoint file" in folder.stderr

    table = f"no-such-table-{uuid.uuid4().hex[:8]}"
    missing_table = status(
        env,
        stream.name,
        "--dynamodb-table",
        table,
        "--dynamodb-endpoint-url",
        moto_server.endpoint_url,
    )
    assert missing_table.returncode == 1, missing_table.stderr
    assert f"lease table {table!r} does not exist" in missing_table.stderr

    orders_table = f"orders-leases-{uuid.uuid4().hex[:8]}"

    async def write_orders_row() -> None:
        async with DynamoDBCheckpointStore(
            orders_table, client_config=moto_server.client_config()
        ) as store:
            await store.put("orders", stream.name, "shardId-000000000000", (1, 0), expected=None)

    asyncio.run(write_orders_row())
    table_args = ["--dynamodb-table", orders_table]
    table_args += ["--dynamodb-endpoint-url", moto_server.endpoint_url]
    other_application = status(env, stream.name, *table_args)
    assert other_application.returncode == 1, other_application.stderr
    assert "'orders'" in other_application.stderr
    assert "give --application the name of the application" in other_application.stderr
    named = status(env, stream.name, *table_args, "--application", "orders", "--json")
    assert named.returncode == 0, named.stderr

    empty_application = status(env, stream.name, "--store", str(tmp_path), "--application", "")
    assert empty_application.returncode == 2, empty_application.stderr
    assert "--application: must not be empty" in empty_application.stderr

    bad_stream = status(env, "no such stream!")
    assert bad_stream.returncode == 2, bad_stream.stderr
    assert "'no such stream!'" in bad_stream.stderr

    shown = status(env, stream.name, "--application", "billing", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["application"] == "billing"


def test_status_shows_rows_of_an_earlier_stream_as_such(
    moto_server: MotoServer, moto_stream: Any, tmp_path: Path
) -> None:
    """Issue 37, part 8: rows written for an earlier stream of the same name (deleted and
    created again) showed as "reading", with a lag measured from a position of a stream that
    no longer exists. They show as an earlier stream's, and a row of this one as before."""
    stream: LocalStream = moto_stream(shards=2)
    first, second = (shard["ShardId"] for shard in stream.shards())
    summary = stream.boto_client().describe_stream_summary(StreamName=stream.name)
    created_ms = StreamFacts.from_response(summary).created_ms
    sequence = int(stream.put(b"x", "k", explicit_hash_key=10)["SequenceNumber"])
    path = tmp_path / "c.sqlite3"

    async def write() -> None:
        async with SQLiteCheckpointStore(path) as store:
            await store.put(
                "app",
                stream.name,
                first,
                (sequence, 0),
                expected=None,
                stream_created_ms=created_ms - 86_400_000,
            )
            await store.put(
                "app",
                stream.name,
                second,
                Sentinel.TRIM_HORIZON,
                expected=None,
                stream_created_ms=created_ms,
            )

    asyncio.run(write())
    env = moto_server.client_environment()
    shown = status(env, stream.name, "--store", str(path), "--application", "app", "--json")
    assert shown.returncode == 0, shown.stderr
    progress = {
        s["shard_id"]: (s["progress"], s["lag"]) for s in json.loads(shown.stdout)["shards"]
    }
    assert progress[first] == ("earlier_stream", None)
    assert progress[second][0] == "ready"
    text = status(env, stream.name, "--store", str(path), "--application", "app")
    assert text.returncode == 0, text.stderr
    line = next(line for line in text.stdout.splitlines() if line.startswith(first))
    assert "earlier stream" in line
    assert "deleted and created again" in text.stdout
