"""``max_idle_interval`` on a real server: an idle shard is polled less and less often, and a
record that comes after a long idle spell is still read."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import LocalStream

pytestmark = pytest.mark.integration


def test_an_idle_shard_is_polled_less_often_and_a_late_record_is_read(moto_stream: Any) -> None:
    stream: LocalStream = moto_stream(1)

    async def main() -> tuple[list[float], bytes]:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            loop = asyncio.get_running_loop()
            calls: list[float] = []
            six = asyncio.Event()

            def count(**_: Any) -> None:
                calls.append(loop.time())
                if len(calls) == 6:
                    six.set()

            client.meta.events.register("before-call.kinesis.GetRecords", count)
            async with Consumer(
                stream.name,
                client=client,
                checkpoint_store=MemoryCheckpointStore(),
                initial_position=TRIM_HORIZON,
                idle_interval=0.2,
                max_idle_interval=0.8,
                lean_get_records=False,  # every call through botocore, where it is counted
                auto_ack=True,
                close_timeout=0,
            ) as consumer:
                await asyncio.wait_for(six.wait(), 20)
                await asyncio.to_thread(stream.put, b"late", "k")
                record = await asyncio.wait_for(consumer.__anext__(), 10)
                return calls, record.data

    calls, data = asyncio.run(main())
    assert data == b"late"
    gaps = [b - a for a, b in itertools.pairwise(calls[:6])]
    # after each empty answer the wait doubles from 0.2 s up to 0.8 s (a gap may be longer)
    assert gaps[1] >= 0.4
    assert gaps[2] >= 0.8
    assert gaps[3] >= 0.8
    assert gaps[4] >= 0.8
