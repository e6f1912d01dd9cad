"""What the Beam tests against a local emulator share: pipelines on the runners they use,
rounds of aggregated records written for a fixed set of keys, a sink whose lines survive worker
processes, and the core consumer reading a stream back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker
from apache_beam.utils.timestamp import Timestamp

from beam_kinesis._read_fn import RestrictionWatermark
from beam_kinesis.record import KinesisRecord as BeamRecord
from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import LocalStream
from kinesis_core.records import KinesisRecord
from kinesis_core.shards.hashing import hash_key

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


class SdfDriver:
    """Runs a ReadFromKinesis DoFn's restriction the way a runner does, one ``process`` call at
    a time, with Beam's own tracker wrappers and the DoFn's watermark estimator: each call
    starts from the last call's residual, and its bundle finalizers run after it (the bundle
    is committed). Records every output with the watermark it was output under."""

    def __init__(self, fn: Any, element: Any, restriction: Any) -> None:
        self.fn = fn
        self.element = element
        self.restriction = restriction
        self._provider = RestrictionWatermark()
        self._estimator_state = self._provider.initial_estimator_state(element, restriction)
        self.outputs: list[tuple[Any, Timestamp | None]] = []
        """(output, the restriction's watermark when it was output)."""
        self.done = False

    def call(self, checkpoint_after: int | None = None) -> None:
        """One ``process`` call; ``done`` once it left no residual. ``checkpoint_after``: the
        runner checkpoints (``try_split(0)``, from its own thread) once the call output that
        many elements (0: at the call's first claim, before it)."""
        tracker = ThreadsafeRestrictionTracker(self.fn.create_tracker(self.restriction))
        estimator = self._provider.create_watermark_estimator(self._estimator_state)
        finalizer = _Finalizer()
        runner_split: list[Any] = []
        if checkpoint_after == 0:
            claim = tracker.try_claim

            def split_first(position: Any) -> bool:
                if not runner_split:
                    runner_split.append(tracker.try_split(0))
                return bool(claim(position))

            tracker.try_claim = split_first  # type: ignore[method-assign]
        for n, out in enumerate(
            self.fn.process(
                self.element,
                bundle_finalizer=finalizer,
                tracker=RestrictionTrackerView(tracker),
                watermark=estimator,
            ),
            1,
        ):
            self.outputs.append((out, estimator.current_watermark()))
            if n == checkpoint_after:
                split = threading.Thread(target=lambda: runner_split.append(tracker.try_split(0)))
                split.start()
                split.join()
        for callback in finalizer.callbacks:
            callback()
        self._estimator_state = estimator.get_estimator_state()
        deferred = tracker.deferred_status()
        if runner_split and runner_split[0] is not None:
            self.restriction = runner_split[0][1]
        elif deferred is None:
            self.done = True
            self.restriction = tracker.current_restriction()
        else:
            self.restriction = deferred[0]

    @property
    def size(self) -> float:
        """What the runner is told the residual's size is."""
        return float(self.fn.restriction_size(self.element, self.restriction))


class _Finalizer:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def register(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)
