"""Sans-I/O HTTP/2 client connection for streaming responses, on python-hyper's ``h2``.

One connection carries many requests (one stream each), up to the server's
MAX_CONCURRENT_STREAMS and our own cap. Each response body is buffered per stream and handed
out by ``read``; the bytes are acknowledged to the server (the flow-control window reopens)
only when ``read`` takes them, so a stream never has more than ``stream_window`` unread bytes
in memory: a slow reader stalls its own stream, never the others, and never grows the buffer.

Failures (RST_STREAM, GOAWAY, a protocol violation, the connection lost) become a
``FanOutTransportError`` on every stream they affect, with what happened in its message.
No I/O here: the driver feeds ``receive_data`` and writes ``data_to_send``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from kinesis_core.fanout.errors import FanOutTransportError

Headers = Sequence[tuple[bytes, bytes]]

MAX_WINDOW = 2**31 - 1
"""The largest flow-control window HTTP/2 allows."""
_FRAME_HEADER = 9
_SETTINGS = 0x4
"""A server's connection preface starts with a SETTINGS frame (type 4)."""
DEFAULT_MAX_STREAMS = 100
"""Our own cap of concurrent streams on one connection (servers often announce 100 or 128)."""


@dataclass
class StreamState:
    """What arrived on one stream so far. ``error`` set means the stream failed."""

    stream_id: int
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    trailers: list[tuple[str, str]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    error: FanOutTransportError | None = None

    @property
    def finished(self) -> bool:
        """Nothing more will arrive: the body ended or the stream failed."""
        return self.ended or self.error is not None


class Http2ClientProtocol:
    """The client side of one HTTP/2 connection, for requests with small bodies and
    long streaming responses.

    ``stream_window`` is the per-stream receive window: the most unread body bytes a stream
    can hold. The connection window is sized so that it never limits a stream before its own
    window does.
    """

    def __init__(
        self,
        *,
        stream_window: int = 2 * 1024 * 1024,
        max_streams: int = DEFAULT_MAX_STREAMS,
        peer: str = "server",
    ) -> None:
        if not 65_535 <= stream_window <= MAX_WINDOW:
            raise ValueError(f"stream_window must be in [65535, {MAX_WINDOW}], got {stream_window}")
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        self.peer = peer
        self._stream_window = stream_window
        self._max_streams = max_streams
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._conn = h2.connection.H2Connection(config=config)
        self._conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: stream_window,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        # Only ever announced by servers; some reject the setting in a client's preface.
        del self._conn.local_settings[h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL]
        self._streams: dict[int, StreamState] = {}
        self._pending_bodies: dict[int, bytes] = {}
        self._settings_received = False
        self._first_bytes = bytearray()
        self.error: FanOutTransportError | None = None
        """Set when the whole connection failed or was told to go away: open no more streams."""

    # -- set-up and capacity ----------------------------------------------------------------

    def initiate(self) -> None:
        """Queue the connection preface and our settings (call once, first)."""
        self._conn.initiate_connection()
        connection_window = min(MAX_WINDOW, self._stream_window * self._max_streams)
        if connection_window > 65_535:
            self._conn.increment_flow_control_window(connection_window - 65_535)

    @property
    def ready(self) -> bool:
        """The server's SETTINGS arrived, so its MAX_CONCURRENT_STREAMS is known."""
        return self._settings_received

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def capacity(self) -> int:
        """How many more streams may be opened now (0 once the connection failed)."""
        if self.error is not None:
            return 0
        limit = min(self._max_streams, self._conn.remote_settings.max_concurrent_streams)
        in_use = max(len(self._streams), self._conn.open_outbound_streams)
        return max(0, limit - in_use)

    # -- requests ---------------------------------------------------------------------------

    def open_stream(self, headers: Headers, body: bytes) -> int:
        """Start a request (pseudo-headers first); returns its stream id."""
        if self.error is not None:
            raise self.error
        if self.capacity < 1:
            raise FanOutTransportError(f"HTTP/2 connection to {self.peer} has no free stream")
        stream_id = self._conn.get_next_available_stream_id()
        self._conn.send_headers(stream_id, list(headers), end_stream=not body)
        self._streams[stream_id] = StreamState(stream_id)
        if body:
            self._pending_bodies[stream_id] = body
            self._send_pending(stream_id)
        return stream_id

    def stream(self, stream_id: int) -> StreamState:
        return self._streams[stream_id]

    def read(self, stream_id: int, max_bytes: int) -> bytes:
        """Take up to ``max_bytes`` buffered body bytes of a stream and acknowledge them,
        which reopens the flow-control window by as much."""
        state = self._streams[stream_id]
        if not state.body or max_bytes <= 0:
            return b""
        data = bytes(state.body[:max_bytes])
        del state.body[:max_bytes]
        self._acknowledge(len(data), stream_id)
        return data

    def cancel(self, stream_id: int) -> None:
        """Forget a stream; if the server may still send on it, reset it (CANCEL)."""
        state = self._streams.pop(stream_id, None)
        self._pending_bodies.pop(stream_id, None)
        if state is None or state.finished or self.error is not None:
            return
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            self._conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)

    def close(self) -> None:
        """Queue a GOAWAY (NO_ERROR): the connection is being shut down by us."""
        if self.error is None:
            self.error = FanOutTransportError(f"HTTP/2 connection to {self.peer} was closed")
            self._conn.close_connection()
        self._fail_open_streams(self.error)

    # -- bytes in and out -------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        return self._conn.data_to_send()

    def receive_data(self, data: bytes) -> set[int]:
        """Feed bytes from the server; returns the ids of the streams that changed (new
        headers, body bytes, end, failure), whose readers should look again."""
        if self.error is not None:
            return set()
        if len(self._first_bytes) < _FRAME_HEADER:
            taken = _FRAME_HEADER - len(self._first_bytes)
            self._first_bytes += data[:taken]
            if len(self._first_bytes) == _FRAME_HEADER and self._first_bytes[3] != _SETTINGS:
                # h2 would wait for the whole "frame" an HTTP/1.1 answer seems to announce.
                seen = (bytes(self._first_bytes) + data[taken:])[:48]
                return self._fail_connection(
                    FanOutTransportError(f"{self.peer} does not speak HTTP/2: it sent {seen!r}")
                )
        try:
            events = self._conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            return self._fail_connection(
                FanOutTransportError(f"HTTP/2 protocol error from {self.peer}: {exc}")
            )
        changed: set[int] = set()
        for event in events:
            changed |= self._handle(event)
        return changed

    def connection_lost(self, reason: str) -> set[int]:
        """The socket closed or failed: every stream still receiving fails."""
        if self.error is None:
            error = FanOutTransportError(f"HTTP/2 connection to {self.peer} lost: {reason}")
            return self._fail_connection(error)
        return self._fail_open_streams(self.error)

    # -- internals --------------------------------------------------------------------------

    def _handle(self, event: h2.events.Event) -> set[int]:
        if isinstance(event, h2.events.ResponseReceived):
            state = self._streams.get(event.stream_id)
            if state is not None:
                for name, value in event.headers or ():
                    key, text = _text(name), _text(value)
                    if key == ":status":
                        state.status = int(text)
                    elif not key.startswith(":"):
                        state.headers.append((key, text))
                return {event.stream_id}
        elif isinstance(event, h2.events.DataReceived):
            return self._on_data(event)
        elif isinstance(event, h2.events.TrailersReceived):
            state = self._streams.get(event.stream_id)
            if state is not None:
                state.trailers.extend((_text(k), _text(v)) for k, v in event.headers or ())
        elif isinstance(event, h2.events.StreamEnded):
            state = self._streams.get(event.stream_id)
            if state is not None:
                state.ended = True
                return {event.stream_id}
        elif isinstance(event, h2.events.StreamReset):
            return self._on_reset(event)
        elif isinstance(event, h2.events.ConnectionTerminated):
            return self._on_goaway(event)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._settings_received = True
        elif isinstance(event, h2.events.WindowUpdated):
            for stream_id in list(self._pending_bodies):
                self._send_pending(stream_id)
        return set()

    def _on_data(self, event: h2.events.DataReceived) -> set[int]:
        stream_id = event.stream_id
        data = event.data or b""
        flow = event.flow_controlled_length or 0
        state = self._streams.get(stream_id)
        if state is None or state.error is not None:
            # A cancelled stream's last frames: give the window back at once.
            self._acknowledge(flow, stream_id)
            return set()
        state.body += data
        # Padding is never read by anyone: acknowledge it now.
        self._acknowledge(flow - len(data), stream_id)
        return {stream_id}

    def _on_reset(self, event: h2.events.StreamReset) -> set[int]:
        state = self._streams.get(event.stream_id)
        if state is None or state.ended:
            return set()  # a reset after the whole response is only "stop sending"
        code = event.error_code
        name = code.name if isinstance(code, h2.errors.ErrorCodes) else str(code)
        state.error = FanOutTransportError(
            f"{self.peer} reset the HTTP/2 stream {event.stream_id} (RST_STREAM {name}) "
            "before the response ended"
        )
        return {event.stream_id}

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> set[int]:
        code = event.error_code
        name = code.name if isinstance(code, h2.errors.ErrorCodes) else str(code)
        detail = f": {event.additional_data!r}" if event.additional_data else ""
        return self._fail_connection(
            FanOutTransportError(
                f"{self.peer} closed the HTTP/2 connection (GOAWAY {name}, last stream "
                f"{event.last_stream_id}{detail}) while the response was still streaming"
            )
        )

    def _fail_connection(self, error: FanOutTransportError) -> set[int]:
        self.error = error
        return self._fail_open_streams(error)

    def _fail_open_streams(self, error: FanOutTransportError) -> set[int]:
        failed = set()
        for state in self._streams.values():
            if not state.finished:
                state.error = error
                failed.add(state.stream_id)
        return failed

    def _acknowledge(self, size: int, stream_id: int) -> None:
        # h2 credits the connection window alone once the stream is closed on the wire.
        if size > 0 and self.error is None:
            self._conn.acknowledge_received_data(size, stream_id)

    def _send_pending(self, stream_id: int) -> None:
        body = self._pending_bodies.get(stream_id)
        if body is None:
            return
        window = self._conn.local_flow_control_window(stream_id)
        chunk = min(window, self._conn.max_outbound_frame_size, len(body))
        while chunk > 0:
            rest = body[chunk:]
            self._conn.send_data(stream_id, body[:chunk], end_stream=not rest)
            body = rest
            window = self._conn.local_flow_control_window(stream_id) if body else 0
            chunk = min(window, self._conn.max_outbound_frame_size, len(body))
        if body:
            self._pending_bodies[stream_id] = body
        else:
            del self._pending_bodies[stream_id]


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
