"""asyncio drivers of the sans-I/O HTTP protocols, and the pool that picks and shares them.

A ``ResponseChannel`` is one request's response as it streams in: ``head()`` waits for the
status and headers, ``read(n, timeout)`` for body bytes. Reading is what acknowledges bytes
(HTTP/2) or resumes the paused socket (HTTP/1.1), so a channel nobody reads stops its server.

``ConnectionPool`` chooses the protocol per origin: TLS with ALPN (``h2`` preferred), plain
HTTP/1.1 for ``http://`` endpoints (loopback emulators), or h2c with prior knowledge when asked.
HTTP/2 connections are shared by many subscriptions up to MAX_CONCURRENT_STREAMS (another
connection is opened when they are full); HTTP/1.1 gets a connection per subscription.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Literal, Protocol

from kinesis_core.aws.config import ClientConfig
from kinesis_core.fanout.errors import FanOutTimeoutError, FanOutTransportError
from kinesis_core.fanout.http2 import Http2ClientProtocol
from kinesis_core.fanout.http11 import Http11ClientProtocol
from kinesis_core.fanout.signing import SignedRequest
from kinesis_core.fanout.tls import ssl_context
from kinesis_core.runtime.timeouts import within

HttpVersion = Literal["auto", "h2", "http/1.1"]
"""auto: ALPN offers h2 and http/1.1 over TLS, plain http:// is HTTP/1.1. h2: only HTTP/2 (h2c
with prior knowledge on http://). http/1.1: only HTTP/1.1."""

_CONNECTION_HEADERS = frozenset(
    {"host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
)


class ResponseChannel(Protocol):
    """One streaming response."""

    peer: str

    async def head(self, timeout: float) -> tuple[int, list[tuple[str, str]]]:
        """Status and headers; FanOutTransportError if the exchange failed first."""
        ...

    async def read(self, max_bytes: int, timeout: float) -> bytes | None:
        """Up to ``max_bytes`` body bytes; b"" once the body ended; None if nothing came within
        ``timeout`` seconds; FanOutTransportError if the stream failed."""
        ...

    def close(self) -> None:
        """Stop receiving (cancel the stream or close the connection)."""
        ...


async def _wait(event: asyncio.Event, ready: Callable[[], bool], timeout: float) -> bool:
    """Wait until ``ready()``, woken by ``event``; False if ``timeout`` passed first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not ready():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        event.clear()
        try:
            async with within(remaining):
                await event.wait()
        except asyncio.TimeoutError:
            return ready()
    return True


# -- HTTP/2 ---------------------------------------------------------------------------------


class Http2Connection(asyncio.Protocol):
    """Drives one ``Http2ClientProtocol`` over an asyncio transport."""

    def __init__(self, protocol: Http2ClientProtocol) -> None:
        self.protocol = protocol
        self._transport: asyncio.Transport | None = None
        self._wakers: dict[int, asyncio.Event] = {}
        self._settled = asyncio.Event()
        self.closed = False

    @property
    def usable(self) -> bool:
        return not self.closed and self.protocol.error is None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.protocol.initiate()
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._wake(self.protocol.receive_data(data))
        self._flush()
        if self.protocol.ready or self.protocol.error is not None:
            self._settled.set()
        if self.protocol.error is not None and self._transport is not None:
            self._transport.close()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake(self.protocol.connection_lost(repr(exc) if exc else "closed by the server"))
        self._settled.set()

    async def wait_ready(self, timeout: float) -> None:
        """Wait for the server's SETTINGS (its stream limit), or fail."""
        if not await _wait(self._settled, lambda: self._settled.is_set(), timeout):
            raise FanOutTimeoutError(
                f"no HTTP/2 SETTINGS from {self.protocol.peer} within {timeout:g} s"
            )
        if self.protocol.error is not None:
            raise self.protocol.error

    def open(self, request: SignedRequest) -> Http2Channel:
        headers = [
            (b":method", b"POST"),
            (b":scheme", request.scheme.encode()),
            (b":authority", request.authority.encode()),
            (b":path", request.path.encode()),
        ]
        headers += [
            (name.lower().encode(), value.encode("latin-1"))
            for name, value in request.headers
            if name.lower() not in _CONNECTION_HEADERS
        ]
        stream_id = self.protocol.open_stream(headers, request.body)
        self._wakers[stream_id] = asyncio.Event()
        self._flush()
        return Http2Channel(self, stream_id)

    def release(self, stream_id: int) -> None:
        self._wakers.pop(stream_id, None)
        self.protocol.cancel(stream_id)
        self._flush()

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self.protocol.close()
            self._flush()
            self._transport.close()
        self._wake(set(self._wakers))

    def flush(self) -> None:
        self._flush()

    def waker(self, stream_id: int) -> asyncio.Event:
        return self._wakers[stream_id]

    def _flush(self) -> None:
        data = self.protocol.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _wake(self, stream_ids: set[int]) -> None:
        for stream_id in stream_ids:
            waker = self._wakers.get(stream_id)
            if waker is not None:
                waker.set()


class Http2Channel:
    """One HTTP/2 stream of a shared connection."""

    def __init__(self, connection: Http2Connection, stream_id: int) -> None:
        self._connection = connection
        self._protocol = connection.protocol
        self._stream_id = stream_id
        self._waker = connection.waker(stream_id)
        self._state = self._protocol.stream(stream_id)
        self.peer = self._protocol.peer

    async def head(self, timeout: float) -> tuple[int, list[tuple[str, str]]]:
        state = self._state
        ready = lambda: state.status is not None or state.finished  # noqa: E731
        if not await _wait(self._waker, ready, timeout):
            raise FanOutTimeoutError(f"no response from {self.peer} within {timeout:g} s")
        if state.status is None:
            raise state.error or FanOutTransportError(
                f"{self.peer} ended the HTTP/2 stream without a response"
            )
        return state.status, state.headers

    async def read(self, max_bytes: int, timeout: float) -> bytes | None:
        state = self._state
        if not await _wait(self._waker, lambda: bool(state.body) or state.finished, timeout):
            return None
        if state.body:
            data = self._protocol.read(self._stream_id, max_bytes)
            self._connection.flush()
            return data
        if state.error is not None:
            raise state.error
        return b""

    def close(self) -> None:
        self._connection.release(self._stream_id)


# -- HTTP/1.1 -------------------------------------------------------------------------------


class Http11Connection(asyncio.Protocol):
    """Drives one ``Http11ClientProtocol``: a single request on its own connection."""

    def __init__(self, protocol: Http11ClientProtocol) -> None:
        self.protocol = protocol
        self.peer = protocol.peer
        self._transport: asyncio.Transport | None = None
        self._waker = asyncio.Event()
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def send(self, request: SignedRequest) -> None:
        headers = [("Host", request.authority)]
        headers += [(k, v) for k, v in request.headers if k.lower() not in _CONNECTION_HEADERS]
        self.protocol.send_request("POST", request.path, headers, request.body)
        assert self._transport is not None
        self._transport.write(self.protocol.data_to_send())

    def data_received(self, data: bytes) -> None:
        self.protocol.receive_data(data)
        if not self.protocol.wants_data and not self.protocol.finished and not self._paused:
            assert self._transport is not None
            self._transport.pause_reading()
            self._paused = True
        self._waker.set()

    def eof_received(self) -> bool | None:
        self.protocol.receive_data(b"")
        self._waker.set()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.connection_lost(repr(exc) if exc else "closed by the server")
        self._waker.set()

    async def head(self, timeout: float) -> tuple[int, list[tuple[str, str]]]:
        protocol = self.protocol
        ready = lambda: protocol.status is not None or protocol.finished  # noqa: E731
        if not await _wait(self._waker, ready, timeout):
            raise FanOutTimeoutError(f"no response from {self.peer} within {timeout:g} s")
        if protocol.status is None:
            raise protocol.error or FanOutTransportError(f"{self.peer} sent no response")
        return protocol.status, protocol.headers

    async def read(self, max_bytes: int, timeout: float) -> bytes | None:
        protocol = self.protocol
        if not await _wait(self._waker, lambda: bool(protocol.body) or protocol.finished, timeout):
            return None
        if protocol.body:
            data = protocol.read(max_bytes)
            if self._paused and protocol.wants_data and self._transport is not None:
                self._paused = False
                self._transport.resume_reading()
            return data
        if protocol.error is not None:
            raise protocol.error
        return b""

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


# -- choosing and sharing connections -------------------------------------------------------


class _Negotiating(asyncio.Protocol):
    """Placeholder protocol until the TLS handshake tells which protocol ALPN selected."""

    def __init__(self, make: Callable[[str | None], asyncio.Protocol]) -> None:
        self._make = make
        self.chosen: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        self.chosen = self._make(alpn)
        transport.set_protocol(self.chosen)
        self.chosen.connection_made(transport)


class ConnectionPool:
    """Opens response channels for signed requests, sharing HTTP/2 connections per origin."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        http_version: HttpVersion = "auto",
        max_buffered_bytes: int,
        max_streams_per_connection: int,
    ) -> None:
        self._config = config
        self._http_version = http_version
        self._budget = max_buffered_bytes
        self._max_streams = max_streams_per_connection
        self._h2: dict[tuple[str, str, int], list[Http2Connection]] = {}
        self._http11: set[Http11Connection] = set()
        self._locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    @property
    def connections(self) -> int:
        """Open HTTP/2 connections (for tests and metrics)."""
        return sum(1 for conns in self._h2.values() for c in conns if c.usable)

    async def open(self, request: SignedRequest) -> ResponseChannel:
        if self._closed:
            raise FanOutTransportError("the fan-out client is closed")
        origin = (request.scheme, request.host, request.port)
        if request.scheme == "http" and self._http_version != "h2":
            return self._send_http11(await self._connect(origin, request), request)
        # One connection attempt per origin at a time, so that a burst of subscriptions
        # shares new HTTP/2 connections instead of opening one each.
        async with self._locks.setdefault(origin, asyncio.Lock()):
            connection = self._free_connection(origin)
            if connection is None:
                chosen = await self._connect(origin, request)
                if isinstance(chosen, Http11Connection):
                    return self._send_http11(chosen, request)
                connection = chosen
            return connection.open(request)

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._h2.values():
            for connection in conns:
                connection.close()
        for http11 in self._http11:
            http11.close()
        self._h2.clear()
        self._http11.clear()

    def _free_connection(self, origin: tuple[str, str, int]) -> Http2Connection | None:
        conns = [c for c in self._h2.get(origin, []) if c.usable]
        self._h2[origin] = conns
        return next((c for c in conns if c.protocol.capacity > 0), None)

    def _send_http11(
        self, connection: Http2Connection | Http11Connection, request: SignedRequest
    ) -> ResponseChannel:
        assert isinstance(connection, Http11Connection)
        self._http11 = {c for c in self._http11 if not c.protocol.finished}
        self._http11.add(connection)
        connection.send(request)
        return connection

    async def _connect(
        self, origin: tuple[str, str, int], request: SignedRequest
    ) -> Http2Connection | Http11Connection:
        scheme, host, port = origin
        peer = f"{scheme}://{request.authority}"

        def make(alpn: str | None) -> asyncio.Protocol:
            # TLS: what ALPN selected. Plain HTTP: h2c with prior knowledge only when asked.
            if alpn == "h2" or (scheme == "http" and self._http_version == "h2"):
                return Http2Connection(
                    Http2ClientProtocol(
                        stream_window=max(self._budget, 65_535),
                        max_streams=self._max_streams,
                        peer=peer,
                    )
                )
            return Http11Connection(
                Http11ClientProtocol(max_buffered_bytes=self._budget, peer=peer)
            )

        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            tls = await self._ssl_context()
        negotiating = _Negotiating(make)
        timeout = self._config.connect_timeout
        try:
            async with within(timeout):
                await loop.create_connection(
                    lambda: negotiating,
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except asyncio.TimeoutError as exc:
            raise FanOutTimeoutError(f"could not connect to {peer} within {timeout:g} s") from exc
        except FanOutTransportError:
            raise
        except (OSError, ssl.SSLError) as exc:
            raise FanOutTransportError(f"could not connect to {peer}: {exc}") from exc
        chosen = negotiating.chosen
        if self._http_version == "h2" and not isinstance(chosen, Http2Connection):
            assert isinstance(chosen, Http11Connection)
            chosen.close()
            raise FanOutTransportError(f"{peer} did not agree to HTTP/2 in ALPN")
        if isinstance(chosen, Http2Connection):
            try:
                await chosen.wait_ready(self._config.read_timeout)
            except BaseException:
                chosen.close()
                raise
            self._h2.setdefault(origin, []).append(chosen)
            return chosen
        assert isinstance(chosen, Http11Connection)
        return chosen

    async def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            alpn = {"auto": ["h2", "http/1.1"], "h2": ["h2"], "http/1.1": ["http/1.1"]}
            self._ssl = await asyncio.to_thread(ssl_context, self._config, alpn[self._http_version])
        return self._ssl
