"""What the Beam tests against a local emulator share: pipelines on the runners they use,
rounds of aggregated records written for a fixed set of keys, a sink whose lines survive worker
processes, and the core consumer reading a stream back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from beam_kinesis.record import KinesisRecord as BeamRecord
from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.hashing import hash_key
from kinesis_core.local import LocalStream
from kinesis_core.records import KinesisRecord

KEYS = [f"key-{i}" for i in range(16)]


def pipeline(stream: LocalStream, mode: str) -> beam.Pipeline:
    flags = [
        f"--kinesis_endpoint_url={stream.endpoint_url}",
        f"--kinesis_region_name={stream.client_config.region_name}",
    ]
    if mode == "in_memory":
        return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags))
    if mode == "multi_processing":
        flags += ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
        return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags))
    assert mode == "streaming"
    flags += ["--streaming", "--prism_location=/nonexistent/prism"]
    return beam.Pipeline(runner="DirectRunner", options=PipelineOptions(flags))


def put_round(stream: LocalStream, n: int, keys: list[str] = KEYS) -> None:
    """Record ``key:n`` for every key, as one KPL aggregate per open shard."""
    open_shards = stream.shards(open_only=True)
    groups: dict[str, AggregateBuilder] = {}
    for key in keys:
        h = hash_key(key)
        shard = next(
            s
            for s in open_shards
            if int(s["HashKeyRange"]["StartingHashKey"])
            <= h
            <= int(s["HashKeyRange"]["EndingHashKey"])
        )
        groups.setdefault(shard["ShardId"], AggregateBuilder()).add(
            key, None, f"{key}:{n}".encode()
        )
    entries = [
        {
            "Data": b.build(),
            "PartitionKey": b.container_partition_key,
            "ExplicitHashKey": b.container_explicit_hash_key,
        }
        for b in groups.values()
    ]
    response = stream.boto_client().put_records(StreamName=stream.name, Records=entries)
    assert response.get("FailedRecordCount", 0) == 0


def append_lines(path: str) -> Callable[[BeamRecord], None]:
    """A sink that appends one line per record to ``path`` (one write each: whole lines even
    from several worker processes), in the order the reader emitted them."""

    def write(record: BeamRecord) -> None:
        with open(path, "a") as f:
            f.write(f"{record.data.decode()},{record.shard_id}\n")

    return write


def read_lines(path: Path) -> list[tuple[str, int, str]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        item, shard_id = line.split(",")
        key, n = item.split(":")
        out.append((key, int(n), shard_id))
    return out


def read_back(
    stream: LocalStream, expected: set[bytes], timeout: float = 60.0
) -> list[KinesisRecord]:
    """Every record of the stream as the core consumer delivers it (KCL rules), until all of
    ``expected`` were seen."""

    async def main() -> list[KinesisRecord]:
        got: list[KinesisRecord] = []
        async with Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            shard_refresh_interval=0.5,
            idle_interval=0.2,
        ) as consumer:

            async def consume() -> None:
                missing = set(expected)
                async for record in consumer:
                    got.append(record)
                    missing.discard(record.data)
                    record.ack()
                    if not missing:
                        return

            await asyncio.wait_for(consume(), timeout)
        return got

    return asyncio.run(main())
