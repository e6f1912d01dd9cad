"""A deduplicating Consumer on moto's server (kinesis-mock for a split): copies of a record id
are dropped and counted, the window survives a restart in the SQLite checkpoint file, children
start with their parents' windows after a split, and a record delivered after the last
checkpoint comes again after a crash (the at-least-once part: its id is not in the stored
window)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.consumer.dedup import DedupWindow
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.records import KinesisRecord

pytestmark = pytest.mark.integration

OPTIONS: dict[str, Any] = {
    "initial_position": TRIM_HORIZON,
    "checkpoint_interval": 0.2,
    "shard_refresh_interval": 0.5,
    "idle_interval": 0.2,
    "deduplicate": True,
}


async def write(stream: Any, ids: range, prefix: str = "order") -> None:
    """Records ``prefix-N`` with that id, aggregated, keyed by N."""
    config = ProducerConfig(record_ids=True, record_max_buffered_time=0.05)
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as p:
        await asyncio.gather(
            *[
                p.put(f"{prefix}-{n}".encode(), partition_key=str(n), record_id=f"{prefix}-{n}")
                for n in ids
            ]
        )


async def read(
    stream: Any, store: Path, wanted: int, *, ack: int | None = None, **options: Any
) -> tuple[list[KinesisRecord], int]:
    """Read until ``wanted`` records came (acking the first ``ack``, all by default) and a
    moment more; the records and the duplicates the consumer dropped."""
    got: list[KinesisRecord] = []
    async with Consumer(
        stream.name,
        client_config=stream.client_config,
        checkpoint_store=SQLiteCheckpointStore(store),
        **{**OPTIONS, **options},
    ) as consumer:

        async def consume() -> None:
            async for record in consumer:
                got.append(record)
                if ack is None or len(got) <= ack:
                    record.ack()
                if len(got) >= wanted:
                    return

        await asyncio.wait_for(consume(), 30)
        with pytest.raises(asyncio.TimeoutError):  # nothing more comes
            await asyncio.wait_for(consume(), 1.0)
        await consumer.checkpoint()
        dropped = sum(s.duplicates for s in consumer.status())
    return got, dropped


def windows(store: Path) -> dict[str, str]:
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT shard_id, dedup_window FROM kinesis_checkpoints").fetchall()
    return {shard: text for shard, text in rows if text is not None}


def test_copies_are_dropped_and_the_window_survives_a_restart(
    moto_stream: Any, tmp_path: Path
) -> None:
    stream = moto_stream(shards=2)
    store = tmp_path / "checkpoints.sqlite3"

    async def main() -> None:
        await write(stream, range(200))
        await write(stream, range(100, 200))  # retried writes: the same ids again
        got, dropped = await read(stream, store, 200)
        assert sorted(r.data for r in got) == sorted(f"order-{n}".encode() for n in range(200))
        assert dropped == 100
        stored = windows(store)
        assert len(stored) == 2
        assert sum(len(DedupWindow.loads(text)) for text in stored.values()) == 200
        # A restart resumes with the stored windows: copies written meanwhile are dropped, and
        # so again are the copies after each shard's last delivered record (the checkpoint
        # is a delivered record's position).
        await write(stream, range(150, 250))
        got, dropped = await read(stream, store, 50)
        assert sorted(r.data for r in got) == sorted(f"order-{n}".encode() for n in range(200, 250))
        assert dropped == 100 + 50

    asyncio.run(main())


def test_children_drop_copies_of_what_their_parent_delivered(
    kinesis_stream: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=1)  # moto's split leaves the parent open to writes
    store = tmp_path / "checkpoints.sqlite3"

    async def main() -> None:
        await write(stream, range(100))
        got, _ = await read(stream, store, 100)
        assert len(got) == 100
        (parent,) = stream.shards()
        children = await asyncio.to_thread(stream.split, parent["ShardId"])
        await write(stream, range(50, 150))  # copies of 50..99 land in the children
        got, dropped = await read(stream, store, 50)
        assert {r.shard_id for r in got} <= set(children)
        assert sorted(r.data for r in got) == sorted(f"order-{n}".encode() for n in range(100, 150))
        assert dropped == 50

    asyncio.run(main())


def test_records_delivered_after_the_last_checkpoint_come_again_after_a_crash(
    moto_stream: Any, tmp_path: Path
) -> None:
    stream = moto_stream(shards=1)
    store = tmp_path / "checkpoints.sqlite3"

    async def main() -> None:
        await write(stream, range(100))
        first, _ = await read(stream, store, 100, ack=60, close_timeout=0)
        assert len(first) == 100
        # The checkpoint is after the 60th record: its window holds those ids only.
        (text,) = windows(store).values()
        assert len(DedupWindow.loads(text)) == 60
        again, dropped = await read(stream, store, 40)
        assert [r.data for r in again] == [r.data for r in first[60:]]
        assert dropped == 0

    asyncio.run(main())
