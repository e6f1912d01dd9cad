"""ReadFromKinesis on a runner that never calls bundle finalizers.

Positions reach the external checkpoint store only from bundle finalizers (after the runner has
committed the bundle). A runner without bundle finalization (Flink in batch mode, Dataflow's
legacy runner v1) never calls them: the read then never writes the store, and a new job starts
from the last positions a finalizer did write, or from ``initial_position`` if none ever did.

The in-process FnApiRunner does finalize bundles; the switch off is a test-only patch that
makes every bundle report that it needs no finalization, so the runner never sends
FinalizeBundle, which is what a runner without the capability does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.worker import bundle_processor

from beam_kinesis import ReadFromKinesis
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from tests.helpers.beam import KEYS, append_lines, pipeline, put_round, read_lines

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


def test_without_bundle_finalization_the_store_is_never_written(
    kinesis_stream: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    for n in range(2):
        put_round(stream, n)
    store_path = str(tmp_path / "checkpoints.sqlite3")

    def read() -> list[tuple[str, int]]:
        out = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}.txt"
        out.touch()
        p = pipeline(stream, "in_memory")
        _ = (
            p
            | ReadFromKinesis(
                stream.name,
                initial_position=TRIM_HORIZON,
                checkpoint_store=store_path,
                application_name="no-finalizer",
                idle_interval=0.2,
                stop_when_caught_up=True,
            )
            | beam.Map(append_lines(str(out)))
        )
        p.run().wait_until_finish()
        return sorted((key, n) for key, n, _ in read_lines(out))

    def stored() -> dict[str, Any]:
        async def rows() -> dict[str, Any]:
            async with SQLiteCheckpointStore(store_path) as store:
                return {r.shard_id: r.value for r in await store.list("no-finalizer", stream.name)}

        return asyncio.run(rows())

    def rounds(*ns: int) -> list[tuple[str, int]]:
        return sorted((key, n) for key in KEYS for n in ns)

    with monkeypatch.context() as off:
        off.setattr(bundle_processor.BundleProcessor, "requires_finalization", lambda self: False)
        assert read() == rounds(0, 1)
        assert stored() == {}  # the read never wrote the store...
        assert read() == rounds(0, 1)  # ...so the next job starts from initial_position again
    assert read() == rounds(0, 1)  # finalization on: the positions are stored
    finalized = stored()
    assert set(finalized) == {s["ShardId"] for s in stream.shards()}
    put_round(stream, 2)
    with monkeypatch.context() as off:
        off.setattr(bundle_processor.BundleProcessor, "requires_finalization", lambda self: False)
        assert read() == rounds(2)  # starts from the last finalized positions
        assert stored() == finalized  # and leaves them where they were
