"""ReadFromKinesis with a shard discovery (``shard_discovery_interval``) against kinesis-mock:
every shard read by its own restriction, children born while the job reads included.

A stream of 2 shards is split into 4 and then 8 while the FnApiRunner reads it, by polling and
by enhanced fan-out. The runner's metrics show 14 shards discovered (2 + 4 + 8), each read by a
restriction holding that one shard, and records read from each of the 8 last shards; the
output has every record once, per key in the order written, every parent's records of a key
before its children's.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter

from beam_kinesis import METRICS_NAMESPACE
from beam_kinesis.read import ReadFromKinesis
from kinesis_core.consumer import TRIM_HORIZON, ConsumerConfig, EnhancedFanOut
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from tests.helpers.beam import append_lines, pipeline, put_round, read_lines

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}" for i in range(64)]
"""Enough keys that each of 8 shards has some."""
ROUNDS = 18
CONSUMED = "messaging.client.consumed.messages{messaging.destination.partition.id=%s}"


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


def _low_first(stream: LocalStream, shard_ids: list[str]) -> list[str]:
    shards = {s["ShardId"]: s for s in stream.shards()}
    return sorted(shard_ids, key=lambda s: int(shards[s]["HashKeyRange"]["StartingHashKey"]))


@pytest.mark.parametrize("transport", ["polling", "fan-out"])
def test_every_shard_has_its_own_restriction_while_the_stream_splits_from_2_to_8(
    kinesis_stream: Any, tmp_path: Path, transport: str
) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    initial = _low_first(stream, [s["ShardId"] for s in stream.shards()])
    out = tmp_path / "records.txt"
    put_round(stream, 0, KEYS)
    generations: list[list[str]] = [initial]
    failure: list[BaseException] = []

    def write_while_reading() -> None:
        try:
            for n in range(1, ROUNDS):
                put_round(stream, n, KEYS)
                if n in (5, 10):
                    children = [c for s in generations[-1] for c in stream.split(s)]
                    generations.append(_low_first(stream, children))
        except BaseException as exc:
            failure.append(exc)

    writer = threading.Thread(target=write_while_reading)
    writer.start()
    efo = EnhancedFanOut(consumer_name="beam-discovery", closed_check_interval=1.0)
    config = ConsumerConfig(enhanced_fan_out=efo if transport == "fan-out" else False)
    p = pipeline(stream, "in_memory")
    _ = (
        p
        | ReadFromKinesis(
            stream.name,
            consumer_config=config,
            initial_position=TRIM_HORIZON,
            checkpoint_store=str(tmp_path / "checkpoints.sqlite3"),
            application_name="discovery-test",
            shard_discovery_interval=0.5,
            max_read_time=10.0 if transport == "polling" else 20.0,
            idle_interval=0.2,
            self_checkpoint_interval=0.5,
        )
        | beam.Map(append_lines(str(out)))
    )
    result = p.run()
    result.wait_until_finish()
    writer.join()
    assert not failure, failure
    assert [len(g) for g in generations] == [2, 4, 8]

    metrics = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    counters = {c.key.metric.name: c.committed for c in metrics["counters"]}
    distributions = {d.key.metric.name: d.committed for d in metrics["distributions"]}
    assert counters["aws.kinesis.beam.discovered_shards"] == 14
    shards_per_restriction = distributions["aws.kinesis.beam.restriction.shards"]
    assert (shards_per_restriction.min, shards_per_restriction.max) == (1, 1)
    assert all(counters.get(CONSUMED % s, 0) > 0 for s in generations[-1]), counters

    got = read_lines(out)
    assert sorted((key, n) for key, n, _ in got) == sorted(
        (key, n) for key in KEYS for n in range(ROUNDS)
    )  # none lost, none twice
    # Each split's children, low half first, follow their parent in the next generation.
    parent_of = {
        child: older[i // 2]
        for older, younger in itertools.pairwise(generations)
        for i, child in enumerate(younger)
    }
    last: dict[str, tuple[int, str]] = {}
    for key, n, shard_id in got:
        if key in last:
            n_before, shard_before = last[key]
            assert n > n_before, f"{key}: {n} came after {n_before}"
            # Per key, a shard's records follow those of the same shard or of its parent.
            assert shard_before in (shard_id, parent_of.get(shard_id)), (key, shard_id)
        last[key] = (n, shard_id)
    assert {shard_id for _, _, shard_id in got} >= set(generations[-1])
