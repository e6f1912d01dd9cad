"""kinesis_core.aws.http1's ResponseParser against h11 as the oracle, on generated answers:
every framing (Content-Length, chunked with extensions and trailers, the connection's end),
interim 1xx answers, Connection: close and HTTP/1.0, bad and missing lengths, cut-short
answers, each fed in pieces split at generated points."""

from __future__ import annotations

from dataclasses import dataclass

import h11
from hypothesis import given, settings, strategies as st

from kinesis_core.aws.http1 import MalformedAnswer, ResponseParser

Outcome = tuple[object, ...]

_TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=1)
_VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789 ,;=/:.", max_size=20).map(str.strip)
_RESERVED = {"content-length", "transfer-encoding", "connection"}


@dataclass(frozen=True)
class Answer:
    raw: bytes
    eof: bool
    """The server closes the connection after these bytes."""


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]))
    head = b"".join(
        f"HTTP/1.1 {code} Interim\r\n\r\n".encode()
        for code in draw(st.lists(st.sampled_from([100, 102, 103]), max_size=2))
    )
    status = draw(st.sampled_from([200, 204, 304, 400, 404, 500, 503]))
    fields = [
        (name, value)
        for name, value in draw(st.lists(st.tuples(_TOKEN, _VALUE), max_size=5))
        if name.lower() not in _RESERVED
    ]
    if version == "HTTP/1.1" and draw(st.booleans()):
        fields.append(("Connection", draw(st.sampled_from(["close", "keep-alive"]))))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["length", "chunked", "close", "short", "long", "bad"]))
    eof = draw(st.booleans())
    if status in (204, 304):
        body, framing = b"", "none"
    if framing == "length":
        fields.append(("Content-Length", str(len(body))))
        payload = body
    elif framing in ("short", "long"):  # the length says fewer or more bytes than come
        delta = draw(st.integers(1, 10))
        fields.append(
            ("Content-Length", str(max(0, len(body) + (delta if framing == "long" else -delta))))
        )
        payload = body
    elif framing == "bad":
        fields.append(
            ("Content-Length", draw(st.sampled_from(["abc", "-1", "1 2", "0x10", "5, 6"])))
        )
        payload = body
    elif framing == "chunked":
        fields.append(("Transfer-Encoding", "chunked"))
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
        payload = b""
        for part in parts:
            ext = draw(st.sampled_from(["", ";ext", ";name=value"]))
            payload += f"{len(part):{draw(st.sampled_from(['x', 'X']))}}{ext}\r\n".encode()
            payload += part + b"\r\n"
        trailers = draw(st.lists(st.tuples(_TOKEN, _VALUE), max_size=2))
        payload += b"0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in trailers) + b"\r\n"
    else:  # "close": no length, the body ends with the connection; "none": 204 and 304
        payload = body
        eof = eof or framing == "close"
    lines = "".join(f"{name}: {value}\r\n" for name, value in fields)
    head += f"{version} {status} Reason\r\n{lines}\r\n".encode()
    raw = head + payload
    if draw(st.booleans()):  # cut short
        raw = raw[: draw(st.integers(0, len(raw)))]
    return Answer(raw, eof)


def pieces(raw: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({min(p, len(raw)) for p in points})
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if b > a]


def with_h11(chunks: list[bytes], eof: bool) -> Outcome:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
    conn.send(
        h11.Request(method="POST", target="/", headers=[("Host", "x"), ("Content-Length", "0")])
    )
    conn.send(h11.EndOfMessage())
    status, body, closed = 0, b"", False
    headers: dict[str, str] = {}
    feed = [*chunks, b""] if eof else list(chunks)
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if not feed:
                    return ("incomplete",)
                closed = not feed[0]
                conn.receive_data(feed.pop(0))
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    key, text = name.decode("latin-1"), value.decode("latin-1")
                    headers[key] = f"{headers[key]}, {text}" if key in headers else text
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                past = any(feed) or conn.trailing_data[0]  # bytes past the answer
                keep_alive = conn.their_state is h11.DONE and not past and not closed
                return ("whole", status, headers, body, keep_alive)
            elif isinstance(event, h11.ConnectionClosed):
                return ("incomplete",)
    except h11.RemoteProtocolError:
        return ("incomplete",) if closed else ("malformed",)  # h11 calls a cut answer an error


def with_ours(chunks: list[bytes], eof: bool) -> Outcome:
    parser = ResponseParser()
    try:
        done = False
        for chunk in chunks:
            done = parser.feed(chunk)
            if done:
                break
        if not done and eof:
            done = parser.feed_eof()
    except MalformedAnswer:
        return ("malformed",)
    if not done:
        return ("incomplete",)
    return ("whole", parser.status, parser.headers, parser.body, parser.keep_alive)


@settings(max_examples=400, deadline=None)
@given(answers(), st.lists(st.integers(0, 2000), max_size=6))
def test_ours_reads_what_h11_reads(answer: Answer, points: list[int]) -> None:
    chunks = pieces(answer.raw, points)
    assert with_ours(chunks, answer.eof) == with_h11(chunks, answer.eof)


@settings(max_examples=200, deadline=None)
@given(answers(), st.lists(st.integers(0, 2000), max_size=6))
def test_the_split_points_do_not_matter(answer: Answer, points: list[int]) -> None:
    whole = with_ours([answer.raw] if answer.raw else [], answer.eof)
    assert with_ours(pieces(answer.raw, points), answer.eof) == whole
