"""Duplicates at a deduplicating reader, and those a plain reader sees.

Two scenarios write records with ids (docs/effectively-once.md) into a kinesis-mock stream that
splits meanwhile; then the stream is read twice:

- **plain**: every user record in it, as the consumer reads it (deaggregated, an aggregate
  with a sub-record outside its shard's hash range dropped whole), read by record id: its
  **duplicates** are the extra copies of an id, what a reader without dedup sees (more than 0,
  or the faults duplicated nothing); also counted, offline: the copies a
  :class:`~kinesis_core.consumer.dedup.DedupWindow` that starts empty in every shard (ignoring
  lineage) would leave, the copies only the parents' windows catch; and the records read under
  more than one id (copies no window can catch);
- **deduplicating**: the core ``Consumer`` with ``ConsumerConfig(deduplicate=True)``, its
  checkpoints and windows in a SQLite file, closed once it delivered half the records (in (b):
  the first worker's outputs, so that it stops where the second one's copies begin in a shard)
  and opened again on the same file (:func:`reliability._reader.read_stream`). At that reader
  **lost** (records written, never delivered) must be 0 and duplicates 0, by record id and by
  the payload's number; counted: the copies it dropped, and those the second session dropped
  by the windows the first one stored.

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

from kinesis_core.consumer.dedup import DedupWindow
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig, FaultKind
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import BlockingProducer, Producer, ProducerConfig, RecordResult
from kinesis_core.records import KinesisRecord
from reliability._common import MakeStream, kcl_view, payload, record_id, shard_position, via
from reliability._reader import Read, read_stream
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
    """What a plain reader that reads by record id saw of a stream."""

    records: list[KinesisRecord] = field(default_factory=list)
    """Every user record read, shard by shard."""
    copies: Counter[str] = field(default_factory=Counter)
    """Times each id was read."""
    without_id: int = 0
    caught_without_lineage: int = 0
    """Copies a window that starts empty in every shard (no inheritance) would drop."""

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.copies.values())

    def numbers_under_several_ids(self) -> int:
        """Records whose copies carry different ids: no window can catch those."""
        ids: dict[int, set[str | None]] = defaultdict(set)
        for r in self.records:
            ids[record_id(r.data)].add(r.record_id)
        return sum(1 for found in ids.values() if len(found) > 1)


def read_by_id(stream: LocalStream) -> ReadById:
    """Read ``stream`` as the consumer does and count its ids, with a window per shard that
    ignores lineage, run offline."""
    out = ReadById(records=kcl_view(stream))
    by_shard: dict[str, list[KinesisRecord]] = defaultdict(list)
    for record in out.records:
        by_shard[record.shard_id].append(record)
    for records in by_shard.values():
        alone = DedupWindow()
        for record in sorted(records, key=lambda r: r.position):
            if record.record_id is None:
                out.without_id += 1
                continue
            out.copies[record.record_id] += 1
            if alone.seen(record.record_id, record.approximate_arrival_seconds or 0.0):
                out.caught_without_lineage += 1
    return out


@dataclass
class Scenario(SuiteResult):
    """The figures of one scenario (``suite`` its name), and what its readers saw."""

    read: ReadById = field(default_factory=ReadById)
    """The plain read."""
    deduplicated: Read = field(default_factory=Read)
    """The deduplicating consumer's read."""

    @property
    def duplicates(self) -> int:
        """Duplicates a reader without dedup sees."""
        return self.read.duplicates

    @property
    def left_without_lineage(self) -> int:
        """Duplicates a window that ignores lineage would still deliver."""
        return self.duplicates - self.read.caught_without_lineage

    @property
    def caught_across_restart(self) -> int:
        """Copies the deduplicating reader's second session dropped by the stored windows."""
        return self.deduplicated.caught_across_restart(self.read.records)

    def summary(self) -> str:
        dedup = self.deduplicated
        return (
            f"{self.suite}: {self.attempted:,} records; duplicates without dedup: "
            f"{self.duplicates}; at a deduplicating consumer restarted after "
            f"{dedup.before_restart or 0:,} records: lost {self.lost}, duplicates "
            f"{dedup.duplicates} by record id and {dedup.duplicate_numbers} by number, "
            f"{dedup.dropped} dropped, {self.caught_across_restart} of them by the windows "
            f"stored before the restart (largest stored window {dedup.window_bytes:,} bytes); "
            f"left by a window that ignores lineage: {self.left_without_lineage}; records read "
            f"under more than one id: {self.read.numbers_under_several_ids()}; read without an "
            f"id: {self.read.without_id}"
        )


def _read_back(
    scenario: Scenario,
    stream: LocalStream,
    workdir: Path,
    expected: set[int],
    restart_after: set[int] | None = None,
) -> None:
    """Both reads of ``stream``, the deduplicating one restarted once it delivered every number
    of ``restart_after`` (by default: half of ``expected`` delivered), and their checks."""
    scenario.read = read_by_id(stream)
    dedup = scenario.deduplicated = read_stream(
        stream,
        expected,
        store=workdir / f"{stream.name}.sqlite3",
        restart_after=len(expected) // 2 if restart_after is None else restart_after,
    )
    missing = expected - dedup.numbers()
    scenario.lost += len(missing)
    scenario.delivered = len(expected) - len(missing)
    if missing:
        scenario.problems.append(
            f"{scenario.suite}: {len(missing)} records never delivered by the deduplicating "
            f"consumer, e.g. {sorted(missing)[:5]}"
        )
    if dedup.timed_out:
        scenario.problems.append(
            f"{scenario.suite}: the deduplicating consumer did not deliver every record in time"
        )
    if dedup.duplicates or dedup.duplicate_numbers:
        scenario.problems.append(
            f"{scenario.suite}: the deduplicating consumer delivered {dedup.duplicates} "
            f"duplicates by record id, {dedup.duplicate_numbers} by number"
        )
    if scenario.read.without_id:
        scenario.problems.append(
            f"{scenario.suite}: {scenario.read.without_id} records read without id"
        )


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
    make_stream: MakeStream,
    workdir: Path,
    *,
    records: int,
    seed: int,
    lost_during_split: float = LOST_ANSWERS,
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
        succeeded = {i for i, result in enumerate(results) if result.success}
        _read_back(scenario, stream, workdir, succeeded)
    finally:
        stream.close()
    at = {shard_position(r): r.data for r in scenario.read.records}
    for i, result in enumerate(results):
        scenario.attempted += 1
        if result.success:
            where = (result.shard_id, *(result.position or ()))
            if at.get(where) != payload(i, 60):
                scenario.problems.append(f"record {i}: not found where its result says {where}")
        elif result.error_code:
            scenario.failed += 1
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
        first_outputs = {record_id(r.data) for r in kcl_view(target)}
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
            lambda: ready.exists() and produced <= {record_id(r.data) for r in kcl_view(target)},
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
        # The deduplicating reader restarts once it delivered the first worker's outputs: in
        # the shard it finishes last, where the second worker's copies begin.
        _read_back(scenario, target, workdir, produced, restart_after=first_outputs)
    finally:
        source.close()
        target.close()
    scenario.faults = 2
    scenario.attempted = records
    scenario.failed = records - len(produced)
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
        producer_scenario(make_stream, workdir, records=producer_records, seed=seed),
        producer_scenario(
            make_stream, workdir, records=producer_records // 2, seed=seed, lost_during_split=1.0
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
