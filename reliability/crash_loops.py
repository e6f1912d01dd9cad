"""Crash loops: a reader process killed with SIGKILL at seeded random points, round after round.

Each round writes new records to a kinesis-mock stream, starts the reader (the core
Consumer, polling or by enhanced fan-out, or a Beam pipeline with ReadFromKinesis:
``_children``; a Faust worker with a KinesisChannel: ``_faust_worker``) on the same SQLite
checkpoint file, waits until it has
processed a seeded random number of records, waits a seeded random moment more and kills it
with SIGKILL. A last round runs to the end.

Checks: records lost (written, never processed by any round) must be 0; duplicates are
counted, and each one must be a record above the checkpoint stored when the process died (what
was checkpointed is never processed again), so duplicates are bounded by the window of records
processed but not yet checkpointed.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kinesis_core.checkpoint import CheckpointValue, SQLiteCheckpointStore
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import BlockingProducer, ProducerConfig
from reliability._children import APPLICATION
from reliability._common import MakeStream, payload, record_id
from reliability.result import SuiteResult

REPO = Path(__file__).resolve().parents[1]
IDLE = 4.0
"""Seconds without a record after which the last round's reader exits."""

KILL_DELAY = 2.0
"""Most seconds between the target number of processed records and the kill."""

Line = tuple[str, tuple[int, int], int]
"""(shard, position, record id) of one processed record."""


def _spawn(
    kind: str, stream: LocalStream, db: Path, out: Path, idle: float
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    if kind == "faust":
        command = ["faust", "-A", "reliability._faust_worker", "worker", "--without-web"]
        env.update(
            RELIABILITY_ENDPOINT=stream.endpoint_url,
            RELIABILITY_STREAM=stream.name,
            RELIABILITY_DATADIR=str(db.parent),
            RELIABILITY_LOG=str(out),
        )
    else:
        args = [stream.endpoint_url, stream.name, str(db), str(out), f"--idle={idle}"]
        command = ["reliability._children", kind, *args]
    return subprocess.Popen(  # noqa: S603 - our own modules, fixed arguments
        [sys.executable, "-m", *command],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _read_log(path: Path) -> list[Line]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        parts = text.split(" ")
        if len(parts) == 4:  # a line cut by the kill is not a processed record
            shard_id, seq, sub, n = parts
            lines.append((shard_id, (int(seq), int(sub)), int(n)))
    return lines


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _checkpoints(db: Path, stream: str) -> dict[str, CheckpointValue]:
    async def read() -> dict[str, CheckpointValue]:
        async with SQLiteCheckpointStore(db) as store:
            return {row.shard_id: row.value for row in await store.list(APPLICATION, stream)}

    return asyncio.run(read())


def crash_loop(
    kind: str,
    make_stream: MakeStream,
    workdir: Path,
    *,
    rounds: int = 20,
    per_round: int = 200,
    seed: int = 3,
    shards: int = 2,
    round_timeout: float = 60.0,
) -> SuiteResult:
    """``kind``: ``consumer``, ``fan-out`` (the consumer by enhanced fan-out), ``beam``
    (``_children``) or ``faust`` (``_faust_worker``)."""
    result = SuiteResult(f"crash loop: {kind}", faults=rounds)
    started = time.monotonic()
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    stream = make_stream(shards)
    db = workdir / f"{kind}-data" / _checkpoint_file(kind)
    db.parent.mkdir()
    produced: set[int] = set()
    rounds_lines: list[list[Line]] = []
    at_kill: list[dict[str, CheckpointValue]] = []
    config = ProducerConfig(aggregation_max_size=4_096)
    with BlockingProducer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as p:
        for r in range(rounds + 1):
            first = r * per_round
            batch = [
                (payload(i, rng.randint(20, 200)), f"k{rng.randrange(300)}")
                for i in range(first, first + per_round)
            ]
            written = p.put_many(batch)
            produced |= {
                record_id(d) for (d, _), w in zip(batch, written, strict=True) if w.success
            }
            log = workdir / f"{kind}-round-{r}.log"
            final = r == rounds
            child = _spawn(kind, stream, db, log, IDLE if final else 0.0)
            if final and kind == "faust":  # a worker runs until told to stop
                done = {n for lines in rounds_lines for _, _, n in lines}
                _stop_when_done(result, child, log, produced - done, round_timeout)
            elif final:
                _finish(result, child, round_timeout)
            else:
                _kill_at_random_point(result, r, child, log, rng, per_round, round_timeout)
                at_kill.append(_checkpoints(db, stream.name))
            rounds_lines.append(_read_log(log))
    _reconcile(result, produced, rounds_lines, at_kill)
    result.seconds = time.monotonic() - started
    return result


def _kill_at_random_point(
    result: SuiteResult,
    r: int,
    child: subprocess.Popen[bytes],
    log: Path,
    rng: random.Random,
    per_round: int,
    timeout: float,
) -> None:
    target = rng.randint(1, per_round)
    deadline = time.monotonic() + timeout
    while _count_lines(log) < target and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    # Then a random moment more: before, during or after the next checkpoint write.
    time.sleep(rng.uniform(0.0, KILL_DELAY))
    if child.poll() is not None:
        _, err = child.communicate()
        result.problem(
            f"round {r}: the reader exited by itself (code {child.returncode}): "
            f"{err.decode(errors='replace')[-500:]}"
        )
        return
    if _count_lines(log) == 0:
        result.problem(f"round {r}: the reader processed nothing within {timeout:g} s")
    child.kill()
    child.communicate()


def _checkpoint_file(kind: str) -> str:
    if kind == "faust":
        from faust_kinesis.reader import CHECKPOINT_FILE

        return CHECKPOINT_FILE
    return "checkpoints.sqlite3"


def _stop_when_done(
    result: SuiteResult,
    child: subprocess.Popen[bytes],
    log: Path,
    missing: set[int],
    timeout: float,
) -> None:
    """Wait until the worker processed every record no earlier round did, then SIGTERM it: it
    must shut down cleanly."""
    deadline = time.monotonic() + timeout
    while missing - {n for _, _, n in _read_log(log)} and time.monotonic() < deadline:
        if child.poll() is not None:
            break
        time.sleep(0.1)
    child.terminate()
    _finish(result, child, timeout)


def _finish(result: SuiteResult, child: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        _, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        result.problem(f"the last round did not finish within {timeout:g} s")
        return
    if child.returncode != 0:
        result.problem(
            f"the last round exited with code {child.returncode}: "
            f"{err.decode(errors='replace')[-800:]}"
        )


def _reconcile(
    result: SuiteResult,
    produced: set[int],
    rounds_lines: list[list[Line]],
    at_kill: list[dict[str, CheckpointValue]],
) -> None:
    seen: set[tuple[str, tuple[int, int]]] = set()
    processed: set[int] = set()
    again_after_kill: Counter[int] = Counter()
    checkpointed_again = 0
    for r, lines in enumerate(rounds_lines):
        stored = at_kill[r - 1] if r else {}
        for shard_id, position, n in lines:
            key = (shard_id, position)
            if key in seen:
                result.duplicated += 1
                again_after_kill[r] += 1
                value = stored.get(shard_id)
                if isinstance(value, tuple) and position <= value:
                    checkpointed_again += 1
            seen.add(key)
            processed.add(n)
    result.attempted = len(produced)
    result.delivered = len(produced & processed)
    result.lost = len(produced - processed)
    if checkpointed_again:
        result.problem(f"{checkpointed_again} records processed again although checkpointed")
    kills = len(at_kill)
    moved = sum(1 for r, stored in enumerate(at_kill) if stored != (at_kill[r - 1] if r else {}))
    result.note(f"the stored checkpoints had moved at {moved} of {kills} kills")
    result.note(
        f"{kills} kills; duplicates per restart: max {max(again_after_kill.values(), default=0)}"
        f", mean {result.duplicated / max(kills, 1):.1f}; every duplicate was above the "
        "checkpoint stored when the process died"
        if not checkpointed_again
        else f"{kills} kills"
    )
