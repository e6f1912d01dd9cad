"""The processes the crash loops kill: ``python -m reliability._children KIND ...``.

Each (the core Consumer polling or by enhanced fan-out, or a Beam pipeline) reads a stream from
its checkpoints (a SQLite file) and appends one line per record it
processes to a log, ``shard sequence sub-sequence id``, flushed before the record is acked, as
a real application processes before it acks. With ``idle`` > 0 it exits once no record came
for that many seconds (the last, clean round); otherwise it runs until it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import IO, Any

APPLICATION = "crash-loop"


def log_line(log: IO[str], shard_id: str, position: tuple[int, int], data: bytes) -> None:
    log.write(f"{shard_id} {position[0]} {position[1]} {int(data[:9])}\n")
    log.flush()


async def consumer(
    endpoint: str, stream: str, db: str, out: str, idle: float, fan_out: bool = False
) -> None:
    from kinesis_core.checkpoint import SQLiteCheckpointStore
    from kinesis_core.consumer import TRIM_HORIZON, Consumer, EnhancedFanOut
    from kinesis_core.local import local_client_config

    # A killed process leaves its subscriptions open on the server for a moment: the next
    # round's subscribes get ResourceInUse until then, and back off.
    efo = fan_out and EnhancedFanOut(
        consumer_name=APPLICATION, closed_check_interval=1.0, max_failures=60
    )
    async with (
        SQLiteCheckpointStore(db) as store,
        Consumer(
            stream,
            client_config=local_client_config(endpoint),
            checkpoint_store=store,
            application_name=APPLICATION,
            initial_position=TRIM_HORIZON,
            checkpoint_interval=0.5,
            idle_interval=0.2,
            max_records_per_call=100,
            enhanced_fan_out=efo,
        ) as c,
    ):
        # Blocking writes on purpose: a record is logged before it is acked, nothing between.
        with open(out, "a") as log:  # noqa: ASYNC230
            while True:
                try:
                    record = await asyncio.wait_for(c.__anext__(), idle or None)
                except (asyncio.TimeoutError, StopAsyncIteration):
                    return
                log_line(log, record.shard_id, record.position, record.data)
                record.ack()
                await asyncio.sleep(0.002)  # a little work per record


def beam_read(endpoint: str, stream: str, db: str, out: str, idle: float) -> None:
    from kinesis_core.aws.noise import silence_third_party_noise

    silence_third_party_noise()
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    from beam_kinesis.read import ReadFromKinesis
    from kinesis_core.consumer import TRIM_HORIZON
    from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LOCAL_REGION

    # Credentials from the environment, as on a worker: none in the pipeline.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    options = PipelineOptions(
        [f"--kinesis_endpoint_url={endpoint}", f"--kinesis_region_name={LOCAL_REGION}"]
    )
    bounded: dict[str, Any] = {"stop_when_caught_up": True} if idle else {}

    class LogLines(beam.DoFn):
        def setup(self) -> None:
            self.log = open(out, "a")  # noqa: SIM115 - closed in teardown

        def process(self, r: Any) -> None:
            log_line(self.log, r.shard_id, r.position, r.data)

        def teardown(self) -> None:
            self.log.close()

    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        _ = (
            p
            | ReadFromKinesis(
                stream,
                initial_position=TRIM_HORIZON,
                checkpoint_store=db,
                application_name=APPLICATION,
                idle_interval=0.2,
                self_checkpoint_interval=0.5,
                max_records_per_call=100,
                **bounded,
            )
            | beam.ParDo(LogLines())  # type: ignore[no-untyped-call]
        )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m reliability._children")
    parser.add_argument("kind", choices=["consumer", "fan-out", "beam"])
    parser.add_argument("endpoint")
    parser.add_argument("stream")
    parser.add_argument("db")
    parser.add_argument("out")
    parser.add_argument("--idle", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.kind in ("consumer", "fan-out"):
        fan_out = args.kind == "fan-out"
        asyncio.run(consumer(args.endpoint, args.stream, args.db, args.out, args.idle, fan_out))
    else:
        beam_read(args.endpoint, args.stream, args.db, args.out, args.idle)


if __name__ == "__main__":
    main(sys.argv[1:])
