"""Write a PCollection to Kinesis with ``beam_kinesis.WriteToKinesis``.

Locally (no AWS account, nothing leaves 127.0.0.1): starts moto (or kinesis-mock) on loopback,
makes a 4-shard stream, runs the pipeline on Beam's in-process runner, then reads the stream
back as a KCL reader would and prints what arrived where::

    .venv/bin/python examples/beam_write.py
    .venv/bin/python examples/beam_write.py --emulator kinesis-mock --count 2000

Against AWS, pass the stream and the pipeline options the Beam way (credentials come from the
workers' default chain; see docs/beam-write.md for Dataflow and Flink)::

    python examples/beam_write.py --emulator none --stream orders \\
        --kinesis_region_name eu-west-1 --runner DataflowRunner --project my-project \\
        --region europe-west1 --temp_location gs://my-bucket/tmp \\
        --extra_package dist/kinesis_connectors-0.1.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_kinesis import METRICS_NAMESPACE, FailedRecord, WriteToKinesis
from kinesis_core.aggregation import deaggregate
from kinesis_core.local import (
    DUMMY_ACCESS_KEY_ID,
    DUMMY_SECRET_ACCESS_KEY,
    LOCAL_REGION,
    KinesisMock,
    LocalServer,
    LocalStream,
    MotoServer,
)


def orders(count: int) -> list[Any]:
    """Orders for 50 customers, and one element JSON cannot write (it lands in failed_records)."""
    rows: list[Any] = [
        {"order": i, "customer": f"customer-{i % 50}", "amount": round(i * 1.7, 2)}
        for i in range(count)
    ]
    rows.insert(count // 2, {"order": -1, "customer": "customer-0", "tags": {"not", "json"}})
    return rows


def report(failed: FailedRecord) -> None:
    logging.warning(
        "not written: %r: %s: %s", failed.element, failed.error_code, failed.error_message
    )


def build(pipeline: beam.Pipeline, stream: str, count: int) -> None:
    result = (
        pipeline
        | "Orders" >> beam.Create(orders(count))
        | "Write" >> WriteToKinesis(stream, partition_key="customer", serializer=json.dumps)
    )
    _ = result.failed_records | "Report failures" >> beam.Map(report)


@contextlib.contextmanager
def local_stream(emulator: str, name: str) -> Iterator[LocalStream]:
    server: LocalServer = KinesisMock() if emulator == "kinesis-mock" else MotoServer()
    with server:
        yield server.create_stream(name, shards=4)


def read_back(stream: LocalStream) -> None:
    per_shard: Counter[str] = Counter()
    for record in stream.records():
        for user_record in deaggregate([record], record["ShardId"]):
            per_shard[user_record.shard_id] += 1
    print(f"read back {sum(per_shard.values())} orders from {stream.name}:")
    for shard_id, n in sorted(per_shard.items()):
        print(f"  {shard_id}: {n}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", default="beam-orders")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument(
        "--emulator",
        choices=["moto", "kinesis-mock", "none"],
        default="moto",
        help="start a local server for the stream (none: use --kinesis_* options, e.g. AWS)",
    )
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if options.view_as(StandardOptions).runner is None:
        # The in-process runner; "DirectRunner" would try (and download) Prism first.
        options.view_as(StandardOptions).runner = "FnApiRunner"

    with contextlib.ExitStack() as stack:
        stream = None
        if args.emulator != "none":
            stream = stack.enter_context(local_stream(args.emulator, args.stream))
            # What workers get from their environment on a real deployment.
            os.environ.setdefault("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
            options = PipelineOptions(
                [
                    *beam_args,
                    f"--runner={options.view_as(StandardOptions).runner}",
                    f"--kinesis_endpoint_url={stream.endpoint_url}",
                    f"--kinesis_region_name={LOCAL_REGION}",
                ]
            )
        pipeline = beam.Pipeline(options=options)
        build(pipeline, args.stream, args.count)
        result = pipeline.run()
        result.wait_until_finish()
        counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
        for counter in counters["counters"]:
            print(f"{counter.key.metric.name}: {counter.committed}")
        if stream is not None:
            read_back(stream)


if __name__ == "__main__":
    main()
