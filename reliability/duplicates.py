"""Duplicates at a reader that reads by record id, and what a dedup window would leave of them.

Two scenarios write records with ids (docs/effectively-once.md) into a kinesis-mock stream that
splits meanwhile; then a reader reads the stream as this library's consumer does (deaggregated,
an aggregate with a sub-record outside its shard's hash range dropped whole, parents before
children) and counts, by record id:

- **lost**: records written (the producer's successes; the Faust pipeline's input records)
  never read; must be 0;
- **duplicates**: the extra copies of an id, what a reader without dedup sees;
- **left after a window**: the copies a :class:`~kinesis_core.consumer.dedup.DedupWindow` of
  the documented bounds (the defaults) would not drop, run offline over each shard's records in
  order, a child shard starting with its parents' final windows (``DedupWindow.inherit``), as
  the consumer is to do once it deduplicates (issue 38, part 2);
- **left after a window that ignores lineage**: the same, each shard starting with an empty
  window: the copies only the parents' windows catch;
- **records read under more than one id**: copies no window can catch (their content is the
  same, their ids differ).

(a) ``producer``: a Producer with ``record_ids=True`` behind a fault proxy that loses the answer
of 10% of the PutRecords calls after the service wrote their records (``lost_answer``), so the
producer writes them again under the same ids; a shard splits when half the records are in.
Run again with every answer lost from a moment before the split until it is done: the retries
of those land in the children, copies of records in the parent that only the inherited windows
catch.
(b) ``faust``: a Faust worker (``_faust_pipeline``: KinesisChannel -> agent -> KinesisSink with
``record_ids=True``) SIGKILLed twice while its input stream splits; the outputs it wrote again
after each kill (the inputs it processed after its last checkpoint) carry the ids derived from
their inputs. Its output's partition key is the record's number, so a copy goes to the shard of
its first write: a window per shard (and its lineage) can only catch a copy in that shard's
lineage, which random partition keys (the sink's default) would not give.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinesis_core.aggregation import deaggregate
from kinesis_core.consumer.dedup import DedupWindow
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig, FaultKind
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import BlockingProducer, Producer, ProducerConfig, RecordResult
from kinesis_core.records import KinesisRecord
from reliability._common import MakeStream, payload, record_id, shard_position, via
from reliability.result import SuiteResult

NAME = "duplicates"
LOST_ANSWERS = 0.10
"""Share of PutRecords calls whose answer the proxy loses after the write (scenario a)."""
WORKERS = 40
"""Coroutines putting records at once (scenario a)."""
SPLIT_LEAD = 0.3
"""Seconds the proxy loses ``lost_during_split`` of the answers before the split starts."""
REPO = Path(__file__).resolve().parents[1]


@dataclass
class ReadById:
    """What a reader that reads by record id saw of a stream, and what a window would drop."""

    records: list[KinesisRecord] = field(default_factory=list)
    """Every user record read, shard by shard, parents before children."""
    copies: Counter[str] = field(default_factory=Counter)
    """Times each id was read."""
    without_id: int = 0
    caught: int = 0
    """Copies the offline window would drop."""
    caught_without_lineage: int = 0
    """Copies a window that starts empty in every shard (no inheritance) would drop."""
    window_bytes: int = 0
    """The largest serialised window of a shard at its end."""

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.copies.values())

    @property
    def left(self) -> int:
        """Duplicates a window of the documented bounds would still deliver."""
        return self.duplicates - self.caught

    def numbers(self) -> set[int]:
        """The record numbers (payloads' prefixes) read."""
        return {record_id(r.data) for r in self.records}

    def numbers_under_several_ids(self) -> int:
        """Records whose copies carry different ids: no window can catch those."""
        ids: dict[int, set[str | None]] = defaultdict(set)
        for r in self.records:
            ids[record_id(r.data)].add(r.record_id)
        return sum(1 for found in ids.values() if len(found) > 1)


def lineage_order(shards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``shards`` (ListShards entries) with every shard after its parents."""
    listed = {s["ShardId"] for s in shards}
    done: set[str] = set()
    ordered: list[dict[str, Any]] = []
    pending = sorted(shards, key=lambda s: str(s["ShardId"]))
    while pending:
        ready = [s for s in pending if not (_parents(s) & listed) - done]
        if not ready:  # a cycle cannot happen in Kinesis; keep going rather than hang
            ready = pending[:1]
        for shard in ready:
            ordered.append(shard)
            done.add(shard["ShardId"])
        pending = [s for s in pending if s["ShardId"] not in done]
    return ordered


def _parents(shard: dict[str, Any]) -> set[str]:
    return {p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p}


def read_by_id(stream: LocalStream) -> ReadById:
    """Read ``stream`` as the consumer does and count its ids, with the offline window."""
    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for raw in stream.records():
        by_shard[raw["ShardId"]].append(raw)
    out = ReadById()
    windows: dict[str, DedupWindow] = {}
    for shard in lineage_order(stream.shards()):
        shard_id = shard["ShardId"]
        hash_range = (
            int(shard["HashKeyRange"]["StartingHashKey"]),
            int(shard["HashKeyRange"]["EndingHashKey"]),
        )
        parents = [windows[p] for p in sorted(_parents(shard)) if p in windows]
        window = DedupWindow.inherit(parents) if parents else DedupWindow()
        alone = DedupWindow()
        raws = sorted(by_shard.get(shard_id, []), key=lambda r: int(r["SequenceNumber"]))
        for record in deaggregate(raws, shard_id, hash_range):
            out.records.append(record)
            if record.record_id is None:
                out.without_id += 1
                continue
            out.copies[record.record_id] += 1
            arrival = record.approximate_arrival_seconds or 0.0
            if window.seen(record.record_id, arrival):
                out.caught += 1
            if alone.seen(record.record_id, arrival):
                out.caught_without_lineage += 1
        windows[shard_id] = window
        out.window_bytes = max(out.window_bytes, len(window.dumps().encode()))
    return out


@dataclass
class Scenario(SuiteResult):
    """The figures of one scenario (``suite`` its name), and what its reader saw."""

    read: ReadById = field(default_factory=ReadById)

    @property
    def duplicates(self) -> int:
        return self.read.duplicates

    @property
    def left(self) -> int:
        return self.read.left

    @property
    def left_without_lineage(self) -> int:
        """Duplicates a window that ignores lineage would still deliver."""
        return self.duplicates - self.read.caught_without_lineage

    def summary(self) -> str:
        window = DedupWindow()
        several = self.read.numbers_under_several_ids()
        return (
            f"{self.suite}: {self.attempted:,} records, lost {self.lost}; duplicates without "
            f"dedup: {self.duplicates}; left after a window: {self.left}, after a window that "
            f"ignores lineage: {self.left_without_lineage} (max_age "
            f"{window.max_age:g} s, max_ids {window.max_ids:,}, max_bytes {window.max_bytes:,}; "
            f"largest window at a shard's end {self.read.window_bytes:,} bytes); records read "
            f"under more than one id: {several}; read without an id: {self.read.without_id}"
        )


def _reconcile_read(scenario: Scenario, expected: set[int]) -> None:
    read = scenario.read
    numbers = read.numbers()
    missing = expected - numbers
    scenario.lost += len(missing)
    if missing:
        scenario.problems.append(
            f"{scenario.suite}: {len(missing)} records never read, e.g. {sorted(missing)[:5]}"
        )
    if read.without_id:
        scenario.problems.append(f"{scenario.suite}: {read.without_id} records read without id")


# (a) the producer, answers lost after the write, a split in the middle


async def _put_with_split(
    proxy: FaultProxy, stream: LocalStream, count: int, lost_during_split: float
) -> tuple[list[RecordResult], list[str]]:
    """``count`` records, one ``put`` each, by WORKERS coroutines through ``proxy``; once half
    of them are in, a shard splits (directly on the emulator, not through the proxy), while
    the proxy loses ``lost_during_split`` of the PutRecords answers."""
    client_config = via(stream.client_config, proxy.endpoint_url)
    rates = proxy.plan.config
    results: list[RecordResult | None] = [None] * count
    half = asyncio.Event()
    finished = 0
    config = ProducerConfig(
        record_ids=True,
        aggregation_max_size=1024,
        collection_max_count=5,
        record_max_buffered_time=0.02,
        request_timeout=2.0,
    )
    async with Producer(stream.name, client_config=client_config, producer_config=config) as p:
        todo = iter(range(count))

        async def worker() -> None:
            nonlocal finished
            for i in todo:
                results[i] = await p.put(payload(i, 60), f"key-{i}")
                finished += 1
                if finished >= count // 2:
                    half.set()
                await asyncio.sleep(0.005)

        async def split() -> list[str]:
            await half.wait()
            shard_id = stream.shards(open_only=True)[0]["ShardId"]
            proxy.configure(FaultConfig.from_rates(lost_answer=lost_during_split))
            try:
                # The loss starts a moment before the split: writes lost in the parent are
                # retried once it has split, into its children.
                await asyncio.sleep(SPLIT_LEAD)
                return await asyncio.to_thread(stream.split, shard_id)
            finally:
                proxy.configure(rates)

        splitting = asyncio.ensure_future(split())
        await asyncio.gather(*(worker() for _ in range(WORKERS)))
        children = await splitting
    return [r for r in results if r is not None], children


def producer_scenario(
    make_stream: MakeStream, *, records: int, seed: int, lost_during_split: float = LOST_ANSWERS
) -> Scenario:
    """(a); with ``lost_during_split`` above LOST_ANSWERS, the answers lost while the shard
    splits are retried into its children: the copies that only lineage catches."""
    name = f"(a) producer, {LOST_ANSWERS:.0%} of PutRecords answers lost, a split"
    if lost_during_split != LOST_ANSWERS:
        name += f" while {lost_during_split:.0%} are lost"
    scenario = Scenario(name)
    stream = make_stream(2)
    try:
        config = FaultConfig.from_rates(lost_answer=LOST_ANSWERS)
        with FaultProxy(stream.endpoint_url, config, seed=seed) as proxy:
            results, children = asyncio.run(
                _put_with_split(proxy, stream, records, lost_during_split)
            )
            stats = proxy.stats()
        scenario.faults = stats.total(FaultKind.LOST_ANSWER)
        scenario.read = read_by_id(stream)
    finally:
        stream.close()
    at = {shard_position(r): r.data for r in scenario.read.records}
    succeeded: set[int] = set()
    for i, result in enumerate(results):
        scenario.attempted += 1
        if result.success:
            where = (result.shard_id, *(result.position or ()))
            if at.get(where) != payload(i, 60):
                scenario.problems.append(f"record {i}: not found where its result says {where}")
            succeeded.add(i)
        elif result.error_code:
            scenario.failed += 1
    _reconcile_read(scenario, succeeded)
    scenario.delivered = len(succeeded & scenario.read.numbers())
    scenario.notes.append(
        f"(a) {scenario.faults} PutRecords answers lost of {stats.requests.get('PutRecords', 0)}"
        f" calls; split into {', '.join(children)}"
    )
    return scenario


# (b) a Faust pipeline, SIGKILLed twice while its input splits


def _spawn_pipeline(
    source: LocalStream, target: LocalStream, datadir: Path, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path]),
        "RELIABILITY_ENDPOINT": source.endpoint_url,
        "RELIABILITY_STREAM": source.name,
        "RELIABILITY_OUTPUT": target.name,
        "RELIABILITY_DATADIR": str(datadir),
        "RELIABILITY_LOG": str(log),
    }
    command = ["faust", "-A", "reliability._faust_pipeline", "worker", "--without-web"]
    return subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
        [sys.executable, "-m", *command],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _processed(logs: list[Path]) -> list[int]:
    """Record numbers the workers processed, one per line written whole."""
    numbers = []
    for log in logs:
        if log.exists():
            numbers += [int(line) for line in log.read_text().splitlines() if len(line) == 9]
    return numbers


def _wait(
    scenario: Scenario,
    child: subprocess.Popen[bytes],
    done: Any,
    timeout: float,
    what: str,
) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if child.poll() is not None:
            _, err = child.communicate()
            scenario.problems.append(
                f"the worker exited by itself (code {child.returncode}) waiting for {what}: "
                f"{err.decode(errors='replace')[-500:]}"
            )
            return False
        if time.monotonic() > deadline:
            scenario.problems.append(f"no {what} within {timeout:g} s")
            return False
        time.sleep(0.05)
    return True


def _produce(stream: LocalStream, numbers: range, rng: random.Random) -> set[int]:
    batch = [(payload(i, rng.randint(20, 200)), f"k{rng.randrange(300)}") for i in numbers]
    config = ProducerConfig(aggregation_max_size=4_096)
    with BlockingProducer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as p:
        written = p.put_many(batch)
    return {record_id(d) for (d, _), w in zip(batch, written, strict=True) if w.success}


def faust_scenario(
    make_stream: MakeStream, workdir: Path, *, records: int, seed: int, timeout: float = 120.0
) -> Scenario:
    scenario = Scenario("(b) Faust pipeline, 2 SIGKILLs, its input split")
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    source, target = make_stream(2), make_stream(2)
    datadir = workdir / "faust-data"
    datadir.mkdir()
    logs = [workdir / f"pipeline-{n}.log" for n in range(3)]
    first, second = 2 * records // 5, 7 * records // 10
    try:
        produced = _produce(source, range(first), rng)
        # 1: killed a fifth of the way in, at a random moment.
        child = _spawn_pipeline(source, target, datadir, logs[0])
        if _wait(scenario, child, lambda: len(_processed(logs)) >= records // 5, timeout, "work"):
            time.sleep(rng.uniform(0.0, 0.5))
        child.kill()
        child.communicate()
        # 2: more records come, the input splits under the worker and gets the rest; killed
        # again.
        child = _spawn_pipeline(source, target, datadir, logs[1])
        produced |= _produce(source, range(first, second), rng)
        _wait(scenario, child, lambda: len(_processed(logs[1:])) > 0, timeout, "restart")
        children = source.split(source.shards(open_only=True)[0]["ShardId"])
        produced |= _produce(source, range(second, records), rng)
        if _wait(
            scenario, child, lambda: len(set(_processed(logs))) >= 4 * records // 5, timeout, "work"
        ):
            time.sleep(rng.uniform(0.0, 0.5))
        child.kill()
        child.communicate()
        # 3: runs until every input's output is in the output stream, then stops (SIGTERM).
        child = _spawn_pipeline(source, target, datadir, logs[2])
        ready = Path(f"{logs[2]}.ready")
        _wait(
            scenario,
            child,
            lambda: ready.exists() and produced <= read_by_id(target).numbers(),
            timeout,
            "output of every input",
        )
        child.terminate()
        try:
            _, err = child.communicate(timeout=timeout)
            if child.returncode != 0:
                scenario.problems.append(
                    f"the last worker exited with code {child.returncode}: "
                    f"{err.decode(errors='replace')[-500:]}"
                )
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            scenario.problems.append("the last worker did not stop on SIGTERM")
        scenario.read = read_by_id(target)
    finally:
        source.close()
        target.close()
    scenario.faults = 2
    scenario.attempted = records
    scenario.failed = records - len(produced)
    _reconcile_read(scenario, produced)
    scenario.delivered = len(produced & scenario.read.numbers())
    processed = _processed(logs)
    scenario.notes.append(
        f"(b) the input split into {', '.join(children)}; the workers processed "
        f"{len(processed) - len(set(processed))} inputs again after the kills (the "
        "at-least-once part, which the outputs' derived ids are for)"
    )
    return scenario


def duplicates(
    make_stream: MakeStream,
    workdir: Path,
    *,
    producer_records: int = 3_000,
    faust_records: int = 3_000,
    seed: int = 7,
) -> SuiteResult:
    """The ``duplicates`` row: the scenarios, their figures in the notes. (a) runs twice: as it
    is, then with every answer lost while the shard splits (half the records)."""
    result = SuiteResult(NAME)
    started = time.monotonic()
    for scenario in (
        producer_scenario(make_stream, records=producer_records, seed=seed),
        producer_scenario(
            make_stream, records=producer_records // 2, seed=seed, lost_during_split=1.0
        ),
        faust_scenario(make_stream, workdir, records=faust_records, seed=seed),
    ):
        result.faults += scenario.faults
        result.attempted += scenario.attempted
        result.delivered += scenario.delivered
        result.failed += scenario.failed
        result.lost += scenario.lost
        result.duplicated += scenario.duplicates
        result.note(scenario.summary())
        for note in scenario.notes:
            result.note(note)
        for problem in scenario.problems:
            result.problem(problem)
    result.seconds = time.monotonic() - started
    return result
