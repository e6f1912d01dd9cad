"""Sans-I/O HTTP/1.1, the library's one HTTP/1.1 stack: the lean calls' POSTs
(:class:`kinesis_core.aws.direct_http.DirectHttp`) and SubscribeToShard over HTTP/1.1
(:mod:`kinesis_core.fanout.http11`).

This module holds what those calls need, without I/O: :func:`post_request`, the bytes of a
request, and :class:`ResponseParser`, bytes in, one answer out (status, headers, body, whether
the connection can carry another request). The parser's states are :class:`State`; bodies
are framed by ``Content-Length``, by chunked transfer coding, or by the end of the
connection. The asyncio drivers: :mod:`kinesis_core.aws.http1_pool` (the lean calls' pool of
kept-alive connections) and :mod:`kinesis_core.fanout.connection`.

Failures are :class:`HttpError`\\ s; :func:`kinesis_core.aws.exceptions.transport_error` turns each
into the botocore exception aiobotocore raises for aiohttp's error for the same failure.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

__all__ = [
    "ConnectTimeout",
    "ConnectionBroken",
    "HttpError",
    "MalformedAnswer",
    "ReadTimeout",
    "ResponseParser",
    "State",
    "post_request",
    "request_prefix",
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
        """The body's bytes parsed so far (and not yet taken by :meth:`take_body`)."""
        return b"".join(self._parts)

    def take_body(self) -> bytes:
        """The body's bytes parsed since the last call, for a reader of a streamed body."""
        data = b"".join(self._parts)
        self._parts.clear()
        return data

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
                    if not b"HTTP/".startswith(data[:5]):  # not to wait 64 KiB for a line
                        line = data.partition(b"\r\n")[0].decode("latin-1")
                        raise MalformedAnswer(f"not an HTTP/1.x status line: {line[:80]!r}")
                    return self._wait(data, "the status line and headers")
                self._within_cap(end, "the status line and headers")
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
                self._within_cap(end, "a chunk-size line")
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
                self._within_cap(end, "the trailer")
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
        self._within_cap(len(data), what)
        self._buffer = data
        return False

    @staticmethod
    def _within_cap(size: int, what: str) -> None:
        """The cap holds whether the bytes came in one piece or in several."""
        if size > MAX_HEAD_BYTES:
            raise MalformedAnswer(f"{what} took more than {MAX_HEAD_BYTES} bytes")

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


def request_prefix(scheme: str, host: str, port: int, target: str) -> str:
    """The start of every POST to ``target`` (path and query) on ``host`` (a name or an
    address; an IPv6 address without brackets) at ``port``: the request line and the Host and
    Accept-Encoding lines."""
    shown = f"[{host}]" if ":" in host else host
    if port != (443 if scheme == "https" else 80):
        shown = f"{shown}:{port}"
    return f"POST {target} HTTP/1.1\r\nHost: {shown}\r\nAccept-Encoding: identity\r\n"


def post_request(prefix: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """The bytes of a POST of ``body`` that starts with ``prefix`` (:func:`request_prefix`, or
    a request line alone), with ``headers`` (not those in ``prefix``, nor Content-Length: that
    is set here)."""
    lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
    head = f"{prefix}{lines}Content-Length: {len(body)}\r\n\r\n"
    lines_expected = prefix.count("\n") + len(headers) + 2
    if head.count("\n") != lines_expected or head.count("\r") != lines_expected:
        raise ValueError(f"a header name or value holds a line break: {headers!r:.200}")
    return head.encode() + body
