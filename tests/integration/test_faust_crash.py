"""A Faust worker reading a KinesisChannel is killed with SIGKILL mid-stream and restarted
(kinesis-mock, ``faust -A faust_apps.crash_worker worker`` subprocesses): nothing is lost, and
the only duplicates are records after the last checkpoint that had reached the SQLite file.
Several Faust workers share one stream through leases: a worker joining and a worker stopping
move shards by hand-off, and no record is processed twice.
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
from faust_apps import numbered, produce, stream_contents

from faust_kinesis.reader import CHECKPOINT_FILE
from kinesis_core.checkpoint import CheckpointValue, SQLiteCheckpointStore
from kinesis_core.records import Position

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
COUNT = 1000
Line = tuple[str, Position, str]


def spawn(stream: Any, datadir: Path, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    config = stream.client_config
    env = {
        **extra,
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]),
        "KC_ENDPOINT": config.endpoint_url,
        "KC_REGION": config.region_name,
        "KC_STREAM": stream.name,
        "KC_DATADIR": str(datadir),
        "KC_LOG": str(log),
    }
    command = [sys.executable, "-m", "faust", "-A", "faust_apps.crash_worker", "worker"]
    return subprocess.Popen([*command, "--without-web", "-l", "warn"], env=env, cwd=HERE)


def read_log(path: Path) -> list[Line]:
    lines = []
    for text in path.read_text().splitlines() if path.exists() else []:
        shard_id, seq, sub, data = text.split(" ")
        lines.append((shard_id, (int(seq), int(sub)), data))
    return lines


def checkpoints(datadir: Path, stream: str) -> dict[str, CheckpointValue]:
    async def read() -> dict[str, CheckpointValue]:
        async with SQLiteCheckpointStore(datadir / CHECKPOINT_FILE) as store:
            return {row.shard_id: row.value for row in await store.list("crash-test", stream)}

    return asyncio.run(read())


def wait_for_lines(worker: subprocess.Popen[bytes], log: Path, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        if len(read_log(log)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker exited ({worker.poll()}) or too slow: {len(read_log(log))}")


def test_sigkill_mid_stream_then_restart_loses_nothing(kinesis_stream: Any, tmp_path: Path) -> None:
    stream = kinesis_stream(shards=2)
    asyncio.run(produce(stream, numbered(COUNT)))
    produced = {data.decode() for data, _ in numbered(COUNT)}
    last = {shard: records[-1][0] for shard, records in stream_contents(stream).items()}
    datadir, first_log, second_log = tmp_path / "data", tmp_path / "1.log", tmp_path / "2.log"

    first = spawn(stream, datadir, first_log)
    try:
        wait_for_lines(first, first_log, COUNT // 3, 40)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    at_kill = checkpoints(datadir, stream.name)

    second = spawn(stream, datadir, second_log)
    try:
        deadline = time.monotonic() + 40
        while {d for _, _, d in read_log(first_log) + read_log(second_log)} != produced:
            assert time.monotonic() < deadline, "the restarted worker did not finish"
            assert second.poll() is None, "the restarted worker died"
            time.sleep(0.05)
        second.send_signal(signal.SIGTERM)  # graceful: final checkpoints
        assert second.wait(30) == 0
    finally:
        second.kill()

    before, after = read_log(first_log), read_log(second_log)
    # Nothing lost, and the graceful stop checkpointed every shard at its last record.
    assert {data for _, _, data in before + after} == produced
    assert checkpoints(datadir, stream.name) == last
    # The first worker had written real checkpoints before it died.
    assert any(isinstance(v, tuple) for v in at_kill.values())
    for shard_id, value in at_kill.items():
        if not isinstance(value, tuple):
            continue
        # Nothing checkpointed is delivered again, and all of it had been processed.
        assert all(pos > value for sid, pos, _ in after if sid == shard_id)
        assert {pos for sid, pos, _ in before if sid == shard_id and pos <= value}
    # Duplicates: only records after the checkpoint that had reached the file.
    duplicates = {(sid, pos) for sid, pos, _ in before} & {(sid, pos) for sid, pos, _ in after}
    for shard_id, pos in duplicates:
        value = at_kill.get(shard_id)
        assert not isinstance(value, tuple) or pos > value


def test_faust_workers_share_a_stream_through_leases(kinesis_stream: Any, tmp_path: Path) -> None:
    stream = kinesis_stream(shards=4)
    shared = str(tmp_path / "leases.sqlite3")
    workers: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        workers[name] = spawn(
            stream,
            tmp_path / name,
            tmp_path / f"{name}.log",
            KC_WORKER=name,
            KC_CHECKPOINTS=shared,
        )

    def processed() -> list[Line]:
        return [line for name in workers for line in read_log(tmp_path / f"{name}.log")]

    def wait_for(values: set[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while {data for _, _, data in processed()} < values:
            assert time.monotonic() < deadline, "timed out waiting for the records"
            for name, proc in workers.items():
                assert proc.poll() in (None, 0), f"{name} died with {proc.returncode}"
            time.sleep(0.2)

    items = numbered(300)
    try:
        start("w1")
        start("w2")  # together: they split the shards
        asyncio.run(produce(stream, items[:100]))
        wait_for({data.decode() for data, _ in items[:100]})
        start("w3")  # joins: shards handed over to it while records come
        for i in range(100, 200, 10):
            asyncio.run(produce(stream, items[i : i + 10]))
            time.sleep(0.3)
        wait_for({data.decode() for data, _ in items[:200]})
        workers["w1"].send_signal(signal.SIGTERM)  # stops: hands its shards over
        assert workers["w1"].wait(60) == 0
        asyncio.run(produce(stream, items[200:]))
        wait_for({data.decode() for data, _ in items})
        for name in ("w2", "w3"):
            workers[name].send_signal(signal.SIGTERM)
            assert workers[name].wait(60) == 0
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    by_worker = {name: read_log(tmp_path / f"{name}.log") for name in workers}
    values = [data for lines in by_worker.values() for _, _, data in lines]
    assert sorted(values) == sorted(data.decode() for data, _ in items)  # once each
    assert all(by_worker.values())  # every worker processed some
