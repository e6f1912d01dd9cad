"""ReadFromKinesis on real runners against kinesis-mock.

- A stream is split and then merged while it is read, the merged shard straddling the two
  initial restrictions; on the FnApiRunner in memory, the FnApiRunner with two worker processes,
  and the streaming DirectRunner: no record lost, none duplicated, per partition key in the
  order written. Records go in as KPL aggregates (kinesis-mock is slow per record).
- Bounded modes and checkpoint stores: max_records is exact, positions reach the store from the
  bundle finalizer, and a new job starts where the last one stopped.
- A windowed count over a stream with an idle shard: the counts are right and the idle
  shard's watermark moved up to about now - idle_threshold.

The runners are passed as objects, or as "DirectRunner" with a Prism location that does not
exist: the DirectRunner otherwise tries to download Prism, and falls back to the FnApiRunner
when it cannot start it, as here. Credentials come from the environment, as on a worker.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.transforms.window import FixedWindows

from beam_kinesis import METRICS_NAMESPACE
from beam_kinesis.read import ReadFromKinesis
from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.checkpoint import SHARD_END, SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, ConsumerConfig, EnhancedFanOut
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from kinesis_core.shards.hashing import hash_key
from tests.helpers.beam import KEYS, append_lines, pipeline, put_round, read_lines

pytestmark = pytest.mark.integration

ROUNDS = 24
BEFORE = 4
"""Rounds written before the pipeline starts (so the read has something to show at once)."""
READ_TIME = 12.0


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


@pytest.mark.parametrize(
    ("mode", "transport"),
    [
        ("in_memory", "polling"),
        ("multi_processing", "polling"),
        ("streaming", "polling"),
        ("in_memory", "fan-out"),
    ],
)
def test_split_and_merge_during_the_read(
    kinesis_stream: Any, tmp_path: Path, mode: str, transport: str
) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    low, high = sorted(stream.shards(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    out = tmp_path / "records.txt"
    for n in range(BEFORE):
        put_round(stream, n)
    resharded: list[str] = []
    failure: list[BaseException] = []

    def write_while_reading() -> None:
        try:
            deadline = time.monotonic() + 120
            while not read_lines(out) and time.monotonic() < deadline:
                time.sleep(0.05)
            for n in range(BEFORE, ROUNDS):
                put_round(stream, n)
                if n == 10:
                    resharded.extend(stream.split(low["ShardId"]))
                if n == 16:
                    # The upper half of the split parent merges with the other initial shard:
                    # the child straddles both initial restrictions.
                    resharded.append(stream.merge(resharded[1], high["ShardId"]))
        except BaseException as exc:
            failure.append(exc)

    writer = threading.Thread(target=write_while_reading)
    writer.start()
    p = pipeline(stream, mode)
    # kinesis-mock never ends a closed shard's subscription: fan-out readers look their shards
    # up once a second, and its events come once a second, so they get more time.
    efo = EnhancedFanOut(consumer_name="beam-reader", closed_check_interval=1.0)
    config = ConsumerConfig(enhanced_fan_out=efo if transport == "fan-out" else False)
    _ = (
        p
        | ReadFromKinesis(
            stream.name,
            consumer_config=config,
            initial_position=TRIM_HORIZON,
            max_read_time=READ_TIME if transport == "polling" else 2 * READ_TIME,
            idle_interval=0.2,
            self_checkpoint_interval=0.5,
        )
        | beam.Map(append_lines(str(out)))
    )
    result = p.run()
    result.wait_until_finish()
    writer.join()
    assert not failure, failure
    assert len(resharded) == 3
    if transport == "fan-out":
        counters = {r.key.metric.name: r.committed for r in result.metrics().query()["counters"]}
        subscriptions = "aws.kinesis.fanout.subscriptions{aws.kinesis.subscription.outcome=%s}"
        assert counters.get(subscriptions % "opened", 0) >= 3, counters
        assert counters.get("messaging.client.consumed.messages", 0) > 0, counters

    got = read_lines(out)
    written = sorted((key, n) for key in KEYS for n in range(ROUNDS))
    assert sorted((key, n) for key, n, _ in got) == written  # none lost, none twice
    last: dict[str, int] = {}
    for key, n, _ in got:
        assert n > last.get(key, -1), f"{key}: {n} came after {last[key]}"
        last[key] = n
    shards_read = {shard_id for _, _, shard_id in got}
    assert set(resharded) <= shards_read
    # The merged shard's keys on both sides of the initial boundary: two restrictions read it.
    boundary = int(low["HashKeyRange"]["EndingHashKey"])
    merged_keys = {key for key, _, shard_id in got if shard_id == resharded[2]}
    assert {hash_key(k) <= boundary for k in merged_keys} == {True, False}


def test_bounded_modes_and_resuming_from_a_checkpoint_store(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    """max_records stops exactly; the finalizer stores the positions; the next job reads the
    rest (none again), and the one after only what was written since."""
    stream: LocalStream = kinesis_stream(shards=2)
    for n in range(3):
        put_round(stream, n)  # 48 records
    store_path = str(tmp_path / "checkpoints.sqlite3")

    def run(**kw: Any) -> list[tuple[str, int, str]]:
        out = tmp_path / f"run-{time.monotonic_ns()}.txt"
        p = pipeline(stream, "in_memory")
        _ = (
            p
            | ReadFromKinesis(
                stream.name,
                initial_position=TRIM_HORIZON,
                checkpoint_store=store_path,
                application_name="bounded-test",
                idle_interval=0.2,
                **kw,
            )
            | beam.Map(append_lines(str(out)))
        )
        p.run().wait_until_finish()
        return read_lines(out)

    first = run(max_records=20)
    assert len(first) == 20
    rest = run(stop_when_caught_up=True)
    assert len(rest) == 28
    everything = sorted((k, n) for k, n, _ in first + rest)
    assert everything == sorted((key, n) for key in KEYS for n in range(3))
    put_round(stream, 3)
    assert sorted((k, n) for k, n, _ in run(stop_when_caught_up=True)) == [
        (k, 3) for k in sorted(KEYS)
    ]

    async def rows() -> dict[str, Any]:
        async with SQLiteCheckpointStore(store_path) as store:
            return {r.shard_id: r.value for r in await store.list("bounded-test", stream.name)}

    stored = asyncio.run(rows())
    assert set(stored) == {s["ShardId"] for s in stream.shards()}
    assert all(isinstance(v, tuple) and v is not SHARD_END for v in stored.values())


def test_windowed_count_while_a_shard_is_idle(kinesis_stream: Any, tmp_path: Path) -> None:
    """Records only in the low shard, event times from the data; the high shard stays empty."""
    stream: LocalStream = kinesis_stream(shards=2)
    low, high = sorted(stream.shards(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    low_end = int(low["HashKeyRange"]["EndingHashKey"])
    keys = [k for k in (f"w-{i}" for i in range(200)) if hash_key(k) <= low_end][:6]
    builder = AggregateBuilder()
    for second in range(30):  # event times 0..29 s: windows [0,10), [10,20), [20,30)
        builder.add(keys[second % len(keys)], None, str(second).encode())
    stream.boto_client().put_records(
        StreamName=stream.name,
        Records=[
            {
                "Data": builder.build(),
                "PartitionKey": builder.container_partition_key,
                "ExplicitHashKey": builder.container_explicit_hash_key,
            }
        ],
    )
    out = tmp_path / "counts.txt"
    started = time.time()
    p = pipeline(stream, "in_memory")
    _ = (
        p
        | ReadFromKinesis(
            stream.name,
            initial_position=TRIM_HORIZON,
            timestamp_fn=lambda r: int(r.data),
            idle_threshold=2.0,
            idle_interval=0.2,
            stop_when_caught_up=True,
        )
        | beam.WindowInto(FixedWindows(10))
        | beam.Map(lambda r: ("all", 1))
        | beam.CombinePerKey(sum)
        | beam.ParDo(_WindowedLine(str(out)))
    )
    result = p.run()
    result.wait_until_finish()
    assert sorted(out.read_text().split()) == ["0:10", "10:10", "20:10"]
    gauges = {
        g.key.metric.name: g.committed.value
        for g in result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["gauges"]
    }
    watermark = "aws.kinesis.beam.watermark{messaging.destination.partition.id=%s}"
    idle_mark = gauges[watermark % high["ShardId"]]
    assert idle_mark >= (started - 2.0) * 1000 - 1000  # moved up to about now - threshold
    assert gauges[watermark % low["ShardId"]] >= 29_000


class _WindowedLine(beam.DoFn):
    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, element: Any, window: Any = beam.DoFn.WindowParam) -> None:
        with open(self._path, "a") as f:
            f.write(f"{int(window.start)}:{element[1]}\n")
