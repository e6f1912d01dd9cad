"""Enhanced fan-out against kinesis-mock on loopback: consumers, subscriptions over HTTP/1.1,
h2c and TLS h2, renewal, resharding, a second subscription, a cut through the fault proxy."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout import (
    ConsumerRegistrationError,
    FanOutClient,
    FanOutTransportError,
    RegisteredConsumer,
    ShardSubscription,
    SubscribeEvent,
    deregister_consumer,
    describe_stream_arn,
    register_consumer,
)
from kinesis_core.fanout.connection import HttpVersion
from kinesis_core.local import KinesisMock, LocalStream
from kinesis_core.local.faults import FaultConfig, FaultKind, FaultRule
from kinesis_core.producer import Producer

pytestmark = pytest.mark.integration

TRIM_HORIZON = {"Type": "TRIM_HORIZON"}


async def consumer_arn(stream: LocalStream, name: str = "efo-test") -> str:
    async with create_kinesis_client(stream.client_config) as client:
        stream_arn = await describe_stream_arn(client, stream.name)
        return (await register_consumer(client, stream_arn, name, timeout=30)).consumer_arn


async def read_until(
    subscription: ShardSubscription, count: int, seconds: float = 30.0
) -> list[SubscribeEvent]:
    """Events until they hold ``count`` records (or the subscription ends)."""
    events: list[SubscribeEvent] = []
    deadline = time.monotonic() + seconds
    while sum(len(e.records) for e in events) < count and time.monotonic() < deadline:
        event = await subscription.next_event()
        if event is None:
            break
        events.append(event)
    return events


def shard_of(stream: LocalStream, index: int = 0) -> str:
    return str(stream.shards()[index]["ShardId"])


def test_register_reuse_by_name_by_arn_and_deregister(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    other = kinesis_stream(shards=1)

    async def main() -> None:
        async with create_kinesis_client(stream.client_config) as client:
            stream_arn = await describe_stream_arn(client, stream.name)
            first = await register_consumer(client, stream_arn, "reader")
            assert first.status == "ACTIVE"
            assert first.stream_arn == stream_arn
            again = await register_consumer(client, stream_arn, "reader")  # ResourceInUse: reused
            assert again.consumer_arn == first.consumer_arn
            async with RegisteredConsumer(
                client, stream.name, consumer_arn=first.consumer_arn
            ) as by_arn:
                assert by_arn.consumer_name == "reader"
            with pytest.raises(ConfigurationError, match="is a consumer of"):
                async with RegisteredConsumer(client, other.name, consumer_arn=first.consumer_arn):
                    pass
            async with RegisteredConsumer(
                client, stream_arn, consumer_name="temporary", deregister_on_close=True
            ) as temporary:
                listed = await client.list_stream_consumers(StreamARN=stream_arn)
                names = {c["ConsumerName"] for c in listed["Consumers"]}
                assert names == {"reader", "temporary"}
            with pytest.raises(ClientError, match="ResourceNotFoundException"):
                await client.describe_stream_consumer(ConsumerARN=temporary.consumer_arn)
            await deregister_consumer(client, first.consumer_arn)
            await deregister_consumer(client, first.consumer_arn)  # already gone: fine

    asyncio.run(main())


def test_consumers_that_are_creating_are_waited_for_and_the_create_limit_retried() -> None:
    """kinesis-mock keeps a consumer CREATING for REGISTER_STREAM_CONSUMER_DURATION and
    refuses a sixth one while five are CREATING (LimitExceededException): the rate case,
    retried with backoff until every consumer is ACTIVE."""
    with KinesisMock(status_delay=1.0) as server:
        stream = server.create_stream("slow-consumers", shards=1)
        try:

            async def main() -> tuple[list[str], float]:
                async with create_kinesis_client(stream.client_config) as client:
                    stream_arn = await describe_stream_arn(client, stream.name)
                    started = time.monotonic()
                    consumers = await asyncio.gather(
                        *(register_consumer(client, stream_arn, f"slow-{i}") for i in range(7))
                    )
                    return [c.status for c in consumers], time.monotonic() - started

            statuses, waited = asyncio.run(main())
            assert statuses == ["ACTIVE"] * 7
            assert waited >= 1.9  # two rounds of CREATING: five, then the two refused at first
        finally:
            stream.close()


def test_the_twentieth_consumer_is_the_last(kinesis_stream: Any) -> None:
    """kinesis-mock takes 20 consumers. The client has botocore's retries off, as the core
    consumer's: a refused registration is tried again a few times (an On-demand Advantage
    stream takes 50, and a rate limit passes) by the registration's own backoff, not by
    botocore's seconds of retries each time."""
    stream = kinesis_stream(shards=1)

    async def main() -> None:
        async with create_kinesis_client(stream.client_config, max_attempts=1) as client:
            stream_arn = await describe_stream_arn(client, stream.name)
            for i in range(20):
                await register_consumer(client, stream_arn, f"c{i:02d}")
            with pytest.raises(
                ConsumerRegistrationError, match="already has 20 registered consumers"
            ):
                await register_consumer(client, stream_arn, "one-too-many")
            reused = await register_consumer(client, stream_arn, "c07")  # existing: still fine
            assert reused.consumer_name == "c07"

    asyncio.run(main())


def test_plain_and_aggregated_records_arrive_in_order(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    plain = [stream.put(f"plain-{i}".encode(), f"key-{i % 3}")["SequenceNumber"] for i in range(5)]

    async def main() -> list[SubscribeEvent]:
        async with Producer(stream.name, client_config=stream.client_config) as producer:
            results = await asyncio.gather(
                *(
                    producer.put(f"agg-{i}".encode(), partition_key=f"key-{i % 4}")
                    for i in range(60)
                )
            )
        assert len({r.sequence_number for r in results}) < 60  # some were aggregated together
        arn = await consumer_arn(stream)
        async with FanOutClient(stream.client_config) as fanout:
            subscription = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            kinesis_records = len(plain) + len({r.sequence_number for r in results})
            return await read_until(subscription, kinesis_records)

    events = asyncio.run(main())
    records = [r for e in events for r in e.records]
    polled = stream.records()
    assert [r.sequence_number for r in records] == [r["SequenceNumber"] for r in polled]
    assert [r.data for r in records] == [r["Data"] for r in polled]
    assert records[0].sequence_number == plain[0]
    users = deaggregate(records, shard_of(stream))
    assert [u.data for u in users] == [f"plain-{i}".encode() for i in range(5)] + [
        f"agg-{i}".encode() for i in range(60)
    ]
    assert any(u.aggregated for u in users)
    assert events[-1].continuation_sequence_number == records[-1].sequence_number


def test_renewal_every_two_seconds_loses_and_repeats_nothing(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    total = 60

    async def main() -> tuple[list[bytes], int]:
        arn = await consumer_arn(stream)
        shard = shard_of(stream)

        async def produce() -> None:
            for i in range(total):
                await asyncio.to_thread(stream.put, f"r{i}".encode(), "k")
                await asyncio.sleep(0.08)

        received: list[bytes] = []
        subscriptions = 0
        position: dict[str, Any] = dict(TRIM_HORIZON)
        async with FanOutClient(stream.client_config, max_subscription_seconds=2.0) as fanout:
            producing = asyncio.create_task(produce())
            deadline = time.monotonic() + 60
            while len(received) < total and time.monotonic() < deadline:
                subscription = await fanout.subscribe(arn, shard, position)
                try:
                    while (event := await subscription.next_event()) is not None:
                        received += [r.data for r in event.records]
                    subscriptions += 1
                except ClientError as exc:
                    # kinesis-mock holds a closed subscription's lease for 1-3 s (AWS: 5 s).
                    if exc.response["Error"]["Code"] != "ResourceInUseException":
                        raise
                    await asyncio.sleep(0.5)
                position = subscription.renewal_position()
            await producing
        return received, subscriptions

    received, subscriptions = asyncio.run(main())
    assert received == [f"r{i}".encode() for i in range(total)]
    assert subscriptions >= 3


def test_a_second_subscription_gets_resource_in_use(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)
    stream.put(b"x", "k")

    async def main() -> None:
        arn = await consumer_arn(stream)
        async with FanOutClient(stream.client_config) as fanout:
            first = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            assert (await read_until(first, 1))[0].records[0].data == b"x"
            second = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            with pytest.raises(ClientError) as raised:
                await second.next_event()
            assert raised.value.response["Error"]["Code"] == "ResourceInUseException"
            assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            with pytest.raises(ClientError):  # a failed subscription keeps its error
                await second.next_event()
            assert second.ended
            assert fanout.subscriptions == 1

    asyncio.run(main())


def test_unknown_consumer_arn_is_resource_not_found(kinesis_stream: Any) -> None:
    stream = kinesis_stream(shards=1)

    async def main() -> None:
        arn = (await consumer_arn(stream)).replace("/consumer/efo-test:", "/consumer/nobody:")
        async with FanOutClient(stream.client_config) as fanout:
            subscription = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            with pytest.raises(ClientError, match="ResourceNotFoundException"):
                await subscription.next_event()

    asyncio.run(main())


def test_split_while_subscribed_kinesis_mock_sends_no_child_shards(kinesis_stream: Any) -> None:
    """kinesis-mock 0.6.2 never ends a subscription at SHARD_END: the closed parent keeps
    sending empty events with its last continuation and ChildShards null. The AWS behaviour
    (ChildShards in the last event) is covered by the unit tests of the decoder."""
    stream = kinesis_stream(shards=1)
    parent = shard_of(stream)
    last = stream.put(b"before", "k")["SequenceNumber"]

    async def main() -> list[SubscribeEvent]:
        arn = await consumer_arn(stream)
        async with FanOutClient(stream.client_config) as fanout:
            subscription = await fanout.subscribe(arn, parent, TRIM_HORIZON)
            events = await read_until(subscription, 1)
            children = await asyncio.to_thread(stream.split, parent)
            assert len(children) == 2
            await asyncio.to_thread(stream.put, b"after", "k", explicit_hash_key=0)  # a child's
            for _ in range(3):
                event = await subscription.next_event()
                assert event is not None
                events.append(event)
            return events

    events = asyncio.run(main())
    assert [r.data for e in events for r in e.records] == [b"before"]
    assert all(e.child_shards == [] and not e.shard_ended for e in events)
    assert all(e.continuation_sequence_number == last for e in events)
    assert {s.get("ParentShardId") for s in stream.shards()} == {None, parent}


def test_a_stream_cut_by_the_fault_proxy_is_a_transport_error(
    kinesis_stream: Any, fault_proxy: Any
) -> None:
    stream = kinesis_stream(shards=1)
    stream.put(b"x", "k")
    proxy = fault_proxy(stream.endpoint_url, FaultConfig.from_rates(stream_cut=1.0))
    through_proxy = dataclasses.replace(stream.client_config, endpoint_url=proxy.endpoint_url)

    async def main() -> None:
        arn = await consumer_arn(stream)
        async with FanOutClient(through_proxy) as fanout:
            subscription = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            first = await subscription.next_event()  # the one event let through
            assert first is not None
            assert first.records[0].data == b"x"
            with pytest.raises(FanOutTransportError, match="broke off the response body") as cut:
                await subscription.next_event()
            assert isinstance(cut.value, OSError)
        proxy.configure(FaultConfig.from_rates(stream_cut=1.0, stream_cut_after_bytes=30))
        await asyncio.sleep(3)  # kinesis-mock releases the cut subscription's lease
        async with FanOutClient(through_proxy) as fanout:
            subscription = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            with pytest.raises(FanOutTransportError, match="broke off the response body"):
                await subscription.next_event()  # cut in the middle of the first event

    asyncio.run(main())
    assert proxy.stats().by_kind()


def test_stream_delays_from_the_fault_proxy_slow_but_keep_every_event(
    kinesis_stream: Any, fault_proxy: Any
) -> None:
    stream = kinesis_stream(shards=1)
    stream.put(b"slow", "k")
    proxy = fault_proxy(stream.endpoint_url, FaultConfig.from_rates(stream_delay_ms=400))
    through_proxy = dataclasses.replace(stream.client_config, endpoint_url=proxy.endpoint_url)

    async def main() -> list[SubscribeEvent]:
        arn = await consumer_arn(stream)
        async with FanOutClient(through_proxy) as fanout:
            subscription = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            return [e for e in [await subscription.next_event() for _ in range(2)] if e]

    started = time.monotonic()
    events = asyncio.run(main())
    assert [r.data for e in events for r in e.records] == [b"slow"]
    assert len(events) == 2
    assert time.monotonic() - started >= 0.8


@pytest.mark.parametrize("http_version", ["h2", "http/1.1"])
def test_plain_port_http_versions(kinesis_stream: Any, http_version: HttpVersion) -> None:
    stream = kinesis_stream(shards=1)
    stream.put(b"over the plain port", "k")

    async def main() -> tuple[bytes, int]:
        arn = await consumer_arn(stream)
        async with FanOutClient(stream.client_config, http_version=http_version) as fanout:
            subscription = await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)
            [event] = await read_until(subscription, 1)
            return event.records[0].data, fanout.connections

    data, http2_connections = asyncio.run(main())
    assert data == b"over the plain port"
    assert http2_connections == (1 if http_version == "h2" else 0)


def tls_config(stream: LocalStream, server: KinesisMock, verify: bool = False) -> ClientConfig:
    return dataclasses.replace(
        stream.client_config, endpoint_url=server.tls_endpoint_url, verify=verify
    )


def test_tls_port_speaks_h2_and_multiplexes_subscriptions(
    kinesis_mock: KinesisMock, kinesis_stream: Any
) -> None:
    stream = kinesis_stream(shards=3)
    for i, shard in enumerate(stream.shards()):
        stream.put(
            f"shard {i}".encode(),
            "k",
            explicit_hash_key=int(shard["HashKeyRange"]["StartingHashKey"]),
        )

    async def main(max_streams: int) -> tuple[list[bytes], int]:
        arn = await consumer_arn(stream, f"tls-{max_streams}")
        config = tls_config(stream, kinesis_mock)
        async with FanOutClient(config, max_streams_per_connection=max_streams) as fanout:
            subscriptions = [
                await fanout.subscribe(arn, shard["ShardId"], TRIM_HORIZON)
                for shard in stream.shards()
            ]
            batches = await asyncio.gather(*(read_until(s, 1) for s in subscriptions))
            data = [b[0].records[0].data for b in batches]
            return data, fanout.connections

    data, connections = asyncio.run(main(100))
    assert data == [b"shard 0", b"shard 1", b"shard 2"]
    assert connections == 1  # three subscriptions on one HTTP/2 connection
    data, connections = asyncio.run(main(2))
    assert data == [b"shard 0", b"shard 1", b"shard 2"]
    assert connections == 2  # full at two streams: a second connection


def test_tls_certificates_are_verified_by_default(
    kinesis_mock: KinesisMock, kinesis_stream: Any
) -> None:
    stream = kinesis_stream(shards=1)

    async def main() -> None:
        arn = await consumer_arn(stream)
        async with FanOutClient(tls_config(stream, kinesis_mock, verify=True)) as fanout:
            with pytest.raises(FanOutTransportError, match="CERTIFICATE_VERIFY_FAILED"):
                await fanout.subscribe(arn, shard_of(stream), TRIM_HORIZON)

    asyncio.run(main())


def test_registration_rides_out_connections_cut_before_the_answer(
    kinesis_stream: Any, fault_proxy: Any
) -> None:
    """A reset on RegisterStreamConsumer or DescribeStreamConsumer (the client retries
    nothing itself here) is a transport failure: backed off and tried again, not raised."""
    stream = kinesis_stream(shards=1)
    cut = frozenset({"RegisterStreamConsumer", "DescribeStreamConsumer"})
    proxy = fault_proxy(
        stream.endpoint_url, FaultConfig(rules=(FaultRule(FaultKind.RESET, 0.5, cut),)), seed=3
    )
    through_proxy = dataclasses.replace(stream.client_config, endpoint_url=proxy.endpoint_url)

    async def main() -> str:
        async with create_kinesis_client(through_proxy, max_attempts=1) as client:
            stream_arn = await describe_stream_arn(client, stream.name)
            registered = await register_consumer(client, stream_arn, "through-resets", timeout=30)
            return registered.status

    assert asyncio.run(main()) == "ACTIVE"
    assert proxy.stats().by_kind().get(FaultKind.RESET, 0) >= 1
