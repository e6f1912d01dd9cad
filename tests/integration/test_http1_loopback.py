"""DirectHttp's HTTP/1.1 client (kinesis_core.aws.http1_pool on kinesis_core.aws.http1) against
small asyncio servers on loopback: kept-alive connections, a server that closes or resets an idle
one, ``Connection: close``, chunked answers, stalls, refused connections, a TLS handshake that
never ends, TLS with a self-signed certificate, cancellation mid-answer, the pool's limit and
idle expiry, large bodies, a malformed answer. Failures are the botocore exceptions
aiobotocore raises."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)

from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.direct_http import DirectHttp, direct_http
from kinesis_core.aws.http1 import MAX_HEAD_BYTES
from kinesis_core.aws.http1_pool import Endpoint, Http1Pool
from kinesis_core.local import local_client_config
from tests.helpers.tls import self_signed_certificate

pytestmark = pytest.mark.integration

Handle = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
WAIT = 10.0
"""Seconds a test waits for something the server should see (a bound, not a timing)."""


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """The next request's body; None once the client closed the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return await reader.readexactly(length)


def answer(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{header}\r\n" for header in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def echo(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request with its own body, on one kept-alive connection."""
    while (body := await read_request(reader)) is not None:
        writer.write(answer(body))
        await writer.drain()


async def until_closed(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass


class Loopback:
    """An HTTP/1.1 server on 127.0.0.1: ``handle(n, reader, writer)`` serves its n-th
    connection. ``ended`` counts the connections the client closed."""

    def __init__(self, handle: Handle, tls: ssl.SSLContext | None = None) -> None:
        self.handle = handle
        self.tls = tls
        self.connections = 0
        self.ended = 0
        self.changed = asyncio.Event()
        self.url = ""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Loopback:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/"
        return self

    async def __aexit__(self, *_: object) -> None:
        self.server.close()
        for writer in self._writers:
            writer.transport.abort()  # every handler's next read ends
        await asyncio.gather(*self._tasks)
        await self.server.wait_closed()

    async def wait_for(self, ended: int) -> None:
        """Until ``ended`` connections were closed by the client."""

        async def ends() -> None:
            while self.ended < ended:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(ends(), WAIT)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        number = self.connections
        self.connections += 1
        try:
            await self.handle(number, reader, writer)
            await until_closed(reader)
            self.ended += 1
            self.changed.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-request: the handler has nothing to do
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def direct(url: str, **overrides: Any) -> AsyncIterator[DirectHttp]:
    config = local_client_config(url, **overrides)
    async with create_kinesis_client(config, max_attempts=1) as client:
        http = direct_http(client)
        assert http is not None
        yield http


async def post(http: DirectHttp, url: str, body: bytes) -> bytes:
    status, headers, raw = await http.post(url, {"Content-Type": "application/json"}, body)
    assert status == 200
    assert headers["content-length"] == str(len(raw))
    return raw


def test_one_kept_alive_connection_carries_many_calls() -> None:
    async def main() -> Loopback:
        async with Loopback(echo) as server, direct(server.url) as http:
            for n in range(20):
                assert await post(http, server.url, b"call %d" % n) == b"call %d" % n
        return server

    server = asyncio.run(main())
    assert server.connections == 1


@pytest.mark.parametrize("how", ["close", "reset", "close after answering"])
def test_a_connection_the_server_ended_while_idle_is_replaced_without_an_error(how: str) -> None:
    """The first connection answers one request; then the server ends it: when the next request
    arrives (the race with a server's idle timeout), or right after its answer."""

    async def handle(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if n > 0:
            return await echo(n, reader, writer)
        body = await read_request(reader)
        assert body is not None
        writer.write(answer(body))
        await writer.drain()
        if how != "close after answering":
            assert await read_request(reader) is not None
        if how == "reset":
            writer.transport.abort()
        else:
            writer.close()

    async def main() -> Loopback:
        async with Loopback(handle) as server, direct(server.url) as http:
            assert await post(http, server.url, b"one") == b"one"
            if how == "close after answering":
                await server.wait_for(0)
                await asyncio.sleep(0.05)  # lets the client see the end of the connection
            assert await post(http, server.url, b"two") == b"two"
            assert await post(http, server.url, b"three") == b"three"
        return server

    assert asyncio.run(main()).connections == 2


def test_a_request_is_sent_again_once_only_and_never_on_a_new_connection() -> None:
    """The first connection answers once, then closes at the next request; every later
    connection closes before answering: the second call fails after one more try, and a call
    that fails on a new connection is not tried again."""

    async def handle(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        if n == 0 and body is not None:
            writer.write(answer(body))
            await writer.drain()
            await read_request(reader)
        writer.close()

    async def main() -> tuple[Loopback, list[int]]:
        async with Loopback(handle) as server, direct(server.url) as http:
            assert await post(http, server.url, b"one") == b"one"
            counts = []
            for _ in range(2):
                with pytest.raises(ConnectionClosedError):
                    await post(http, server.url, b"two")
                counts.append(server.connections)
        return server, counts

    _, counts = asyncio.run(main())
    assert counts == [2, 3]


def test_connection_close_from_the_server_is_honoured() -> None:
    async def handle(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        assert body is not None
        writer.write(answer(body, "Connection: close"))  # and the server waits for the client

    async def main() -> Loopback:
        async with Loopback(handle) as server, direct(server.url) as http:
            for n in range(3):
                assert await post(http, server.url, b"%d" % n) == b"%d" % n
            await server.wait_for(3)
        return server

    server = asyncio.run(main())
    assert (server.connections, server.ended) == (3, 3)


def test_chunked_answers_in_pieces_on_a_kept_alive_connection() -> None:
    async def handle(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(body), 3):
                piece = body[i : i + 3]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(0)
            writer.write(b"0\r\n\r\n")

    async def main() -> tuple[Loopback, list[bytes]]:
        async with Loopback(handle) as server, direct(server.url) as http:
            bodies = []
            for body in (b"a chunked answer", b"", b"another one"):
                _, headers, raw = await http.post(server.url, {}, body)
                assert headers["transfer-encoding"] == "chunked"
                bodies.append(raw)
        return server, bodies

    server, bodies = asyncio.run(main())
    assert bodies == [b"a chunked answer", b"", b"another one"]
    assert server.connections == 1


@pytest.mark.parametrize("where", ["before answering", "mid-body"])
def test_a_stalled_server_is_a_read_timeout_and_its_connection_is_closed(where: str) -> None:
    async def handle(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if n > 0:
            return await echo(n, reader, writer)
        await read_request(reader)
        if where == "mid-body":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")

    async def main() -> Loopback:
        async with Loopback(handle) as server, direct(server.url, read_timeout=0.3) as http:
            with pytest.raises(ReadTimeoutError):
                await post(http, server.url, b"x")
            await server.wait_for(1)
            assert await post(http, server.url, b"after") == b"after"
        return server

    assert asyncio.run(main()).connections == 2


def test_an_answer_dripped_a_byte_at_a_time_is_a_read_timeout_two_read_timeouts_on() -> None:
    async def handle(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if n > 0:
            return await echo(n, reader, writer)
        await read_request(reader)
        body = b"x" * 1_000
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        for index in range(len(body)):  # each byte well within the read timeout
            writer.write(body[index : index + 1])
            await writer.drain()
            await asyncio.sleep(0.05)

    async def main() -> Loopback:
        async with Loopback(handle) as server, direct(server.url, read_timeout=0.3) as http:
            with pytest.raises(ReadTimeoutError):  # 2 x 0.3 s after the request
                await post(http, server.url, b"x")
            assert await post(http, server.url, b"after") == b"after"
        return server

    assert asyncio.run(main()).connections == 2


def test_a_refused_connection_is_an_endpoint_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"

    async def main() -> None:
        async with direct(url) as http:
            with pytest.raises(EndpointConnectionError):
                await post(http, url, b"x")

    asyncio.run(main())


def test_a_tls_handshake_that_never_ends_is_a_connect_timeout() -> None:
    """A plain TCP server that never answers the client's TLS hello: the connection is not made
    within the connect timeout."""

    async def handle(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await until_closed(reader)

    async def main() -> Loopback:
        async with Loopback(handle) as server:
            url = server.url.replace("http://", "https://")
            async with direct(url, verify=False, connect_timeout=0.3) as http:
                with pytest.raises(ConnectTimeoutError):
                    await post(http, url, b"x")
            await server.wait_for(1)
        return server

    assert asyncio.run(main()).connections == 1


def test_a_malformed_answer_is_a_closed_connection() -> None:
    async def handle(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")

    async def main() -> Loopback:
        async with Loopback(handle) as server, direct(server.url) as http:
            with pytest.raises(ConnectionClosedError) as closed:
                await post(http, server.url, b"x")
            assert "not an HTTP/1.x status line: 'SMTP ready'" in str(closed.value.__cause__)
            await server.wait_for(1)
        return server

    assert asyncio.run(main()).connections == 1


def test_headers_over_the_cap_are_refused_however_they_arrive() -> None:
    """An answer whose headers take more than 64 KiB (MAX_HEAD_BYTES), written at once: the
    call fails with the cap named, as when they come in pieces (before, headers that arrived
    complete passed whatever their size)."""

    async def handle(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"{}", "X-Padding: " + "p" * MAX_HEAD_BYTES))

    async def main() -> None:
        async with Loopback(handle) as server, direct(server.url) as http:
            with pytest.raises(ConnectionClosedError) as closed:
                await post(http, server.url, b"x")
            assert f"took more than {MAX_HEAD_BYTES} bytes" in str(closed.value.__cause__)

    asyncio.run(main())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize("verify", ["off", "the certificate as CA bundle", "default bundle"])
def test_tls_with_a_self_signed_certificate(certificate: tuple[Path, Path], verify: str) -> None:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(*certificate)
    setting: bool | str = {"off": False, "default bundle": True}.get(verify, str(certificate[0]))

    async def main() -> Loopback:
        async with Loopback(echo, tls) as server, direct(server.url, verify=setting) as http:
            if setting is True:
                with pytest.raises(SSLError):
                    await post(http, server.url, b"x")
            else:
                for n in range(3):
                    assert await post(http, server.url, b"tls %d" % n) == b"tls %d" % n
        return server

    server = asyncio.run(main())
    assert server.connections == (0 if setting is True else 1)  # 0: no handshake completed


def test_a_call_cancelled_mid_answer_closes_its_connection() -> None:
    async def handle(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if n > 0:
            return await echo(n, reader, writer)
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nthe first part")
        await writer.drain()
        sent.set()

    sent = asyncio.Event()

    async def main() -> Loopback:
        async with Loopback(handle) as server, direct(server.url) as http:
            call = asyncio.create_task(post(http, server.url, b"x"))
            await asyncio.wait_for(sent.wait(), WAIT)
            await asyncio.sleep(0.05)  # the first part reaches the client
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await server.wait_for(1)
            assert await post(http, server.url, b"next") == b"next"
        return server

    assert asyncio.run(main()).connections == 2


def test_close_closes_every_connection() -> None:
    async def main() -> Loopback:
        async with Loopback(echo) as server:
            async with direct(server.url) as http:
                await asyncio.gather(*(post(http, server.url, b"%d" % n) for n in range(4)))
                assert server.connections == 4
            await server.wait_for(4)
            assert not http.handles(server.url)
        return server

    assert asyncio.run(main()).ended == 4


def test_at_most_max_pool_connections_are_open() -> None:
    async def handle(n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            await asyncio.sleep(0.01)
            writer.write(answer(body))

    async def main() -> tuple[Loopback, list[bytes]]:
        async with Loopback(handle) as server, direct(server.url, max_pool_connections=2) as http:
            bodies = [b"%d" % n for n in range(12)]
            got = await asyncio.gather(*(post(http, server.url, body) for body in bodies))
            assert got == bodies
        return server, got

    server, _ = asyncio.run(main())
    assert server.connections == 2


def test_a_call_cancelled_while_waiting_for_a_connection_leaves_the_others_their_turn() -> None:
    release = asyncio.Event()

    async def handle(_: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            if body == b"first":
                await release.wait()
            writer.write(answer(body))

    async def main() -> tuple[Loopback, list[bytes]]:
        async with Loopback(handle) as server, direct(server.url, max_pool_connections=1) as http:
            first = asyncio.create_task(post(http, server.url, b"first"))
            await asyncio.sleep(0.05)
            second = asyncio.create_task(post(http, server.url, b"second"))
            third = asyncio.create_task(post(http, server.url, b"third"))
            await asyncio.sleep(0.05)
            second.cancel()
            release.set()
            got = await asyncio.wait_for(asyncio.gather(first, third), WAIT)
            with pytest.raises(asyncio.CancelledError):
                await second
        return server, got

    server, got = asyncio.run(main())
    assert got == [b"first", b"third"]
    assert server.connections == 1


def test_an_idle_connection_is_closed_after_the_keepalive_timeout() -> None:
    async def main() -> Loopback:
        async with Loopback(echo) as server:
            pool = Http1Pool(limit=4, connect_timeout=5, read_timeout=5, keepalive_timeout=0.2)
            port = int(server.url.rsplit(":", 1)[1].strip("/"))
            endpoint = Endpoint.of("http", "127.0.0.1", port, "/", None)
            status, _, body = await pool.post(endpoint, {}, b"x")
            assert (status, body) == (200, b"x")
            await server.wait_for(1)  # nobody closes it but the pool's expiry
            assert pool.open_connections == 0
            await pool.close()
        return server

    assert asyncio.run(main()).connections == 1


def test_bodies_of_ten_mebibytes_and_more_both_ways() -> None:
    request = bytes(range(256)) * (40 * 1024) + b"end"  # 10 MiB and 3 bytes

    async def main() -> bytes:
        async with Loopback(echo) as server, direct(server.url) as http:
            return await post(http, server.url, request)

    assert asyncio.run(main()) == request
