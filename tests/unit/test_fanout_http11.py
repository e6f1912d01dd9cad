"""The sans-I/O HTTP/1.1 exchange against bytes recorded from kinesis-mock 0.6.2."""

from __future__ import annotations

import h11
import pytest

from kinesis_core.aws.http1 import MAX_HEAD_BYTES
from kinesis_core.fanout.errors import FanOutTransportError
from kinesis_core.fanout.http11 import Http11ClientProtocol
from tests.fakes.fanout import DATA

EVENTS = (DATA / "kinesis_mock_h11_events.bin").read_bytes()
IN_USE = (DATA / "kinesis_mock_h11_resource_in_use.bin").read_bytes()


def started(budget: int = 1 << 20) -> Http11ClientProtocol:
    protocol = Http11ClientProtocol(max_buffered_bytes=budget, peer="kinesis-mock")
    protocol.send_request(
        "POST", "/", [("Host", "127.0.0.1:4567"), ("Content-Length", "99")], b'{"a": 1}'
    )
    return protocol


def test_request_bytes_parse_as_the_request_sent() -> None:
    protocol = started()
    server = h11.Connection(h11.SERVER)
    server.receive_data(protocol.data_to_send())
    request = server.next_event()
    assert isinstance(request, h11.Request)
    assert request.method == b"POST"
    assert (b"content-length", b"8") in list(request.headers)  # ours, not the caller's
    body = server.next_event()
    assert isinstance(body, h11.Data)
    assert body.data == b'{"a": 1}'
    assert isinstance(server.next_event(), h11.EndOfMessage)
    assert protocol.data_to_send() == b""


def test_recorded_chunked_event_stream() -> None:
    protocol = started()
    protocol.receive_data(EVENTS)
    assert protocol.status == 200
    assert ("transfer-encoding", "chunked") in protocol.headers
    assert ("content-type", "application/vnd.amazon.eventstream") in protocol.headers
    assert not protocol.finished  # the stream goes on
    body = protocol.read(1 << 20)
    assert body.startswith(b"\x00\x00")  # an event-stream prelude, not chunk framing
    assert b"SubscribeToShardEvent" in body
    assert b"\r\n" not in body[:12]


def test_recorded_bytes_one_at_a_time() -> None:
    whole = started()
    whole.receive_data(EVENTS)
    split = started()
    for i in range(len(EVENTS)):
        split.receive_data(EVENTS[i : i + 1])
    assert split.read(1 << 20) == whole.read(1 << 20)


def test_recorded_exception_answer_ends_the_body() -> None:
    protocol = started()
    protocol.receive_data(IN_USE)
    assert protocol.status == 200
    assert protocol.ended
    assert protocol.error is None
    assert b"ResourceInUseException" in protocol.read(1 << 20)


def test_cut_mid_body_is_a_transport_error() -> None:
    protocol = started()
    protocol.receive_data(EVENTS[: len(EVENTS) - 100])
    protocol.receive_data(b"")  # the server closed the connection
    assert isinstance(protocol.error, FanOutTransportError)
    assert isinstance(protocol.error, OSError)
    assert str(protocol.error).startswith("kinesis-mock broke off the response body")
    assert protocol.read(1 << 20)  # what did arrive can still be read


def test_closed_before_a_response() -> None:
    protocol = started()
    protocol.receive_data(b"")
    assert protocol.status is None
    assert str(protocol.error).startswith("kinesis-mock ")


def test_reset_connection() -> None:
    protocol = started()
    protocol.receive_data(EVENTS[:400])
    protocol.connection_lost("ConnectionResetError(104)")
    assert "lost: ConnectionResetError(104)" in str(protocol.error)


def test_not_http_is_a_transport_error() -> None:
    protocol = started()
    protocol.receive_data(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00" + b"\x00" * 30)
    assert protocol.error is not None
    assert "broke off the response" in str(protocol.error)


def test_budget_tells_the_driver_when_to_stop_reading() -> None:
    protocol = started(budget=500)
    assert protocol.wants_data
    protocol.receive_data(EVENTS)
    assert len(protocol.body) > 500
    assert not protocol.wants_data
    protocol.read(len(protocol.body) - 499)
    assert protocol.wants_data


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_buffered_bytes"):
        Http11ClientProtocol(max_buffered_bytes=0)


@pytest.mark.parametrize("pieces", [1, 7], ids=["one-piece", "in-pieces"])
@pytest.mark.parametrize("where", ["headers", "trailers"])
def test_headers_or_trailers_over_the_cap_are_a_transport_error(pieces: int, where: str) -> None:
    """Over MAX_HEAD_BYTES (64 KiB), whole in one piece or not (before: h11 capped only what
    it buffered while incomplete, at 16 KiB, so headers that came whole passed at any size)."""
    padding = b"X-Padding: " + b"p" * MAX_HEAD_BYTES + b"\r\n"
    if where == "headers":
        raw = b"HTTP/1.1 200 OK\r\n" + padding + b"Content-Length: 0\r\n\r\n"
    else:
        raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + padding + b"\r\n"
    protocol = started()
    step = -(-len(raw) // pieces)
    for start in range(0, len(raw), step):
        protocol.receive_data(raw[start : start + step])
    assert isinstance(protocol.error, FanOutTransportError)
    assert not protocol.ended


def test_headers_within_the_cap_pass_whole() -> None:
    protocol = started()
    padding = b"X-Padding: " + b"p" * (MAX_HEAD_BYTES // 2) + b"\r\n"
    protocol.receive_data(b"HTTP/1.1 200 OK\r\n" + padding + b"Content-Length: 2\r\n\r\n{}")
    assert protocol.error is None
    assert protocol.ended
    assert bytes(protocol.body) == b"{}"
