"""StreamRef: one way to name a stream in every call, by name or by ARN."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import SyncExecutor
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import Consumer
from kinesis_core.consumer.links import sync_link
from kinesis_core.consumer.polling import GetIterator, GetRecords
from kinesis_core.errors import ConfigurationError
from kinesis_core.producer import Producer
from kinesis_core.stream import StreamRef

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"


def test_a_name_is_sent_as_stream_name() -> None:
    ref = StreamRef.of("orders")
    assert ref == StreamRef("orders")
    assert ref.params() == {"StreamName": "orders"}
    assert str(ref) == "orders"
    assert ref.region is None


def test_an_arn_is_sent_as_stream_arn_and_knows_its_name() -> None:
    ref = StreamRef.of(ARN)
    assert ref.name == "orders"
    assert ref.arn == ARN
    assert ref.params() == {"StreamARN": ARN}
    assert str(ref) == ARN
    assert ref.region == "eu-west-1"


def test_other_partitions_parse() -> None:
    ref = StreamRef.of("arn:aws-cn:kinesis:cn-north-1:123456789012:stream/a.b-c_d")
    assert ref.name == "a.b-c_d"


def test_a_ref_passes_through() -> None:
    ref = StreamRef.of(ARN)
    assert StreamRef.of(ref) is ref


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must be a stream name or ARN"),
        (None, "must be a stream name or ARN"),
        (42, "must be a stream name or ARN"),
        ("has space", "1 to 128 characters"),
        ("x" * 129, "1 to 128 characters"),
        ("arn:aws:kinesis:eu-west-1:123456789012:table/orders", "not a Kinesis stream ARN"),
        ("arn:aws:kinesis:eu-west-1:12345:stream/orders", "not a Kinesis stream ARN"),
    ],
)
def test_bad_references_name_the_field(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^target: .*{message}"):
        StreamRef.of(value, field="target")  # type: ignore[arg-type]


STREAM_ID = "abcdefghij0123456789-abc"


def test_a_stream_id_goes_with_every_call_that_names_the_stream() -> None:
    ref = StreamRef("orders", stream_id=STREAM_ID)
    assert ref.params() == {"StreamName": "orders", "StreamId": STREAM_ID}
    with_arn = StreamRef.of(ARN)
    assert StreamRef(with_arn.name, with_arn.arn, STREAM_ID).params() == {
        "StreamARN": ARN,
        "StreamId": STREAM_ID,
    }
    assert str(ref) == "orders"
    assert StreamRef.of(ref) is ref


@pytest.mark.parametrize("bad", ["", "ABCDEFGHIJ0123456789-abc", "abc-def", 42])
def test_a_stream_id_is_checked(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^stream_id: a StreamId is 20"):
        StreamRef("orders", stream_id=bad)  # type: ignore[arg-type]


def test_botocore_routes_a_stream_id_around_a_custom_endpoint_so_that_is_refused() -> None:
    """What the check is for: botocore's endpoint rules send a call naming a StreamId to the
    stream's AWS endpoint even when the client was made for another endpoint."""
    import botocore.session
    from botocore.awsrequest import AWSResponse

    client = botocore.session.get_session().create_client(
        "kinesis",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:4567",
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    sent: list[str] = []

    def record(request: Any, **_: Any) -> AWSResponse:
        sent.append(request.url)
        return AWSResponse(request.url, 200, {}, None)

    client.meta.events.register("before-send.kinesis.DescribeStreamSummary", record)
    for ref in (StreamRef("orders"), StreamRef("orders", stream_id=STREAM_ID)):
        with contextlib.suppress(Exception):
            client.describe_stream_summary(**ref.params())
    assert sent[0] == "http://127.0.0.1:4567/"
    assert sent[1].startswith("https://abcdefghij0123456789.abc.")
    StreamRef("orders", stream_id=STREAM_ID).check_endpoint(None)
    with pytest.raises(ConfigurationError, match="for AWS only"):
        StreamRef("orders", stream_id=STREAM_ID).check_endpoint("http://127.0.0.1:4567")
    with pytest.raises(ConfigurationError, match="for AWS only"):
        Producer(
            StreamRef("orders", stream_id=STREAM_ID),
            client_config=ClientConfig(endpoint_url="http://127.0.0.1:4567"),
        )
    with pytest.raises(ConfigurationError, match="for AWS only"):
        Consumer(
            StreamRef("orders", stream_id=STREAM_ID),
            client_config=ClientConfig(endpoint_url="http://127.0.0.1:4567"),
            checkpoint_store=MemoryCheckpointStore(),
        )


def test_polling_passes_the_stream_id_to_get_shard_iterator_and_get_records() -> None:
    class Client:
        def __init__(self) -> None:
            self.calls: list[tuple[str, dict[str, Any]]] = []

        def get_shard_iterator(self, **kw: Any) -> dict[str, Any]:
            self.calls.append(("GetShardIterator", kw))
            return {"ShardIterator": "it"}

        def get_records(self, **kw: Any) -> dict[str, Any]:
            self.calls.append(("GetRecords", kw))
            return {"Records": []}

    for ref, extra in (
        (StreamRef("orders"), {}),
        (StreamRef("orders", stream_id=STREAM_ID), {"StreamId": STREAM_ID}),
    ):
        client = Client()
        polling = sync_link(SyncExecutor(client), ref, "shardId-000000000000")
        polling.call(GetIterator({"ShardIteratorType": "LATEST"}))
        polling.call(GetRecords("it", 100))
        assert client.calls == [
            (
                "GetShardIterator",
                {
                    **ref.params(),
                    "ShardId": "shardId-000000000000",
                    "ShardIteratorType": "LATEST",
                },
            ),
            ("GetRecords", {"ShardIterator": "it", "Limit": 100, **extra}),
        ]
