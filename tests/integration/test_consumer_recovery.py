"""Recovery paths against kinesis-mock: resume inside an aggregate, an expired iterator, acks
out of order, and a crash between the ack and the checkpoint write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aggregation import encode_aggregate
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.checkpoint import Checkpoint, CheckpointValue, MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.records import KinesisRecord, SubRecord

pytestmark = pytest.mark.integration


def put(stream: Any, entries: list[tuple[str, bytes]]) -> None:
    """PutRecords with the synchronous set-up client."""
    response = stream.boto_client().put_records(
        StreamName=stream.name,
        Records=[{"PartitionKey": pk, "Data": data} for pk, data in entries],
    )
    assert response.get("FailedRecordCount", 0) == 0


def consumer(stream: Any, store: Any, **kwargs: Any) -> Consumer:
    options: dict[str, Any] = {
        "client_config": stream.client_config,
        "checkpoint_store": store,
        "initial_position": TRIM_HORIZON,
        "checkpoint_interval": 0.2,
        "idle_interval": 0.2,
        "close_timeout": 1.0,
    }
    options.update(kwargs)
    return Consumer(stream.name, **options)


async def take(c: Consumer, count: int, *, ack: bool = True) -> list[KinesisRecord]:
    out: list[KinesisRecord] = []

    async def run() -> None:
        async for record in c:
            out.append(record)
            if ack:
                record.ack()
            if len(out) == count:
                return

    await asyncio.wait_for(run(), 20)
    return out


async def stored(store: Any, stream: Any) -> CheckpointValue:
    (row,) = await store.list("default", stream.name)
    return row.value  # type: ignore[no-any-return]


def test_resume_inside_an_aggregated_record(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    subs = [SubRecord("agg", None, f"sub-{i}".encode()) for i in range(10)]
    put(stream, [("agg", encode_aggregate(subs)), ("plain", b"after")])
    store = MemoryCheckpointStore()

    async def main() -> tuple[list[KinesisRecord], list[KinesisRecord], CheckpointValue]:
        async with consumer(stream, store) as c:
            first = await take(c, 4)
        checkpoint = await stored(store, stream)
        async with consumer(stream, store) as c:
            rest = await take(c, 7)
        return first, rest, checkpoint

    first, rest, checkpoint = asyncio.run(main())
    assert [r.sub_sequence_number for r in first] == [0, 1, 2, 3]
    assert all(r.aggregated for r in first)
    assert checkpoint == first[-1].position
    assert [r.data for r in rest] == [f"sub-{i}".encode() for i in range(4, 10)] + [b"after"]
    assert rest[0].position == (first[0].position[0], 4)


class ExpiringClient:
    """The real client, except that one GetRecords call fails with ExpiredIteratorException
    (kinesis-mock expires iterators only after 5 minutes)."""

    def __init__(self, client: Any, expire_on_call: int) -> None:
        self._client = client
        self._expire_on_call = expire_on_call
        self.get_records_calls = 0
        self.iterator_requests: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def get_records(self, **kwargs: Any) -> Any:
        self.get_records_calls += 1
        if self.get_records_calls == self._expire_on_call:
            raise ClientError(
                {"Error": {"Code": "ExpiredIteratorException", "Message": "Iterator expired"}},
                "GetRecords",
            )
        return await self._client.get_records(**kwargs)

    async def get_shard_iterator(self, **kwargs: Any) -> Any:
        self.iterator_requests.append(kwargs)
        return await self._client.get_shard_iterator(**kwargs)


def test_an_expired_iterator_is_replaced_after_the_last_record_read(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    put(stream, [("k", f"r{i}".encode()) for i in range(30)])

    async def main() -> tuple[list[KinesisRecord], ExpiringClient]:
        async with create_kinesis_client(stream.client_config) as real:
            client = ExpiringClient(real, expire_on_call=3)
            async with Consumer(
                stream.name,
                client=client,
                checkpoint_store=MemoryCheckpointStore(),
                initial_position=TRIM_HORIZON,
                max_records_per_call=7,
                idle_interval=0.2,
            ) as c:
                got = await take(c, 30)
        return got, client

    got, client = asyncio.run(main())
    assert [r.data for r in got] == [f"r{i}".encode() for i in range(30)]
    assert [r["ShardIteratorType"] for r in client.iterator_requests] == [
        "TRIM_HORIZON",
        "AFTER_SEQUENCE_NUMBER",
    ]
    # Re-got after a record that was delivered: nothing skipped, nothing read twice (above).
    resumed_after = int(client.iterator_requests[1]["StartingSequenceNumber"])
    assert resumed_after in {r.position[0] for r in got[:-1]}


def test_out_of_order_acks_checkpoint_the_contiguous_prefix(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    put(stream, [("k", f"r{i}".encode()) for i in range(8)])
    store = MemoryCheckpointStore()

    async def main() -> list[CheckpointValue]:
        seen = []
        async with consumer(stream, store, close_timeout=0.2) as c:
            got = await take(c, 8, ack=False)
            for i in (7, 5, 6, 3, 1, 2):
                got[i].ack()
            await c.checkpoint()
            seen.append(await stored(store, stream))  # nothing: record 0 is not acked
            got[0].ack()
            await c.checkpoint()
            seen.append(await stored(store, stream))  # 0..3
            got[4].ack()
            await c.checkpoint()
            seen.append(await stored(store, stream))  # all
            seen.append(got[3].position)
            seen.append(got[7].position)
        return seen

    before, after_first, after_all, third, last = asyncio.run(main())
    assert not isinstance(before, tuple)
    assert after_first == third
    assert after_all == last


class CrashingStore(MemoryCheckpointStore):
    """A store whose writes stop landing after ``allowed`` of them, as if the process died
    between the acks and the checkpoint write."""

    def __init__(self, inner: MemoryCheckpointStore, allowed: int) -> None:
        super().__init__()
        self._rows = inner._rows
        self.allowed = allowed

    async def put(
        self, application: str, stream: str, shard_id: str, value: CheckpointValue, **options: Any
    ) -> Checkpoint:
        if self.allowed <= 0:
            raise ConnectionError("crashed before the checkpoint was written")
        self.allowed -= 1
        return await super().put(application, stream, shard_id, value, **options)


def test_a_crash_between_ack_and_checkpoint_write_replays_only_the_unwritten(
    kinesis_stream: Any,
) -> None:
    stream = kinesis_stream(shards=1)
    put(stream, [("k", f"r{i}".encode()) for i in range(20)])
    durable = MemoryCheckpointStore()

    async def main() -> tuple[list[KinesisRecord], list[KinesisRecord], CheckpointValue]:
        crashing = CrashingStore(durable, allowed=1)
        c = consumer(stream, crashing, checkpoint_interval=3600)
        await c.start()
        first = await take(c, 12)
        await c.checkpoint()  # lands: records 0..11
        await take(c, 8)  # acked, but the write below never lands
        with pytest.raises(ConnectionError):
            await c.close()
        checkpoint = await stored(durable, stream)
        async with consumer(stream, durable) as again:
            replayed = await take(again, 8)
        return first, replayed, checkpoint

    first, replayed, checkpoint = asyncio.run(main())
    assert checkpoint == first[-1].position
    assert [r.data for r in replayed] == [f"r{i}".encode() for i in range(12, 20)]


def test_two_consumers_sharing_a_store_without_leases_are_warned(
    kinesis_stream: Any, tmp_path: Any
) -> None:
    """Both would deliver every record; the second writer of a checkpoint row says so."""
    from kinesis_core.checkpoint import SQLiteCheckpointStore
    from kinesis_core.consumer import SharedCheckpointsWarning

    stream = kinesis_stream(shards=1)
    put(stream, [(f"k{i}", f"r{i}".encode()) for i in range(6)])
    path = tmp_path / "shared.sqlite3"

    async def main() -> tuple[list[KinesisRecord], list[KinesisRecord]]:
        async with (
            SQLiteCheckpointStore(path) as one,
            SQLiteCheckpointStore(path) as two,
            consumer(stream, one) as first,
            consumer(stream, two) as second,
        ):
            a = await take(first, 3)
            await first.checkpoint()
            b = await take(second, 6)
            await second.checkpoint()
            return a, b

    with pytest.warns(SharedCheckpointsWarning, match="leases=True") as caught:
        a, b = asyncio.run(main())
    assert [r.data for r in a] == [b"r0", b"r1", b"r2"]
    assert [r.data for r in b] == [f"r{i}".encode() for i in range(6)]
    assert "written by another consumer" in str(caught[0].message)
