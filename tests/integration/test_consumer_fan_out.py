"""The core Consumer reading by enhanced fan-out against kinesis-mock: a split and a merge while
producing, renewals every few seconds, a subscription cut mid-stream, and switching between
polling and fan-out on one SQLite store."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.executor import list_all_shards
from kinesis_core.checkpoint import SHARD_END, MemoryCheckpointStore, SQLiteCheckpointStore
from kinesis_core.consumer import (
    TRIM_HORIZON,
    Consumer,
    ConsumerConfig,
    EnhancedFanOut,
    ShardState,
)
from kinesis_core.local.faults import FaultConfig
from kinesis_core.records import KinesisRecord

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}" for i in range(12)]


def fan_out(**overrides: Any) -> EnhancedFanOut:
    """Fan-out settings for kinesis-mock: it never ends a closed shard's subscription, so look
    shards up often; its events come once a second."""
    options: dict[str, Any] = {"consumer_name": "efo-app", "closed_check_interval": 1.0}
    options.update(overrides)
    return EnhancedFanOut(**options)


def consumer(stream: Any, store: Any, efo: EnhancedFanOut | None, **kwargs: Any) -> Consumer:
    config = ConsumerConfig(
        initial_position=TRIM_HORIZON,
        checkpoint_interval=0.2,
        shard_refresh_interval=1.0,
        idle_interval=0.2,
        close_timeout=2.0,
        enhanced_fan_out=efo or False,
    )
    return Consumer(
        stream.name,
        consumer_config=config,
        client_config=kwargs.pop("client_config", stream.client_config),
        checkpoint_store=store,
        **kwargs,
    )


async def take(c: Consumer, wanted: set[bytes], seconds: float = 60) -> list[KinesisRecord]:
    """Records (acked) until every one of ``wanted`` was seen."""
    got: list[KinesisRecord] = []

    async def run() -> None:
        seen: set[bytes] = set()
        async for record in c:
            got.append(record)
            seen.add(record.data)
            record.ack()
            if seen >= wanted:
                return

    await asyncio.wait_for(run(), seconds)
    return got


def assert_in_order_per_key(records: list[KinesisRecord]) -> None:
    last: dict[str, int] = {}
    for record in records:
        key, n = record.data.decode().split(":")
        assert int(n) > last.get(key, -1), f"{key}: {n} came after {last[key]}"
        last[key] = int(n)


def test_split_then_merge_while_producing_and_reading_by_fan_out(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=2)
    rounds = 16
    wanted = {f"{k}:{n}".encode() for k in KEYS for n in range(rounds)}

    async def main() -> tuple[list[KinesisRecord], Consumer, list[str]]:
        async with create_kinesis_client(stream.client_config) as client:
            resharded: list[str] = []

            async def produce() -> None:
                for n in range(rounds):
                    response = await client.put_records(
                        StreamName=stream.name,
                        Records=[{"Data": f"{k}:{n}".encode(), "PartitionKey": k} for k in KEYS],
                    )
                    assert response.get("FailedRecordCount", 0) == 0
                    if n == 5:
                        shards = await list_all_shards(client, stream.name)
                        parent = min(shards, key=lambda s: s.start_hash_key).shard_id
                        children = await asyncio.to_thread(stream.split, parent)
                        resharded.extend([parent, *children])
                    if n == 10:
                        resharded.append(await asyncio.to_thread(stream.merge, *resharded[1:3]))
                    await asyncio.sleep(0.1)

            async with consumer(stream, MemoryCheckpointStore(), fan_out()) as c:
                producer = asyncio.create_task(produce())
                got = await take(c, wanted, seconds=90)
                await producer
                await c.checkpoint()
                return got, c, resharded

    got, c, resharded = asyncio.run(main())
    parent, left, right, merged = resharded
    assert {r.data for r in got} == wanted
    assert len(got) == len(wanted), "a record was delivered twice"
    assert_in_order_per_key(got)
    status = {s.shard_id: s for s in c.status()}
    assert {s.transport for s in status.values() if s.transport} == {"subscription"}
    for shard_id in (parent, left, right):
        assert status[shard_id].state is ShardState.ENDED
        assert status[shard_id].checkpoint is SHARD_END
    assert status[merged].parent_shard_ids == (left, right)
    first = {}
    for i, record in enumerate(got):
        first.setdefault(record.shard_id, i)
    last = {r.shard_id: i for i, r in enumerate(got)}
    for child, parents in ((left, [parent]), (right, [parent]), (merged, [left, right])):
        for p in parents:
            assert last[p] < first[child], f"{child} started before {p} ended"
    assert c.consumer_arn is not None
    assert c.consumer_arn.endswith(":" + c.consumer_arn.rsplit(":", 1)[1])
    assert "/consumer/efo-app:" in c.consumer_arn


def test_subscriptions_renewed_every_two_seconds_lose_and_repeat_nothing(
    kinesis_stream: Any,
) -> None:
    stream = kinesis_stream(shards=1)
    total = 40
    wanted = {f"k:{n}".encode() for n in range(total)}

    async def main() -> tuple[list[KinesisRecord], int]:
        async with consumer(
            stream, MemoryCheckpointStore(), fan_out(max_subscription_seconds=2.0)
        ) as c:

            async def produce() -> None:
                for n in range(total):
                    await asyncio.to_thread(stream.put, f"k:{n}".encode(), "k")
                    await asyncio.sleep(0.2)

            producer = asyncio.create_task(produce())
            got = await take(c, wanted)
            await producer
            (status,) = c.status()
            return got, status.connects

    got, connects = asyncio.run(main())
    assert [r.data for r in got] == [f"k:{n}".encode() for n in range(total)]
    assert connects >= 3, f"only {connects} subscriptions in a run of 8+ seconds"


def test_a_subscription_cut_mid_stream_resumes_where_it_stopped(
    kinesis_stream: Any, fault_proxy: Any
) -> None:
    stream = kinesis_stream(shards=1)
    for n in range(5):
        stream.put(f"k:{n}".encode(), "k")
    proxy = fault_proxy(
        stream.endpoint_url, FaultConfig.from_rates(stream_cut=1.0, stream_cut_after_events=2)
    )
    through_proxy = dataclasses.replace(stream.client_config, endpoint_url=proxy.endpoint_url)
    wanted = {f"k:{n}".encode() for n in range(15)}

    async def main() -> tuple[list[KinesisRecord], int]:
        async with consumer(
            stream, MemoryCheckpointStore(), fan_out(), client_config=through_proxy
        ) as c:

            async def produce() -> None:
                for n in range(5, 15):
                    await asyncio.to_thread(stream.put, f"k:{n}".encode(), "k")
                    await asyncio.sleep(0.3)

            producer = asyncio.create_task(produce())
            got = await take(c, wanted)
            await producer
            (status,) = c.status()
            return got, status.connects

    got, connects = asyncio.run(main())
    assert [r.data for r in got] == [f"k:{n}".encode() for n in range(15)]
    assert connects >= 2
    assert proxy.stats().by_kind()


def test_polling_then_fan_out_then_polling_on_one_store(kinesis_stream: Any, tmp_path: Any) -> None:
    """Checkpoints mean the same in both modes: each run starts after the last checkpoint."""
    stream = kinesis_stream(shards=2)
    path = tmp_path / "checkpoints.sqlite3"

    def batch(first: int, count: int) -> set[bytes]:
        records = [f"{KEYS[n % len(KEYS)]}:{n}".encode() for n in range(first, first + count)]
        for data in records:
            stream.put(data, data.decode().split(":")[0])
        return set(records)

    async def run(efo: EnhancedFanOut | None, wanted: set[bytes]) -> list[KinesisRecord]:
        async with SQLiteCheckpointStore(path) as store, consumer(stream, store, efo) as c:
            got = await take(c, wanted)
            await c.checkpoint()
            assert {s.transport for s in c.status() if s.transport} == {
                "polling" if efo is None else "subscription"
            }
            return got

    first = batch(0, 12)
    one = asyncio.run(run(None, first))
    second = batch(12, 12)
    two = asyncio.run(run(fan_out(), second))
    third = batch(24, 12)
    three = asyncio.run(run(None, third))
    assert {r.data for r in one} == first
    assert [r.data for r in two if r.data not in second] == []
    assert {r.data for r in two} == second
    assert {r.data for r in three} == third
    assert len(one) + len(two) + len(three) == 36


@pytest.mark.parametrize(
    ("efo", "deadline"),
    [
        # Renewed every 2 s: the next SubscribeToShard gets ResourceNotFoundException, and
        # DescribeStreamConsumer says the consumer is gone (it took 20 backed-off
        # resubscriptions, about 109 s, before).
        (fan_out(consumer_name="deregistered", max_subscription_seconds=2.0), 20),
        # The defaults: kinesis-mock keeps the live subscription open for its five minutes;
        # the reader's periodic look at its consumer (every closed_check_interval, 30 s, an
        # answer up to 15 s old) finds it gone (before, nothing came for those 300 s; the
        # deadline is the documented bound with a margin).
        (EnhancedFanOut(consumer_name="deregistered"), 90),
    ],
    ids=["renewed-every-2s", "defaults"],
)
def test_a_consumer_deregistered_while_reading_fails_naming_it(
    kinesis_stream: Any, efo: EnhancedFanOut, deadline: float
) -> None:
    """The stream consumer is deregistered under a running fan-out reader: the iteration
    raises, naming the consumer, its stream and its ARN; the records read before stay read."""
    from kinesis_core.consumer.reading import ShardReadError
    from kinesis_core.fanout import deregister_consumer

    stream = kinesis_stream(shards=1)
    stream.put(b"before", "k")

    async def run() -> tuple[list[bytes], str, ShardReadError]:
        got: list[bytes] = []
        async with consumer(stream, MemoryCheckpointStore(), efo) as c:
            iterator = c.__aiter__()
            record = await asyncio.wait_for(iterator.__anext__(), 30)
            got.append(record.data)
            record.ack()
            assert c.consumer_arn is not None
            async with create_kinesis_client(stream.client_config) as client:
                await deregister_consumer(client, c.consumer_arn)
            with pytest.raises(ShardReadError) as raised:
                await asyncio.wait_for(iterator.__anext__(), deadline)
        return got, c.consumer_arn, raised.value

    got, arn, error = asyncio.run(run())
    assert got == [b"before"]
    message = str(error)
    assert f"stream consumer 'deregistered' of stream {stream.name!r} is gone" in message
    assert arn in message
