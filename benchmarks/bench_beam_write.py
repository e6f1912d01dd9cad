"""Beam sink throughput: WriteToKinesis against the core producer it wraps, a no-op sink and a
hand-written boto3 DoFn.

One pipeline, 200,000 elements of 100 bytes (4,000 with ``--quick``), on the in-process
FnApiRunner, into a 16-shard moto stream (a fresh one per subject). Three sinks and the core:

* ``no-op sink``: a DoFn that drops its input, the ceiling Beam itself sets for the pipeline
  (and, against the boto3 DoFn, the best ratio any sink could reach from that source);
* ``no-op batched sink`` (Impulse source only): a DoFn with only ``process_batch`` (a list of
  elements), which drops its input: what Beam's batched DoFn path costs when the upstream
  step yields elements (the ConsumerSet buffers up to 4,096 windowed values and regroups them
  by timestamp and windows before each call);
* ``WriteToKinesis``: this project's sink with its defaults (random keys, KPL aggregation,
  rate limit 150 % of the shard limits, each bundle acknowledged before it commits);
* ``boto3 DoFn``: what people write by hand: a boto3 client in ``setup``, ``put_records`` per
  500 elements and at the end of the bundle, failed entries resent. It writes 20,000 elements
  (see ``BOTO3_ELEMENTS``): its rate per element does not depend on the count, moto's does;
* ``kinesis_core producer``: no Beam at all: the same records (the same payloads, a random key
  each, made in the timed loop as the sink makes them) handed to a ``BlockingProducer`` with the
  sink's default configuration in chunks of 1,000, as the sink hands them over, then flushed.
  ``WriteToKinesis`` from the Impulse source against it is what the adapter costs on top of the
  producer, measured in turns with the sinks in the same run. (The sink draws the random keys of
  a chunk at once, ``random_partition_keys``; the core run makes one per record, as a user
  writing records one by one does.) Two ratios: end to end, and per element (target: at least
  0.8x), which leaves out what a run pays once: Beam's pipeline start and stop (about 0.1 s on
  the in-process runner, half the core's time for 200,000 records), the producer's start and
  its last flush. Both are also run with a tenth of the elements, and the per-element rate is
  the 90 % more elements over the extra time they took.

Two sources, because they put the sink's cost in very different light:

* ``Impulse source``: one ``FlatMap`` yields the elements, fused with the sink: Beam's cheapest
  path (about 1 microsecond an element), so the sink's own cost dominates;
* ``Create source``: ``beam.Create`` + ``Map``, what most batch pipelines and tests look like
  (a reshuffle inside Create: tens of microseconds an element).

Measured: elements per second from ``run()`` to the end of the pipeline, which for both
writing sinks includes every record acknowledged by the server.
"""

from __future__ import annotations

import logging
import os
import random
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import apache_beam as beam
import boto3
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_kinesis import METRICS_NAMESPACE, WriteToKinesis
from beam_kinesis.write import CHUNK_RECORDS
from benchmarks._table import Row, best_rates, marginal_rate
from kinesis_core.aws.config import ClientConfig
from kinesis_core.local import LOCAL_REGION, MotoServer
from kinesis_core.producer import BlockingProducer, random_partition_key

SHARDS = 16
RECORD_BYTES = 100
NOOP = "no-op sink"
NOOP_BATCH = "no-op batched sink"
OURS = "WriteToKinesis"
BOTO3 = "boto3 DoFn"
CORE = "kinesis_core producer"
END_TO_END = "end to end, with Beam's pipeline start and stop"
PER_ELEMENT = "the rate past the start and stop: runs of N and N/10"
TOO_CLOSE = "not measured: the run of N was not slower than the run of N/10 (noise; use more)"
VS_NOOP: dict[str, float | None] = {"Impulse": None, "Create": 0.6}
"""The target against the no-op sink, per source. From ``Impulse`` there is none: Beam's
cheapest path delivers about a million elements a second, five times what the core producer
alone writes, so no sink could reach any useful share of it; the per-element row against the
core producer is that source's target."""
NO_TARGET_VS_NOOP = "no target: the core producer alone writes a fifth of this rate"
VS_BOTO3 = {"Impulse": 10.0, "Create": 5.0}
"""The target against the boto3 DoFn, per source: from ``Create`` Beam's own cost per element
is so much higher that a sink costing nothing reaches about 5x (the ceiling row), the line
issue 27 asks of it."""
BOTO3_ELEMENTS = 20_000
"""The boto3 DoFn writes this many elements at most: moto lists every record of a shard to
number each new one, so past a few thousand raw records per shard a run would time moto's
quadratic slowdown (200,000 elements: about 900 el/s instead of 6,000), not boto3."""


def _payloads() -> list[bytes]:
    rng = random.Random(7)
    return [rng.randbytes(RECORD_BYTES) for _ in range(1024)]


class _NoOp(beam.DoFn):
    def process(self, element: bytes) -> None:
        pass


class _NoOpBatch(beam.DoFn):
    """A batch-only DoFn: Beam gives it lists of elements even from an element-producing
    upstream (a DoFn that also has ``process`` gets elements from such an upstream)."""

    def get_input_batch_type(self, input_element_type: Any) -> Any:
        # Beam's list batch converter wants List[T] for exactly the input's element type T.
        return list[input_element_type]

    @beam.DoFn.yields_elements
    def process_batch(self, batch: list[bytes]) -> Iterator[bytes]:
        return iter(())


class _Boto3PutRecords(beam.DoFn):
    """The hand-written sink: batches of 500 per bundle, failed entries resent."""

    def __init__(self, stream: str, endpoint_url: str) -> None:
        super().__init__()
        self.stream = stream
        self.endpoint_url = endpoint_url

    def setup(self) -> None:
        self.client = boto3.client(
            "kinesis", endpoint_url=self.endpoint_url, region_name=LOCAL_REGION
        )

    def start_bundle(self) -> None:
        self.batch: list[dict[str, Any]] = []

    def process(self, element: bytes) -> None:
        self.batch.append({"Data": element, "PartitionKey": random_partition_key()})
        if len(self.batch) == 500:
            self._put()

    def finish_bundle(self) -> None:
        if self.batch:
            self._put()

    def _put(self) -> None:
        entries, self.batch = self.batch, []
        while entries:
            response = self.client.put_records(StreamName=self.stream, Records=entries)
            entries = [
                entry
                for entry, result in zip(entries, response["Records"], strict=True)
                if "ErrorCode" in result
            ]

    def teardown(self) -> None:
        self.client.close()


def _boto3_sink(stream: str, endpoint_url: str) -> beam.PTransform:
    return beam.ParDo(_Boto3PutRecords(stream, endpoint_url))


def _pipeline(
    source: str, count: int, sink: Callable[[], beam.PTransform], options: PipelineOptions
) -> Callable[[], None]:
    payloads = _payloads()

    def generate(_: bytes) -> Iterator[bytes]:
        for i in range(count):
            yield payloads[i & 1023]

    def run() -> None:
        pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
        if source == "Impulse":
            elements = pipeline | beam.Impulse() | beam.FlatMap(generate)
        else:
            elements = pipeline | beam.Create(range(count)) | beam.Map(lambda i: payloads[i & 1023])
        _ = elements | sink()
        result = pipeline.run()
        result.wait_until_finish()
        written = result.metrics().query(
            MetricsFilter()
            .with_namespace(METRICS_NAMESPACE)
            .with_name("messaging.client.sent.messages")
        )["counters"]
        if written:
            assert written[0].committed == count, f"wrote {written[0].committed} of {count}"

    return run


def _core_producer(stream: str, client_config: ClientConfig, count: int) -> Callable[[], None]:
    """The producer without Beam: the sink's records, hand-off and final flush."""
    payloads = _payloads()

    def run() -> None:
        with BlockingProducer(stream, client_config=client_config) as producer:
            futures = []
            chunk: list[tuple[bytes, str]] = []
            for i in range(count):
                chunk.append((payloads[i & 1023], random_partition_key()))
                if len(chunk) == CHUNK_RECORDS:
                    futures.append(producer.submit_many(chunk))
                    chunk = []
            if chunk:
                futures.append(producer.submit_many(chunk))
            producer.flush()
            for future in futures:
                future.result().raise_for_failures()

    return run


def run(quick: bool) -> list[Row]:
    count = 4_000 if quick else 200_000
    boto_count = min(count, BOTO3_ELEMENTS)
    repeat = 1 if quick else 2
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    rows: list[Row] = []
    with MotoServer() as moto:
        options = PipelineOptions(
            [f"--kinesis_endpoint_url={moto.endpoint_url}", f"--kinesis_region_name={LOCAL_REGION}"]
        )
        client_config = ClientConfig(endpoint_url=moto.endpoint_url, region_name=LOCAL_REGION)
        for source in ("Impulse", "Create"):
            ours_stream = moto.create_stream(f"ours-{uuid.uuid4().hex[:8]}", SHARDS)
            boto_stream = moto.create_stream(f"boto-{uuid.uuid4().hex[:8]}", SHARDS)
            core_stream = moto.create_stream(f"core-{uuid.uuid4().hex[:8]}", SHARDS)
            subjects = {
                NOOP: _pipeline(source, count, lambda: beam.ParDo(_NoOp()), options),
                OURS: _pipeline(source, count, partial(WriteToKinesis, ours_stream.name), options),
            }
            if source == "Impulse":
                subjects[NOOP_BATCH] = _pipeline(
                    source, count, lambda: beam.ParDo(_NoOpBatch()), options
                )
                subjects[CORE] = _core_producer(core_stream.name, client_config, count)
            fast = best_rates(subjects, count, repeat=repeat, warmup=0 if quick else 1)
            if source == "Impulse":
                small = count // 10
                start_stop = best_rates(
                    {
                        OURS: _pipeline(
                            source, small, partial(WriteToKinesis, ours_stream.name), options
                        ),
                        CORE: _core_producer(core_stream.name, client_config, small),
                    },
                    small,
                    repeat=repeat,
                    warmup=0,
                )
                per_element = {
                    name: marginal_rate(count, fast[name], small, start_stop[name])
                    for name in (OURS, CORE)
                }
            slow = best_rates(
                {
                    BOTO3: _pipeline(
                        source,
                        boto_count,
                        partial(_boto3_sink, boto_stream.name, moto.endpoint_url),
                        options,
                    )
                },
                boto_count,
                repeat=1,
                warmup=0,
            )
            ours_stream.delete()
            boto_stream.delete()
            core_stream.delete()
            group = f"beam write, {source} source, {count:,} x {RECORD_BYTES} B"
            if source == "Impulse":
                marginal = f"{group}, per element vs core"
                rows += [
                    Row(f"{group}, vs core", CORE, fast[CORE], "rec/s"),
                    Row(f"{group}, vs core", OURS, fast[OURS], "el/s", CORE, note=END_TO_END),
                    Row(
                        marginal,
                        CORE,
                        per_element[CORE],
                        "rec/s",
                        note=PER_ELEMENT if per_element[CORE] else TOO_CLOSE,
                    ),
                    Row(
                        marginal,
                        OURS,
                        per_element[OURS],
                        "el/s",
                        CORE,
                        0.8,
                        note="" if per_element[OURS] else TOO_CLOSE,
                    ),
                ]
            rows += [
                Row(f"{group}, vs Beam", NOOP, fast[NOOP], "el/s"),
                Row(
                    f"{group}, vs Beam",
                    OURS,
                    fast[OURS],
                    "el/s",
                    NOOP,
                    VS_NOOP[source],
                    note="" if VS_NOOP[source] else NO_TARGET_VS_NOOP,
                ),
            ]
            if source == "Impulse":
                rows.append(
                    Row(
                        f"{group}, vs Beam",
                        NOOP_BATCH,
                        fast[NOOP_BATCH],
                        "el/s",
                        NOOP,
                        note="Beam's batched DoFn path (process_batch) from an element upstream",
                    )
                )
            rows += [
                Row(f"{group}, vs boto3", BOTO3, slow[BOTO3], "el/s", note=f"{boto_count:,} el"),
                Row(
                    f"{group}, vs boto3",
                    NOOP,
                    fast[NOOP],
                    "el/s",
                    BOTO3,
                    note="the ceiling: Beam's cost alone, what a sink that costs nothing reaches",
                ),
                Row(f"{group}, vs boto3", OURS, fast[OURS], "el/s", BOTO3, VS_BOTO3[source]),
            ]
    return rows
