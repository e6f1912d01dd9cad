"""Consumers sharing a stream through leases, in one event loop: the in-memory Kinesis
(tests/fakes/kinesis.py) and a MemoryCheckpointStore shared by the workers."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from kinesis_core.checkpoint import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointValue,
    MemoryCheckpointStore,
    Sentinel,
)
from kinesis_core.consumer import Consumer, ShardState
from kinesis_core.consumer.incarnation import StreamRecreatedError
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseConfig
from kinesis_core.records import KinesisRecord
from tests.fakes.clock import FakeClock
from tests.fakes.kinesis import FakeKinesis
from tests.helpers.consumer import assert_in_order_per_key, consumer

APP = "app"
Delivery = tuple[int, str, KinesisRecord]
"""(global delivery order, worker, record)"""


def lease_config(name: str, failover: float = 1.0) -> LeaseConfig:
    return LeaseConfig(
        worker_id=name,
        failover_time=failover,
        renew_interval=0.05,
        take_interval=0.1,
        parent_poll_interval=0.05,
    )


def worker(fake: FakeKinesis, store: Any, name: str, **kwargs: Any) -> Consumer:
    kwargs.setdefault("leases", lease_config(name))
    return consumer(fake, store, application_name=APP, **kwargs)


class Pumps:
    """Consumers iterated in the background; every delivery is logged, then acked."""

    def __init__(self, consumers: dict[str, Consumer]) -> None:
        self.consumers = consumers
        self.log: list[Delivery] = []
        self._order = itertools.count()
        self._tasks = [asyncio.create_task(self._pump(n, c)) for n, c in consumers.items()]

    async def _pump(self, name: str, c: Consumer) -> None:
        async for record in c:
            self.log.append((next(self._order), name, record))
            record.ack()

    async def until(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        async def wait() -> None:
            while not condition():  # noqa: ASYNC110 (polling the consumers' state)
                await asyncio.sleep(0.02)

        await asyncio.wait_for(wait(), timeout)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def data(self, names: Sequence[str] | None = None) -> list[str]:
        return [r.data.decode() for _, n, r in self.log if names is None or n in names]


def put_keys(fake: FakeKinesis, count: int, round_: int = 0) -> set[str]:
    for i in range(count):
        fake.put(f"k{i}", f"k{i}:{round_}".encode())
    return {f"k{i}:{round_}" for i in range(count)}


def owners(*consumers: Consumer) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in consumers:
        for shard in c.leased_shards():
            assert c.worker_id is not None
            out.setdefault(shard, []).append(c.worker_id)
    return out


def balanced(consumers: Sequence[Consumer], shards: int) -> Callable[[], bool]:
    def check() -> bool:
        held = owners(*consumers)
        per = [len(c.leased_shards()) for c in consumers]
        return (
            len(held) == shards
            and all(len(h) == 1 for h in held.values())
            and (max(per) - min(per) <= 1)
        )

    return check


def test_two_workers_split_the_shards_and_lose_nothing() -> None:
    async def main() -> None:
        fake = FakeKinesis(4)
        first = put_keys(fake, 200)
        store = MemoryCheckpointStore()
        a, b = worker(fake, store, "a"), worker(fake, store, "b")
        async with a, b:
            pumps = Pumps({"a": a, "b": b})
            await pumps.until(balanced([a, b], 4))
            await pumps.until(lambda: set(pumps.data()) >= first)
            assert len(a.leased_shards()) == len(b.leased_shards()) == 2
            # Settled: new records of a shard go to its holder only.
            seen = len(pumps.log)
            second = put_keys(fake, 200, 1)
            await pumps.until(lambda: set(pumps.data()) >= first | second)
            held = owners(a, b)
            for _, name, record in pumps.log[seen:]:
                assert held[record.shard_id] == [name]
            await pumps.stop()
        rows = await store.list(APP, "stream")
        assert len(rows) == 4
        assert all(row.owner is None for row in rows)  # close released them

    asyncio.run(main())


def test_a_worker_joining_gets_its_share_by_hand_off_and_no_record_twice() -> None:
    """Balancing moves leases between live workers by hand-off: the owner stops, its acks
    land, its final checkpoint is the taker's start. Records keep coming all along."""

    async def main() -> None:
        fake = FakeKinesis(4)
        store = MemoryCheckpointStore()
        handed: list[str] = []
        lost: list[str] = []
        a = worker(fake, store, "a", on_lease_handed_over=handed.append, on_lease_lost=lost.append)
        async with a:
            pumps_a = Pumps({"a": a})
            produced = put_keys(fake, 100)
            await pumps_a.until(lambda: set(pumps_a.data()) >= produced)
            assert len(a.leased_shards()) == 4
            b = worker(fake, store, "b")
            async with b:
                pumps_b = Pumps({"b": b})
                for round_ in range(1, 40):
                    produced |= put_keys(fake, 10, round_)
                    await asyncio.sleep(0.02)
                await pumps_b.until(balanced([a, b], 4))
                delivered = lambda: pumps_a.data() + pumps_b.data()  # noqa: E731
                await pumps_b.until(lambda: set(delivered()) >= produced)
                assert len(b.leased_shards()) == 2
                await pumps_b.stop()
                # The hooks: the two shards handed over, none lost.
                assert sorted(handed) == sorted(b.leased_shards())
                assert lost == []
            await pumps_a.stop()
        everything = pumps_a.data() + pumps_b.data()
        assert sorted(everything) == sorted(produced)  # none lost, none twice

    asyncio.run(main())


def test_with_throughput_assignment_each_lease_carries_what_its_owner_reads() -> None:
    async def main() -> None:
        fake = FakeKinesis(2)
        produced = put_keys(fake, 200)
        store = MemoryCheckpointStore()
        config = dataclasses.replace(lease_config("a"), assignment="throughput")
        a = worker(fake, store, "a", leases=config)
        async with a:
            pumps = Pumps({"a": a})
            await pumps.until(lambda: set(pumps.data()) >= produced)

            async def measured() -> bool:
                rows = await store.list(APP, "stream")
                return len(rows) == 2 and all(r.throughput_kbps is not None for r in rows)

            while not await measured():  # noqa: ASYNC110 (polling the store)
                await asyncio.sleep(0.02)
            await pumps.stop()
        rows = await store.list(APP, "stream")
        assert all(r.throughput_kbps is not None and r.throughput_kbps >= 0 for r in rows)

    asyncio.run(main())


def test_a_lost_lease_stops_delivery_at_once_and_fences_checkpoints() -> None:
    clock = FakeClock()  # the renewals, the thief's and the waits pass at once

    async def main() -> None:
        fake = FakeKinesis(1)
        put_keys(fake, 300)
        store = MemoryCheckpointStore()
        (shard,) = fake.shards
        # Small batches, so that several wait in the consumer's queue, undelivered.
        config = lease_config("a", 30.0)
        lost: list[str] = []
        a = worker(
            fake,
            store,
            "a",
            max_records_per_call=10,
            leases=config,
            clock=clock,
            on_lease_lost=lost.append,
        )
        async with a:
            first = await asyncio.wait_for(a.__anext__(), 5)
            while a._delivery.queue.qsize() < 3:  # noqa: ASYNC110 (batches read, not delivered)
                await asyncio.sleep(0.01)
            first.ack()
            await a.checkpoint()
            before = await store.get(APP, "stream", shard)
            assert before is not None
            assert before.owner == "a"
            assert before.position == first.position
            # Another worker steals the lease (between two renewals of a) and keeps it alive.
            while True:
                current = await store.get(APP, "stream", shard)
                assert current is not None
                try:
                    stolen = await store.update_lease(
                        APP, "stream", shard, expected=current, owner="b"
                    )
                    break
                except CheckpointConflictError:
                    continue
            stop = asyncio.Event()

            async def renew_as_b() -> None:
                row = stolen
                while not stop.is_set():
                    row = await store.update_lease(APP, "stream", shard, expected=row, owner="b")
                    await asyncio.sleep(0.02)

            thief = asyncio.create_task(renew_as_b())
            while a.leased_shards():  # noqa: ASYNC110 (until the renewal fails)
                await asyncio.sleep(0.01)
            # Nothing more of the shard reaches the user: not the rest of the current batch,
            # not the batches that were queued.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(a.__anext__(), 0.5)
            assert a._delivery.queue.qsize() == 0
            assert shard not in a.shard_states()
            assert lost == [shard]  # the hook
            # And no checkpoint of it is written any more.
            await a.checkpoint()
            stop.set()
            await thief
        row = await store.get(APP, "stream", shard)
        assert row is not None
        assert row.owner == "b"
        assert row.position == first.position

    clock.run(main())


def test_close_hands_over_checkpoint_then_release() -> None:
    async def main() -> None:
        fake = FakeKinesis(2)
        produced = put_keys(fake, 100)
        store = MemoryCheckpointStore()
        a = worker(fake, store, "a")
        async with a:
            pumps = Pumps({"a": a})
            await pumps.until(lambda: len(pumps.log) >= 40)
            await pumps.stop()
        rows = await store.list(APP, "stream")
        assert all(row.owner is None for row in rows)
        # A successor starts where the acks ended: no record twice, none lost.
        b = worker(fake, store, "b")
        async with b:
            pumps_b = Pumps({"b": b})
            await pumps_b.until(lambda: len(pumps.log) + len(pumps_b.log) >= len(produced))
            await pumps_b.stop()
        delivered = pumps.data() + pumps_b.data()
        assert sorted(delivered) == sorted(produced)

    asyncio.run(main())


def test_parent_before_child_across_workers() -> None:
    async def main() -> None:
        fake = FakeKinesis(2)
        store = MemoryCheckpointStore()
        a, b = worker(fake, store, "a"), worker(fake, store, "b")
        n = itertools.count()
        produced: set[str] = set()

        def put(rounds: int) -> None:
            for _ in range(rounds):
                produced.update(put_keys(fake, 20, next(n)))

        async with a, b:
            pumps = Pumps({"a": a, "b": b})
            await pumps.until(balanced([a, b], 2))
            put(3)
            parent = sorted(fake.shards)[0]
            fake.split(parent)
            put(3)
            await pumps.until(lambda: set(pumps.data()) >= produced)
            await pumps.until(lambda: len(owners(a, b)) == 3)  # the open one and 2 children
            await pumps.stop()
        # Leases move while the children start, so records may come twice (at least once):
        # look at the first delivery of each.
        first: dict[tuple[str, tuple[int, int]], Delivery] = {}
        for delivery in pumps.log:
            first.setdefault((delivery[2].shard_id, delivery[2].position), delivery)
        children = {c.shard_id for c in fake.shards[parent].children}
        parent_orders = [d[0] for (shard, _), d in first.items() if shard == parent]
        child_orders = [d[0] for (shard, _), d in first.items() if shard in children]
        assert child_orders
        assert max(parent_orders) < min(child_orders)
        assert_in_order_per_key([d[2] for d in sorted(first.values(), key=lambda d: d[0])])
        rows = {row.shard_id: row for row in await store.list(APP, "stream")}
        assert rows[parent].value is SHARD_END
        assert set(rows[parent].child_shard_ids) == children
        for child in children:
            assert rows[child].parent_shard_ids == (parent,)
            assert rows[child].hash_range == (fake.shards[child].start, fake.shards[child].end)

    asyncio.run(main())


class NoLeases:
    """A checkpoint store without update_lease."""

    def __init__(self) -> None:
        self.inner = MemoryCheckpointStore()

    async def get(self, application: str, stream: str, shard_id: str) -> Checkpoint | None:
        return await self.inner.get(application, stream, shard_id)

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        return await self.inner.list(application, stream)

    async def put(self, *args: Any, **kwargs: Any) -> Checkpoint:
        return await self.inner.put(*args, **kwargs)

    async def close(self) -> None:
        pass


def test_leases_need_a_store_that_holds_them() -> None:
    with pytest.raises(ConfigurationError, match="update_lease"):
        worker(FakeKinesis(1), NoLeases(), "a")
    assert consumer(FakeKinesis(1), NoLeases()).worker_id is None  # type: ignore[arg-type]
    default = consumer(FakeKinesis(1), MemoryCheckpointStore(), leases=True)
    assert default.worker_id
    assert default.leased_shards() == []


class FlakyLeases(MemoryCheckpointStore):
    """Renewals stop getting through (no answer), everything else works."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    async def update_lease(self, *args: Any, **kwargs: Any) -> Checkpoint:
        if self.broken and kwargs.get("owner") is not None:
            raise OSError("connection reset")
        return await super().update_lease(*args, **kwargs)


def test_a_worker_that_cannot_renew_stops_after_the_failover_time() -> None:
    clock = FakeClock()  # the failover time and the waits pass at once

    async def main() -> None:
        fake = FakeKinesis(1)
        put_keys(fake, 50)
        store = FlakyLeases()
        a = worker(fake, store, "a", leases=lease_config("a", failover=0.5), clock=clock)
        async with a:
            pumps = Pumps({"a": a})
            await pumps.until(lambda: len(pumps.log) == 50)
            store.broken = True
            await pumps.until(lambda: not a.leased_shards(), timeout=5)
            count = len(pumps.log)
            put_keys(fake, 50, 1)
            await asyncio.sleep(0.5)  # (taking the lease back fails too: no answer)
            assert len(pumps.log) == count
            await pumps.stop()

    clock.run(main())


def test_status_with_leases_shows_this_workers_shards() -> None:
    async def main() -> None:
        fake = FakeKinesis(4)
        store = MemoryCheckpointStore()
        a, b = worker(fake, store, "a"), worker(fake, store, "b")
        async with a, b:
            pumps = Pumps({"a": a, "b": b})
            await pumps.until(balanced([a, b], 4))
            await pumps.until(lambda: len(a.status()) == 2 and len(b.status()) == 2)
            assert {s.shard_id for s in a.status()} == set(a.leased_shards())
            assert all(s.state is ShardState.READING for s in a.status())
            await pumps.stop()

    asyncio.run(main())


def test_a_table_with_kcl_leases_resumes_at_their_checkpoints() -> None:
    """Rows as a KCL worker leaves them (owned by a dead worker, sub-sequence checkpoint):
    taken after the failover time, read from just after the checkpoint."""

    async def main() -> None:
        fake = FakeKinesis(1)
        (shard,) = fake.shards
        put_keys(fake, 10)
        records = fake.shards[shard].records
        checkpoint: CheckpointValue = (int(records[4]["SequenceNumber"]), 0)
        store = MemoryCheckpointStore()
        row = await store.put(APP, "stream", shard, Sentinel.TRIM_HORIZON, expected=None)
        row = await store.update_lease(APP, "stream", shard, expected=row, owner="kcl-worker")
        await store.put(APP, "stream", shard, checkpoint, expected=row)
        a = worker(fake, store, "a", leases=lease_config("a", failover=0.3))
        async with a:
            pumps = Pumps({"a": a})
            await pumps.until(lambda: len(pumps.log) == 5)
            await pumps.stop()
        assert pumps.data() == [f"k{i}:0" for i in range(5, 10)]

    asyncio.run(main())


def test_leases_of_an_earlier_stream_are_refused_or_reset_before_anyone_reads() -> None:
    """Lease rows of a stream deleted and created again (held by workers of the earlier one):
    a worker's start fails; with on_stream_recreated="reset" the rows start over and two
    workers read every record of the new stream."""

    async def main() -> None:
        fake = FakeKinesis(2)
        store = MemoryCheckpointStore()
        earlier = fake.created - timedelta(hours=1)
        earlier_ms = int(earlier.timestamp() * 1000)
        for shard_id in fake.shards:
            row = await store.put(
                APP, "stream", shard_id, (10**30, 0), expected=None, stream_created_ms=earlier_ms
            )
            await store.update_lease(APP, "stream", shard_id, expected=row, owner="gone-worker")
        written = put_keys(fake, 40)
        with pytest.raises(StreamRecreatedError, match="deleted and created again"):
            await worker(fake, store, "a").start()
        a = worker(fake, store, "a", on_stream_recreated="reset", leases=lease_config("a", 0.3))
        b = worker(fake, store, "b", on_stream_recreated="reset", leases=lease_config("b", 0.3))
        async with a, b:
            pumps = Pumps({"a": a, "b": b})
            await pumps.until(lambda: len(pumps.log) >= len(written))
            await pumps.stop()
        assert set(pumps.data()) == written

    asyncio.run(main())


def test_children_a_scan_shows_are_taken_once_listed_not_a_take_interval_later() -> None:
    """A worker whose scan shows leases of shards it does not know (a split another worker's
    reader saw) lists the stream, and takes them as soon as they are listed: before the
    fix, at its next round, a take interval later (issue 21: a split balanced in 4.2 s)."""
    clock = FakeClock()

    async def main() -> tuple[float, float]:
        fake = FakeKinesis(2)
        store = MemoryCheckpointStore()
        capped = dataclasses.replace(lease_config("a"), max_leases_for_worker=1)
        slow = dataclasses.replace(lease_config("b"), take_interval=10.0)
        a = worker(fake, store, "a", leases=capped, clock=clock)
        b = worker(fake, store, "b", leases=slow, clock=clock, shard_refresh_interval=1000.0)
        async with a, b:
            pumps = Pumps({"a": a, "b": b})
            await pumps.until(balanced([a, b], 2))
            [parent] = a.leased_shards()
            fake.split(parent)
            children = {c.shard_id for c in fake.shards[parent].children}

            async def rows() -> set[str]:
                return {row.shard_id for row in await store.list(APP, "stream")}

            while not children <= await rows():
                await clock.sleep(0.01)
            created = clock.now()
            await pumps.until(lambda: bool(children & set(b.leased_shards())), timeout=30)
            taken = clock.now()
            await pumps.stop()
        return created, taken

    created, taken = clock.run(main())
    assert taken - created < 10.0  # b's take interval
