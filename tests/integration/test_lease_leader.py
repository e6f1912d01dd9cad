"""The lease leader on DynamoDB (moto's server): three worker processes share twelve leases;
the leader is SIGKILLed, another worker takes the leader row over, and the two survivors hold
six leases each within the bound docs/leases.md gives for a leader's death.

The workers are lease managers only (no stream is read: the table is what is under test), this
file run as a script.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from kinesis_core.aws.client import ClientConfig
from kinesis_core.checkpoint import DynamoDBCheckpointStore, Sentinel
from kinesis_core.lease import LeaseConfig, LeaseManager

pytestmark = pytest.mark.integration

STREAM = "leader-stream"
SHARDS = [f"shardId-{i:012d}" for i in range(12)]
FAILOVER, RENEW, TAKE = 2.0, 0.4, 1.0
MARGIN = 3.0
"""Seconds allowed beyond the bound for the calls themselves on a loaded machine."""


def leader_bound(failover: float, renew: float, take: float) -> float:
    """docs/leases.md: a leader SIGKILLed is replaced, and its leases taken and balanced,
    within ``take + 2 x (floor(failover / take) + 1) x take + renew`` of its last renewal."""
    return take + 2 * (failover // take + 1) * take + renew


def store(endpoint: str) -> DynamoDBCheckpointStore:
    config = ClientConfig(
        region_name="us-east-1",
        dynamodb_endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return DynamoDBCheckpointStore(client_config=config)


async def worker(endpoint: str, app: str, name: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with store(endpoint) as leases:
        config = LeaseConfig(
            worker_id=name, failover_time=FAILOVER, renew_interval=RENEW, take_interval=TAKE
        )
        manager = LeaseManager(leases, app, STREAM, config, eligible=lambda: SHARDS)
        manager.start()
        await stop.wait()
        await manager.close()


def table(endpoint: str, app: str) -> tuple[str | None, dict[str, str | None]]:
    """The leader, and each lease's owner."""

    async def read() -> tuple[str | None, dict[str, str | None]]:
        async with store(endpoint) as leases:
            leader, _ = await leases.leader(app, STREAM)
            rows = await leases.list(app, STREAM)
        return leader, {row.shard_id: row.owner for row in rows if row.checkpoint_owner is None}

    return asyncio.run(read())


def balanced(owners: dict[str, str | None], live: set[str]) -> bool:
    counts = Counter(owners.values())
    return (
        len(owners) == len(SHARDS)
        and set(counts) == live
        and max(counts.values()) - min(counts.values()) <= 1
    )


def test_a_sigkilled_leader_is_replaced_and_its_leases_spread(moto_server: Any) -> None:
    endpoint = moto_server.client_config().dynamodb_endpoint_url
    app = f"leader-{uuid.uuid4().hex[:10]}"

    async def create() -> None:
        async with store(endpoint) as leases:
            for shard in SHARDS:
                await leases.put(app, STREAM, shard, Sentinel.TRIM_HORIZON, expected=None)

    asyncio.run(create())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = {
        name: subprocess.Popen([sys.executable, __file__, endpoint, app, name], env=env)
        for name in ("w1", "w2", "w3")
    }

    def wait(what: str, condition: Any, timeout: float) -> float:
        start = time.monotonic()
        while not condition():
            if time.monotonic() - start > timeout:
                raise AssertionError(f"timed out waiting for: {what}; table {table(endpoint, app)}")
            time.sleep(0.1)
        return time.monotonic() - start

    try:
        wait("4 leases each", lambda: balanced(table(endpoint, app)[1], set(procs)), 60)
        leader, _ = table(endpoint, app)
        assert leader in procs
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(10)
        survivors = set(procs) - {leader}
        took = wait(
            "6 leases each on the survivors",
            lambda: balanced(table(endpoint, app)[1], survivors),
            leader_bound(FAILOVER, RENEW, TAKE) + 2 * MARGIN,
        )
        new_leader, _ = table(endpoint, app)
        assert new_leader in survivors
        print(f"{leader} SIGKILLed; {new_leader} leads; balanced again after {took:.1f} s")
        assert took <= leader_bound(FAILOVER, RENEW, TAKE) + MARGIN
        for name in sorted(survivors):
            procs[name].send_signal(signal.SIGTERM)
            assert procs[name].wait(30) == 0
        # A graceful stop releases every lease and the leader row.
        assert table(endpoint, app) == (None, dict.fromkeys(SHARDS))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


if __name__ == "__main__":
    asyncio.run(worker(*sys.argv[1:]))
