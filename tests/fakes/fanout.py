"""A fake SubscribeToShard server for enhanced fan-out's tests: event-stream messages and one
HTTP/2 server side, driven by hand in memory (``H2Server``) or serving a socket on loopback
(``LoopbackH2Server``, the same server side behind an asyncio protocol).

The server side is h2's own server-mode connection, so the client's framing is checked against
an independent HTTP/2 implementation, byte for byte.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from pathlib import Path
from typing import Any, Literal

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings

from kinesis_core.local.faults import event_message

DATA = Path(__file__).parents[1] / "data" / "fanout"
CONSUMER_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000"
RATE_EXCEEDED = b'{"__type": "LimitExceededException", "message": "Rate exceeded for consumer"}'


def event(payload: dict[str, Any], event_type: str = "SubscribeToShardEvent") -> bytes:
    headers = {
        ":message-type": "event",
        ":event-type": event_type,
        ":content-type": "application/json",
    }
    return event_message(headers, json.dumps(payload).encode())


def initial_response() -> bytes:
    return event({}, "initial-response")


def exception(code: str, message: str) -> bytes:
    headers = {
        ":message-type": "exception",
        ":exception-type": code,
        ":content-type": "application/json",
    }
    return event_message(headers, json.dumps({"message": message}).encode())


def record(
    sequence: int, data: bytes, key: str = "pk", arrival: float = 1_700_000_000.25
) -> dict[str, Any]:
    return {
        "SequenceNumber": str(sequence),
        "ApproximateArrivalTimestamp": arrival,
        "Data": base64.b64encode(data).decode(),
        "PartitionKey": key,
    }


def subscribe_event(
    records: list[dict[str, Any]],
    continuation: str | None,
    millis: int = 0,
    child_shards: list[dict[str, Any]] | None = None,
) -> bytes:
    payload: dict[str, Any] = {"Records": records, "MillisBehindLatest": millis}
    if continuation is not None:
        payload["ContinuationSequenceNumber"] = continuation
    if child_shards is not None:
        payload["ChildShards"] = child_shards
    return event(payload)


class H2Server:
    """h2's server side of one connection, driven by hand."""

    def __init__(self, max_concurrent_streams: int | None = None) -> None:
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        if max_concurrent_streams is not None:
            self.conn.local_settings = h2.settings.Settings(
                client=False,
                initial_values={
                    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_concurrent_streams
                },
            )
        self.conn.initiate_connection()
        self.events: list[h2.events.Event] = []

    def receive(self, data: bytes) -> list[h2.events.Event]:
        events = self.conn.receive_data(data)
        self.events += events
        return events

    def requests(self) -> list[h2.events.RequestReceived]:
        return [e for e in self.events if isinstance(e, h2.events.RequestReceived)]

    def respond(
        self,
        stream_id: int,
        status: int = 200,
        content_type: str = "application/vnd.amazon.eventstream",
    ) -> None:
        self.conn.send_headers(
            stream_id,
            [(b":status", str(status).encode()), (b"content-type", content_type.encode())],
        )

    def send(
        self, stream_id: int, data: bytes, *, end: bool = False, pad: int | None = None
    ) -> None:
        self.conn.send_data(stream_id, data, end_stream=end, pad_length=pad)

    def sendable(self, stream_id: int) -> int:
        return self.conn.local_flow_control_window(stream_id)

    def out(self) -> bytes:
        return self.conn.data_to_send()


class LoopbackH2Server:
    """A SubscribeToShard endpoint on 127.0.0.1 (``async with`` gives its URL): every request
    gets a 200 event stream carrying ``body`` (or the ``error`` answer), sent as fast as the
    client's flow control lets it, then ends as ``finish`` says: stays ``open``, ``end`` of
    stream, ``reset`` (RST_STREAM) or ``goaway``. ``handshake_delay`` holds the server's
    SETTINGS back (a far region, a slow TLS handshake)."""

    def __init__(
        self,
        body: bytes,
        *,
        finish: Literal["open", "end", "reset", "goaway"] = "open",
        max_concurrent_streams: int | None = None,
        tls: ssl.SSLContext | None = None,
        error: tuple[int, bytes] | None = None,
        handshake_delay: float = 0.0,
        refuse_within: float = 0.0,
    ) -> None:
        self.body = body
        self.error = error
        self.handshake_delay = handshake_delay
        self.refuse_within = refuse_within
        """Refuse a request that arrives sooner than this after the previous one, as AWS
        refuses a second SubscribeToShard within a second (LimitExceededException)."""
        self.arrivals: list[float] = []
        self.refused = 0
        self.finish = finish
        self.max_concurrent_streams = max_concurrent_streams
        self.tls = tls
        self.connections = 0
        self.requests: list[dict[bytes, bytes]] = []
        self.sent: dict[int, int] = {}
        """Bytes of ``body`` sent per stream."""
        self.cancelled: list[int] = []
        """The streams the client reset."""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _LoopbackConnection(self), "127.0.0.1", 0, ssl=self.tls
        )
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


class _LoopbackConnection(asyncio.Protocol):
    """One connection of a LoopbackH2Server: an H2Server fed from and flushed to the socket."""

    def __init__(self, server: LoopbackH2Server) -> None:
        self.server = server
        self.h2: H2Server | None = None
        self.early: list[bytes] = []
        """What the client sent before the server's handshake (``handshake_delay``)."""
        self.pending: dict[int, bytes] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections += 1
        asyncio.get_running_loop().call_later(self.server.handshake_delay, self.settle)

    def settle(self) -> None:
        self.h2 = H2Server(self.server.max_concurrent_streams)
        self.flush()
        early, self.early = self.early, []
        for data in early:
            self.data_received(data)

    def data_received(self, data: bytes) -> None:
        if self.h2 is None:
            self.early.append(data)
            return
        for event in self.h2.receive(data):
            if isinstance(event, h2.events.RequestReceived):
                self.server.requests.append(dict(event.headers or ()))
                now = asyncio.get_running_loop().time()
                arrivals = self.server.arrivals
                too_soon = bool(arrivals) and now - arrivals[-1] < self.server.refuse_within
                arrivals.append(now)
                if too_soon:  # AWS: one SubscribeToShard per second per shard and consumer
                    self.server.refused += 1
                    self.h2.respond(event.stream_id, 400, "application/json")
                    self.h2.send(event.stream_id, RATE_EXCEEDED, end=True)
                    continue
                if self.server.error is not None:
                    status, body = self.server.error
                    self.h2.respond(event.stream_id, status, "application/json")
                    self.h2.send(event.stream_id, body, end=True)
                    continue
                self.h2.respond(event.stream_id)
                self.pending[event.stream_id] = self.server.body
                self.server.sent[event.stream_id] = 0
            elif isinstance(event, h2.events.StreamReset):
                self.pending.pop(event.stream_id, None)
                self.server.cancelled.append(event.stream_id)
        self.push()
        self.flush()

    def push(self) -> None:
        assert self.h2 is not None
        for stream_id, body in list(self.pending.items()):
            while body:
                window = min(self.h2.sendable(stream_id), self.h2.conn.max_outbound_frame_size)
                if window <= 0:
                    break
                self.h2.send(stream_id, body[:window])
                self.server.sent[stream_id] += min(window, len(body))
                body = body[window:]
            self.pending[stream_id] = body
            if not body:
                del self.pending[stream_id]
                self.finish(stream_id)

    def finish(self, stream_id: int) -> None:
        assert self.h2 is not None
        if self.server.finish == "end":
            self.h2.conn.end_stream(stream_id)
        elif self.server.finish == "reset":
            self.h2.conn.reset_stream(stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
        elif self.server.finish == "goaway":
            self.h2.conn.close_connection(h2.errors.ErrorCodes.NO_ERROR, last_stream_id=stream_id)

    def flush(self) -> None:
        assert self.h2 is not None
        data = self.h2.out()
        if data and self.transport is not None:
            self.transport.write(data)


def exchange(client: Any, server: H2Server) -> set[int]:
    """Move bytes both ways until neither side has anything to send; returns changed streams."""
    changed: set[int] = set()
    while True:
        to_server = client.data_to_send()
        if to_server:
            server.receive(to_server)
        to_client = server.out()
        if to_client:
            changed |= client.receive_data(to_client)
        if not to_server and not to_client:
            return changed
