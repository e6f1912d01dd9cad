"""Sans-I/O HTTP/1.1 client exchange for one streaming response, on python-hyper's ``h11``.

kinesis-mock answers SubscribeToShard over HTTP/1.1 with a chunked event-stream body, and a
TLS server that does not offer h2 in ALPN leaves us with HTTP/1.1 too. One connection carries
one subscription. The body is buffered until ``read`` takes it; the driver stops reading the
socket while ``buffered`` is at the budget (``wants_data`` False), which is HTTP/1.1's only
backpressure: TCP's window then closes and the server stops sending.
"""

from __future__ import annotations

from collections.abc import Sequence

import h11

from kinesis_core.aws.http1 import MAX_HEAD_BYTES
from kinesis_core.fanout.errors import FanOutTransportError


def _head_bytes(headers: Sequence[tuple[bytes, bytes]]) -> int:
    """The bytes header lines take on the wire (``name: value`` and a line break each)."""
    return sum(len(name) + len(value) + 4 for name, value in headers)


class Http11ClientProtocol:
    """One request and its streaming response on a fresh connection."""

    def __init__(self, *, max_buffered_bytes: int, peer: str = "server") -> None:
        if max_buffered_bytes < 1:
            raise ValueError(f"max_buffered_bytes must be >= 1, got {max_buffered_bytes}")
        self.peer = peer
        self._budget = max_buffered_bytes
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._out = bytearray()
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
        fields = [(k, v) for k, v in headers if k.lower() != "content-length"]
        fields.append(("Content-Length", str(len(body))))
        self._out += self._conn.send(h11.Request(method=method, target=target, headers=fields))
        self._out += self._conn.send(h11.Data(data=body))
        self._out += self._conn.send(h11.EndOfMessage())

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the server (b"" when it closed the connection)."""
        if self.finished:
            return
        try:
            self._conn.receive_data(data)
            while True:
                event = self._conn.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                if isinstance(event, (h11.Response, h11.EndOfMessage)):
                    # h11 caps only what it buffers while incomplete; the cap holds for
                    # headers and trailers that came whole in one piece too.
                    size = _head_bytes(event.headers)
                    if size > MAX_HEAD_BYTES:
                        what = "headers" if isinstance(event, h11.Response) else "trailers"
                        self._fail(f"sent {what} of {size} bytes, over {MAX_HEAD_BYTES}")
                        return
                if isinstance(event, h11.Response):
                    self.status = event.status_code
                    self.headers = [
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers
                    ]
                elif isinstance(event, h11.Data):
                    self.body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    self.ended = True
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    self._fail("closed the connection before sending a response")
                    return
        except h11.RemoteProtocolError as exc:
            what = "the response" if self.status is None else "the response body"
            self._fail(f"broke off {what}: {exc}")

    def connection_lost(self, reason: str) -> None:
        """The socket failed (reset, timeout) rather than closing cleanly."""
        if not self.finished:
            self.error = FanOutTransportError(f"connection to {self.peer} lost: {reason}")

    def read(self, max_bytes: int) -> bytes:
        """Take up to ``max_bytes`` of the buffered body."""
        data = bytes(self.body[:max_bytes])
        del self.body[:max_bytes]
        return data

    def _fail(self, what: str) -> None:
        self.error = FanOutTransportError(f"{self.peer} {what}")
