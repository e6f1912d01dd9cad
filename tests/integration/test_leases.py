"""Several consumer processes sharing a kinesis-mock stream through leases.

- DynamoDB (moto's server): three workers on six shards end up with two each; one is killed
  with SIGKILL, the other two take its shards after the failover time and nothing is lost;
  once the hand-offs settled every shard is read by one worker only; SIGTERM closes the rest
  gracefully (final checkpoints, leases released).
- SQLite (one file, one host): two workers split four shards; one stops gracefully and the
  other carries on exactly where it stopped (no record twice).
- A split while two workers read: a child is read only after its parent, whichever worker
  holds which lease.
- Both stores: workers started together split the shards without asking each other for any;
  a worker joining later gets its share by graceful hand-off, and a worker stopping hands its
  shards over: no record is delivered twice by any of these moves.

The workers are this file run as a script. Each logs every record it delivers, one JSON line
(worker, shard, position, data) before it acks the record.
"""

from __future__ import annotations

import asyncio
import json
import logging
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

from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.checkpoint import Checkpoint, DynamoDBCheckpointStore, SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.lease import LeaseConfig
from kinesis_core.shards.hashing import hash_key
from reliability._common import log_each_record_until

pytestmark = pytest.mark.integration

FAILOVER = 3.0
PER_AGGREGATE = 15
Position = tuple[int, int]


# -- the worker process ------------------------------------------------------------------------


def make_store(
    kind: str, where: str, region: str
) -> DynamoDBCheckpointStore | SQLiteCheckpointStore:
    if kind == "sqlite":
        return SQLiteCheckpointStore(where)
    config = ClientConfig(
        region_name=region,
        dynamodb_endpoint_url=where,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return DynamoDBCheckpointStore(client_config=config)


async def worker(
    kind: str, where: str, endpoint: str, region: str, stream: str, app: str, name: str, out: str
) -> None:
    config = ClientConfig(
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    leases = LeaseConfig(
        worker_id=name,
        failover_time=FAILOVER,
        renew_interval=0.5,
        take_interval=1.0,
        parent_poll_interval=0.5,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with (
        make_store(kind, where, region) as store,
        Consumer(
            stream,
            client_config=config,
            checkpoint_store=store,
            application_name=app,
            initial_position=TRIM_HORIZON,
            checkpoint_interval=0.2,
            idle_interval=0.2,
            leases=leases,
        ) as consumer,
    ):
        await log_each_record_until(
            consumer,
            out,
            lambda record: {
                "time": time.time(),
                "worker": name,
                "shard": record.shard_id,
                "position": list(record.position),
                "data": record.data.decode(),
            },
            stop,
        )


# -- the test side -----------------------------------------------------------------------------


class Cluster:
    """Worker processes, their logs and the lease table."""

    def __init__(self, kind: str, where: str, stream: Any, tmp: Path) -> None:
        self.kind, self.where, self.stream, self.tmp = kind, where, stream, tmp
        # One lease table per application and stream: a fresh application per test.
        self.app = f"leases-{uuid.uuid4().hex[:10]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str) -> None:
        config = self.stream.client_config
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                __file__,
                self.kind,
                self.where,
                config.endpoint_url,
                config.region_name,
                self.stream.name,
                self.app,
                name,
                str(self.tmp / f"{name}.jsonl"),
            ],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )

    def logs(self) -> dict[str, list[dict[str, Any]]]:
        """Per worker, what it delivered, in its order."""
        out: dict[str, list[dict[str, Any]]] = {}
        for name in self.procs:
            path = self.tmp / f"{name}.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            # A killed worker may leave half a line.
            out[name] = [json.loads(line) for line in lines if line.endswith("}")]
        return out

    def log(self, since: dict[str, int] | None = None) -> list[dict[str, Any]]:
        """Every delivery (after the per-worker counts ``since``)."""
        since = since or {}
        return [e for n, log in self.logs().items() for e in log[since.get(n, 0) :]]

    def marks(self) -> dict[str, int]:
        return {name: len(log) for name, log in self.logs().items()}

    def delivered(self) -> set[str]:
        return {entry["data"] for entry in self.log()}

    def rows(self) -> dict[str, Checkpoint]:
        async def read() -> list[Checkpoint]:
            region = self.stream.client_config.region_name
            async with make_store(self.kind, self.where, region) as store:
                return await store.list(self.app, self.stream.name)

        return {row.shard_id: row for row in asyncio.run(read())}

    def owners(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for row in self.rows().values():
            if row.owner is not None:
                out.setdefault(row.owner, []).append(row.shard_id)
        return {owner: sorted(shards) for owner, shards in out.items()}

    def wait(self, what: str, condition: Callable[[], bool], timeout: float = 30.0) -> float:
        """Poll until ``condition``; return how long it took."""
        start = time.monotonic()
        while not condition():
            for name, proc in self.procs.items():
                if proc.poll() is not None and proc.returncode not in (0, -signal.SIGKILL):
                    raise AssertionError(f"worker {name} died with {proc.returncode}")
            if time.monotonic() - start > timeout:
                raise AssertionError(f"timed out waiting for: {what}; owners {self.owners()}")
            time.sleep(0.2)
        return time.monotonic() - start

    def settled(self, expected: dict[str, int], quiet: float = 1.5) -> Callable[[], bool]:
        """Owners hold ``expected`` counts of leases, unchanged for ``quiet`` seconds (longer
        than a renewal interval: a worker whose lease was stolen has stopped by then)."""
        last: dict[str, Any] = {"owners": None, "since": 0.0}

        def check() -> bool:
            owners = self.owners()
            if {o: len(s) for o, s in owners.items()} != expected:
                last["owners"] = None
                return False
            if owners != last["owners"]:
                last["owners"], last["since"] = owners, time.monotonic()
            return bool(time.monotonic() - last["since"] >= quiet)

        return check

    def stop(self, name: str, sig: signal.Signals = signal.SIGTERM) -> int:
        proc = self.procs[name]
        proc.send_signal(sig)
        return proc.wait(30)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


class Producer:
    """KPL aggregates, each inside one shard's hash range."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.client = stream.boto_client()

        async def shards() -> list[Any]:
            async with create_kinesis_client(stream.client_config) as aio:
                return await list_all_shards(aio, stream.name)

        self.shards = {i.shard_id: i.hash_range for i in asyncio.run(shards()) if i.is_open}
        self.keys: dict[str, list[str]] = {s: [] for s in self.shards}
        i = 0
        while any(len(v) < PER_AGGREGATE for v in self.keys.values()):
            key = f"pk-{i}"
            owner = next(s for s, (lo, hi) in self.shards.items() if lo <= hash_key(key) <= hi)
            self.keys[owner].append(key)
            i += 1
        self.by_data: dict[str, str] = {}
        """data -> the shard it was written to"""

    def put(self, batch: str, aggregates: int = 2) -> set[str]:
        entries = []
        produced = set()
        for shard in self.shards:
            for a in range(aggregates):
                builder = AggregateBuilder()
                for j, key in enumerate(self.keys[shard][:PER_AGGREGATE]):
                    data = f"{batch}-{shard[-2:]}-{a}-{j}"
                    builder.add(key, None, data.encode())
                    produced.add(data)
                    self.by_data[data] = shard
                entries.append(
                    {
                        "Data": builder.build(),
                        "PartitionKey": builder.container_partition_key,
                        "ExplicitHashKey": builder.container_explicit_hash_key,
                    }
                )
        response = self.client.put_records(StreamName=self.stream.name, Records=entries)
        assert response.get("FailedRecordCount", 0) == 0
        return produced


def test_three_workers_dynamodb_sigkill_and_hand_offs(
    kinesis_stream: Any, moto_server: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=6)
    dynamodb_url = moto_server.client_config().dynamodb_endpoint_url
    producer = Producer(stream)
    produced = producer.put("a")
    cluster = Cluster("dynamodb", dynamodb_url, stream, tmp_path)
    try:
        for name in ("w1", "w2", "w3"):
            cluster.spawn(name)
        # Each ends up with two shards.
        cluster.wait("2 leases each", cluster.settled({"w1": 2, "w2": 2, "w3": 2}))
        cluster.wait("batch a delivered", lambda: cluster.delivered() >= produced)

        # Kill one: its shards are taken after the failover time, nothing is lost.
        victim = cluster.owners()["w3"]
        at_kill = cluster.rows()
        assert cluster.stop("w3", signal.SIGKILL) == -signal.SIGKILL
        after_kill = cluster.marks()
        killed = time.monotonic()
        produced |= producer.put("b")
        cluster.wait(
            "w3's leases taken",
            lambda: (
                set(victim) <= {s for o, ss in cluster.owners().items() if o != "w3" for s in ss}
            ),
        )
        taken_after = time.monotonic() - killed
        cluster.wait("3 leases each", cluster.settled({"w1": 3, "w2": 3}))
        cluster.wait("batch b delivered", lambda: cluster.delivered() >= produced)
        print(f"w3's leases were taken {taken_after:.1f} s after SIGKILL (failover {FAILOVER} s)")
        # The survivors resumed the dead worker's shards from its checkpoints: what it had
        # checkpointed was not delivered again.
        log = cluster.log(after_kill)
        for shard in victim:
            value = at_kill[shard].position
            again = [tuple(e["position"]) for e in log if e["shard"] == shard]
            assert again
            assert value is None or min(again) > value

        # Settled: every shard is read by exactly one worker, the one holding its lease.
        owners = {s: o for o, ss in cluster.owners().items() for s in ss}
        settled = cluster.marks()
        batch_c = producer.put("c")
        cluster.wait("batch c delivered", lambda: cluster.delivered() >= batch_c)
        for entry in cluster.log(settled):
            assert entry["worker"] == owners[entry["shard"]]

        # A graceful stop checkpoints, then releases.
        assert cluster.stop("w1") == 0
        assert cluster.stop("w2") == 0
    finally:
        cluster.kill_all()
    rows = cluster.rows()
    assert len(rows) == 6
    assert all(row.owner is None for row in rows.values())
    log = cluster.log()
    assert {e["data"] for e in log} == produced | batch_c  # nothing lost
    last = {}
    for entry in log:
        last[entry["shard"]] = max(last.get(entry["shard"], (0, 0)), tuple(entry["position"]))
    assert {s: row.position for s, row in rows.items()} == last  # everything checkpointed


def test_two_workers_share_a_sqlite_file_and_hand_over(kinesis_stream: Any, tmp_path: Path) -> None:
    stream = kinesis_stream(shards=4)
    producer = Producer(stream)
    cluster = Cluster("sqlite", str(tmp_path / "leases.sqlite3"), stream, tmp_path)
    try:
        cluster.spawn("w1")
        cluster.spawn("w2")
        cluster.wait("2 leases each", cluster.settled({"w1": 2, "w2": 2}))
        produced = producer.put("a")
        cluster.wait("batch a delivered", lambda: cluster.delivered() >= produced)
        owners = {s: o for o, ss in cluster.owners().items() for s in ss}
        for entry in cluster.log():
            assert entry["worker"] == owners[entry["shard"]]
        # w2 stops gracefully: its leases are released and taken by w1 at once.
        assert cluster.stop("w2") == 0
        cluster.wait("w1 holds all", cluster.settled({"w1": 4}, quiet=0.0), timeout=10)
        produced |= producer.put("b")
        cluster.wait("batch b delivered", lambda: cluster.delivered() >= produced)
        assert cluster.stop("w1") == 0
    finally:
        cluster.kill_all()
    log = cluster.log()
    data = [e["data"] for e in log]
    assert sorted(data) == sorted(produced)  # nothing lost, nothing twice
    assert all(row.owner is None for row in cluster.rows().values())


@pytest.mark.parametrize("kind", ["sqlite", "dynamodb"])
def test_planned_moves_hand_over_without_a_record_twice(
    kind: str, kinesis_stream: Any, moto_server: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=6)
    where = (
        str(tmp_path / "leases.sqlite3")
        if kind == "sqlite"
        else moto_server.client_config().dynamodb_endpoint_url
    )
    producer = Producer(stream)
    cluster = Cluster(kind, where, stream, tmp_path)
    try:
        cluster.spawn("w1")
        cluster.spawn("w2")  # started together: they split the new leases
        cluster.wait("3 leases each", cluster.settled({"w1": 3, "w2": 3}))
        produced = producer.put("a")
        cluster.wait("batch a delivered", lambda: cluster.delivered() >= produced)
        cluster.spawn("w3")  # joins: two leases handed over to it, while records come
        for batch in "bcde":
            produced |= producer.put(batch, aggregates=1)
            time.sleep(0.3)
        cluster.wait("2 leases each", cluster.settled({"w1": 2, "w2": 2, "w3": 2}))
        cluster.wait("batches b-e delivered", lambda: cluster.delivered() >= produced)
        assert cluster.stop("w2") == 0  # stops: hands its leases over
        produced |= producer.put("f")
        cluster.wait("3 leases each", cluster.settled({"w1": 3, "w3": 3}))
        cluster.wait("batch f delivered", lambda: cluster.delivered() >= produced)
        assert cluster.stop("w1") == 0
        assert cluster.stop("w3") == 0
    finally:
        cluster.kill_all()
    data = [e["data"] for e in cluster.log()]
    assert sorted(data) == sorted(produced)  # nothing lost, nothing twice
    logs = {n: (tmp_path / f"{n}.log").read_text() for n in ("w1", "w2", "w3")}
    # w1 and w2 never asked each other for a lease; w3 asked for its two.
    assert "INFO asked for the lease" not in logs["w1"] + logs["w2"]
    assert logs["w3"].count("INFO asked for the lease") >= 2
    assert "handed the lease" in logs["w1"] + logs["w2"]
    rows = cluster.rows()
    assert all(row.owner is None and row.checkpoint_owner is None for row in rows.values())


if __name__ == "__main__":
    logging.basicConfig(
        filename=sys.argv[-1].replace(".jsonl", ".log"),
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    asyncio.run(worker(*sys.argv[1:]))


def test_parents_before_children_across_workers(
    kinesis_stream: Any, moto_server: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=2)
    cluster = Cluster(
        "dynamodb", moto_server.client_config().dynamodb_endpoint_url, stream, tmp_path
    )
    try:
        cluster.spawn("w1")
        cluster.spawn("w2")
        cluster.wait("1 lease each", cluster.settled({"w1": 1, "w2": 1}))
        produced = Producer(stream).put("a", aggregates=4)
        parent = sorted(Producer(stream).shards)[0]
        children = stream.split(parent)
        produced |= Producer(stream).put("b", aggregates=4)
        cluster.wait("everything delivered", lambda: cluster.delivered() >= produced)
        cluster.wait("the parent finished", lambda: cluster.rows()[parent].is_shard_end)
        assert cluster.stop("w1") == 0
        assert cluster.stop("w2") == 0
    finally:
        cluster.kill_all()
    log = cluster.log()
    parent_times = [e["time"] for e in log if e["shard"] == parent]
    child_times = [e["time"] for e in log if e["shard"] in children]
    assert parent_times
    assert child_times
    assert max(parent_times) < min(child_times)
    rows = cluster.rows()
    assert set(rows[parent].child_shard_ids) == set(children)
    for child in children:
        assert rows[child].parent_shard_ids == (parent,)
    assert {e["data"] for e in log} == produced
