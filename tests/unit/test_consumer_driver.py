"""The Consumer driver against the in-memory Kinesis (tests/fakes/kinesis.py, no server):
shard lineage on split and merge, resumes inside aggregates, acks and checkpoints, errors
injected on demand."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from botocore.exceptions import ClientError

from kinesis_core.checkpoint import SHARD_END, MemoryCheckpointStore, Sentinel
from kinesis_core.consumer import LATEST, Consumer, RecordBatch, ShardState
from kinesis_core.errors import KinesisServiceError
from kinesis_core.records import KinesisRecord, SubRecord
from tests.fakes.clock import FakeClock
from tests.fakes.kinesis import FakeKinesis, client_error
from tests.helpers.consumer import assert_in_order_per_key, consumer, keyed


async def collect(c: Consumer, count: int, *, ack: bool = True) -> list[KinesisRecord]:
    out: list[KinesisRecord] = []

    async def run() -> None:
        async for record in c:
            out.append(record)
            if ack:
                record.ack()
            if len(out) == count:
                return

    await asyncio.wait_for(run(), 10)
    return out


def test_split_and_merge_while_reading_keep_per_key_order() -> None:
    async def main() -> None:
        fake = FakeKinesis(2)
        keys = [f"key-{i}" for i in range(12)]
        counter = itertools.count()

        def produce(rounds: int) -> None:
            for _ in range(rounds):
                n = next(counter)
                for key in keys:
                    fake.put(key, f"{key}:{n}".encode())

        produce(5)
        store = MemoryCheckpointStore()
        ended: list[str] = []
        async with consumer(fake, store, on_shard_ended=ended.append) as c:
            got = await collect(c, 60)
            first, second = (s.shard_id for s in fake.open_shards())
            fake.split(first)
            produce(5)
            got += await collect(c, 60)
            a, b = (s.shard_id for s in fake.open_shards() if s.parents == (first,))
            fake.merge(a, b)
            produce(5)
            got += await collect(c, 60)
            states = c.shard_states()
        assert sorted(keyed(r) for r in got) == sorted((k, n) for k in keys for n in range(15))
        assert_in_order_per_key(got)
        assert states[first] is ShardState.ENDED
        assert states[a] is ShardState.ENDED
        assert states[b] is ShardState.ENDED
        rows = {row.shard_id: row for row in await store.list("default", "stream")}
        assert rows[first].value is SHARD_END
        assert rows[a].value is SHARD_END
        assert rows[a].parent_shard_ids == (first,)
        merged = next(s for s in fake.open_shards() if len(s.parents) == 2)
        assert rows[merged.shard_id].parent_shard_ids == (a, b)
        assert rows[second].position is not None
        assert sorted(ended) == sorted([first, a, b])  # the hook: once per shard, at SHARD_END

    asyncio.run(main())


def test_restart_resumes_after_the_checkpoint_inside_an_aggregate() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        fake.put_aggregate([SubRecord("k", None, f"k:{i}".encode()) for i in range(10)])
        fake.put("k", b"k:10")
        store = MemoryCheckpointStore()
        async with consumer(fake, store) as c:
            got = await collect(c, 4)
        assert [r.sub_sequence_number for r in got] == [0, 1, 2, 3]
        row = (await store.list("default", "stream"))[0]
        assert row.value == got[-1].position
        async with consumer(fake, store) as c:
            rest = await collect(c, 7)
        assert [keyed(r)[1] for r in rest] == list(range(4, 11))

    asyncio.run(main())


def test_out_of_order_acks_checkpoint_only_the_contiguous_prefix() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        for i in range(6):
            fake.put("k", f"k:{i}".encode())
        store = MemoryCheckpointStore()
        async with consumer(fake, store, close_timeout=0.1) as c:
            got = await collect(c, 6, ack=False)
            for i in (5, 3, 1, 0):
                got[i].ack()
            await c.checkpoint()
            row = (await store.list("default", "stream"))[0]
            assert row.value == got[1].position
            status = c.status()[0]
            assert status.pending_acks == 2
            assert status.checkpoint == got[1].position
            assert status.position == got[5].position
            assert status.state is ShardState.READING
            got[2].ack()
            await c.checkpoint()
            assert (await store.list("default", "stream"))[0].value == got[3].position
        # Closed without the last ack: the checkpoint stays before the unacked record.
        assert (await store.list("default", "stream"))[0].value == got[3].position

    asyncio.run(main())


def test_expired_iterator_and_throttling_lose_nothing_and_repeat_nothing() -> None:
    clock = FakeClock()  # the backoffs and the idle waits pass at once

    async def main() -> None:
        fake = FakeKinesis(1)
        for i in range(5):
            fake.put("k", f"k:{i}".encode())
        fake.faults["GetRecords"] += [
            client_error("ProvisionedThroughputExceededException"),
            client_error("InternalFailure", status=500),
        ]
        store = MemoryCheckpointStore()
        async with consumer(fake, store, max_records_per_call=2, clock=clock) as c:
            got = await collect(c, 3)
            fake.faults["GetRecords"].append(client_error("ExpiredIteratorException"))
            for i in range(5, 8):
                fake.put("k", f"k:{i}".encode())
            got += await collect(c, 5)
        assert [keyed(r)[1] for r in got] == list(range(8))
        assert fake.count("GetShardIterator") == 2

    clock.run(main())


def test_a_fatal_error_surfaces_from_the_iterator() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        fake.faults["GetShardIterator"].append(client_error("AccessDeniedException"))
        async with consumer(fake, MemoryCheckpointStore()) as c:
            with pytest.raises(
                KinesisServiceError, match=r"GetIterator on shardId-0+ of stream failed"
            ) as info:
                await collect(c, 1)
            assert info.value.code == "AccessDeniedException"
            assert isinstance(info.value.__cause__, ClientError)
            with pytest.raises(KinesisServiceError):
                await collect(c, 1)

    asyncio.run(main())


def test_a_missing_stream_fails_at_start() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        fake.faults["ListShards"].append(client_error("ResourceNotFoundException"))
        with pytest.raises(KinesisServiceError, match="starting to read stream failed") as info:
            async with consumer(fake, MemoryCheckpointStore()):
                pass
        assert info.value.code == "ResourceNotFoundException"
        assert "check the stream name" in str(info.value)

    asyncio.run(main())


def test_close_waits_for_delivered_acks_and_forgets_undelivered_records() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        for i in range(10):
            fake.put("k", f"k:{i}".encode())
        store = MemoryCheckpointStore()
        c = consumer(fake, store, checkpoint_interval=60)
        await c.start()
        got = await collect(c, 3, ack=False)
        got[0].ack()
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, got[2].ack)
        loop.call_later(0.2, got[1].ack)
        await c.close()
        row = (await store.list("default", "stream"))[0]
        assert row.value == got[2].position

    asyncio.run(main())


def test_batches_with_auto_ack_and_latest() -> None:
    async def main() -> None:
        fake = FakeKinesis(2)
        fake.put("old", b"old:0")
        store = MemoryCheckpointStore()
        seen: list[RecordBatch] = []
        async with consumer(fake, store, initial_position=LATEST, auto_ack=True) as c:
            await asyncio.sleep(0.3)  # the readers hold their LATEST iterators
            for i in range(4):
                fake.put(f"k{i}", f"k{i}:0".encode())

            async def run() -> None:
                async for batch in c.batches():
                    seen.append(batch)
                    if sum(len(b) for b in seen) == 4:
                        return

            await asyncio.wait_for(run(), 10)
            assert all(b.acked for b in seen[:-1])
            assert not seen[-1].acked
        assert sorted(r.data for b in seen for r in b) == [b"k0:0", b"k1:0", b"k2:0", b"k3:0"]
        rows = {row.shard_id: row.value for row in await store.list("default", "stream")}
        # The last batch was not acked (the loop body may not have finished): its shard stays
        # at LATEST or an earlier position, never past it.
        last = seen[-1]
        assert rows[last.shard_id] in (Sentinel.LATEST, *(b.records[-1].position for b in seen))

    asyncio.run(main())


def test_children_wait_while_the_parent_has_unacked_records() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        parent = fake.open_shards()[0].shard_id
        fake.put("k", b"k:0")
        fake.split(parent)
        fake.put("k", b"k:1")
        async with consumer(fake, MemoryCheckpointStore(), close_timeout=0) as c:
            first = await collect(c, 1, ack=False)
            await asyncio.sleep(0.5)
            assert c.shard_states()[parent] is ShardState.ENDING
            assert {s.state for s in c.status() if s.parent_shard_ids} == {
                ShardState.WAITING_FOR_PARENT
            }
            first[0].ack()
            second = await collect(c, 1)
        assert keyed(second[0]) == ("k", 1)

    asyncio.run(main())


def test_only_a_fresh_application_lists_with_a_shard_filter() -> None:
    async def main() -> None:
        fake = FakeKinesis(3)
        fake.split(fake.open_shards()[0].shard_id)
        store = MemoryCheckpointStore()
        async with consumer(fake, store, initial_position=LATEST) as c:
            await asyncio.sleep(0.5)
            states = c.shard_states()
        assert fake.shard_filters[0] == {"Type": "AT_LATEST"}
        assert len(fake.shard_filters) > 1
        assert set(fake.shard_filters[1:]) == {None}
        # The closed parent: not listed at first, then listed and skipped (LATEST).
        assert sorted(states.values()) == sorted(
            [ShardState.SKIPPED] + [ShardState.READING] * 4, key=lambda s: s.value
        )
        fake.shard_filters.clear()
        async with consumer(fake, store, initial_position=LATEST):
            pass
        assert fake.shard_filters[0] is None

    asyncio.run(main())


def test_transient_errors_at_start_are_retried() -> None:
    async def main() -> None:
        fake = FakeKinesis(1)
        fake.put("k", b"k:0")
        fake.faults["ListShards"] += [
            client_error("InternalFailure", status=500),
            client_error("LimitExceededException"),
        ]
        async with consumer(fake, MemoryCheckpointStore()) as c:
            assert [keyed(r) for r in await collect(c, 1)] == [("k", 0)]

    asyncio.run(main())
