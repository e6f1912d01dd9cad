"""FanOutClient against a small HTTP/2 server on loopback (h2's server side, TLS with ALPN and a
throwaway self-signed certificate): flow control over a real socket, stream limits, GOAWAY,
RST_STREAM, a server that ends the stream, and one that refuses a SubscribeToShard arriving
within a second of the previous one, as AWS does."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.checkpoint.base import Sentinel
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.links import async_link
from kinesis_core.consumer.positions import TRIM_HORIZON as TRIM_HORIZON_START
from kinesis_core.consumer.reading import run_shard_read
from kinesis_core.consumer.subscription import SubscriptionRead
from kinesis_core.fanout import (
    FanOutClient,
    FanOutTimeoutError,
    FanOutTransportError,
    SubscribeEvent,
)
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.stream import StreamRef
from tests.fakes.fanout import (
    CONSUMER_ARN,
    LoopbackH2Server,
    initial_response,
    record,
    subscribe_event,
)
from tests.helpers.tls import self_signed_certificate

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
TRIM_HORIZON = {"Type": "TRIM_HORIZON"}
EVENTS = [subscribe_event([record(n, bytes([n]) * 16_000)], str(n)) for n in range(1, 41)]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


def server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    context.set_alpn_protocols(["h2"])
    return context


def config(endpoint: str, verify: bool | str = True, read_timeout: float = 30.0) -> ClientConfig:
    return ClientConfig(
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        verify=verify,
        read_timeout=read_timeout,
    )


def test_tls_alpn_h2_with_a_verified_certificate_and_flow_control(
    certificate: tuple[Path, Path],
) -> None:
    body = initial_response() + b"".join(EVENTS)
    window = 65_535

    async def run() -> tuple[LoopbackH2Server, list[SubscribeEvent], int, int]:
        server = LoopbackH2Server(body, finish="end", tls=server_tls(certificate))
        async with server as endpoint:
            client = FanOutClient(
                config(endpoint, verify=str(certificate[0])), max_buffered_bytes=window
            )
            async with client:
                subscription = await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)
                first = await subscription.next_event()
                assert first is not None
                await asyncio.sleep(0.5)  # the application is slow: the server must wait
                sent_while_slow = server.sent[1]
                events = [first]
                while (event := await subscription.next_event()) is not None:
                    events.append(event)
                return server, events, sent_while_slow, first.size

    server, events, sent_while_slow, first_size = asyncio.run(run())
    request = server.requests[0]
    assert request[b":scheme"] == b"https"
    assert request[b"x-amz-target"] == b"Kinesis_20131202.SubscribeToShard"
    assert request[b"authorization"].startswith(b"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    # While nobody read, the server could send the consumed bytes plus one window, no more.
    assert window <= sent_while_slow <= len(initial_response()) + first_size + window
    assert [e.records[0].data for e in events] == [bytes([n]) * 16_000 for n in range(1, 41)]
    assert server.sent[1] == len(body)


def test_tls_verification_fails_against_an_unknown_certificate(
    certificate: tuple[Path, Path],
) -> None:
    async def run() -> None:
        server = LoopbackH2Server(b"", tls=server_tls(certificate))
        async with server as endpoint, FanOutClient(config(endpoint)) as client:
            with pytest.raises(FanOutTransportError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("finish", "message"),
    [("reset", "RST_STREAM INTERNAL_ERROR"), ("goaway", "GOAWAY NO_ERROR")],
)
def test_reset_and_goaway_mid_stream_are_transport_errors(finish: str, message: str) -> None:
    body = initial_response() + EVENTS[0] + EVENTS[1][:100]

    async def run() -> SubscribeEvent | None:
        server = LoopbackH2Server(body, finish=finish)
        async with server as endpoint, FanOutClient(config(endpoint), http_version="h2") as client:
            subscription = await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)
            first = await subscription.next_event()
            with pytest.raises(FanOutTransportError, match=message):
                await subscription.next_event()
            return first

    first = asyncio.run(run())
    assert first is not None
    assert first.continuation_sequence_number == "1"


def test_the_servers_stream_limit_opens_another_connection() -> None:
    async def run() -> tuple[int, int, list[int]]:
        server = LoopbackH2Server(initial_response(), max_concurrent_streams=1)
        async with server as endpoint:
            async with FanOutClient(config(endpoint), http_version="h2") as client:
                first = await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)
                second = await client.subscribe(CONSUMER_ARN, "shardId-000000000001", TRIM_HORIZON)
                connections = client.connections
                await first.aclose()
                await asyncio.sleep(0.2)
                third = await client.subscribe(CONSUMER_ARN, "shardId-000000000002", TRIM_HORIZON)
                after = client.connections
                await second.aclose()
                await third.aclose()
                await asyncio.sleep(0.2)
            return connections, after, server.cancelled

    connections, after, cancelled = asyncio.run(run())
    assert connections == 2
    assert after == 2  # the freed stream was reused
    assert len(cancelled) == 3  # every closed subscription reset its stream (CANCEL)


def test_max_subscription_seconds_ends_the_subscription_normally() -> None:
    async def run() -> tuple[Any, float, list[int]]:
        server = LoopbackH2Server(initial_response() + EVENTS[0])
        async with server as endpoint:
            client = FanOutClient(config(endpoint), http_version="h2", max_subscription_seconds=1)
            async with client:
                subscription = await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)
                loop = asyncio.get_running_loop()
                started = loop.time()
                assert await subscription.next_event() is not None
                end = await subscription.next_event()  # nothing more comes: the deadline ends it
                elapsed = loop.time() - started
                await asyncio.sleep(0.2)
                return end, elapsed, server.cancelled

    end, elapsed, cancelled = asyncio.run(run())
    assert end is None
    assert 0.8 <= elapsed < 5
    assert cancelled == [1]


def test_an_error_answer_is_a_client_error_with_its_code_and_status() -> None:
    body = b'{"__type": "LimitExceededException", "message": "Rate exceeded for consumer"}'

    async def run() -> ClientError:
        server = LoopbackH2Server(b"", error=(400, body))
        async with server as endpoint, FanOutClient(config(endpoint), http_version="h2") as client:
            with pytest.raises(ClientError) as raised:
                await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)
            assert client.subscriptions == 0
            return raised.value

    error = asyncio.run(run())
    assert error.response["Error"] == {
        "Code": "LimitExceededException",
        "Message": "Rate exceeded for consumer",
    }
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_silence_longer_than_the_read_timeout_is_a_timeout_error() -> None:
    async def run() -> FanOutTimeoutError:
        server = LoopbackH2Server(initial_response())  # then nothing, the stream stays open
        async with server as endpoint:
            client = FanOutClient(config(endpoint, read_timeout=0.5), http_version="h2")
            async with client:
                subscription = await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)
                with pytest.raises(FanOutTimeoutError) as raised:
                    await subscription.next_event()
                return raised.value

    error = asyncio.run(run())
    assert isinstance(error, OSError)
    assert isinstance(error, TimeoutError)
    assert "for 0.5 s (read timeout)" in str(error)


def test_nobody_listening_is_a_transport_error() -> None:
    async def run() -> None:
        server = LoopbackH2Server(b"")
        async with server as endpoint:
            pass  # closed again: the port is free
        async with FanOutClient(config(endpoint)) as client:
            with pytest.raises(FanOutTransportError, match="could not connect to http://127"):
                await client.subscribe(CONSUMER_ARN, SHARD, TRIM_HORIZON)

    asyncio.run(run())


class _ActiveConsumer:
    """The one Kinesis call a fan-out reader makes besides its subscriptions: the look at its
    stream consumer before each renewal, answered ACTIVE."""

    async def describe_stream_consumer(self, **_: Any) -> dict[str, Any]:
        return {"ConsumerDescription": {"ConsumerARN": CONSUMER_ARN, "ConsumerStatus": "ACTIVE"}}


def test_renewals_are_paced_from_where_the_previous_subscribe_landed() -> None:
    """A shard's reader against a server that refuses a SubscribeToShard arriving within 1 s
    of the previous one (as AWS does, with LimitExceededException) and ends every subscription
    after one event. The first call waits for a slow handshake, the later ones reuse the
    connection: pacing from when each call was decided let the second one arrive 0.7 s after
    the first, which the server refused. Paced from the answer, none is refused."""
    body = initial_response() + subscribe_event([], "1", millis=1000)  # behind: no listing

    async def run() -> LoopbackH2Server:
        server = LoopbackH2Server(body, finish="end", handshake_delay=0.3, refuse_within=1.0)
        async with server as endpoint, FanOutClient(config(endpoint), http_version="h2") as client:
            node = ShardNode(SHARD, (), (0, MAX_HASH_KEY), True)
            machine = SubscriptionRead(node, TRIM_HORIZON_START)
            executor = AsyncExecutor(_ActiveConsumer(), fanout=client)
            transport = async_link(executor, StreamRef.of("orders"), SHARD, CONSUMER_ARN)
            frontier = ShardFrontier(SHARD, Sentinel.TRIM_HORIZON)

            async def emit(batch: RecordBatch) -> None:
                batch.ack()

            reading = asyncio.create_task(run_shard_read(machine, transport, frontier, emit))
            while len(server.arrivals) < 4 and not reading.done():  # noqa: ASYNC110 (a test)
                await asyncio.sleep(0.05)
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            await transport.aclose()
        return server

    server = asyncio.run(run())
    assert len(server.arrivals) >= 4
    assert server.refused == 0
