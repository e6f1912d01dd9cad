"""Test helpers for enhanced fan-out: event-stream messages and an in-memory HTTP/2 server.

The server side is h2's own server-mode connection, so the client's framing is checked against
an independent HTTP/2 implementation, byte for byte, without sockets.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings

DATA = Path(__file__).parent / "data" / "fanout"
CONSUMER_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000"


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (as AWS and kinesis-mock write them)."""
    header_bytes = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(payload: dict[str, Any], event_type: str = "SubscribeToShardEvent") -> bytes:
    headers = {
        ":message-type": "event",
        ":event-type": event_type,
        ":content-type": "application/json",
    }
    return encode_message(headers, json.dumps(payload).encode())


def initial_response() -> bytes:
    return event({}, "initial-response")


def exception(code: str, message: str) -> bytes:
    headers = {
        ":message-type": "exception",
        ":exception-type": code,
        ":content-type": "application/json",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


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
