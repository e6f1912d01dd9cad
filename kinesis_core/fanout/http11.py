"""Sans-I/O HTTP/1.1 client exchange for one streaming response, on the lean calls' parser
(:mod:`kinesis_core.aws.http1`).

kinesis-mock answers SubscribeToShard over HTTP/1.1 with a chunked event-stream body, and a
TLS server that does not offer h2 in ALPN leaves us with HTTP/1.1 too. One connection carries
one subscription. The body is buffered until ``read`` takes it; the driver stops reading the
socket while ``buffered`` is at the budget (``wants_data`` False), which is HTTP/1.1's only
backpressure: TCP's window then closes and the server stops sending.
"""

from __future__ import annotations

from collections.abc import Sequence

from kinesis_core.aws.http1 import MalformedAnswer, ResponseParser, post_request
from kinesis_core.fanout.errors import FanOutTransportError


class Http11ClientProtocol:
    """One request and its streaming response on a fresh connection."""

    def __init__(self, *, max_buffered_bytes: int, peer: str = "server") -> None:
        if max_buffered_bytes < 1:
            raise ValueError(f"max_buffered_bytes must be >= 1, got {max_buffered_bytes}")
        self.peer = peer
        self._budget = max_buffered_bytes
        self._parser = ResponseParser()
        self._out = b""
        self.status: int | None = None
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.ended = False
        self.error: FanOutTransportError | None = None

    @property
    def finished(self) -> bool:
        return self.ended or self.error is not None

    @property
    def wants_data(self) -> bool:
        """Keep reading the socket: the response goes on and the buffer is under budget."""
        return not self.finished and len(self.body) < self._budget

    def send_request(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> None:
        """Queue the request (``headers`` must include Host; Content-Length is set here)."""
        fields = {k: v for k, v in headers if k.lower() != "content-length"}
        self._out += post_request(f"{method} {target} HTTP/1.1\r\n", fields, body)

    def data_to_send(self) -> bytes:
        out, self._out = self._out, b""
        return out

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the server (b"" when it closed the connection)."""
        if self.finished:
            return
        parser = self._parser
        try:
            done = parser.feed(data) if data else parser.feed_eof()
        except MalformedAnswer as exc:
            self._take(parser)
            self._fail(f"broke off {self._part()}: {exc}")
            return
        self._take(parser)
        if done:
            self.ended = True
        elif not data:
            if self.status is None and not parser.received:
                self._fail("closed the connection before sending a response")
            else:
                self._fail(f"broke off {self._part()}: closed in {parser.state.value}")

    def connection_lost(self, reason: str) -> None:
        """The socket failed (reset, timeout) rather than closing cleanly."""
        if not self.finished:
            self.error = FanOutTransportError(f"connection to {self.peer} lost: {reason}")

    def read(self, max_bytes: int) -> bytes:
        """Take up to ``max_bytes`` of the buffered body."""
        data = bytes(self.body[:max_bytes])
        del self.body[:max_bytes]
        return data

    def _take(self, parser: ResponseParser) -> None:
        if parser.status and self.status is None:
            self.status = parser.status
            self.headers = list(parser.headers.items())
        self.body += parser.take_body()

    def _part(self) -> str:
        return "the response" if self.status is None else "the response body"

    def _fail(self, what: str) -> None:
        self.error = FanOutTransportError(f"{self.peer} {what}")
