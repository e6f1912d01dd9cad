"""One lease table, two KCLs in turns: this project's Consumer and kcl-rs (a Rust port of the
KCL v3, with Python bindings) on moto's server (Kinesis and DynamoDB on one endpoint).

Our consumer reads a first batch, checkpoints and stops; kcl-rs, started on the same table
(which also holds a worker row and a leader row of ours, as a SIGKILLed worker leaves them),
delivers only what came after our checkpoints (the lease rows carrying a dedup window of the
largest size, which its checkpoints keep); it stops, and our consumer delivers only what came
after kcl-rs's. The table is created by our store (with the KCL 3.x owner index), so kcl-rs
finds it as its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

from kinesis_core.checkpoint import DynamoDBCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.consumer.dedup import MAX_WINDOW_BYTES
from kinesis_core.lease import LeaseConfig
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LOCAL_REGION

kcl_rs = pytest.importorskip("kcl_rs", reason="kcl-rs is in the test extras")

pytestmark = pytest.mark.integration

SHARDS = 2
PER_BATCH = 20


def put_batch(stream: Any, batch: str) -> set[str]:
    data = {f"{batch}-{i}" for i in range(PER_BATCH)}
    for item in sorted(data):
        stream.put(item.encode(), item)
    return data


async def ours(stream: Any, app: str, expected: set[str]) -> set[str]:
    """Our consumer with leases, until it delivered ``expected``; what it delivered."""
    seen: set[str] = set()
    config = stream.client_config
    async with (
        DynamoDBCheckpointStore(client_config=config) as store,
        Consumer(
            stream.name,
            client_config=config,
            checkpoint_store=store,
            application_name=app,
            initial_position=TRIM_HORIZON,
            checkpoint_interval=0.2,
            idle_interval=0.2,
            leases=LeaseConfig(
                worker_id="ours", failover_time=3, renew_interval=0.5, take_interval=1
            ),
        ) as consumer,
    ):
        async for record in consumer:
            seen.add(record.data.decode())
            record.ack()
            if seen >= expected:
                break
    return seen


class Collect(kcl_rs.RecordProcessorBase):  # type: ignore[misc,name-defined]
    seen: set[str] = set()
    lock = threading.Lock()

    def initialize(self, _: Any) -> None:
        pass

    def process_records(self, batch: Any) -> None:
        with self.lock:
            self.seen.update(bytes(r.binary_data).decode() for r in batch.records)
        batch.checkpointer.checkpoint()

    def lease_lost(self, _: Any) -> None:
        pass

    def shard_ended(self, ended: Any) -> None:
        ended.checkpointer.checkpoint()

    def shutdown_requested(self, request: Any) -> None:
        request.checkpointer.checkpoint()


def theirs(stream: Any, app: str, expected: set[str], timeout: float) -> set[str]:
    """kcl-rs on the same table, until it delivered ``expected`` (or ``timeout``)."""
    Collect.seen = set()
    scheduler = kcl_rs.Scheduler(
        stream_name=stream.name,
        application_name=app,
        record_processor_factory=Collect,
        worker_identifier="kcl-rs",
        region=LOCAL_REGION,
        endpoint_url=stream.client_config.endpoint_url,
        access_key_id=DUMMY_ACCESS_KEY_ID,
        secret_access_key=DUMMY_SECRET_ACCESS_KEY,
        initial_position="TRIM_HORIZON",
        retrieval_mode="POLLING",
        idle_time_between_reads_millis=200,
    )
    scheduler.start()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with Collect.lock:
                if Collect.seen >= expected:
                    break
            time.sleep(0.2)
    finally:
        scheduler.shutdown()
    with Collect.lock:
        return set(Collect.seen)


async def leave_rows(stream: Any, app: str) -> None:
    """A worker row and a leader row, as a SIGKILLed worker of ours leaves them."""
    async with DynamoDBCheckpointStore(client_config=stream.client_config) as store:
        await store.heartbeat(app, stream.name, "killed")
        assert await store.claim_leader(app, stream.name, "killed", None) == 1


WINDOW = "é" * (MAX_WINDOW_BYTES // 2)
"""A dedup window of the largest size in UTF-8 bytes: kcl-rs reads past the attribute."""


async def add_windows(stream: Any, app: str) -> None:
    """A checkpoint with a dedup window on every lease row, at the position it holds."""
    async with DynamoDBCheckpointStore(client_config=stream.client_config) as store:
        for row in await store.list(app, stream.name):
            await store.put(
                app, stream.name, row.shard_id, row.value, expected=row, dedup_window=WINDOW
            )


async def windows(stream: Any, app: str) -> list[str | None]:
    async with DynamoDBCheckpointStore(client_config=stream.client_config) as store:
        return [row.dedup_window for row in await store.list(app, stream.name)]


def test_kcl_rs_and_ours_resume_from_each_others_checkpoints(moto_stream: Any) -> None:
    stream = moto_stream(shards=SHARDS)
    app = f"kclrs-{uuid.uuid4().hex[:8]}"
    first = put_batch(stream, "a")
    assert asyncio.run(ours(stream, app, first)) == first
    # kcl-rs reads a table holding our other rows too: they are no leases to it.
    asyncio.run(leave_rows(stream, app))
    asyncio.run(add_windows(stream, app))
    second = put_batch(stream, "b")
    got = theirs(stream, app, second, timeout=120)
    assert got == second  # from our checkpoints: nothing of batch a again
    # kcl-rs checkpoints with UpdateItem of its own attributes: the windows stay.
    assert asyncio.run(windows(stream, app)) == [WINDOW] * SHARDS
    third = put_batch(stream, "c")
    assert asyncio.run(ours(stream, app, third)) == third  # from kcl-rs's checkpoints
