"""The lean calls' direct HTTP path (kinesis_core.aws.direct_http.DirectHttp) on real servers:
after a route's first call, a client made by create_kinesis_client sends its lean calls on the
library's own HTTP/1.1 client (kinesis_core.aws.http1), with the client's settings (TLS
verification, timeouts), and its transport failures are botocore's exceptions, as on the
client's own session."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from botocore.exceptions import SSLError

from kinesis_core.aws.botocore_private import http_session
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.direct_http import DirectHttp, direct_http
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.lean_get_records import LeanGetRecords
from kinesis_core.local import KinesisMock, LocalStream, local_client_config
from kinesis_core.local.faults import FaultConfig, FaultKind, FaultRule

pytestmark = pytest.mark.integration


@pytest.fixture(params=["kinesis_stream", "moto_stream"])
def make_stream(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


async def _iterator(client: Any, stream: str, shard_id: str) -> str:
    answer = await client.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )
    iterator: str = answer["ShardIterator"]
    return iterator


def _count_sends(client: Any) -> list[str]:
    """The X-Amz-Target of every request the client's own HTTP session sends."""
    sent: list[str] = []
    session = http_session(client)
    send = session.send

    async def counted(request: Any) -> Any:
        sent.append(str(request.headers.get("X-Amz-Target", "")))
        return await send(request)

    session.send = counted
    return sent


def _read_all(config: ClientConfig, stream: LocalStream) -> tuple[int, list[bytes], bool]:
    shard_id = stream.shards()[0]["ShardId"]

    async def main() -> tuple[int, list[bytes], bool]:
        async with create_kinesis_client(config, max_attempts=1) as client:
            direct = direct_http(client)
            assert direct is not None
            sent = _count_sends(client)
            lean = LeanGetRecords.of(client)
            assert lean is not None
            iterator = await _iterator(client, stream.name, shard_id)
            first = await lean.get_records(iterator, 2, {})  # botocore's: learns the route
            sent_before = len(sent)
            data = [r["Data"] for r in first["Records"]]
            iterator = first["NextShardIterator"]
            for _ in range(5):
                answer = await lean.get_records(iterator, 2, {})
                data += [r.data for r in answer["Records"]]
                iterator = answer["NextShardIterator"]
            assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
            url = lean.route(None)
            assert url is not None
        return len(sent) - sent_before, data, direct.handles(url.url)

    return asyncio.run(main())


def test_lean_calls_go_on_the_direct_client_and_read_everything(make_stream: Any) -> None:
    stream: LocalStream = make_stream(1)
    sent = [f"record-{i}".encode() for i in range(8)]
    for data in sent:
        stream.put(data, "one-key")
    on_the_clients_session, read, open_after_close = _read_all(stream.client_config, stream)
    assert read == sent
    assert on_the_clients_session == 0
    assert not open_after_close, "the direct session outlived its client"


def test_a_plain_http_endpoint_costs_no_tls_context(
    moto_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CA bundle (about 40 ms of CPU to load) is read only for an https endpoint."""

    def refuse(_self: DirectHttp) -> None:
        raise AssertionError("a TLS context was made for an http endpoint")

    monkeypatch.setattr(DirectHttp, "_ssl_context", refuse)
    stream: LocalStream = moto_stream(1)
    stream.put(b"plain", "k")
    on_the_clients_session, read, _ = _read_all(stream.client_config, stream)
    assert read == [b"plain"]
    assert on_the_clients_session == 0


def test_tls_with_verification_off_is_honoured(kinesis_mock: KinesisMock) -> None:
    config = local_client_config(kinesis_mock.tls_endpoint_url, verify=False)
    stream = kinesis_mock.create_stream("direct-tls", 1)
    try:
        stream.put(b"over-tls", "k")
        on_the_clients_session, read, _ = _read_all(config, stream)
    finally:
        stream.delete()
        stream.close()
    assert read == [b"over-tls"]
    assert on_the_clients_session == 0


def test_tls_verification_refuses_a_self_signed_server_as_botocore_does(
    kinesis_mock: KinesisMock,
) -> None:
    """Verification on (the default): kinesis-mock's self-signed certificate is refused on the
    direct path with botocore's SSLError."""
    config = local_client_config(kinesis_mock.tls_endpoint_url, verify=True)

    async def main() -> None:
        async with create_kinesis_client(config, max_attempts=1) as client:
            direct = direct_http(client)
            assert direct is not None
            with pytest.raises(SSLError):
                await direct.post(kinesis_mock.tls_endpoint_url, {}, b"{}")

    asyncio.run(main())


@pytest.mark.parametrize("kind", [FaultKind.RESET, FaultKind.STALL, FaultKind.TRUNCATE])
def test_transport_failures_are_the_exceptions_botocore_raises(
    moto_stream: Any, fault_proxy: Any, kind: FaultKind
) -> None:
    stream: LocalStream = moto_stream(1)
    stream.put(b"x" * 2000, "k")
    shard_id = stream.shards()[0]["ShardId"]
    proxy = fault_proxy(stream.endpoint_url)
    config = dataclasses.replace(
        stream.client_config, endpoint_url=proxy.endpoint_url, read_timeout=1.0
    )
    faulty = FaultConfig(
        rules=(FaultRule(kind, 1.0, frozenset({"GetRecords"})),), stall_seconds=3.0
    )

    async def main() -> tuple[BaseException, BaseException, int]:
        async with create_kinesis_client(config, max_attempts=1) as client:
            sent = _count_sends(client)
            lean = LeanGetRecords.of(client)
            assert lean is not None
            iterator = await _iterator(client, stream.name, shard_id)
            await lean.get_records(iterator, 1, {})  # botocore's: learns the route
            await lean.get_records(iterator, 1, {})  # signed here, sent directly
            sent_before = len(sent)
            proxy.configure(faulty)
            with pytest.raises(Exception) as by_botocore:
                await client.get_records(ShardIterator=iterator, Limit=1)
            sent_before += 1
            with pytest.raises(Exception) as by_lean:
                await lean.get_records(iterator, 1, {})
            return by_botocore.value, by_lean.value, len(sent) - sent_before

    by_botocore, by_lean, on_the_clients_session = asyncio.run(main())
    assert on_the_clients_session == 0
    assert type(by_lean) is type(by_botocore), (by_lean, by_botocore)
    assert error_kind(by_lean) is error_kind(by_botocore) is not None


def test_the_direct_session_keeps_no_cookies_asks_for_no_compression_and_reuses_a_connection() -> (
    None
):
    """On a loopback server that sets a cookie and would compress: the next request carries no
    cookie, every request asks for the identity encoding, the body comes back as the server
    sent it, and the calls share one kept-alive connection."""
    from aiohttp import web

    seen: list[tuple[str | None, str | None, int]] = []

    async def answer(request: web.Request) -> web.Response:
        assert request.transport is not None
        seen.append(
            (
                request.headers.get("Cookie"),
                request.headers.get("Accept-Encoding"),
                id(request.transport),
            )
        )
        response = web.Response(body=b'{"ok": 1}', headers={"Set-Cookie": "session=abc"})
        return response

    async def main() -> list[tuple[int, bytes]]:
        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}/"
        config = local_client_config(url)
        try:
            async with create_kinesis_client(config, max_attempts=1) as client:
                direct = direct_http(client)
                assert direct is not None
                answers = []
                for _ in range(3):
                    status, _, body = await direct.post(url, {"Content-Type": "x"}, b"{}")
                    answers.append((status, body))
                return answers
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == [(200, b'{"ok": 1}')] * 3
    assert [cookie for cookie, _, _ in seen] == [None, None, None]
    assert {encoding for _, encoding, _ in seen} == {"identity"}
    assert len({connection for _, _, connection in seen}) == 1
