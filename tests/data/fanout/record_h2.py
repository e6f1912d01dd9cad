"""Regenerate the recorded HTTP/2 server bytes of this folder.

    .venv/bin/python tests/data/fanout/record_h2.py

Each recording is what h2's server-mode connection sent in answer to a client preface and a
SubscribeToShard request on stream 1: its SETTINGS, the acknowledgement of the client's, then the
scenario's frames. The unit tests replay them into the client's sans-I/O protocol.
"""

from __future__ import annotations

import sys
from pathlib import Path

import h2.config
import h2.connection
import h2.errors

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.fakes.fanout import H2Server, initial_response, record, subscribe_event

HERE = Path(__file__).parent
EVENTS = (
    initial_response()
    + subscribe_event([record(101, b"one"), record(102, b"two", key="other")], "102", millis=5)
    + subscribe_event([], "102")
)
CHILDREN = [
    {
        "ShardId": "shardId-000000000001",
        "ParentShards": ["shardId-000000000000"],
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**127 - 1)},
    },
]


def server_after_request() -> H2Server:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(
        1, [(":method", "POST"), (":scheme", "https"), (":authority", "k"), (":path", "/")]
    )
    client.send_data(1, b"{}", end_stream=True)
    server = H2Server(max_concurrent_streams=50)
    server.receive(client.data_to_send())
    return server


def record_scenarios() -> dict[str, bytes]:
    scenarios = {}
    # Headers, three events split unevenly over DATA frames (one padded), trailers, end.
    server = server_after_request()
    server.respond(1)
    server.send(1, EVENTS[:7])
    server.send(1, EVENTS[7:150], pad=10)
    server.send(1, EVENTS[150:])
    last = subscribe_event([record(103, b"last")], None, child_shards=CHILDREN)
    server.send(1, last)
    server.conn.send_headers(1, [(b"x-amzn-trailer", b"done")], end_stream=True)
    scenarios["h2_server_events.bin"] = server.out()
    # Headers, part of an event, then RST_STREAM INTERNAL_ERROR.
    server = server_after_request()
    server.respond(1)
    server.send(1, EVENTS[:40])
    server.conn.reset_stream(1, h2.errors.ErrorCodes.INTERNAL_ERROR)
    scenarios["h2_server_reset.bin"] = server.out()
    # Headers, one event, then GOAWAY (the server shuts down).
    server = server_after_request()
    server.respond(1)
    server.send(1, initial_response())
    server.conn.close_connection(h2.errors.ErrorCodes.NO_ERROR, last_stream_id=1)
    scenarios["h2_server_goaway.bin"] = server.out()
    return scenarios


if __name__ == "__main__":
    for name, data in record_scenarios().items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")
