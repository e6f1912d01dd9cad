"""What a lease table costs in DynamoDB reads and writes: today's every-worker scan against the
leader that assigns and the workers that list their own leases through the owner index.

N lease managers (the core's :class:`~kinesis_core.lease.LeaseManager`, each with a
``DynamoDBCheckpointStore`` of its own, in this process) share a lease table on moto's
DynamoDB holding S leases, created unowned; no stream is read, so the table sees only what the
leases do. Each design in turn, on a fresh table: the workers start together, take and balance
the leases (every worker holds ``S // N`` or one more), then a window of four take intervals
is measured, and the read and write units every store counted in it (by DynamoDB's rules,
:class:`~kinesis_core.checkpoint.dynamodb.TableUsage`) are summed.

- today's design (every worker scans the table each take interval: the lease managers on a
  store without :class:`~kinesis_core.checkpoint.base.AssignedLeaseStore`, as they run on
  SQLite): the same store, its leader and index methods hidden. It is also counted at every
  size: N workers x what one of its rounds reads (a listing of the leases and one of the
  worker rows, measured on the balanced table) per take interval; at the largest size it is
  only counted (its workers, all in this process, fall behind their renewals there);
- the leader design (``DynamoDBCheckpointStore`` as it is).

The take interval is ``TAKE`` (5 s, not 20 s) so that the runs fit in about a minute; the
failover time and the renewal interval are the defaults (10 s, 3.31 s). Every read
recurs once per take interval (scans, the leader row's look, the listings of a worker's own
leases; a listing the leader asked for comes only after an assignment) and every write once
per renewal interval (renewals, worker and leader rows), so the table shows reads per hour
at the default take interval (those measured times ``TAKE / 20.05``) and writes per hour as
measured. Sizes: 4 x 256 and 8 x 256
(workers x shards: does the cost grow with workers?)
and 8 x 512, the largest the leader design runs at here, on a shared 2-core machine, in
about a minute (the renewals alone are 155 writes a second; when the machine is busy, the
workers of this one process fall behind their renewals, and leases expire and move: a run
to repeat). Targets: at the largest size,
the leader design reads at most a tenth of today's units (counted); from 4 to 8 workers over
256 shards its reads grow by at most half (today's double).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks._table import Row
from kinesis_core.aws.client import ClientConfig
from kinesis_core.checkpoint import Checkpoint, CheckpointValue, DynamoDBCheckpointStore, Sentinel
from kinesis_core.lease import LeaseConfig, LeaseManager
from kinesis_core.local import MotoServer

TAKE = 5.0
"""The take interval of the runs (``--quick``: ``QUICK_TAKE``)."""
QUICK_TAKE = 2.0
DEFAULT_TAKE = 20.05
FAILOVER = 10.0
"""The failover time of the runs (the default)."""
DEFAULT_RENEW = 10 / 3 - 0.025
READS = "leases: table read units per hour (default intervals)"
WRITES = "leases: table write units per hour (default intervals)"
RATIOS = "leases: the leader design's reads"
TODAY = "every worker scans (today)"
LEADER = "leader + owner index"
STREAM = "bench-stream"


class EveryWorkerScans:
    """A DynamoDB store seen as a plain lease store (no leader, no index): today's design."""

    def __init__(self, store: DynamoDBCheckpointStore) -> None:
        self.store = store

    async def get(self, application: str, stream: str, shard_id: str) -> Checkpoint | None:
        return await self.store.get(application, stream, shard_id)

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        return await self.store.list(application, stream)

    async def put(
        self, application: str, stream: str, shard_id: str, value: CheckpointValue, **options: Any
    ) -> Checkpoint:
        return await self.store.put(application, stream, shard_id, value, **options)

    async def update_lease(
        self,
        application: str,
        stream: str,
        shard_id: str,
        *,
        expected: Checkpoint,
        owner: str | None,
        checkpoint_owner: str | None = None,
        throughput_kbps: float | None = None,
    ) -> Checkpoint:
        return await self.store.update_lease(
            application,
            stream,
            shard_id,
            expected=expected,
            owner=owner,
            checkpoint_owner=checkpoint_owner,
            throughput_kbps=throughput_kbps,
        )

    async def heartbeat(
        self, application: str, stream: str, worker_id: str, *, leaving: bool = False
    ) -> None:
        await self.store.heartbeat(application, stream, worker_id, leaving=leaving)

    async def workers(self, application: str, stream: str) -> dict[str, int]:
        return await self.store.workers(application, stream)

    async def forget_worker(
        self, application: str, stream: str, worker_id: str, counter: int
    ) -> None:
        await self.store.forget_worker(application, stream, worker_id, counter)

    async def close(self) -> None:
        await self.store.close()


@dataclass(frozen=True)
class Cost:
    read_units: float
    write_units: float
    seconds: float
    balanced_after: float
    by_call: dict[str, float]
    """Read units per kind of call in the window."""
    take: float
    """The take interval of the run."""
    renew: float
    """The renewal interval of the run."""
    round_units: float
    """What one round of today's design reads (a listing of the leases and one of the worker
    rows, two scans of the table), measured on the balanced table after the window."""

    @property
    def reads_per_hour(self) -> float:
        """Read units per hour at the default take interval."""
        return self.read_units / self.seconds * 3600 * self.take / DEFAULT_TAKE

    @property
    def writes_per_hour(self) -> float:
        """Write units per hour at the default renewal interval."""
        return self.write_units / self.seconds * 3600 * self.renew / DEFAULT_RENEW

    def counted_today(self, workers: int) -> float:
        """Today's reads per hour at the default take interval, counted: every worker reads
        a round every take interval (and nothing else)."""
        return workers * self.round_units * 3600 / DEFAULT_TAKE


def _by_call(stores: Sequence[DynamoDBCheckpointStore]) -> dict[str, float]:
    out: dict[str, float] = {}
    for store in stores:
        for call, units in store.usage.read_units_by_call.items():
            out[call] = out.get(call, 0.0) + units
    return out


def _balanced(managers: Sequence[LeaseManager], shards: int) -> bool:
    counts = [len(m.held()) for m in managers]
    return sum(counts) == shards and max(counts) - min(counts) <= 1


async def _measure(
    config: ClientConfig, workers: int, shards: int, leader: bool, take: float
) -> Cost:
    app = f"bench-leases-{uuid.uuid4().hex[:8]}"
    stores = [DynamoDBCheckpointStore(client_config=config) for _ in range(workers)]
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    await asyncio.gather(
        *(stores[0].put(app, STREAM, s, Sentinel.TRIM_HORIZON, expected=None) for s in ids)
    )
    lease = LeaseConfig(failover_time=FAILOVER, take_interval=take)
    managers = [
        LeaseManager(
            store if leader else EveryWorkerScans(store),
            app,
            STREAM,
            dataclasses.replace(lease, worker_id=f"w{i}"),
            eligible=lambda: ids,
        )
        for i, store in enumerate(stores)
    ]
    started = time.monotonic()
    for manager in managers:
        manager.start()
    try:
        while not _balanced(managers, shards):
            if time.monotonic() - started > 120:
                raise RuntimeError(f"{workers} x {shards}: not balanced after two minutes")
            await asyncio.sleep(0.2)
        balanced = time.monotonic() - started
        # One more take interval, and past the workers' first two take intervals (the rounds
        # in which they read the table and take for themselves): the last hand-offs settle.
        young = started + lease.renew_every + 3 * lease.take_every - time.monotonic()
        await asyncio.sleep(max(lease.take_every, young))
        reads = sum(s.usage.read_units for s in stores)
        writes = sum(s.usage.write_units for s in stores)
        calls = _by_call(stores)
        window = 4 * take
        begin = time.monotonic()
        await asyncio.sleep(window)
        seconds = time.monotonic() - begin
        read_units = sum(s.usage.read_units for s in stores) - reads
        write_units = sum(s.usage.write_units for s in stores) - writes
        by_call = {k: v - calls.get(k, 0.0) for k, v in _by_call(stores).items()}
        async with DynamoDBCheckpointStore(client_config=config) as probe:
            await probe.list(app, STREAM)
            await probe.workers(app, STREAM)
            round_units = probe.usage.read_units
    finally:
        await asyncio.gather(*(m.close() for m in managers), return_exceptions=True)
        await asyncio.gather(*(s.close() for s in stores))
    return Cost(
        read_units, write_units, seconds, balanced, by_call, take, lease.renew_every, round_units
    )


def _note(cost: Cost) -> str:
    share = ", ".join(
        f"{call} {units / cost.read_units:.0%}"
        for call, units in sorted(cost.by_call.items())
        if units
    )
    return f"balanced {cost.balanced_after:.1f} s after the start; reads: {share}"


def run(quick: bool) -> list[Row]:
    sizes = [(2, 64), (4, 64)] if quick else [(4, 256), (8, 256), (8, 512)]
    # Today's design runs at the first two sizes; at 8 x 512 its eight scanning workers in
    # one process fall behind their renewals here, so it is counted there (and the count is
    # checked against the measure at the others).
    both = sizes[:2]
    costs: dict[tuple[int, int, bool], Cost] = {}
    with MotoServer() as server:
        for workers, shards in sizes:
            for leader in (False, True) if (workers, shards) in both else (True,):
                cost = asyncio.run(
                    _measure(
                        server.client_config(),
                        workers,
                        shards,
                        leader,
                        QUICK_TAKE if quick else TAKE,
                    )
                )
                costs[workers, shards, leader] = cost
                print(
                    f"leases {workers} x {shards} {LEADER if leader else TODAY}: "
                    f"{cost.reads_per_hour:,.0f} RCU/h (today's counted "
                    f"{cost.counted_today(workers):,.0f}), {cost.writes_per_hour:,.0f} WCU/h, "
                    f"balanced after {cost.balanced_after:.1f} s, reads by call {cost.by_call}",
                    file=sys.stderr,
                )
    rows: list[Row] = []
    for workers, shards in sizes:
        size = f"{workers} x {shards}"
        ours = costs[workers, shards, True]
        counted = f"{size}: {TODAY}, counted"
        rows.append(
            Row(
                READS,
                counted,
                ours.counted_today(workers),
                "RCU/h",
                note=f"{workers} workers x one round ({ours.round_units:g} units) per take "
                "interval",
            )
        )
        today = costs.get((workers, shards, False))
        if today is not None:
            rows.append(
                Row(
                    READS,
                    f"{size}: {TODAY}, measured",
                    today.reads_per_hour,
                    "RCU/h",
                    baseline=counted,
                    note=_note(today),
                )
            )
            rows.append(Row(WRITES, f"{size}: {TODAY}", today.writes_per_hour, "WCU/h"))
        rows.append(
            Row(
                READS,
                f"{size}: {LEADER}",
                ours.reads_per_hour,
                "RCU/h",
                baseline=counted,
                note=_note(ours),
            )
        )
        rows.append(Row(WRITES, f"{size}: {LEADER}", ours.writes_per_hour, "WCU/h"))
    workers, shards = sizes[-1]
    ours = costs[workers, shards, True]
    rows.append(
        Row(
            RATIOS,
            f"{workers} x {shards}: share of today's (counted)",
            ours.reads_per_hour / ours.counted_today(workers),
            "x",
            # --quick: 64 leases, a table too small for its scan to outweigh the others' reads
            maximum=None if quick else 0.1,
        )
    )
    (few, shards), (many, _) = sizes[0], sizes[1]
    growth = costs[many, shards, True].reads_per_hour / costs[few, shards, True].reads_per_hour
    today_growth = (
        costs[many, shards, False].reads_per_hour / costs[few, shards, False].reads_per_hour
    )
    rows.append(
        Row(
            RATIOS,
            f"{many} / {few} workers over {shards} shards",
            growth,
            "x",
            note=f"today's, measured: {today_growth:.2f}x",
            maximum=1.5,
        )
    )
    return rows


if __name__ == "__main__":
    from benchmarks._table import render

    print(render(run(quick="--quick" in sys.argv)))
