"""Event-stream decoding: kinesis-mock's recorded streams and AWS-shaped ones."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aggregation import deaggregate, encode_aggregate
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.consumer.subscription import SubscribeEvent, renewal_position
from kinesis_core.fanout.errors import FanOutTransportError
from kinesis_core.fanout.eventstream import MAX_MESSAGE_LENGTH, EventStreamDecoder, http_error
from kinesis_core.fanout.http11 import Http11ClientProtocol
from kinesis_core.records import SubRecord
from tests.fakes.fanout import (
    DATA,
    event,
    event_message,
    exception,
    initial_response,
    record,
    subscribe_event,
)


def body_of(recording: str) -> tuple[Http11ClientProtocol, bytes]:
    protocol = Http11ClientProtocol(max_buffered_bytes=1 << 20)
    protocol.send_request("POST", "/", [("Host", "x")], b"{}")
    protocol.receive_data((DATA / recording).read_bytes())
    return protocol, protocol.read(1 << 20)


def decode_all(body: bytes, decoder: EventStreamDecoder | None = None) -> list[SubscribeEvent]:
    decoder = decoder or EventStreamDecoder()
    events = []
    while body:
        take = decoder.bytes_wanted()
        decoder.feed(body[:take])
        body = body[take:]
        decoded = decoder.next_event()
        if decoded is not None:
            events.append(decoded)
    return events


def test_kinesis_mock_stream_without_initial_response() -> None:
    _, body = body_of("kinesis_mock_h11_events.bin")
    first, second = decode_all(body)
    assert [r.data for r in first.records] == [b"first", b"\x00\xffbinary", b"third"]
    assert [r.partition_key for r in first.records] == ["a", "b", "c"]
    sequences = [r.sequence_number for r in first.records]
    assert all(isinstance(s, str) and s.isdigit() for s in sequences)
    assert sorted(sequences, key=int) == sequences
    stamp = first.records[0].approximate_arrival_timestamp
    assert isinstance(stamp, float)
    assert abs(datetime.now(timezone.utc).timestamp() - stamp) < 10 * 365 * 86_400
    assert first.continuation_sequence_number == sequences[-1]
    assert first.millis_behind_latest == 0
    assert first.child_shards == []  # kinesis-mock sends "ChildShards": null
    assert not first.shard_ended
    assert first.size == len(body) - second.size
    assert second.records == []
    assert second.continuation_sequence_number == sequences[-1]


@pytest.mark.parametrize(
    ("recording", "code"),
    [
        ("kinesis_mock_h11_resource_in_use.bin", "ResourceInUseException"),
        ("kinesis_mock_h11_not_found.bin", "ResourceNotFoundException"),
    ],
)
def test_kinesis_mock_exception_events_raise_client_error(recording: str, code: str) -> None:
    _, body = body_of(recording)
    with pytest.raises(ClientError) as raised:
        decode_all(body)
    error = raised.value.response
    assert error["Error"]["Code"] == code
    assert "arn:aws:kinesis" in error["Error"]["Message"]
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert raised.value.operation_name == "SubscribeToShard"


def test_aws_stream_with_initial_response_and_child_shards_at_the_end() -> None:
    children = [
        {
            "ShardId": "shardId-000000000002",
            "ParentShards": ["shardId-000000000000"],
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "99"},
        }
    ]
    body = (
        initial_response()
        + subscribe_event([record(7, b"a", arrival=1_700_000_000)], "7", millis=1500)
        + subscribe_event([], None, child_shards=children)
    )
    first, last = decode_all(body)
    assert (
        first.records[0].approximate_arrival_timestamp
        == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc).timestamp()
    )
    assert first.millis_behind_latest == 1500
    assert not first.shard_ended
    assert last.shard_ended
    assert last.continuation_sequence_number is None
    assert last.child_shards == children


def test_fed_byte_by_byte() -> None:
    body = initial_response() + subscribe_event([record(1, b"x" * 300)], "1")
    decoder = EventStreamDecoder()
    events = []
    for i in range(len(body)):
        assert decoder.bytes_wanted() >= 1
        decoder.feed(body[i : i + 1])
        decoded = decoder.next_event()
        if decoded is not None:
            events.append(decoded)
        assert decoder.idle == (i + 1 in (len(initial_response()), len(body)))
    assert [e.records[0].data for e in events] == [b"x" * 300]


def test_the_decoder_holds_at_most_one_message() -> None:
    decoder = EventStreamDecoder()
    decoder.feed(subscribe_event([], "1")[:12])
    with pytest.raises(ValueError, match="wanted"):
        decoder.feed(b"\x00" * (decoder.bytes_wanted() + 1))


def test_kpl_aggregated_records_deaggregate_as_they_come() -> None:
    blob = encode_aggregate([SubRecord("k1", None, b"one"), SubRecord("k2", None, b"two")])
    [decoded] = decode_all(subscribe_event([record(42, blob)], "42"))
    users = deaggregate(decoded.records, "shardId-000000000000")
    assert [(u.partition_key, u.data, u.sub_sequence_number) for u in users] == [
        ("k1", b"one", 0),
        ("k2", b"two", 1),
    ]
    assert all(u.sequence_number == "42" and u.position[0] == 42 for u in users)


def test_internal_failure_exception_is_a_server_error_and_retryable() -> None:
    with pytest.raises(ClientError) as raised:
        decode_all(exception("InternalFailureException", "boom"))
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert error_kind(raised.value) is ErrorKind.TRANSIENT


def test_resource_not_found_classifies_as_not_found() -> None:
    with pytest.raises(ClientError) as raised:
        decode_all(exception("ResourceNotFoundException", "Shard gone"))
    assert error_kind(raised.value) is ErrorKind.NOT_FOUND


def test_error_messages_use_their_headers() -> None:
    headers = {
        ":message-type": "error",
        ":error-code": "InternalServerError",
        ":error-message": "stream failed",
    }
    with pytest.raises(ClientError) as raised:
        decode_all(event_message(headers, b""))
    assert raised.value.response["Error"] == {
        "Code": "InternalServerError",
        "Message": "stream failed",
    }
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500


def test_unknown_event_types_are_skipped() -> None:
    body = event({"x": 1}, "SomethingNew") + subscribe_event([], "5")
    [only] = decode_all(body)
    assert only.continuation_sequence_number == "5"


def test_corrupt_message_is_a_transport_error() -> None:
    message = bytearray(subscribe_event([record(1, b"abc")], "1"))
    message[-10] ^= 0xFF
    with pytest.raises(FanOutTransportError, match="corrupt event-stream message"):
        decode_all(bytes(message))


def test_an_impossible_length_fails_at_once() -> None:
    decoder = EventStreamDecoder()
    with pytest.raises(FanOutTransportError, match="not an event stream"):
        decoder.feed(b"<html><body>")
    decoder = EventStreamDecoder()
    with pytest.raises(FanOutTransportError):
        decoder.feed((MAX_MESSAGE_LENGTH + 1).to_bytes(4, "big") + b"\x00" * 8)


def test_malformed_payload_is_a_transport_error() -> None:
    with pytest.raises(FanOutTransportError, match="malformed SubscribeToShardEvent"):
        decode_all(event({"Records": [{"SequenceNumber": "1"}]}))  # no Data


def test_http_error_from_kinesis_mock_400() -> None:
    protocol = Http11ClientProtocol(max_buffered_bytes=1 << 20)
    protocol.send_request("POST", "/", [("Host", "x")], b"{}")
    protocol.receive_data((DATA / "kinesis_mock_h11_bad_request.bin").read_bytes())
    assert protocol.status is not None
    error = http_error(protocol.status, protocol.headers, protocol.read(1 << 20))
    assert error.response["Error"]["Code"] == "SerializationException"
    assert "Could not decode JSON" in error.response["Error"]["Message"]
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error_kind(error) is ErrorKind.INVALID


def test_http_error_shapes() -> None:
    error = http_error(429, [("x-amzn-ErrorType", "LimitExceededException:http://x")], b"")
    assert error.response["Error"]["Code"] == "LimitExceededException"
    assert error_kind(error) is ErrorKind.THROTTLED
    error = http_error(503, [], b"<html>down</html>")
    assert error.response["Error"] == {"Code": "HTTP503", "Message": "<html>down</html>"}
    assert error_kind(error) is ErrorKind.TRANSIENT
    aws = b'{"__type": "com.amazonaws.kinesis#ResourceInUseException", "message": "in use"}'
    assert http_error(400, [], aws).response["Error"]["Code"] == "ResourceInUseException"


def test_renewal_position_is_after_the_continuation() -> None:
    assert renewal_position("123") == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "123"}
