"""A fan-out reader's link to the synchronous executor: a subscription on the event-loop
thread, read ahead a bounded number of events, for a synchronous engine that must never block
on it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws.executor import SyncExecutor
from kinesis_core.consumer.links import PENDING, LoopFanOut, SyncShardLink, sync_link
from kinesis_core.consumer.subscription import (
    CheckConsumer,
    CheckShard,
    ConsumerCheck,
    NextEvent,
    ShardCheck,
    Subscribe,
    SubscribeEvent,
)
from kinesis_core.runtime.loop_thread import LoopThread
from kinesis_core.stream import StreamRef


class FakeSubscription:
    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.asked = 0
        self.closed = False

    async def next_event(self) -> Any:
        self.asked += 1
        if not self.events:
            await asyncio.sleep(3600)
        item = self.events.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


class FakeFanOut:
    def __init__(self, *subscriptions: FakeSubscription) -> None:
        self.subscriptions = list(subscriptions)
        self.positions: list[dict[str, Any]] = []

    async def subscribe(self, arn: str, shard_id: str, position: dict[str, Any]) -> Any:
        self.positions.append(position)
        return self.subscriptions.pop(0)


def event(n: int) -> SubscribeEvent:
    return SubscribeEvent(
        [{"SequenceNumber": str(n), "Data": b"x", "PartitionKey": "k"}], str(n), 0
    )


def wait_until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000"


class FakeKinesis:
    """A botocore client: DescribeStreamConsumer (the consumer is ``status``, or not found:
    None) and ListShards (shard-1, closed)."""

    def __init__(self, status: str | None) -> None:
        self.status = status

    def list_shards(self, **params: Any) -> Any:
        shard = {
            "ShardId": "shard-1",
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "9"},
            "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "5"},
        }
        return {"Shards": [shard]}

    def describe_stream_consumer(self, ConsumerARN: str) -> Any:
        if self.status is None:
            error = {"Error": {"Code": "ResourceNotFoundException", "Message": "not found"}}
            raise ClientError(error, "DescribeStreamConsumer")  # type: ignore[arg-type]
        return {"ConsumerDescription": {"ConsumerARN": ConsumerARN, "ConsumerStatus": self.status}}


def transport(
    fanout: FakeFanOut, wake: threading.Event, prefetch: int = 2, consumer: str | None = "ACTIVE"
) -> SyncShardLink:
    return sync_link(
        SyncExecutor(FakeKinesis(consumer)),
        StreamRef.of("orders"),
        "shard-1",
        LoopFanOut(LoopThread.get(), fanout, ARN),
        wake=wake,
        prefetch=prefetch,
    )


@pytest.mark.parametrize("status", ["ACTIVE", "DELETING", None])
def test_the_consumer_is_described_on_the_loop_thread(status: str | None) -> None:
    t = transport(FakeFanOut(), threading.Event(), consumer=status)
    assert t.call(CheckConsumer()) == ConsumerCheck(ARN, "reader", "orders", status)


def test_events_are_read_ahead_up_to_the_prefetch_and_never_block_the_caller() -> None:
    sub = FakeSubscription([event(1), event(2), event(3), event(4)])
    wake = threading.Event()
    t = transport(FakeFanOut(sub), wake, prefetch=2)
    assert t.call(NextEvent()) is None  # nothing subscribed yet: ended
    t.call(Subscribe({"Type": "LATEST"}))
    wait_until(lambda: sub.asked == 2)
    time.sleep(0.1)
    assert sub.asked == 2, "read more than the prefetch ahead"
    assert wake.is_set()
    assert t.call(NextEvent()) == event(1)
    wait_until(lambda: sub.asked == 3)  # room for one more
    assert t.call(NextEvent()) == event(2)
    assert t.call(NextEvent()) == event(3)
    wait_until(lambda: sub.asked == 5)
    assert t.call(NextEvent()) == event(4)
    assert t.call(NextEvent()) is PENDING  # the subscription waits for the server
    assert t.call(CheckShard()) == ShardCheck(listed=True, closed=True)
    t.close()
    assert sub.closed


def test_an_error_of_the_stream_is_raised_in_order_and_closes_it() -> None:
    sub = FakeSubscription([event(1), ConnectionResetError("cut")])
    t = transport(FakeFanOut(sub), threading.Event())
    t.call(Subscribe({"Type": "LATEST"}))
    wait_until(lambda: sub.closed)
    assert t.call(NextEvent()) == event(1)
    with pytest.raises(ConnectionResetError, match="cut"):
        t.call(NextEvent())
    assert t.call(NextEvent()) is None


def test_the_end_of_a_subscription_and_a_new_one() -> None:
    first = FakeSubscription([event(1), None])
    second = FakeSubscription([event(2)])
    fanout = FakeFanOut(first, second)
    t = transport(fanout, threading.Event())
    t.call(Subscribe({"Type": "LATEST"}))
    wait_until(lambda: first.closed)
    assert t.call(NextEvent()) == event(1)
    assert t.call(NextEvent()) is None  # ended: the machine subscribes again
    t.call(Subscribe({"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "1"}))
    wait_until(lambda: second.asked == 2)
    assert t.call(NextEvent()) == event(2)
    assert fanout.positions[-1]["SequenceNumber"] == "1"
    t.close()
    assert second.closed


def test_a_refused_subscribe_raises_in_the_caller() -> None:
    class Refusing(FakeFanOut):
        async def subscribe(self, arn: str, shard_id: str, position: dict[str, Any]) -> Any:
            raise PermissionError("refused")

    t = transport(Refusing(), threading.Event())
    with pytest.raises(PermissionError, match="refused"):
        t.call(Subscribe({"Type": "LATEST"}))
    assert t.call(NextEvent()) is None
