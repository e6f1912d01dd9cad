"""ReadFromKinesis throughput on the FnApiRunner against Beam's own ceiling, same run.

Data: 500,000 records of 100 bytes (20,000 with ``--quick``) in KPL aggregates (51,200 bytes,
each inside one shard's range) in an 8-shard moto stream. Every subject sends the same
``KinesisRecord`` elements, timestamped with their arrival time, through the same downstream
(``Map(len(data))`` then ``Count.Globally``, checked against the expected count) on the
FnApiRunner in memory. Measured: elements per second of ``pipeline.run()`` to the end, pipeline
construction excluded.

* ReadFromKinesis: a bounded read from TRIM_HORIZON (``stop_when_caught_up``), one restriction
  per shard, GetRecords against the moto server (a subprocess), without the pacing to the
  shard's 2 MiB/s of reads (moto does not limit them).
* beam.Create: the same elements, built in memory beforehand: the issue's baseline (target:
  the read at >= 0.5x). Create pickles its elements into the pipeline and decodes them on the
  worker, which is most of its time.
* Impulse+FlatMap: the same elements yielded from a module-level list (no I/O, no encoding): the
  fastest any source can feed this downstream on this runner.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.record import KinesisRecord
from benchmarks._table import Row
from benchmarks.bench_consumer import _fill_aggregated
from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer import TRIM_HORIZON, ConsumerConfig
from kinesis_core.local import LOCAL_REGION, LocalStream, MotoServer

SHARDS = 8
READ = "ReadFromKinesis"
CREATE = "beam.Create"
CEILING = "Impulse+FlatMap"

_ELEMENTS: list[KinesisRecord] = []
"""The elements of the FlatMap subject: a module global, so the pipeline does not pickle them."""


def _elements(stream: LocalStream) -> list[KinesisRecord]:
    """What ReadFromKinesis outputs for ``stream``, built from a plain read of it."""
    shards = {
        s["ShardId"]: (
            int(s["HashKeyRange"]["StartingHashKey"]),
            int(s["HashKeyRange"]["EndingHashKey"]),
        )
        for s in stream.shards()
    }
    by_shard: dict[str, list[dict[str, Any]]] = {shard_id: [] for shard_id in shards}
    for record in stream.records():
        by_shard[record["ShardId"]].append(record)
    out = []
    for shard_id, raw in by_shard.items():
        for r in deaggregate(raw, shard_id, shards[shard_id]):
            assert r.approximate_arrival_timestamp is not None
            ts = Timestamp.of(r.approximate_arrival_timestamp.timestamp())
            out.append(
                KinesisRecord(
                    r.data,
                    r.partition_key,
                    r.explicit_hash_key,
                    shard_id,
                    str(r.sequence_number),
                    r.sub_sequence_number,
                    ts,
                )
            )
    return out


def _size(record: KinesisRecord) -> int:
    return len(record.data)


def _check(count: int, expected: int) -> None:
    if count != expected:
        raise AssertionError(f"the pipeline saw {count:,} elements, expected {expected:,}")


def _yield_elements(_: Any) -> Iterator[TimestampedValue]:
    for e in _ELEMENTS:
        yield TimestampedValue(e, e.approximate_arrival_timestamp)


def _timestamped(record: KinesisRecord) -> TimestampedValue:
    return TimestampedValue(record, record.approximate_arrival_timestamp)


def _timed(build: Callable[[beam.Pipeline], Any], expected: int) -> float:
    """Seconds from ``run()`` to the end of a pipeline that ``build`` fills with a source."""
    p = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions([]))
    _ = (
        build(p)
        | "Size" >> beam.Map(_size)
        | "Count" >> beam.combiners.Count.Globally()
        | "Check" >> beam.Map(_check, expected)
    )
    gc.collect()
    start = time.perf_counter()
    p.run().wait_until_finish()
    return time.perf_counter() - start


def prepare(moto: MotoServer, count: int) -> Callable[[beam.Pipeline], Any]:
    """Fill a stream with ``count`` records and the FlatMap subject's elements with the same;
    returns the ReadFromKinesis subject (a source to build a pipeline on)."""
    stream = moto.create_stream("beam-read", SHARDS)
    _fill_aggregated(stream, count)
    _ELEMENTS[:] = _elements(stream)
    assert len(_ELEMENTS) == count
    # Credentials come from the environment, as on a worker: none in the pipeline.
    config = ClientConfig(region_name=LOCAL_REGION, endpoint_url=moto.endpoint_url)

    def read(p: beam.Pipeline) -> Any:
        return p | ReadFromKinesis(
            stream.name,
            client_config=config,
            # moto does not limit reads: no pacing to the service's 2 MiB/s per shard
            consumer_config=ConsumerConfig(max_read_bytes_per_second=math.inf),
            initial_position=TRIM_HORIZON,
            stop_when_caught_up=True,
        )

    return read


def ceiling(p: beam.Pipeline) -> Any:
    """The Impulse+FlatMap subject: the elements ``prepare`` made, from a module global."""
    return p | beam.Impulse() | beam.FlatMap(_yield_elements)


def run(quick: bool) -> list[Row]:
    count = 20_000 if quick else 500_000
    repeat = 1 if quick else 2
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with MotoServer() as moto:
        read = prepare(moto, count)
        elements = list(_ELEMENTS)

        def create(p: beam.Pipeline) -> Any:
            return p | beam.Create(elements, reshuffle=False) | beam.Map(_timestamped)

        subjects = {READ: read, CREATE: create, CEILING: ceiling}
        best = dict.fromkeys(subjects, float("inf"))
        for _ in range(repeat):
            for name, build in subjects.items():
                best[name] = min(best[name], _timed(build, count))
        _ELEMENTS.clear()
    rates = {name: count / seconds for name, seconds in best.items()}
    group = f"beam read, {count:,} x 100 B in KPL aggregates, {SHARDS} shards"
    return [
        Row(group, CREATE, rates[CREATE], "elem/s", note="issue baseline"),
        Row(group, CEILING, rates[CEILING], "elem/s", note="no I/O, no encoding"),
        Row(
            group,
            READ,
            rates[READ],
            "elem/s",
            baseline=CREATE,
            target=0.5,
            note="moto",
            quote_baseline=True,
        ),
        Row(f"{group} (vs ceiling)", CEILING, rates[CEILING], "elem/s"),
        Row(
            f"{group} (vs ceiling)",
            READ,
            rates[READ],
            "elem/s",
            baseline=CEILING,
            quote_baseline=True,
        ),
    ]
