"""A streaming Beam pipeline: read a Kinesis stream, count per window and partition key, and
write the counts to another stream.

    ReadFromKinesis(source) -> FixedWindows -> count per (window, user) -> WriteToKinesis(sink)

Three ways to run it:

* Against a local emulator, end to end (``run_demo``): creates a 2-shard source stream and a
  sink stream, writes click events while the pipeline reads, splits a shard in the middle,
  then prints the windowed counts read back from the sink stream::

      python -m examples.beam_read_window_count --local          # starts kinesis-mock itself
      python -m examples.beam_read_window_count --demo_endpoint http://127.0.0.1:4567

  From code: ``run_demo("http://127.0.0.1:4567")`` prints the counts and returns them,
  ``{(window_start, user): count}``, with the number of clicks written.

* Against existing streams, here on the in-process runner for 60 seconds::

      python -m examples.beam_read_window_count --source_stream clicks --sink_stream counts \\
          --read_seconds 60 --kinesis_region_name eu-west-1

* On Flink or Dataflow, unbounded (leave ``--read_seconds`` out); Beam flags pass through::

      python -m examples.beam_read_window_count --source_stream clicks --sink_stream counts \\
          --runner FlinkRunner --flink_master localhost:8081 --environment_type LOOPBACK \\
          --streaming --kinesis_region_name eu-west-1
      python -m examples.beam_read_window_count --source_stream clicks --sink_stream counts \\
          --runner DataflowRunner --project my-project --region eu-west-1 \\
          --temp_location gs://my-bucket/tmp --streaming \\
          --requirements_file requirements.txt --kinesis_region_name eu-west-1

With ``--runner DirectRunner`` (or no runner) the pipeline runs on Beam's in-process
FnApiRunner, passed as an object: the DirectRunner would first try to download Prism. That
runner executes the stages after a GroupByKey once the read has ended, so locally the read is
bounded (``--read_seconds``) and the counts appear at its end; on Flink and Dataflow windows
fire as the watermark passes them. Credentials come from the workers' default chain.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.transforms.window import FixedWindows

from beam_kinesis import WriteToKinesis
from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.record import KinesisRecord
from kinesis_core import ClientConfig, create_botocore_client
from kinesis_core.aggregation import deaggregate
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.local import (
    DUMMY_ACCESS_KEY_ID,
    DUMMY_SECRET_ACCESS_KEY,
    LOCAL_REGION,
    KinesisMock,
    create_stream,
    read_records,
    split_shard,
)
from kinesis_core.producer import BlockingProducer

USERS = [f"user-{i}" for i in range(8)]


class FormatCount(beam.DoFn):
    """(user, count) in a window -> a JSON line for the sink stream."""

    def process(self, element: tuple[str, int], window: Any = beam.DoFn.WindowParam) -> Any:
        user, count = element
        start = window.start.to_utc_datetime().replace(tzinfo=timezone.utc)
        yield json.dumps({"window_start": start.isoformat(), "user": user, "count": count})


def user_of(record: KinesisRecord) -> str:
    return record.partition_key


def build(
    p: beam.Pipeline,
    source_stream: str,
    sink_stream: str,
    *,
    window_seconds: float,
    read_seconds: float | None,
    idle_threshold: float = 10.0,
) -> Any:
    """Read, window, count per user, write the counts; returns the counts' PCollection."""
    counts = (
        p
        | "Read"
        >> ReadFromKinesis(
            source_stream,
            initial_position=TRIM_HORIZON,
            max_read_time=read_seconds,
            idle_threshold=idle_threshold,
        )
        | "Window" >> beam.WindowInto(FixedWindows(window_seconds))
        | "User" >> beam.Map(user_of)
        | "Count" >> beam.combiners.Count.PerElement()
        | "Format" >> beam.ParDo(FormatCount())
    )
    _ = counts | "Write" >> WriteToKinesis(
        sink_stream, partition_key=lambda line: json.loads(line)["user"], on_failure="raise"
    )
    return counts


def make_pipeline(beam_args: Sequence[str]) -> beam.Pipeline:
    """The pipeline for ``beam_args``; the in-process runner for DirectRunner or none."""
    options = PipelineOptions(list(beam_args))
    runner = options.view_as(StandardOptions).runner
    if runner in (None, "DirectRunner", "direct", "FnApiRunner"):
        return beam.Pipeline(runner=FnApiRunner(), options=options)
    return beam.Pipeline(options=options)


class DemoResult(NamedTuple):
    counts: dict[tuple[str, str], int]
    """{(window_start, user): count}, read back from the sink stream"""
    written: int
    """clicks written to the source stream"""


def _produce(
    config: ClientConfig, stream: str, seconds: float, split_at: float, rate: int
) -> tuple[int, list[str]]:
    """Click events for ``seconds`` at ``rate`` per second; split the first shard at
    ``split_at`` seconds. Returns the number written and the split's children."""
    written = 0
    children: list[str] = []
    client = create_botocore_client(config, "kinesis")
    start = time.monotonic()
    try:
        with BlockingProducer(stream, client_config=config) as producer:
            n = 0
            while (elapsed := time.monotonic() - start) < seconds:
                if not children and elapsed >= split_at:
                    shard = client.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
                    children = split_shard(client, stream, shard)
                    print(
                        f"  {elapsed:.0f} s: {written} clicks written; split {shard} into "
                        f"{' and '.join(children)} while the pipeline reads",
                        flush=True,
                    )
                batch = [
                    (json.dumps({"click": n + i}).encode(), USERS[(n + i) % len(USERS)])
                    for i in range(rate // 10)
                ]
                result = producer.put_many(batch)
                written += len(batch) - len(result.failures)
                n += len(batch)
                time.sleep(max(0.0, start + (n / rate) - time.monotonic()))
    finally:
        client.close()
    print(f"  {seconds:.0f} s: {written} clicks written; the pipeline reads on", flush=True)
    return written, children


def run_demo(
    endpoint_url: str,
    *,
    region: str = LOCAL_REGION,
    produce_seconds: float = 6.0,
    window_seconds: float = 2.0,
    rate: int = 200,
) -> DemoResult:
    """The whole demo against a Kinesis endpoint (a local emulator): prints the counts read
    back from the sink stream and returns them with the number of clicks written."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    config = ClientConfig(region_name=region, endpoint_url=endpoint_url)
    suffix = datetime.now(timezone.utc).strftime("%H%M%S")
    source, sink = f"clicks-{suffix}", f"click-counts-{suffix}"
    client = create_botocore_client(config, "kinesis")
    try:
        create_stream(client, source, 2)
        create_stream(client, sink, 1)
        print(
            f"  streams {source} (2 shards) and {sink}; clicks for {produce_seconds:g} s at "
            f"{rate}/s, read for {produce_seconds + 4.0:g} s",
            flush=True,
        )
        produced: list[tuple[int, list[str]]] = []
        producer = threading.Thread(
            target=lambda: produced.append(
                _produce(config, source, produce_seconds, produce_seconds / 2, rate)
            )
        )
        producer.start()
        p = make_pipeline(
            [f"--kinesis_endpoint_url={endpoint_url}", f"--kinesis_region_name={region}"]
        )
        build(
            p,
            source,
            sink,
            window_seconds=window_seconds,
            read_seconds=produce_seconds + 4.0,
            idle_threshold=1.0,
        )
        started = time.monotonic()
        p.run().wait_until_finish()
        producer.join()
        written, children = produced[0]
        print(
            f"  the pipeline ended after {time.monotonic() - started:.1f} s; a shard split into "
            f"{' and '.join(children)} half-way"
        )
        counts: dict[tuple[str, str], int] = {}
        # WriteToKinesis aggregates: take the KPL records apart as any consumer would.
        for record in deaggregate(read_records(client, sink), sink):
            row = json.loads(record.data)
            counts[(row["window_start"], row["user"])] = row["count"]
    finally:
        client.close()
    windows = sorted({w for w, _ in counts})
    print(f"  {'window start (UTC)':<34}{'clicks':>8}  per user")
    for window in windows:
        per_user = {u: c for (w, u), c in counts.items() if w == window}
        detail = " ".join(f"{u[5:]}:{c}" for u, c in sorted(per_user.items()))
        print(f"  {window:<34}{sum(per_user.values()):>8}  {detail}")
    total = sum(counts.values())
    counted = "all" if total == written else "NOT all"
    print(f"  {'total':<34}{total:>8}  ({counted} clicks counted)")
    return DemoResult(counts, written)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", action="store_true", help="start kinesis-mock, run the demo")
    parser.add_argument("--demo_endpoint", help="run the demo against this Kinesis endpoint")
    parser.add_argument("--source_stream", help="stream to read")
    parser.add_argument("--sink_stream", help="stream to write the counts to")
    parser.add_argument("--window_seconds", type=float, default=60.0)
    parser.add_argument(
        "--read_seconds", type=float, default=None, help="stop reading after this (bounded)"
    )
    args, beam_args = parser.parse_known_args(argv)
    if args.local:
        with KinesisMock() as server:
            run_demo(server.endpoint_url)
    elif args.demo_endpoint:
        run_demo(args.demo_endpoint)
    else:
        if not (args.source_stream and args.sink_stream):
            parser.error("give --source_stream and --sink_stream (or --local / --demo_endpoint)")
        p = make_pipeline(beam_args)
        build(
            p,
            args.source_stream,
            args.sink_stream,
            window_seconds=args.window_seconds,
            read_seconds=args.read_seconds,
        )
        p.run().wait_until_finish()


if __name__ == "__main__":
    main()
