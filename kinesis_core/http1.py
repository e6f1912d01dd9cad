"""A small HTTP/1.1 client for the lean calls' POSTs (:class:`kinesis_core.client.DirectHttp`).

An idle poll is one small POST and one small JSON answer; on aiohttp about half of its client
CPU went to the request and response objects, the connector's bookkeeping and their timers.
This client does only what those calls need, in two parts:

- :class:`ResponseParser`, sans-I/O: bytes in, one answer out (status, headers, body, whether
  the connection can carry another request). Its states are :class:`State`; bodies framed by
  ``Content-Length``, by chunked transfer coding, or by the end of the connection.
- :class:`Http1Pool`, the asyncio driver: a request is one ``transport.write``, its answer is
  parsed as it arrives, and the connection goes back to a pool of kept-alive connections
  (at most ``limit`` connections open, an idle one closed after ``keepalive_timeout``). A
  request on a reused connection whose answer had not begun when the connection failed (the
  server had closed it while idle) is sent once more on a new connection.

Failures are :class:`HttpError`\\ s (the connection broke, a timeout), ``ssl.SSLError`` or
``OSError`` (connecting); :func:`kinesis_core.client.transport_error` turns each into the
botocore exception aiobotocore raises for it.
"""

from __future__ import annotations

import asyncio
import enum
import re
import ssl
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ConnectTimeout",
    "ConnectionBroken",
    "Endpoint",
    "Http1Pool",
    "HttpError",
    "MalformedAnswer",
    "ReadTimeout",
    "ResponseParser",
    "State",
]

MAX_HEAD_BYTES = 64 * 1024
"""The most bytes a status line and headers (or a chunk-size or trailer line) may take."""

_HEX = re.compile(r"[0-9a-fA-F]+")


class HttpError(Exception):
    """A failure of an HTTP/1.1 exchange."""


class MalformedAnswer(HttpError):
    """The server's bytes are not an HTTP/1.1 answer this client can read."""


class ConnectionBroken(HttpError):
    """The connection ended before the whole answer came. ``received`` is how many bytes of
    the answer had arrived; ``reset`` the socket's error, None when the server closed the
    connection cleanly."""

    def __init__(self, message: str, received: int, reset: BaseException | None = None) -> None:
        super().__init__(message)
        self.received = received
        self.reset = reset


class ConnectTimeout(HttpError):
    """No connection (TCP and TLS) within the connect timeout."""


class ReadTimeout(HttpError):
    """No byte of the answer within the read timeout."""


class State(enum.Enum):
    """Where a :class:`ResponseParser` is in the answer."""

    HEAD = "status line and headers"
    LENGTH = "a body of Content-Length bytes"
    CHUNK_SIZE = "a chunk-size line"
    CHUNK_DATA = "a chunk's data"
    CHUNK_END = "the line break after a chunk's data"
    TRAILER = "the trailer after the last chunk"
    UNTIL_CLOSE = "a body that ends with the connection"
    DONE = "the end of the answer"


class ResponseParser:
    """One answer to one request, parsed from the bytes given to :meth:`feed` and
    :meth:`feed_eof`. Header names are in lower case; a repeated header's values are joined
    with ``", "``. Interim 1xx answers are skipped. ``keep_alive`` says whether the connection
    may carry another request once the answer is whole."""

    __slots__ = (
        "_buffer",
        "_parts",
        "_remaining",
        "headers",
        "keep_alive",
        "received",
        "state",
        "status",
    )

    def __init__(self) -> None:
        self.state = State.HEAD
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.received = 0
        """Bytes fed so far."""
        self._buffer = b""
        self._parts: list[bytes] = []
        self._remaining = 0

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)

    def feed(self, data: bytes) -> bool:
        """Take the next bytes from the server; True once the answer is whole. Raises
        :class:`MalformedAnswer` for bytes that are not an HTTP/1.1 answer."""
        self.received += len(data)
        if self._buffer:
            data = self._buffer + data
            self._buffer = b""
        while True:
            state = self.state
            if state is State.HEAD:
                end = data.find(b"\r\n\r\n")
                if end < 0:
                    return self._wait(data, "the status line and headers")
                self._head(data[:end])
                data = data[end + 4 :]
            elif state is State.LENGTH or state is State.CHUNK_DATA:
                need = self._remaining
                if len(data) < need:
                    if data:
                        self._parts.append(data)
                    self._remaining = need - len(data)
                    return False
                self._parts.append(data[:need])
                data = data[need:]
                self.state = State.DONE if state is State.LENGTH else State.CHUNK_END
            elif state is State.CHUNK_SIZE:
                end = data.find(b"\r\n")
                if end < 0:
                    return self._wait(data, "a chunk-size line")
                self._chunk_size(data[:end])
                data = data[end + 2 :]
            elif state is State.CHUNK_END:
                if len(data) < 2:
                    self._buffer = data
                    return False
                if data[:2] != b"\r\n":
                    raise MalformedAnswer(f"no line break after a chunk's data: {data[:20]!r}")
                data = data[2:]
                self.state = State.CHUNK_SIZE
            elif state is State.TRAILER:
                end = data.find(b"\r\n")
                if end < 0:
                    return self._wait(data, "the trailer")
                if end == 0:
                    self.state = State.DONE
                data = data[end + 2 :]
            elif state is State.UNTIL_CLOSE:
                if data:
                    self._parts.append(data)
                return False
            else:
                if data:  # bytes past the answer: the connection's framing cannot be trusted
                    self.keep_alive = False
                return True

    def feed_eof(self) -> bool:
        """The server closed the connection: True if that ended the answer (a body framed by
        the connection's end), False if the answer was cut short."""
        if self.state is State.UNTIL_CLOSE:
            self.state = State.DONE
        return self.state is State.DONE

    def _wait(self, data: bytes, what: str) -> bool:
        if len(data) > MAX_HEAD_BYTES:
            raise MalformedAnswer(f"{what} took more than {MAX_HEAD_BYTES} bytes")
        self._buffer = data
        return False

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        line = lines[0]
        version, _, rest = line.partition(" ")
        code = rest[:3]
        if (
            version not in ("HTTP/1.1", "HTTP/1.0")
            or not (code.isascii() and code.isdigit())
            or rest[3:4] not in ("", " ")
        ):
            raise MalformedAnswer(f"not an HTTP/1.x status line: {line[:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for text in lines[1:]:
            name, colon, value = text.partition(":")
            if not colon or not name or " " in name or "\t" in name:
                raise MalformedAnswer(f"not a header line: {text[:80]!r}")
            name = name.lower()
            value = value.strip(" \t")
            known = headers.get(name)
            headers[name] = value if known is None else f"{known}, {value}"
        if 100 <= status < 200:
            if status == 101:
                raise MalformedAnswer("the server switched protocols (101), unasked")
            return  # interim: the answer follows
        self.status = status
        self.headers = headers
        tokens = headers.get("connection", "").lower()
        self.keep_alive = "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if status in (204, 304):
            self.state = State.DONE
        elif coding is not None:
            if coding.rpartition(",")[2].strip(" \t").lower() != "chunked":
                raise MalformedAnswer(f"transfer coding {coding!r} is not supported")
            if length is not None:  # RFC 9112 6.3: chunked wins, and the connection ends
                self.keep_alive = False
            self.state = State.CHUNK_SIZE
        elif length is not None:
            values = {v.strip(" \t") for v in length.split(",")}
            value = values.pop()
            if values or not (value.isascii() and value.isdigit()):
                raise MalformedAnswer(f"not a Content-Length: {length[:80]!r}")
            self._remaining = int(value)
            self.state = State.LENGTH if self._remaining else State.DONE
        else:
            self.keep_alive = False
            self.state = State.UNTIL_CLOSE

    def _chunk_size(self, line: bytes) -> None:
        size = line.partition(b";")[0].strip(b" \t").decode("latin-1")
        if not _HEX.fullmatch(size):
            raise MalformedAnswer(f"not a chunk-size line: {line[:80]!r}")
        self._remaining = int(size, 16)
        self.state = State.CHUNK_DATA if self._remaining else State.TRAILER


@dataclass(frozen=True)
class Endpoint:
    """Where a URL's requests go: its connection key and the start of every request's head."""

    scheme: str
    host: str
    port: int
    tls: ssl.SSLContext | None
    prefix: str
    """``POST <path> HTTP/1.1`` and the Host and Accept-Encoding lines."""

    @classmethod
    def of(
        cls, scheme: str, host: str, port: int, target: str, tls: ssl.SSLContext | None
    ) -> Endpoint:
        """``target`` is the request target (path and query); ``host`` a name or an address
        (an IPv6 address without brackets)."""
        shown = f"[{host}]" if ":" in host else host
        if port != (443 if scheme == "https" else 80):
            shown = f"{shown}:{port}"
        prefix = f"POST {target} HTTP/1.1\r\nHost: {shown}\r\nAccept-Encoding: identity\r\n"
        return cls(scheme, host, port, tls, prefix)

    def request(self, headers: Mapping[str, str], body: bytes) -> bytes:
        """The bytes of a POST of ``body`` with ``headers`` (not Host, Content-Length or
        Accept-Encoding: those are this function's)."""
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        head = f"{self.prefix}{lines}Content-Length: {len(body)}\r\n\r\n"
        lines_expected = len(headers) + 5
        if head.count("\n") != lines_expected or head.count("\r") != lines_expected:
            raise ValueError(f"a header name or value holds a line break: {headers!r:.200}")
        return head.encode() + body


class _Connection(asyncio.Protocol):
    """One connection; at most one request on it at a time."""

    def __init__(self, pool: Http1Pool, key: tuple[str, str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.waiter: asyncio.Future[ResponseParser] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.last_read = 0.0
        self.idle_since = 0.0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.closed:  # closed by the pool while it was being made
            transport.close()

    def exchange(self, request: bytes) -> asyncio.Future[ResponseParser]:
        """Send ``request``; its answer, whole (the future fails with an :class:`HttpError`)."""
        if self.closed or self.transport is None:
            raise ConnectionBroken("the connection closed before the request was sent", 0)
        loop = self.pool.loop
        self.parser = ResponseParser()
        self.waiter = waiter = loop.create_future()
        self.transport.write(request)
        self.last_read = now = loop.time()
        self.timer = loop.call_at(now + self.pool.read_timeout, self._check_timeout)
        return waiter

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:  # nothing asked: the connection's framing cannot be trusted
            self.close()
            return
        self.last_read = self.pool.loop.time()
        try:
            done = parser.feed(data)
        except MalformedAnswer as exc:
            self._fail(exc)
            return
        if done:
            self._finish(parser)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost says what that ended

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        parser = self.parser
        if parser is None:
            return
        if parser.feed_eof():
            parser.keep_alive = False
            self._finish(parser)
        else:
            if parser.state is State.HEAD and not parser.received:
                what = "before answering"
            else:
                what = f"in {parser.state.value}, after {parser.received} bytes of the answer"
            how = "closed the connection" if exc is None else f"broke the connection ({exc})"
            self._fail(ConnectionBroken(f"the server {how} {what}", parser.received, exc))

    def close(self) -> None:
        """Close the connection, failing a request in flight."""
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
            self.pool.forget(self)
        if self.parser is not None:
            received = self.parser.received
            self._fail(ConnectionBroken("the connection was closed by this client", received))

    def _finish(self, parser: ResponseParser) -> None:
        waiter = self._settle()
        if waiter is not None:
            waiter.set_result(parser)

    def _fail(self, exc: HttpError) -> None:
        waiter = self._settle()
        if waiter is not None:
            waiter.set_exception(exc)
        self.close()

    def _settle(self) -> asyncio.Future[ResponseParser] | None:
        """End the exchange: the waiter of its answer, if still waiting."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.parser = None
        waiter = self.waiter
        self.waiter = None
        return None if waiter is None or waiter.done() else waiter

    def _check_timeout(self) -> None:
        self.timer = None
        transport = self.transport
        if self.parser is None or transport is None:
            return
        loop = self.pool.loop
        now = loop.time()
        timeout = self.pool.read_timeout
        if transport.get_write_buffer_size():  # the request is still going out
            self.last_read = now
        due = self.last_read + timeout
        if due > now:
            self.timer = loop.call_at(due, self._check_timeout)
            return
        self._fail(ReadTimeout(f"no byte of the answer for {timeout:g} s"))


class Http1Pool:
    """HTTP/1.1 POSTs on kept-alive connections: at most ``limit`` connections open, an idle
    one closed after ``keepalive_timeout`` seconds. ``connect_timeout`` bounds the TCP and TLS
    handshakes; ``read_timeout`` the wait for each next byte of an answer. Made and used on one
    event loop."""

    def __init__(
        self,
        *,
        limit: int,
        connect_timeout: float,
        read_timeout: float,
        keepalive_timeout: float,
    ) -> None:
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.keepalive_timeout = keepalive_timeout
        self.loop = asyncio.get_running_loop()
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def post(
        self, endpoint: Endpoint, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """POST ``body``: the answer's status, headers and body."""
        request = endpoint.request(headers, body)
        key = (endpoint.scheme, endpoint.host, endpoint.port)
        fresh = False
        while True:
            connection, reused = await self._acquire(endpoint, key, fresh)
            try:
                answer = await connection.exchange(request)
            except ConnectionBroken as exc:
                if reused and not fresh and not exc.received:
                    fresh = True  # the server had closed it while idle: once more, anew
                    continue
                raise
            except BaseException:
                connection.close()  # never pooled with half an answer in it
                raise
            if answer.keep_alive and not connection.closed and not self._closed:
                self._release(connection)
            else:
                connection.close()
            return answer.status, answer.headers, answer.body

    async def _acquire(
        self, endpoint: Endpoint, key: tuple[str, str, int], fresh: bool
    ) -> tuple[_Connection, bool]:
        """A connection to ``endpoint``, and whether it was idle in the pool (not when
        ``fresh``); waits while ``limit`` connections are busy."""
        while True:
            if self._closed:
                raise ConnectionBroken("the client is closed", 0)
            connection = None if fresh else self._take_idle(key)
            if connection is not None:
                return connection, True
            if len(self._open) < self.limit:
                return await self._connect(endpoint, key), False
            idle = [c for connections in self._idle.values() for c in connections]
            if idle:  # make room: the connection idle longest goes
                min(idle, key=lambda c: c.idle_since).close()
                continue
            waiter = self.loop.create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # pass the turn on
                raise

    def _take_idle(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        connection = idle.pop()
        if self.loop.time() - connection.idle_since < self.keepalive_timeout:
            if connection.transport is not None and connection.transport.is_closing():
                connection.close()  # its end is on the way: the next one, or a new one
                return self._take_idle(key)
            return connection
        connection.close()  # the most recent is too old: so are the others
        for old in idle[:]:
            old.close()
        return None

    def _release(self, connection: _Connection) -> None:
        connection.idle_since = now = self.loop.time()
        self._idle.setdefault(connection.key, []).append(connection)
        if self._sweep is None:
            self._sweep = self.loop.call_at(now + self.keepalive_timeout, self._expire)
        self._wake()

    def _expire(self) -> None:
        """Close the connections idle for ``keepalive_timeout``."""
        self._sweep = None
        now = self.loop.time()
        oldest = now
        for idle in list(self._idle.values()):
            for connection in idle[:]:
                if now - connection.idle_since >= self.keepalive_timeout:
                    connection.close()
                else:
                    oldest = min(oldest, connection.idle_since)
        if any(self._idle.values()):
            self._sweep = self.loop.call_at(oldest + self.keepalive_timeout, self._expire)

    def forget(self, connection: _Connection) -> None:
        """``connection`` is closed: no longer idle, and no longer counted."""
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)
        if connection in self._open:
            self._open.discard(connection)
            self._wake()

    def _wake(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, endpoint: Endpoint, key: tuple[str, str, int]) -> _Connection:
        connection = _Connection(self, key)
        self._open.add(connection)
        try:
            await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: connection,
                    endpoint.host,
                    endpoint.port,
                    ssl=endpoint.tls,
                    server_hostname=endpoint.host if endpoint.tls is not None else None,
                ),
                self.connect_timeout,
            )
        except asyncio.TimeoutError:
            connection.close()
            raise ConnectTimeout(
                f"no connection to {endpoint.host}:{endpoint.port} in {self.connect_timeout:g} s"
            ) from None
        except BaseException:
            connection.close()
            raise
        return connection

    async def close(self) -> None:
        """Close every connection; a request in flight fails with :class:`ConnectionBroken`."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for connection in list(self._open):
            connection.close()
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
        await asyncio.sleep(0)  # the transports' connection_lost
