"""A stream is split and then merged while a producer writes and the consumer reads
(kinesis-mock): every record arrives, per partition key in order, parents before children."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.checkpoint import SHARD_END, MemoryCheckpointStore, SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, ShardState, ShardStatus
from kinesis_core.records import KinesisRecord

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}" for i in range(16)]
ROUNDS = 24


def test_split_then_merge_while_producing_and_consuming(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=2)
    store = MemoryCheckpointStore()

    async def main() -> tuple[list[KinesisRecord], list[ShardStatus], list[str]]:
        async with create_kinesis_client(stream.client_config) as client:
            resharded: list[str] = []

            async def open_shards() -> list[Any]:
                shards = await list_all_shards(client, stream.name)
                return sorted((s for s in shards if s.is_open), key=lambda s: s.start_hash_key)

            async def produce() -> None:
                for n in range(ROUNDS):
                    response = await client.put_records(
                        StreamName=stream.name,
                        Records=[{"Data": f"{k}:{n}".encode(), "PartitionKey": k} for k in KEYS],
                    )
                    assert response.get("FailedRecordCount", 0) == 0
                    if n == 7:
                        shards = await list_all_shards(client, stream.name)
                        parent = min(shards, key=lambda s: s.start_hash_key).shard_id
                        children = await asyncio.to_thread(stream.split, parent)
                        resharded.extend([parent, *children])
                    if n == 15:
                        resharded.append(await asyncio.to_thread(stream.merge, *resharded[1:3]))
                    await asyncio.sleep(0.05)

            async with Consumer(
                stream.name,
                client_config=stream.client_config,
                checkpoint_store=store,
                initial_position=TRIM_HORIZON,
                checkpoint_interval=0.2,
                shard_refresh_interval=0.5,
                idle_interval=0.2,
            ) as consumer:
                producer = asyncio.create_task(produce())
                got: list[KinesisRecord] = []
                wanted = {f"{k}:{n}".encode() for k in KEYS for n in range(ROUNDS)}

                async def consume() -> None:
                    seen: set[bytes] = set()
                    async for record in consumer:
                        got.append(record)
                        seen.add(record.data)
                        record.ack()
                        if seen >= wanted:
                            return

                await asyncio.wait_for(consume(), 45)
                await producer
                await consumer.checkpoint()
                status = consumer.status()
            return got, status, resharded

    got, status, resharded = asyncio.run(main())
    parent, left, right, merged = resharded
    states = {s.shard_id: s.state for s in status}
    assert next(s for s in status if s.shard_id == merged).parent_shard_ids == (left, right)
    seen = {r.data for r in got}
    assert seen == {f"{k}:{n}".encode() for k in KEYS for n in range(ROUNDS)}
    last: dict[str, int] = {}
    for record in got:
        key, n = record.data.decode().split(":")
        assert int(n) > last.get(key, -1), f"{key}: {n} came after {last[key]}"
        last[key] = int(n)
    for shard_id in (parent, left, right):
        assert states[shard_id] is ShardState.ENDED
    assert states[merged] is ShardState.READING
    # Parent before child: a shard's first record comes after every record of its parents.
    first_index: dict[str, int] = {}
    for i, record in enumerate(got):
        first_index.setdefault(record.shard_id, i)
    last_index = {r.shard_id: i for i, r in enumerate(got)}
    for child, parents in ((left, [parent]), (right, [parent]), (merged, [left, right])):
        for p in parents:
            assert last_index[p] < first_index[child], f"{child} started before {p} ended"

    async def rows() -> dict[str, Any]:
        return {row.shard_id: row for row in await store.list("default", stream.name)}

    stored = asyncio.run(rows())
    assert stored[parent].value is SHARD_END
    assert stored[left].parent_shard_ids == (parent,)


def test_a_consumer_closed_before_delivering_a_split_parents_last_records_leaves_them_to_read(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    """The parent was read to its end, its last records still queued when the consumer closed:
    its checkpoint stops before them (not SHARD_END), and the next consumer delivers them."""
    stream = kinesis_stream(shards=1)
    store = tmp_path / "checkpoints.sqlite3"

    async def read(stop_after: int | None) -> list[bytes]:
        got: list[bytes] = []
        async with Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=SQLiteCheckpointStore(store),
            initial_position=TRIM_HORIZON,
            shard_refresh_interval=0.5,
            idle_interval=0.2,
        ) as consumer:

            async def consume() -> None:
                async for record in consumer:
                    record.ack()
                    got.append(record.data)
                    if len(got) == stop_after:
                        return

            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(consume(), 3.0)
        return got

    records = [{"Data": b"%d" % i, "PartitionKey": str(i)} for i in range(100)]
    stream.boto_client().put_records(StreamName=stream.name, Records=records)
    (parent,) = stream.shards()
    stream.split(parent["ShardId"])
    first = asyncio.run(read(50))
    second = asyncio.run(read(None))
    assert len(first) == 50
    assert sorted(first + second, key=int) == [b"%d" % i for i in range(100)]
