"""kinesis_core.aws.http1's sans-I/O parts: the response parser (every answer split at every byte
boundary, each framing, each malformed input) and the request bytes (read back by h11)."""

from __future__ import annotations

import h11
import pytest

from kinesis_core.aws.http1 import (
    MAX_HEAD_BYTES,
    MalformedAnswer,
    ResponseParser,
    State,
    post_request,
    request_prefix,
)

JSON = b'{"Records":[],"NextShardIterator":"AAAA","MillisBehindLatest":0}'
LENGTH = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\n"
    b"x-amzn-RequestId: abc\r\nContent-Length: " + str(len(JSON)).encode() + b"\r\n\r\n" + JSON
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Amz-Id-2: x\r\n\r\n"
    b"5\r\nhello\r\n"
    b"1;name=value\r\n \r\n"
    b"A\r\n0123456789\r\n"
    b"0\r\nTrailer-Field: t\r\n\r\n"
)
EMPTY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nServer: s\r\n\r\n"
UNTIL_CLOSE = (
    b"HTTP/1.1 500 Internal Server Error\r\nServer: s\r\n\r\nthe body ends with the connection"
)
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX: y\r\n\r\n" + EMPTY

WHOLE = {
    "length": (LENGTH, 200, JSON, True),
    "chunked": (CHUNKED, 200, b"hello 0123456789", True),
    "empty": (EMPTY, 200, b"", True),
    "no content": (NO_CONTENT, 204, b"", True),
    "interim answers skipped": (INTERIM, 200, b"", True),
}


def _feed(pieces: list[bytes]) -> tuple[ResponseParser, list[bool]]:
    parser = ResponseParser()
    return parser, [parser.feed(piece) for piece in pieces]


@pytest.mark.parametrize("name", list(WHOLE))
def test_an_answer_split_at_every_byte_boundary_reads_the_same(name: str) -> None:
    raw, status, body, keep_alive = WHOLE[name]
    for cut in range(len(raw) + 1):
        parser, done = _feed([raw[:cut], raw[cut:]])
        assert done == [False, True] or (cut == len(raw) and done == [True, True]), cut
        assert (parser.status, parser.body, parser.keep_alive) == (status, body, keep_alive)
        assert parser.state is State.DONE
        assert parser.received == len(raw)


@pytest.mark.parametrize("name", list(WHOLE))
def test_an_answer_one_byte_at_a_time(name: str) -> None:
    raw, status, body, _ = WHOLE[name]
    parser, done = _feed([raw[i : i + 1] for i in range(len(raw))])
    assert done == [False] * (len(raw) - 1) + [True]
    assert (parser.status, parser.body) == (status, body)


def test_headers_in_lower_case_a_repeated_one_joined() -> None:
    parser, _ = _feed([b"HTTP/1.1 200 OK\r\nA-B:  1 \r\nx:\r\na-b:2\r\nContent-Length: 0\r\n\r\n"])
    assert parser.headers == {"a-b": "1, 2", "x": "", "content-length": "0"}


def test_a_status_line_without_a_reason() -> None:
    parser, done = _feed([b"HTTP/1.1 503\r\nContent-Length: 2\r\n\r\n{}"])
    assert done == [True]
    assert (parser.status, parser.body) == (503, b"{}")


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n", True),
        (b"HTTP/1.0 200 OK\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n", True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n", False),  # and Content-Length
    ],
)
def test_whether_the_connection_carries_another_request(head: bytes, keep_alive: bool) -> None:
    chunked = b"chunked" in head
    raw = head + b"Content-Length: 2\r\n\r\n" + (b"2\r\n{}\r\n0\r\n\r\n" if chunked else b"{}")
    parser, done = _feed([raw])
    assert done == [True]
    assert parser.body == b"{}"
    assert parser.keep_alive is keep_alive


def test_bytes_past_the_answer_end_the_connection() -> None:
    parser, done = _feed([LENGTH + b"HTTP/1.1"])
    assert done == [True]
    assert not parser.keep_alive
    parser, done = _feed([LENGTH, b"x"])
    assert done == [True, True]
    assert not parser.keep_alive


def test_a_body_framed_by_the_connections_end() -> None:
    for cut in range(len(UNTIL_CLOSE) + 1):
        parser, done = _feed([UNTIL_CLOSE[:cut], UNTIL_CLOSE[cut:]])
        assert done == [False, False]
        assert parser.feed_eof()
        assert parser.status == 500
        assert parser.body == b"the body ends with the connection"
        assert not parser.keep_alive


@pytest.mark.parametrize("name", ["length", "chunked", "empty", "no content"])
def test_every_cut_short_answer_is_incomplete(name: str) -> None:
    raw = WHOLE[name][0]
    for cut in range(len(raw)):
        parser, done = _feed([raw[:cut]])
        assert done == [False]
        assert not parser.feed_eof(), cut
        assert parser.state is not State.DONE


def test_every_state_is_reached() -> None:
    seen = set()
    for raw in (LENGTH, CHUNKED, UNTIL_CLOSE):
        parser = ResponseParser()
        for i in range(len(raw)):
            parser.feed(raw[i : i + 1])
            seen.add(parser.state)
    assert seen == set(State)


def test_a_large_body_in_pieces() -> None:
    body = bytes(range(256)) * (40 * 1024 + 3)  # 10 MiB and a bit
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    parser = ResponseParser()
    pieces = [raw[i : i + 65536] for i in range(0, len(raw), 65536)]
    assert [parser.feed(p) for p in pieces][-1]
    assert parser.body == body


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"garbage\r\n\r\n", "not an HTTP/1.x status line: 'garbage'"),
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
        # Bytes that cannot begin a status line fail at once, not after 64 KiB or a timeout.
        (b"\x00\x00\x12\x04\x00", "not an HTTP/1.x status line"),
        (b"HTTX", "not an HTTP/1.x status line: 'HTTX'"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 abc OK\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "not a header line: 'no colon'"),
        (b"HTTP/1.1 200 OK\r\nA B: 1\r\n\r\n", "not a header line"),
        (b"HTTP/1.1 200 OK\r\n: 1\r\n\r\n", "not a header line"),
        (b"HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n\r\n", "not a header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", "not a Content-Length: 'abc'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "not a Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", "not a Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n", "not a Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "transfer coding 'gzip'"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", "not a chunk-size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", "not a chunk-size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\n", "not a chunk-size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc", "no line break"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * MAX_HEAD_BYTES, "took more than"),
        # The same caps when the line or head is whole in one piece (it passed before).
        (
            b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEAD_BYTES + b"\r\nContent-Length: 0\r\n\r\n",
            "the status line and headers took more than 65536 bytes",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"0" * MAX_HEAD_BYTES
            + b"1\r\nx\r\n0\r\n\r\n",
            "a chunk-size line took more than",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: "
            + b"y" * MAX_HEAD_BYTES
            + b"\r\n\r\n",
            "the trailer took more than",
        ),
    ],
)
def test_a_malformed_answer_is_a_clear_error(raw: bytes, message: str) -> None:
    with pytest.raises(MalformedAnswer, match=message.replace("(", r"\(").replace(")", r"\)")):
        ResponseParser().feed(raw)


def test_two_equal_content_lengths_are_one() -> None:
    parser, done = _feed([b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n{}"])
    assert done == [True]
    assert parser.body == b"{}"


@pytest.mark.parametrize(
    ("scheme", "host", "port", "shown"),
    [
        ("https", "kinesis.eu-west-1.amazonaws.com", 443, "kinesis.eu-west-1.amazonaws.com"),
        ("http", "127.0.0.1", 80, "127.0.0.1"),
        ("http", "127.0.0.1", 4567, "127.0.0.1:4567"),
        ("https", "::1", 8443, "[::1]:8443"),
    ],
)
def test_the_request_bytes_are_the_post_asked_for(
    scheme: str, host: str, port: int, shown: str
) -> None:
    prefix = request_prefix(scheme, host, port, "/a?b=c")
    body = b'{"ShardIterator": "x"}'
    raw = post_request(prefix, {"X-Amz-Target": "Kinesis_20131202.GetRecords", "A": "b c"}, body)
    server = h11.Connection(h11.SERVER)
    server.receive_data(raw)
    request = server.next_event()
    assert isinstance(request, h11.Request)
    assert (request.method, request.target, request.http_version) == (b"POST", b"/a?b=c", b"1.1")
    assert list(request.headers) == [
        (b"host", shown.encode()),
        (b"accept-encoding", b"identity"),
        (b"x-amz-target", b"Kinesis_20131202.GetRecords"),
        (b"a", b"b c"),
        (b"content-length", str(len(body)).encode()),
    ]
    data = server.next_event()
    assert isinstance(data, h11.Data)
    assert data.data == body
    assert isinstance(server.next_event(), h11.EndOfMessage)


@pytest.mark.parametrize("headers", [{"A": "b\r\nInjected: 1"}, {"A\nB": "c"}, {"A": "b\rc"}])
def test_a_line_break_in_a_header_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="line break"):
        post_request(request_prefix("http", "127.0.0.1", 80, "/"), headers, b"")
