"""Consume a stream with the core consumer: acks, SQLite checkpoints, a restart, a split.

Starts kinesis-mock on 127.0.0.1 (it reshards like Kinesis does), makes a 2-shard stream,
writes orders through the core producer (KPL aggregates), and then:

1. reads 120 orders one by one, acking each, and stops: the checkpoints go to a SQLite file;
2. splits a shard and writes more orders;
3. starts again on the same file and reads the rest in batches: nothing is read twice, the
   parent shard is finished (SHARD_END) before its children start.

Run: ``.venv/bin/python examples/consumer_example.py``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from kinesis_core import ClientConfig
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import KinesisMock, LocalStream
from kinesis_core.producer import Producer, ProducerConfig


async def write_orders(stream: str, config: ClientConfig, first: int, count: int) -> None:
    async with Producer(
        stream, client_config=config, producer_config=ProducerConfig(record_max_buffered_time=0.05)
    ) as producer:
        orders = [{"order": i, "customer": f"c-{i % 9}"} for i in range(first, first + count)]
        result = await producer.put_many([(json.dumps(o).encode(), o["customer"]) for o in orders])
        result.raise_for_failures()
    print(f"wrote orders {first}..{first + count - 1}")


def consumer(stream: str, config: ClientConfig, store: SQLiteCheckpointStore) -> Consumer:
    return Consumer(
        stream,
        client_config=config,
        checkpoint_store=store,
        application_name="billing",
        initial_position=TRIM_HORIZON,
        checkpoint_interval=1.0,
        idle_interval=0.2,
        shard_refresh_interval=1.0,
    )


async def first_session(stream: str, config: ClientConfig, db: Path) -> set[int]:
    seen: set[int] = set()
    async with SQLiteCheckpointStore(db) as store, consumer(stream, config, store) as c:
        async for record in c:
            seen.add(json.loads(record.data)["order"])
            record.ack()  # processed: its checkpoint may move past it
            if len(seen) == 120:
                break
        # Leaving the block writes the final checkpoints.
    async with SQLiteCheckpointStore(db) as store:
        for row in await store.list("billing", stream):
            print(f"  checkpoint {row.shard_id}: {row.value}")
    return seen


async def second_session(stream: str, config: ClientConfig, db: Path, total: int) -> set[int]:
    seen: set[int] = set()
    async with SQLiteCheckpointStore(db) as store, consumer(stream, config, store) as c:
        async for batch in c.batches():
            seen.update(json.loads(r.data)["order"] for r in batch)
            batch.ack()
            if len(seen) == total:
                break
        for status in c.status():
            parents = ",".join(status.parent_shard_ids) or "-"
            print(
                f"  {status.shard_id} {status.state.value:<8} parents={parents}"
                f" lag={status.millis_behind_latest} ms"
            )
    return seen


async def main(stream: LocalStream) -> None:
    config = stream.client_config
    await write_orders(stream.name, config, 0, 300)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "checkpoints.sqlite3"
        print("session 1: read 120 orders, record by record")
        first = await first_session(stream.name, config, db)

        parent = stream.shards()[0]["ShardId"]
        children = await asyncio.to_thread(stream.split, parent)
        print(f"split {parent} into {children}")
        await write_orders(stream.name, config, 300, 200)

        print("session 2: the rest, in batches, from the checkpoints")
        second = await second_session(stream.name, config, db, 500 - len(first))
    assert not first & second, "an acked, checkpointed order was read twice"
    assert first | second == set(range(500))
    print(f"read {len(first)} + {len(second)} orders: all 500, none twice")


if __name__ == "__main__":
    with KinesisMock() as server:
        asyncio.run(main(server.create_stream("orders", shards=2)))
