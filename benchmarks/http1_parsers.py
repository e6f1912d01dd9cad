"""The lean path's HTTP/1.1 exchange on three parsers, CPU per answer, in one process, in turns:
``python -m benchmarks.http1_parsers [rounds]``.

Subjects: ours (:mod:`kinesis_core.aws.http1`), h11 and llhttp through
httptools. Each exchange is what :class:`~kinesis_core.aws.http1_pool.Http1Pool` does per
call on a kept-alive connection: the request's bytes (ours and httptools:
:func:`~kinesis_core.aws.http1.post_request`; h11: its own ``send``), then the answer fed as
the socket hands it over, to status, lower-case headers, body and whether the connection may
carry another request.

Answers, shaped as Kinesis sends them (five headers, ``Content-Length``):

* idle: a GetRecords answer without records (about 350 bytes of body), in one read;
* busy: a GetRecords answer of about 1 MB, in reads of 64 KiB;
* put: a PutRecords answer for 500 records (about 45 KB), in reads of 64 KiB.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable

import h11
import httptools

from kinesis_core.aws.http1 import ResponseParser, post_request, request_prefix

Exchange = Callable[[list[bytes]], tuple[int, dict[str, str], bytes, bool]]

_SIGNED = {
    "Content-Type": "application/x-amz-json-1.1",
    "X-Amz-Target": "Kinesis_20131202.GetRecords",
    "X-Amz-Date": "20261202T000000Z",
    "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/us-east-1/kinesis/"
    "aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "0" * 64,
}
_REQUEST_BODY = b'{"ShardIterator":"' + b"A" * 280 + b'","Limit":10000}'
_PREFIX = request_prefix("https", "kinesis.us-east-1.amazonaws.com", 443, "/")


def _answer(body: bytes) -> bytes:
    head = (
        "HTTP/1.1 200 OK\r\n"
        "x-amzn-RequestId: c1b3e5f0-8e5b-4a6e-9d8f-0123456789ab\r\n"
        "x-amz-id-2: " + "Z" * 76 + "\r\n"
        "Content-Type: application/x-amz-json-1.1\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Date: Wed, 02 Dec 2026 00:00:00 GMT\r\n\r\n"
    )
    return head.encode() + body


def _reads(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def workloads() -> dict[str, list[bytes]]:
    iterator = "AAAAAAAAAAGc" + "x" * 276
    idle = json.dumps(
        {"Records": [], "NextShardIterator": iterator, "MillisBehindLatest": 0}
    ).encode()
    data = base64.b64encode(b"r" * 1000).decode()
    records = [
        {
            "SequenceNumber": f"{49590338271490256608559692538361571095921575989136588898 + i}",
            "ApproximateArrivalTimestamp": 1.764633600e9,
            "Data": data,
            "PartitionKey": f"key-{i}",
        }
        for i in range(750)
    ]
    busy = json.dumps(
        {"Records": records, "NextShardIterator": iterator, "MillisBehindLatest": 0}
    ).encode()
    results = [
        {
            "SequenceNumber": f"{49590338271490256608559692538361571095921575989136588898 + i}",
            "ShardId": "shardId-000000000003",
        }
        for i in range(500)
    ]
    put = json.dumps({"FailedRecordCount": 0, "Records": results}).encode()
    return {
        "idle GetRecords": [_answer(idle)],
        "busy GetRecords (~1 MB)": _reads(_answer(busy), 65536),
        "PutRecords (500)": _reads(_answer(put), 65536),
    }


def ours(reads: list[bytes]) -> tuple[int, dict[str, str], bytes, bool]:
    post_request(_PREFIX, _SIGNED, _REQUEST_BODY)
    parser = ResponseParser()
    for data in reads:
        if parser.feed(data):
            break
    return parser.status, parser.headers, parser.body, parser.keep_alive


def h11_exchange() -> Exchange:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
    fields = [("Host", "kinesis.us-east-1.amazonaws.com"), ("Accept-Encoding", "identity")]
    fields += list(_SIGNED.items())
    fields.append(("Content-Length", str(len(_REQUEST_BODY))))

    def exchange(reads: list[bytes]) -> tuple[int, dict[str, str], bytes, bool]:
        conn.send(h11.Request(method="POST", target="/", headers=fields))
        conn.send(h11.Data(data=_REQUEST_BODY))
        conn.send(h11.EndOfMessage())
        status = 0
        headers: dict[str, str] = {}
        parts: list[bytes] = []
        it = iter(reads)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(next(it))
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    headers[name.decode("latin-1")] = value.decode("latin-1")
            elif isinstance(event, h11.Data):
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        keep_alive = conn.our_state is h11.DONE and conn.their_state is h11.DONE
        conn.start_next_cycle()
        return status, headers, b"".join(parts), keep_alive

    return exchange


class _Answer:
    __slots__ = ("done", "headers", "parts")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.parts: list[bytes] = []
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        self.done = True


def httptools_exchange(reads: list[bytes]) -> tuple[int, dict[str, str], bytes, bool]:
    post_request(_PREFIX, _SIGNED, _REQUEST_BODY)
    answer = _Answer()
    parser = httptools.HttpResponseParser(answer)
    for data in reads:
        parser.feed_data(data)
        if answer.done:
            break
    return (
        parser.get_status_code(),
        answer.headers,
        b"".join(answer.parts),
        parser.should_keep_alive(),
    )


def measure(exchange: Exchange, reads: list[bytes], seconds: float) -> float:
    """CPU µs per exchange over about ``seconds`` of CPU."""
    count = 0
    batch = 1
    start = time.process_time()
    while True:
        for _ in range(batch):
            exchange(reads)
        count += batch
        spent = time.process_time() - start
        if spent >= seconds:
            return spent / count * 1e6
        batch = min(batch * 2, 4096)


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 5
    subjects: dict[str, Exchange] = {
        "ours (http1.py)": ours,
        "h11": h11_exchange(),
        "httptools": httptools_exchange,
    }
    versions = f"h11 {getattr(h11, '__version__', '?')}, httptools {httptools.__version__}"
    print(f"{versions}; Python {sys.version.split()[0]}; best of {rounds} turns")
    for name, reads in workloads().items():
        expected = ours(reads)
        best = dict.fromkeys(subjects, float("inf"))
        for _ in range(rounds):
            for subject, exchange in subjects.items():
                got = exchange(reads)
                assert got[0] == expected[0], subject
                assert got[2] == expected[2], subject
                assert {k.lower(): v for k, v in got[1].items()} == expected[1], subject
                best[subject] = min(best[subject], measure(exchange, reads, 0.3))
        size = sum(len(r) for r in reads)
        base = best["ours (http1.py)"]
        cells = ", ".join(f"{s} {us:.1f} µs ({us / base:.2f}x)" for s, us in best.items())
        print(f"{name}, {size:,} bytes in {len(reads)} reads: {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
