"""The sans-I/O HTTP/2 client against recorded server frames and h2's own server, live."""

from __future__ import annotations

import h2.errors
import h2.events
import pytest
from hyperframe.frame import RstStreamFrame

from kinesis_core.consumer.subscription import SubscribeEvent
from kinesis_core.fanout.errors import FanOutTransportError
from kinesis_core.fanout.eventstream import EventStreamDecoder
from kinesis_core.fanout.http2 import Http2ClientProtocol
from tests.fakes.fanout import DATA, H2Server, exchange, initial_response, record, subscribe_event

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"https"),
    (b":authority", b"kinesis.example"),
    (b":path", b"/"),
    (b"x-amz-target", b"Kinesis_20131202.SubscribeToShard"),
]
BODY = b'{"ShardId": "shardId-000000000000"}'


def opened(stream_window: int = 65_535) -> tuple[Http2ClientProtocol, int]:
    client = Http2ClientProtocol(stream_window=stream_window, peer="test server")
    client.initiate()
    return client, client.open_stream(REQUEST, BODY)


def drain(client: Http2ClientProtocol, stream_id: int) -> bytes:
    out = bytearray()
    while data := client.read(stream_id, 1000):
        out += data
    return bytes(out)


def decode(body: bytes) -> list[SubscribeEvent]:
    decoder = EventStreamDecoder()
    events = []
    view = memoryview(body)
    while view:
        take = decoder.bytes_wanted()
        decoder.feed(bytes(view[:take]))
        view = view[take:]
        event = decoder.next_event()
        if event is not None:
            events.append(event)
    assert decoder.idle
    return events


def test_recorded_headers_data_split_across_frames_trailers_and_end() -> None:
    client, stream_id = opened()
    changed = client.receive_data((DATA / "h2_server_events.bin").read_bytes())
    state = client.stream(stream_id)
    assert changed == {stream_id}
    assert client.ready
    assert state.status == 200
    assert ("content-type", "application/vnd.amazon.eventstream") in state.headers
    assert state.trailers == [("x-amzn-trailer", "done")]
    assert state.ended
    assert state.error is None
    events = decode(drain(client, stream_id))
    assert [[r.data for r in e.records] for e in events] == [[b"one", b"two"], [], [b"last"]]
    assert [e.continuation_sequence_number for e in events] == ["102", "102", None]
    assert events[-1].shard_ended
    assert events[-1].child_shards[0]["ShardId"] == "shardId-000000000001"


def test_recorded_fed_byte_by_byte_gives_the_same_body() -> None:
    recorded = (DATA / "h2_server_events.bin").read_bytes()
    whole, stream_id = opened()
    whole.receive_data(recorded)
    split, _ = opened()
    for i in range(len(recorded)):
        split.receive_data(recorded[i : i + 1])
    assert drain(split, stream_id) == drain(whole, stream_id)
    assert split.stream(stream_id).ended


def test_recorded_rst_stream_fails_the_stream_after_its_buffered_bytes() -> None:
    client, stream_id = opened()
    client.receive_data((DATA / "h2_server_reset.bin").read_bytes())
    state = client.stream(stream_id)
    assert len(state.body) == 40  # what came before the reset is still readable
    assert isinstance(state.error, FanOutTransportError)
    assert isinstance(state.error, OSError)
    assert "RST_STREAM INTERNAL_ERROR" in str(state.error)
    assert "test server" in str(state.error)


def test_recorded_goaway_fails_open_streams_and_the_connection() -> None:
    client, stream_id = opened()
    client.receive_data((DATA / "h2_server_goaway.bin").read_bytes())
    state = client.stream(stream_id)
    assert state.body == bytearray(initial_response())
    assert isinstance(state.error, FanOutTransportError)
    assert "GOAWAY NO_ERROR" in str(state.error)
    assert client.error is state.error
    assert client.capacity == 0
    with pytest.raises(FanOutTransportError, match="GOAWAY"):
        client.open_stream(REQUEST, BODY)


def test_request_reaches_the_server_with_headers_and_body() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    [request] = server.requests()
    assert request.stream_id == stream_id
    assert request.headers is not None
    assert list(request.headers)[:5] == REQUEST
    received = b"".join(
        e.data or b"" for e in server.events if isinstance(e, h2.events.DataReceived)
    )
    assert received == BODY
    assert any(isinstance(e, h2.events.StreamEnded) for e in server.events)


def test_flow_control_server_cannot_send_more_than_the_window_until_the_client_reads() -> None:
    window = 65_535
    client, stream_id = opened(stream_window=window)
    server = H2Server()
    exchange(client, server)
    server.respond(stream_id)
    payload = bytes(range(256)) * 2048  # 512 KiB the server would like to push
    sent = 0

    def push() -> None:
        nonlocal sent
        while sent < len(payload) and server.sendable(stream_id) > 0:
            chunk = min(server.sendable(stream_id), server.conn.max_outbound_frame_size)
            server.send(stream_id, payload[sent : sent + chunk])
            sent += chunk
        exchange(client, server)

    push()
    state = client.stream(stream_id)
    assert sent == window  # blocked: the window is used up and nothing was read
    assert len(state.body) == window
    push()
    assert sent == window  # still blocked: no WINDOW_UPDATE without a read
    received = bytearray()
    while len(received) < len(payload):
        received += client.read(stream_id, 20_000)  # the application reads a little
        exchange(client, server)
        push()
        assert len(state.body) <= window  # never more unread bytes than the window
    assert received == payload


def test_padding_is_acknowledged_at_once_and_data_when_read() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    server.respond(stream_id)
    for _ in range(3):
        server.send(stream_id, b"x" * 12_000, pad=200)
    exchange(client, server)
    # The padding (3 x 201 bytes) was acknowledged at once, but is below h2's threshold for a
    # WINDOW_UPDATE (half the window); the data is acknowledged when read, which crosses it.
    assert server.sendable(stream_id) == 65_535 - 3 * (12_000 + 201)
    assert client.read(stream_id, 36_000) == b"x" * 36_000
    exchange(client, server)
    assert server.sendable(stream_id) == 65_535


def test_the_servers_max_concurrent_streams_bounds_capacity() -> None:
    client = Http2ClientProtocol(peer="test server")
    client.initiate()
    server = H2Server(max_concurrent_streams=2)
    assert not client.ready
    exchange(client, server)
    assert client.ready
    assert client.capacity == 2
    first = client.open_stream(REQUEST, BODY)
    client.open_stream(REQUEST, BODY)
    assert client.capacity == 0
    with pytest.raises(FanOutTransportError, match="no free stream"):
        client.open_stream(REQUEST, BODY)
    client.cancel(first)
    assert client.capacity == 1


def test_our_own_cap_bounds_capacity() -> None:
    client = Http2ClientProtocol(max_streams=1, peer="test server")
    client.initiate()
    exchange(client, H2Server(max_concurrent_streams=100))
    client.open_stream(REQUEST, BODY)
    assert client.capacity == 0


def test_cancel_resets_the_stream_on_the_server_and_forgets_it() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    server.respond(stream_id)
    exchange(client, server)
    client.cancel(stream_id)
    exchange(client, server)
    resets = [e for e in server.events if isinstance(e, h2.events.StreamReset)]
    assert [(r.stream_id, r.error_code) for r in resets] == [
        (stream_id, h2.errors.ErrorCodes.CANCEL)
    ]
    assert client.open_streams == 0


def test_data_for_a_cancelled_stream_gives_the_connection_window_back() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    server.respond(stream_id)
    for _ in range(4):
        server.send(stream_id, b"y" * 10_000)  # in flight when the client cancels
    client.cancel(stream_id)
    exchange(client, server)
    assert server.conn.outbound_flow_control_window > 65_535 - 40_000


def test_a_reset_after_the_whole_response_is_not_an_error() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    server.respond(stream_id)
    server.send(stream_id, b"done", end=True)
    exchange(client, server)
    frame = RstStreamFrame(stream_id)
    frame.error_code = h2.errors.ErrorCodes.NO_ERROR
    client.receive_data(frame.serialize())
    state = client.stream(stream_id)
    assert state.ended
    assert state.error is None


def test_garbage_from_the_server_is_a_protocol_error() -> None:
    client, stream_id = opened()
    changed = client.receive_data(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert changed == {stream_id}
    assert "test server does not speak HTTP/2: it sent b'HTTP/1.1 400" in str(
        client.stream(stream_id).error
    )


def test_a_malformed_frame_after_the_preface_is_a_protocol_error() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    bad_window_update = b"\x00\x00\x04\x08\x00\x00\x00\x00\x01\x00\x00\x00\x00"  # increment 0
    assert client.receive_data(bad_window_update) == {stream_id}
    assert "HTTP/2 protocol error from test server" in str(client.stream(stream_id).error)


def test_connection_lost_fails_unfinished_streams_only() -> None:
    client = Http2ClientProtocol(peer="test server")
    client.initiate()
    server = H2Server()
    done = client.open_stream(REQUEST, BODY)
    streaming = client.open_stream(REQUEST, BODY)
    exchange(client, server)
    for stream_id in (done, streaming):
        server.respond(stream_id)
    server.send(done, subscribe_event([record(1, b"a")], "1"), end=True)
    exchange(client, server)
    assert client.connection_lost("ConnectionResetError(104)") == {streaming}
    assert client.stream(done).error is None
    assert "lost: ConnectionResetError(104)" in str(client.stream(streaming).error)


def test_close_sends_goaway() -> None:
    client, stream_id = opened()
    server = H2Server()
    exchange(client, server)
    client.close()
    exchange(client, server)
    assert any(isinstance(e, h2.events.ConnectionTerminated) for e in server.events)
    assert client.stream(stream_id).error is not None


def test_a_request_body_larger_than_the_send_window_waits_for_window_updates() -> None:
    client = Http2ClientProtocol(peer="test server")
    client.initiate()
    server = H2Server()
    exchange(client, server)
    big = b"z" * 100_000  # more than the default 65,535-byte window
    stream_id = client.open_stream(REQUEST, big)
    received = bytearray()
    for _ in range(10):
        exchange(client, server)
        for e in server.events:
            if isinstance(e, h2.events.DataReceived) and e.data is not None:
                received += e.data
                server.conn.acknowledge_received_data(e.flow_controlled_length or 0, stream_id)
        server.events.clear()
    assert received == big


def test_kinesis_mock_h2c_recording() -> None:
    client, stream_id = opened()
    client.receive_data((DATA / "kinesis_mock_h2c_server.bin").read_bytes())
    state = client.stream(stream_id)
    assert state.status == 200
    events = decode(drain(client, stream_id))
    assert events
    assert all(e.child_shards == [] for e in events)
    assert all(e.continuation_sequence_number for e in events)


@pytest.mark.parametrize("window", [1, 65_534, 2**31])
def test_window_out_of_range(window: int) -> None:
    with pytest.raises(ValueError, match="stream_window"):
        Http2ClientProtocol(stream_window=window)
