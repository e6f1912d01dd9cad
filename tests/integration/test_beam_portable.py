"""ReadFromKinesis and WriteToKinesis on the portable runner, with SDK workers in other processes.

The path Flink and Dataflow take, on one machine (``reliability._portable``): the pipeline goes
to a job service over the Job API (``local_job_service_main``, one process for the session),
which runs it by asking a worker pool (``worker_pool_main``, one process for the session) to
start SDK harnesses (``--environment_type=EXTERNAL``): separate Python processes that get the
pickled DoFns, the restriction coder, self-checkpoints, splits and bundle finalization over the
Fn API (gRPC on 127.0.0.1). Workers get their credentials from their environment, as on a real
cluster.

- Reading while a shard splits and a child merges with the other initial shard, bounded and
  with ``--streaming``: nothing lost, nothing twice, per key in order.
- Writing, bounded and streaming: every element arrives.
- An SDK worker SIGKILLed mid-bundle, while reading and while writing. The job service (the
  FnApiRunner behind ``--job_endpoint=embed`` too) retries no bundle and does not notice that an
  EXTERNAL worker died (it watches Docker workers only): the job hangs. The test cancels it
  and runs the job again, which is what a production runner's retry amounts to (Flink restarts
  from its last checkpoint, Dataflow re-runs the work item). The read resumes from the positions
  its bundle finalizers stored, the write writes again: nothing lost, per key in order.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest

from beam_kinesis import ReadFromKinesis, WriteToKinesis
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, ConsumerConfig, EnhancedFanOut
from kinesis_core.local import LocalStream
from kinesis_core.shards.hashing import hash_key
from reliability._portable import Portable, Service, run, run_until_a_worker_is_killed
from tests.helpers.beam import KEYS, append_lines, put_round, read_back, read_lines

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def portable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portable]:
    # The workers import this module: its DoFns are pickled by reference.
    services = Portable(tmp_path_factory.mktemp("portable"), path=[HERE])
    try:
        yield services
    finally:
        services.stop()


def check_per_key_order(lines: list[tuple[str, int, str]]) -> None:
    last: dict[str, int] = {}
    for key, n, _ in lines:
        assert n > last.get(key, -1), f"{key}: {n} came after {last[key]}"
        last[key] = n


# -- reading --------------------------------------------------------------------------------------

ROUNDS = 20


@pytest.mark.parametrize(
    ("mode", "transport"),
    [("bounded", "polling"), ("streaming", "polling"), ("streaming", "fan-out")],
)
def test_read_while_a_shard_splits_and_merges(
    portable: Portable, kinesis_stream: Any, tmp_path: Path, mode: str, transport: str
) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    low, high = sorted(stream.shards(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    out = tmp_path / "records.txt"
    for n in range(3):
        put_round(stream, n)
    resharded: list[str] = []
    failure: list[BaseException] = []

    def write_while_reading() -> None:
        try:
            deadline = time.monotonic() + 120
            while not read_lines(out) and time.monotonic() < deadline:
                time.sleep(0.05)
            for n in range(3, ROUNDS):
                put_round(stream, n)
                if n == 8:
                    resharded.extend(stream.split(low["ShardId"]))
                if n == 13:
                    resharded.append(stream.merge(resharded[1], high["ShardId"]))
        except BaseException as exc:
            failure.append(exc)

    writer = threading.Thread(target=write_while_reading)
    writer.start()
    p = portable.pipeline(stream, *(["--streaming"] if mode == "streaming" else []))
    # Fan-out in the SDK workers: each registers (or reuses) the consumer and subscribes; the
    # subscriptions outlive bundles. kinesis-mock needs shard look-ups to see shards close.
    efo = EnhancedFanOut(consumer_name="portable-reader", closed_check_interval=1.0)
    _ = (
        p
        | ReadFromKinesis(
            stream.name,
            consumer_config=ConsumerConfig(enhanced_fan_out=transport == "fan-out" and efo),
            initial_position=TRIM_HORIZON,
            max_read_time=12.0 if transport == "polling" else 24.0,
            idle_interval=0.2,
            self_checkpoint_interval=0.5,
        )
        | beam.Map(append_lines(str(out)))
    )
    try:
        run(p)
    finally:
        writer.join()
    assert not failure, failure
    assert len(resharded) == 3
    got = read_lines(out)
    written = sorted((key, n) for key in KEYS for n in range(ROUNDS))
    assert sorted((key, n) for key, n, _ in got) == written  # none lost, none twice
    check_per_key_order(got)
    assert set(resharded) <= {shard_id for _, _, shard_id in got}
    boundary = int(low["HashKeyRange"]["EndingHashKey"])
    merged_keys = {key for key, _, shard_id in got if shard_id == resharded[2]}
    assert {hash_key(k) <= boundary for k in merged_keys} == {True, False}


def test_a_shard_discovery_reads_each_shard_in_its_own_restriction(
    portable: Portable, kinesis_stream: Any, tmp_path: Path
) -> None:
    """Bounded: the discovery's encoded restrictions and its own restriction cross the Fn API;
    the children found after the start wait in the workers for the SHARD_END their parents'
    finalizers stored."""
    stream: LocalStream = kinesis_stream(shards=2)
    keys = [f"key-{i}" for i in range(32)]
    out = tmp_path / "records.txt"
    put_round(stream, 0, keys)
    children: list[str] = []
    failure: list[BaseException] = []

    def write_while_reading() -> None:
        try:
            for n in range(1, 10):
                put_round(stream, n, keys)
                if n == 4:
                    children.extend(c for s in stream.shards() for c in stream.split(s["ShardId"]))
        except BaseException as exc:
            failure.append(exc)

    writer = threading.Thread(target=write_while_reading)
    writer.start()
    p = portable.pipeline(stream)
    _ = (
        p
        | ReadFromKinesis(
            stream.name,
            initial_position=TRIM_HORIZON,
            checkpoint_store=str(tmp_path / "checkpoints.sqlite3"),
            shard_discovery_interval=0.5,
            max_read_time=8.0,
            idle_interval=0.2,
            self_checkpoint_interval=0.5,
        )
        | beam.Map(append_lines(str(out)))
    )
    try:
        run(p)
    finally:
        writer.join()
    assert not failure, failure
    assert len(children) == 4
    got = read_lines(out)
    assert sorted((key, n) for key, n, _ in got) == sorted(
        (key, n) for key in keys for n in range(10)
    )  # none lost, none twice
    check_per_key_order(got)
    assert set(children) <= {shard_id for _, _, shard_id in got}


def test_read_resumes_from_finalized_positions_after_a_worker_is_killed(
    portable: Portable, kinesis_stream: Any, tmp_path: Path
) -> None:
    """Positions reach the store only from bundle finalizers; the killed bundle's never do, so
    the second job re-reads from the last finalized positions: nothing lost, per key in order
    in each job (records after those positions come again: at least once)."""
    stream: LocalStream = kinesis_stream(shards=2)
    for n in range(6):
        put_round(stream, n)
    store = str(tmp_path / "checkpoints.sqlite3")
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    stop_writing = threading.Event()

    def keep_writing() -> None:
        n = 6
        while not stop_writing.is_set() and n < 40:
            put_round(stream, n)
            n += 1
            time.sleep(0.3)
        rounds.append(n)

    def read(out: Path, jobs: Service | None = None, **bounds: Any) -> beam.Pipeline:
        p = portable.pipeline(stream, "--streaming", jobs=jobs)
        _ = (
            p
            | ReadFromKinesis(
                stream.name,
                initial_position=TRIM_HORIZON,
                checkpoint_store=store,
                application_name="killed",
                idle_interval=0.2,
                self_checkpoint_interval=0.3,
                **bounds,
            )
            | beam.Map(append_lines(str(out)))
        )
        return p

    def stored() -> dict[str, Any]:
        async def rows() -> dict[str, Any]:
            async with SQLiteCheckpointStore(store) as s:
                return {r.shard_id: r.value for r in await s.list("killed", stream.name)}

        return asyncio.run(rows()) if Path(store).exists() else {}

    rounds: list[int] = []
    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        run_until_a_worker_is_killed(
            portable,
            lambda jobs: read(first, jobs, max_read_time=120.0),
            lambda: len(read_lines(first)) > 6 * len(KEYS) and len(stored()) == 2,
        )
    finally:
        stop_writing.set()
        writer.join()
    before_second = stored()
    assert len(before_second) == 2
    run(read(second, stop_when_caught_up=True))
    got_first, got_second = read_lines(first), read_lines(second)
    check_per_key_order(got_first)
    check_per_key_order(got_second)
    written = {(key, n) for key in KEYS for n in range(rounds[0])}
    assert {(k, n) for k, n, _ in got_first + got_second} == written  # nothing lost
    assert len(got_second) < len(written)  # the second job started from stored positions


# -- writing --------------------------------------------------------------------------------------

ELEMENTS = 3000


def keyed_payload(i: int) -> tuple[str, bytes]:
    return (f"key-{i % 7}", f"{i}".encode())


@pytest.mark.parametrize("mode", ["bounded", "streaming"])
def test_write(portable: Portable, moto_stream: Any, mode: str) -> None:
    stream: LocalStream = moto_stream(shards=4)
    p = portable.pipeline(stream, *(["--streaming"] if mode == "streaming" else []))
    _ = (
        p
        | beam.Create(range(ELEMENTS))
        | beam.Map(keyed_payload)
        | WriteToKinesis(stream.name, keyed=True, on_failure="raise")
    )
    run(p)
    expected = {str(i).encode() for i in range(ELEMENTS)}
    got = read_back(stream, expected)
    assert {r.data for r in got} == expected
    assert {(r.partition_key, r.data) for r in got} == {keyed_payload(i) for i in range(ELEMENTS)}


class SlowAfter(beam.DoFn):
    """Passes elements on; at element ``after`` creates ``marker``, and from there on slows
    down, so that the bundle is still running when the test kills it."""

    def __init__(self, after: int, marker: str) -> None:
        self.after = after
        self.marker = marker

    def process(self, element: int) -> Iterator[int]:
        if element == self.after:
            Path(self.marker).touch()
        if element >= self.after:
            time.sleep(0.005)
        yield element


def test_write_after_a_worker_is_killed_mid_bundle(
    portable: Portable, moto_stream: Any, tmp_path: Path
) -> None:
    """The first job dies mid-bundle after it handed 2,000 elements to the producer (two chunks,
    written); the second writes everything again. Nothing is lost; what the dead bundle wrote
    is there twice (at least once)."""
    stream: LocalStream = moto_stream(shards=4)
    marker = tmp_path / "slow"

    def pipeline(jobs: Service | None = None) -> beam.Pipeline:
        p = portable.pipeline(stream, jobs=jobs)
        _ = (
            p
            | beam.Impulse()
            | beam.FlatMap(lambda _: range(ELEMENTS))
            | beam.ParDo(SlowAfter(2100, str(marker)))
            | beam.Map(keyed_payload)
            | WriteToKinesis(stream.name, keyed=True, on_failure="raise")
        )
        return p

    def handed_off_a_second_ago() -> bool:
        """The chunks handed off before the marker are sent by now (0.1 s buffering)."""
        return marker.exists() and time.time() - marker.stat().st_mtime > 1.0

    run_until_a_worker_is_killed(portable, pipeline, handed_off_a_second_ago)
    written_before = {str(i).encode() for i in range(2000)}
    assert {r.data for r in read_back(stream, written_before)} >= written_before
    run(pipeline())
    expected = {str(i).encode() for i in range(ELEMENTS)}
    got = read_back(stream, expected)
    assert {r.data for r in got} == expected
    # Per key, in the stream's order: what the first job wrote, in element order, then all of
    # the key's elements again, in element order.
    per_key: dict[str, list[int]] = {}
    for record in got:
        per_key.setdefault(record.partition_key, []).append(int(record.data))
    for key, values in per_key.items():
        restart = next(i for i in range(1, len(values)) if values[i] <= values[i - 1])
        assert values[:restart] == sorted(values[:restart]), key
        assert values[restart:] == [i for i in range(ELEMENTS) if keyed_payload(i)[0] == key]
