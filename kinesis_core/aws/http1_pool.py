"""The asyncio driver of :mod:`kinesis_core.aws.http1`: HTTP/1.1 POSTs on a pool of kept-alive
connections, for :class:`kinesis_core.aws.direct_http.DirectHttp`.

A request is one ``transport.write`` (:func:`~kinesis_core.aws.http1.post_request`); its answer is
parsed as it arrives (:class:`~kinesis_core.aws.http1.ResponseParser`), and the connection goes
back to the pool (at most ``limit`` connections open, an idle one closed after
``keepalive_timeout``). A request on a reused connection whose answer had not begun when the
connection failed (the server had closed it while idle) is sent once more on a new
connection. A request whose answer is not whole ``answer_timeout`` seconds after it was sent
fails with :class:`~kinesis_core.aws.http1.ReadTimeout`, however steadily its bytes trickle in (a
body dripped a byte a second never ends otherwise). A cancelled request closes its connection.
Failures are
:class:`~kinesis_core.aws.http1.HttpError`\\ s, ``ssl.SSLError`` or ``OSError`` (connecting).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from kinesis_core.aws.http1 import (
    ConnectionBroken,
    ConnectTimeout,
    HttpError,
    MalformedAnswer,
    ReadTimeout,
    ResponseParser,
    State,
    post_request,
    request_prefix,
)
from kinesis_core.runtime.timeouts import within

__all__ = ["ANSWER_TIMEOUT_READS", "Endpoint", "Http1Pool"]

ANSWER_TIMEOUT_READS = 2
"""A whole answer's deadline, in read timeouts from its request."""


@dataclass(frozen=True)
class Endpoint:
    """Where a URL's requests go: its connection key, TLS context (None for ``http``) and the
    start of every request (:func:`~kinesis_core.aws.http1.request_prefix`)."""

    scheme: str
    host: str
    port: int
    tls: ssl.SSLContext | None
    prefix: str

    @classmethod
    def of(
        cls, scheme: str, host: str, port: int, target: str, tls: ssl.SSLContext | None
    ) -> Endpoint:
        """``target`` is the request target (path and query); ``host`` a name or an address
        (an IPv6 address without brackets)."""
        return cls(scheme, host, port, tls, request_prefix(scheme, host, port, target))


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
        self.deadline = 0.0
        """When the answer in flight must be whole."""
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
        self.deadline = now + self.pool.answer_timeout
        self.timer = loop.call_at(
            min(now + self.pool.read_timeout, self.deadline), self._check_timeout
        )
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
        if now >= self.deadline:
            whole = self.pool.answer_timeout
            self._fail(ReadTimeout(f"the answer was not whole {whole:g} s after the request"))
            return
        if transport.get_write_buffer_size():  # the request is still going out
            self.last_read = now
        due = self.last_read + timeout
        if due > now:
            self.timer = loop.call_at(min(due, self.deadline), self._check_timeout)
            return
        self._fail(ReadTimeout(f"no byte of the answer for {timeout:g} s"))


class Http1Pool:
    """HTTP/1.1 POSTs on kept-alive connections: at most ``limit`` connections open, an idle
    one closed after ``keepalive_timeout`` seconds. ``connect_timeout`` bounds the TCP and TLS
    handshakes; ``read_timeout`` the wait for each next byte of an answer, and
    ``answer_timeout`` (by default twice ``read_timeout``) the whole answer, from the request.
    Made and used on one event loop."""

    def __init__(
        self,
        *,
        limit: int,
        connect_timeout: float,
        read_timeout: float,
        keepalive_timeout: float,
        answer_timeout: float | None = None,
    ) -> None:
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.answer_timeout = (
            ANSWER_TIMEOUT_READS * read_timeout if answer_timeout is None else answer_timeout
        )
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
        request = post_request(endpoint.prefix, headers, body)
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
            async with within(self.connect_timeout):
                await self.loop.create_connection(
                    lambda: connection,
                    endpoint.host,
                    endpoint.port,
                    ssl=endpoint.tls,
                    server_hostname=endpoint.host if endpoint.tls is not None else None,
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
