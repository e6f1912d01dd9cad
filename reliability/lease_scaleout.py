"""Leases under scale-out: workers joining, one SIGKILLed, one stopped, a replacement, a split.

A 16-shard kinesis-mock stream, a DynamoDB lease table on moto, and a writer, our Producer with
record ids, putting about ``rate`` records a second for ``seconds`` through a fault proxy that
loses the answer of 5% of its PutRecords calls after the write (so it writes those records
again under the same ids: duplicates enter the stream). Worker processes
(:mod:`reliability._lease_worker`, the core Consumer with leases, deduplicating by record id)
come and go:

- two start together, then two more join;
- one is SIGKILLed, later another is stopped with SIGTERM, then a replacement joins;
- a shard is split.

Every worker logs each record it delivers (with its id) before acking it; a sampler reads the
lease table a few times a second; at the end a plain read of the stream counts the ids written
twice. Checks: nothing lost; duplicates entered the stream, and none reached the application
(two copies of an id delivered); re-deliveries (one copy delivered twice) at most 1% of the
records written, every one from the SIGKILL (the earlier delivery the killed worker's, after
its last checkpoint as the lease table held it right after the kill: the at-least-once part),
none from a planned move; the leases balanced
(every lease held by a live worker, none in hand-off, counts within one) within two take
intervals of each change; no shard delivered by two workers at once; the killed worker's
shards read again within ``failover + 2 x take`` plus the time to open a shard.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]

from kinesis_core.aws.config import ClientConfig
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LOCAL_REGION
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig, FaultKind
from kinesis_core.local.streams import StreamFactory
from kinesis_core.producer import Producer, ProducerConfig, RecordResult
from kinesis_core.records import KinesisRecord
from reliability._common import kcl_view, via
from reliability._lease_worker import FAILOVER, TAKE
from reliability.result import SuiteResult

NAME = "leases scale-out"
REPO = Path(__file__).resolve().parents[1]
OPEN_SHARD = 1.0
"""Seconds allowed, after a lease is taken, to open its shard and deliver (GetShardIterator and
GetRecords on kinesis-mock)."""
SAMPLE = 0.25
LOST_ANSWERS = 0.05
"""Share of the writer's PutRecords calls whose answer the fault proxy loses after the write."""


def _boto(service: str, endpoint: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=LOCAL_REGION,
        aws_access_key_id=DUMMY_ACCESS_KEY_ID,
        aws_secret_access_key=DUMMY_SECRET_ACCESS_KEY,
    )


class Writer(threading.Thread):
    """``rate`` records a second for ``seconds`` with our Producer (``record_ids=True``,
    automatic ids) through ``endpoint`` (the fault proxy), every record's data its decimal
    number; keeps the numbers whose write succeeded and those that failed."""

    def __init__(self, config: ClientConfig, stream: str, rate: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.stream, self.rate, self.seconds = stream, rate, seconds
        self.written: set[int] = set()
        self.failed: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._write())
        except BaseException as exc:
            self.error = exc

    async def _write(self) -> None:
        rng = random.Random(1)  # noqa: S311 (partition keys, not secrets)
        per_tick = max(1, self.rate // 10)
        config = ProducerConfig(record_ids=True, record_ttl=120.0)
        async with Producer(self.stream, client_config=self.config, producer_config=config) as p:
            puts: list[asyncio.Task[RecordResult]] = []
            loop = asyncio.get_running_loop()
            started = loop.time()
            tick = 0
            while loop.time() - started < self.seconds:
                for _ in range(per_tick):
                    data = str(len(puts)).encode()
                    key = f"pk-{rng.randrange(10**6)}"
                    puts.append(asyncio.create_task(p.put(data, key)))
                tick += 1
                await asyncio.sleep(max(0.0, started + tick / 10 - loop.time()))
            results = await asyncio.gather(*puts)
        for number, outcome in enumerate(results):
            (self.written if outcome.success else self.failed).add(number)


@dataclass
class ScaleOut(SuiteResult):
    """The row's figures, with the copies of record ids told apart."""

    entered: int = 0
    """Duplicates that entered the stream: ids written at more than one position."""
    leaked: int = 0
    """Copies of an id delivered from another position: duplicates the dedup let through."""
    after_kill: int = 0
    """Re-deliveries of what the killed worker delivered after its last checkpoint."""
    planned: int = 0
    """Re-deliveries whose earlier delivery was a live worker's (a planned move)."""
    checkpointed: int = 0
    """Re-deliveries of what the killed worker had checkpointed."""
    bounds: list[str] = field(default_factory=list)
    """The problems that are bounds of time or share (also in ``problems``); the others are
    invariants whatever the machine's load."""

    def bound(self, message: str) -> None:
        self.problem(message)
        self.bounds.append(message)


@dataclass
class Sample:
    at: float
    owners: dict[str, str | None]
    """Lease -> owner, for leases not at SHARD_END."""
    handing: int
    """Leases in hand-off (checkpointOwner set)."""


@dataclass(eq=False)
class Sampler(threading.Thread):
    """Reads the lease table every ``SAMPLE`` seconds."""

    endpoint: str
    table: str
    samples: list[Sample] = field(default_factory=list)
    announced: dict[str, float] = field(default_factory=dict)
    """Worker -> when its worker row was first seen."""
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True)
        self.client = _boto("dynamodb", self.endpoint)

    def run(self) -> None:
        while not self.stop.wait(SAMPLE):
            try:
                items = self._scan()
            except Exception:  # noqa: S112 - the table is being created; look again
                continue
            now = time.monotonic()
            owners: dict[str, str | None] = {}
            handing = 0
            for item in items:
                kind = item.get("entityType", {}).get("S", "LEASE")
                if kind == "WORKER":
                    self.announced.setdefault(item["workerId"]["S"], now)
                    continue
                if item["checkpoint"]["S"] == "SHARD_END":
                    continue
                owners[item["leaseKey"]["S"]] = item.get("leaseOwner", {}).get("S")
                handing += "checkpointOwner" in item
            self.samples.append(Sample(now, owners, handing))

    def _scan(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        while True:
            page = self.client.scan(**kwargs)
            items.extend(page.get("Items", ()))
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def checkpoints_of(self, worker: str) -> dict[str, tuple[int, int]]:
        """The checkpoints of the leases ``worker`` holds now, as positions (a shard not
        checkpointed yet: before every record)."""
        out = {}
        for item in self._scan():
            if item.get("leaseOwner", {}).get("S") != worker:
                continue
            sequence = item["checkpoint"]["S"]
            sub = int(item.get("checkpointSubSequenceNumber", {}).get("N", "0"))
            out[item["leaseKey"]["S"]] = (int(sequence), sub) if sequence.isdigit() else (-1, -1)
        return out

    def balanced_after(self, since: float, live: set[str], leases: int = 0) -> float | None:
        """Seconds from ``since`` to the first sample with at least ``leases`` leases where
        every lease is held by a live worker, none is in hand-off and the live workers'
        counts differ by one at most."""
        for sample in self.samples:
            if sample.at < since or len(sample.owners) < leases:
                continue
            counts = Counter(sample.owners.values())
            if (
                sample.handing == 0
                and set(counts) <= live
                and max(counts[w] for w in live) - min(counts[w] for w in live) <= 1
            ):
                return sample.at - since
        return None

    def moved_away(self, since: float, leases: set[str], dead: str) -> float | None:
        """Seconds from ``since`` until none of ``leases`` is ``dead``'s any more."""
        for sample in self.samples:
            if sample.at >= since and all(
                sample.owners.get(s) not in (dead, None) for s in leases if s in sample.owners
            ):
                return sample.at - since
        return None


class Cluster:
    """Worker processes and their logs."""

    def __init__(self, kinesis: str, dynamodb: str, stream: str, app: str, folder: Path) -> None:
        self.args = [kinesis, dynamodb, stream, app]
        self.folder = folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
        out = self.folder / f"{name}.jsonl"
        with open(self.folder / f"{name}.err", "wb") as err:
            self.procs[name] = subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
                [sys.executable, "-m", "reliability._lease_worker", *self.args, name, str(out)],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def signal(self, name: str, sig: signal.Signals) -> int:
        proc = self.procs[name]
        proc.send_signal(sig)
        return proc.wait(60)

    def deliveries(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name in self.procs:
            path = self.folder / f"{name}.jsonl"
            if path.exists():
                # A killed worker may leave half a line.
                lines = path.read_text().splitlines()
                out.extend(json.loads(line) for line in lines if line.endswith("}"))
        return sorted(out, key=lambda e: e["t"])

    def log_text(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _wait(what: str, condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


def lease_scale_out(
    kinesis: StreamFactory,
    dynamodb_endpoint: str,
    folder: Path,
    *,
    shards: int = 16,
    rate: int = 150,
    seconds: float = 60.0,
    seed: int = 0,
) -> ScaleOut:
    started = time.monotonic()
    result = ScaleOut(NAME)
    stream = kinesis(shards)
    app = f"scale-out-{uuid.uuid4().hex[:8]}"
    sampler = Sampler(dynamodb_endpoint, app)
    cluster = Cluster(stream.endpoint_url, dynamodb_endpoint, stream.name, app, folder)
    proxy = FaultProxy(
        stream.endpoint_url, FaultConfig.from_rates(lost_answer=LOST_ANSWERS), seed=seed
    )
    events: list[tuple[str, float, set[str], int]] = []
    """(what, when, the workers alive after it, the leases to hold after it)"""

    def at(fraction: float) -> None:
        """At ``fraction`` of the run, but never before the last change had its two take
        intervals to balance (workers slow to start on a loaded machine made a change
        follow the previous one too closely to measure it)."""
        last = events[-1][1] + 2 * TAKE if events else 0.0
        time.sleep(max(0.0, t0 + fraction * seconds - time.monotonic(), last - time.monotonic()))

    try:
        proxy.start_in_thread()
        writer = Writer(via(stream.client_config, proxy.endpoint_url), stream.name, rate, seconds)
        t0 = time.monotonic()
        writer.start()
        sampler.start()
        cluster.spawn("w1")
        cluster.spawn("w2")
        _wait("w1 and w2 announced", lambda: {"w1", "w2"} <= set(sampler.announced), 30)
        events.append(("w1, w2 start", max(sampler.announced.values()), {"w1", "w2"}, shards))
        at(0.15)
        cluster.spawn("w3")
        cluster.spawn("w4")
        _wait("w3 and w4 announced", lambda: {"w3", "w4"} <= set(sampler.announced), 30)
        joined = max(sampler.announced.values())
        events.append(("w3, w4 join", joined, {"w1", "w2", "w3", "w4"}, shards))
        at(0.35)
        held = {s for s, o in sampler.samples[-1].owners.items() if o == "w4"}
        cluster.signal("w4", signal.SIGKILL)
        killed = time.monotonic()
        # Its last checkpoints: nobody takes its leases before the failover time.
        last_checkpoints = sampler.checkpoints_of("w4")
        _wait("w4's leases taken", lambda: sampler.moved_away(killed, held, "w4") is not None, 30)
        moved = sampler.moved_away(killed, held, "w4")
        assert moved is not None
        result.note(f"w4's leases taken {moved:.1f} s after SIGKILL")
        events.append(("w4 SIGKILLed, leases taken", killed + moved, {"w1", "w2", "w3"}, shards))
        at(0.55)
        if cluster.signal("w3", signal.SIGTERM) != 0:
            result.problem("w3 did not stop cleanly on SIGTERM")
        # Measured from its exit: its leases are released by then.
        events.append(("w3 SIGTERM", time.monotonic(), {"w1", "w2"}, shards))
        at(0.65)
        cluster.spawn("w5")
        _wait("w5 announced", lambda: "w5" in sampler.announced, 30)
        events.append(("w5 joins", sampler.announced["w5"], {"w1", "w2", "w5"}, shards))
        at(0.8)
        parent = sorted(s["ShardId"] for s in stream.shards(open_only=True))[0]
        stream.split(parent)
        # Balanced again once the parent ended and both children are held.
        events.append(("a split", time.monotonic(), {"w1", "w2", "w5"}, shards + 1))
        writer.join()
        if writer.error is not None:
            raise writer.error
        stats = proxy.stats()
        written = writer.written
        _wait(
            "every record delivered",
            lambda: {e["d"] for e in cluster.deliveries()} >= written,
            90,
        )
        # The last change gets its two take intervals (and a sample) before the workers stop.
        time.sleep(max(0.0, events[-1][1] + 2 * TAKE + 2 * SAMPLE - time.monotonic()))
        for name in ("w1", "w2", "w5"):
            if cluster.signal(name, signal.SIGTERM) != 0:
                result.problem(f"{name} did not stop cleanly on SIGTERM")
    finally:
        sampler.stop.set()
        cluster.kill_all()
        proxy.stop_in_thread()
    deliveries = cluster.deliveries()
    _reconcile(result, writer, kcl_view(stream), deliveries, last_checkpoints)
    lost_answers = stats.total(FaultKind.LOST_ANSWER)
    result.note(
        f"PutRecords answers lost after the write: {lost_answers} of "
        f"{stats.requests.get('PutRecords', 0)} calls"
    )
    _check_balance(result, sampler, events)
    _check_concurrency(result, deliveries)
    _check_failover(result, deliveries, held, killed)
    result.faults = 3 + lost_answers
    result.seconds = time.monotonic() - started
    return result


def _reconcile(
    result: ScaleOut,
    writer: Writer,
    stream: list[KinesisRecord],
    deliveries: list[dict[str, Any]],
    last_checkpoints: dict[str, tuple[int, int]],
) -> None:
    """Copies by record id: those that entered the stream (an id at two positions), and those
    the application got: the same position again (a re-delivery) or another copy of the id."""
    positions: dict[str | None, set[tuple[str, int, int]]] = defaultdict(set)
    for record in stream:
        positions[record.record_id].add((record.shard_id, *record.position))
    result.entered = sum(len(found) - 1 for found in positions.values())
    without_id = len(positions.pop(None, ()))
    if without_id:
        result.problem(f"{without_id} records in the stream without a record id")
    if not result.entered:
        result.problem("no duplicate entered the stream (the lost answers wrote nothing twice)")
    by_id: dict[str, dict[tuple[str, int, int], list[dict[str, Any]]]] = defaultdict(dict)
    for entry in deliveries:
        by_id[entry["i"]].setdefault((entry["s"], int(entry["q"]), entry["u"]), []).append(entry)
    for copies in by_id.values():
        # Another copy of the id delivered: a duplicate that entered the stream got through.
        result.leaked += len(copies) - 1
        for (shard, *at), entries in copies.items():
            for earlier in entries[:-1]:
                if earlier["w"] != "w4":
                    result.planned += 1
                elif tuple(at) <= last_checkpoints.get(shard, (-1, -1)):
                    result.checkpointed += 1
                else:
                    result.after_kill += 1
    delivered = {e["d"] for e in deliveries}
    written = writer.written
    span = max(e["t"] for e in deliveries) - min(e["t"] for e in deliveries) if deliveries else 0
    result.note(f"{len(deliveries):,} deliveries over {span:.0f} s")
    result.attempted = len(written) + len(writer.failed)
    result.failed = len(writer.failed)
    result.delivered = len(delivered & written)
    result.lost = len(written - delivered)
    redelivered = result.after_kill + result.planned + result.checkpointed
    result.duplicated = redelivered + result.leaked
    share = redelivered / max(1, len(written))
    result.note(
        f"{len(written):,} records written by our producer with record ids; duplicates that "
        f"entered the stream (an id written twice): {result.entered}, delivered to the "
        f"application: {result.leaked}; re-deliveries {redelivered} ({share:.2%} of the "
        f"records): {result.after_kill} after the SIGKILL (the killed worker's deliveries after "
        f"its last checkpoint: the at-least-once part), {result.planned} from planned moves, "
        f"{result.checkpointed} of records the killed worker had checkpointed"
    )
    if writer.failed:
        result.problem(f"{len(writer.failed)} writes failed, e.g. {sorted(writer.failed)[:5]}")
    if result.leaked:
        result.problem(
            f"{result.leaked} duplicates that entered the stream reached the application"
        )
    if share > 0.01:
        result.bound(f"re-deliveries {share:.2%} of the records written (at most 1%)")
    if result.planned:
        result.problem(f"{result.planned} duplicates from planned moves (none allowed)")
    if result.checkpointed:
        result.problem(
            f"{result.checkpointed} records the killed worker had checkpointed delivered again"
        )


def _check_balance(
    result: ScaleOut, sampler: Sampler, events: list[tuple[str, float, set[str], int]]
) -> None:
    limit = 2 * TAKE
    figures = []
    for what, when, live, leases in events:
        took = sampler.balanced_after(when, live, leases)
        figures.append(f"{what}: {'never' if took is None else f'{took:.1f} s'}")
        if took is None or took > limit:
            result.bound(f"not balanced within {limit:g} s (two take intervals) of: {what}")
    result.note("balanced after: " + "; ".join(figures))


def _check_concurrency(result: SuiteResult, deliveries: list[dict[str, Any]]) -> None:
    """A shard delivered by two workers at once shows as runs A, B, A of deliveries in time
    order with A's two runs closer than a take interval (a real move back takes longer)."""
    runs: dict[str, list[list[Any]]] = defaultdict(list)
    for entry in deliveries:
        shard_runs = runs[entry["s"]]
        if shard_runs and shard_runs[-1][0] == entry["w"]:
            shard_runs[-1][2] = entry["t"]
        else:
            shard_runs.append([entry["w"], entry["t"], entry["t"]])
    overlaps = [
        shard
        for shard, shard_runs in runs.items()
        for a, b, c in zip(shard_runs, shard_runs[1:], shard_runs[2:], strict=False)
        if a[0] == c[0] != b[0] and c[1] - a[2] < TAKE
    ]
    moves = sum(len(r) - 1 for r in runs.values())
    result.note(f"{moves} shard moves between workers; shards read by two at once: {len(overlaps)}")
    if overlaps:
        result.problem(f"shards delivered by two workers at once: {sorted(set(overlaps))}")


def _check_failover(
    result: ScaleOut, deliveries: list[dict[str, Any]], held: set[str], killed: float
) -> None:
    """Each of the killed worker's shards: delivered again by another worker within the
    bound (wall-clock times in the logs: ``killed`` is monotonic, so compare gaps)."""
    bound = FAILOVER + 2 * TAKE + OPEN_SHARD
    kill_wall = time.time() - (time.monotonic() - killed)
    worst = 0.0
    for shard in held:
        after = [
            e["t"] for e in deliveries if e["s"] == shard and e["w"] != "w4" and e["t"] > kill_wall
        ]
        if not after:
            result.problem(f"{shard} (w4's) never read again after the SIGKILL")
            continue
        worst = max(worst, min(after) - kill_wall)
    result.note(
        f"w4's {len(held)} shards read again at most {worst:.1f} s after SIGKILL "
        f"(bound: failover {FAILOVER:g} + 2 x take {TAKE:g} + {OPEN_SHARD:g} to open a shard)"
    )
    if worst > bound:
        result.bound(f"w4's shards read again after {worst:.1f} s (bound {bound:g} s)")
